#!/usr/bin/env bash
# Two builds of the GPU kernels side by side (docs/kernels.md, "Comparing two builds"): a change that
# claims to move no rounding must give the base build's bytes, and its speed is measured against the base
# in the same run, alternating, never against a number from another day.
#
#   compare-gpu-builds.sh [options] BASE_DIR NEW_DIR
#
# BASE_DIR and NEW_DIR each hold a kalman-oracle-gpu (and, for --bench, a gpu_bench) of one build.
#   --device cuda|twin   where the kernels run (default cuda; twin: the CPU twins, as CI runs them)
#   --fixtures DIR       the fixtures to run (default: the repository's fixtures/golden)
#   --new-env VAR=VALUE  set for NEW_DIR's runs only (repeatable): the meta-test plants a bug this way
#   --bench ROUNDS       then ROUNDS rounds of gpu_bench, base then new each round (cuda only)
#   --only NAME          gpu_bench's benchmark (default delta_rule); --repeats N its repeats (default 5)
#   --out DIR            keep the candidates and the bench output there (default: a temporary folder)
#
# Every fixture runs in each mode the tool has (the forward; --with-memory; --gradients with f32 and with
# tf32 operands) under both builds. A mode that the base refuses (a model without that kernel) must be
# refused by the new build with the same message ("n/a"); otherwise the two candidates must be the same
# bytes ("same bits"), or the line says DIFFER. Exit status: 0 when every comparison is the same bits or
# n/a, 1 when any differs, 2 on bad usage. The bench rounds print, per problem and arithmetic, each build's
# times (ms) and the ratio new / base of their medians; the JSON lines stay in --out.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
device=cuda fixtures=$here/../fixtures/golden rounds=0 only=delta_rule repeats=5 out=
new_env=()
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=${2:?}; shift 2 ;;
    --fixtures) fixtures=${2:?}; shift 2 ;;
    --new-env) new_env+=("${2:?}"); shift 2 ;;
    --bench) rounds=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --repeats) repeats=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "compare-gpu-builds: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
base=$1 new=$2
case "$device" in cuda|twin) ;; *) echo "compare-gpu-builds: --device must be cuda or twin, not $device" >&2; exit 2 ;; esac
for d in "$base" "$new"; do
  [ -x "$d/kalman-oracle-gpu" ] || { echo "compare-gpu-builds: $d/kalman-oracle-gpu: not an executable" >&2; exit 2; }
done
shopt -s nullglob
files=("$fixtures"/*.safetensors)
[ ${#files[@]} -gt 0 ] || { echo "compare-gpu-builds: no .safetensors in $fixtures" >&2; exit 2; }
[ -n "$out" ] || { out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"

same=0 differ=0 not_applicable=0
modes=("" "--with-memory" "--gradients --operands f32" "--gradients --operands tf32")
names=(forward memory gradients_f32 gradients_tf32)
for f in "${files[@]}"; do
  fixture=$(basename "$f" .safetensors)
  for m in "${!modes[@]}"; do
    read -r -a args <<< "${modes[$m]}"
    stem=$out/${fixture}_${names[$m]}
    base_msg=$("$base/kalman-oracle-gpu" run --device "$device" "${args[@]}" "$f" "$stem.base.safetensors" 2>&1 >/dev/null)
    base_rc=$?
    new_msg=$(env "${new_env[@]}" "$new/kalman-oracle-gpu" run --device "$device" "${args[@]}" "$f" "$stem.new.safetensors" 2>&1 >/dev/null)
    new_rc=$?
    # The messages name the build's own path nowhere but in the tool's name: compare them without it.
    base_msg=${base_msg//$base\//} new_msg=${new_msg//$new\//}
    if [ $base_rc -ne 0 ] && [ $new_rc -ne 0 ] && [ "$base_msg" = "$new_msg" ]; then
      not_applicable=$((not_applicable + 1))
      echo "n/a: $fixture ${names[$m]} (${base_msg%%$'\n'*})"
    elif [ $base_rc -eq 0 ] && [ $new_rc -eq 0 ] && cmp -s "$stem.base.safetensors" "$stem.new.safetensors"; then
      same=$((same + 1))
      echo "same bits: $fixture ${names[$m]}"
    else
      differ=$((differ + 1))
      echo "DIFFER: $fixture ${names[$m]} (base exit $base_rc, new exit $new_rc${new_msg:+: ${new_msg%%$'\n'*}})"
    fi
  done
done
echo "compare-gpu-builds: $same same bits, $differ differ, $not_applicable n/a ($device, ${#files[@]} fixtures of $fixtures)"

if [ "$rounds" -gt 0 ]; then
  if [ "$device" != cuda ]; then
    echo "compare-gpu-builds: --bench needs --device cuda; no benchmark run"
  elif ! why=$("$base/kalman-oracle-gpu" device 2>&1); then
    echo "SKIP: no benchmark: $why"
  else
    for d in "$base" "$new"; do
      [ -x "$d/gpu_bench" ] || { echo "compare-gpu-builds: $d/gpu_bench: not an executable" >&2; exit 2; }
    done
    for r in $(seq 1 "$rounds"); do
      "$base/gpu_bench" --only "$only" --repeats "$repeats" > "$out/bench_base_$r.jsonl" || echo "compare-gpu-builds: base bench round $r failed"
      env "${new_env[@]}" "$new/gpu_bench" --only "$only" --repeats "$repeats" > "$out/bench_new_$r.jsonl" ||
        echo "compare-gpu-builds: new bench round $r failed"
    done
    python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
times = {}
for path in sorted(glob.glob(os.path.join(out, "bench_*.jsonl"))):
    build = os.path.basename(path).split("_")[1]
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "problem" in j and "ms" in j:
            key = (j.get("kernel", "?"), j["problem"], j.get("operands", j.get("dtype", "")))
            times.setdefault(key, {}).setdefault(build, []).append(j["ms"])
for key, t in times.items():
    b, n = t.get("base", []), t.get("new", [])
    ratio = statistics.median(n) / statistics.median(b) if b and n else float("nan")
    print(" ".join(key), "base", b, "new", n, "new/base %.3f" % ratio)
PY
  fi
fi
[ $differ -eq 0 ]
