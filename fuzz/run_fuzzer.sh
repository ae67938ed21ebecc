#!/usr/bin/env bash
# Builds a libFuzzer harness into OUT_DIR and fuzzes for SECONDS seconds; SECONDS = 0 only replays
# the seed corpus (every seed once, -runs=0). Exits non-zero on any crash, sanitizer report or leak;
# prints "SKIP: clang++ with libFuzzer not found" and exits 0 where there is none.
#
#   fuzz/run_fuzzer.sh OUT_DIR SECONDS                                   # the safetensors reader
#   fuzz/run_fuzzer.sh OUT_DIR SECONDS suite FIXTURES_LIB INCLUDE_DIRS   # the suite-file parser
#
# The safetensors harness is header-only. The suite harness instruments the parser
# (fixtures/lib/case_spec.cpp) and links the rest of the fixture library as built (FIXTURES_LIB, a
# Release static library: the model cards are far too heavy to rebuild with clang here), with the
# reference's include directories (INCLUDE_DIRS, ';'-separated, as CMake gives them).
#
# New inputs go to OUT_DIR/corpus (fresh on every run, listed first so libFuzzer writes there);
# the repository's corpus comes second and is only read (checked: its checksums must not change).
# Crash inputs land in OUT_DIR/artifacts/. CXX_FUZZ overrides the compiler.
set -euo pipefail

harness=${3:-safetensors}
if ! { [ $# -eq 2 ] || { [ $# -eq 5 ] && [ "$harness" = suite ]; }; } || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 OUT_DIR SECONDS [suite FIXTURES_LIB INCLUDE_DIRS]   (SECONDS = 0: replay the seeds only)" >&2
  exit 2
fi
out=$1
seconds=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds=$repo/fuzz/corpus/$harness
mkdir -p "$out"
out=$(cd "$out" && pwd)

# A clang++ whose -fsanitize=fuzzer links: try a trivial harness (GCC has no libFuzzer).
cxx=""
for candidate in ${CXX_FUZZ:-} clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    >"$out/probe.cpp"
  if "$candidate" -fsanitize=fuzzer "$out/probe.cpp" -o "$out/probe" >/dev/null 2>&1; then
    cxx=$candidate
    break
  fi
done
rm -f "$out/probe.cpp" "$out/probe"
if [ -z "$cxx" ]; then
  echo "SKIP: clang++ with libFuzzer not found"
  exit 0
fi

# -fno-sanitize-recover: UBSan only prints by default; the fuzzer must stop on the first report.
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
binary=$out/${harness}_fuzzer
if [ "$harness" = safetensors ]; then
  "$cxx" "${flags[@]}" -I "$repo/reference/include" "$repo/fuzz/safetensors_fuzzer.cpp" -o "$binary"
  # Tokens of the format, so mutations reach past the JSON syntax into the rules.
  tokens=('"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"F64"' '"F32"' '"F16"' '"BF16"' '"I64"'
          '"I32"' '"I8"' '"U8"' '[0,0]' '[]' '{}' '"\u0000"' '18446744073709551615' '4294967296' '-1' '1e400')
else
  includes=()
  IFS=';' read -r -a dirs <<<"$5"
  # (not the system directories themselves: -isystem /usr/include breaks libstdc++'s #include_next)
  for d in "${dirs[@]}"; do
    case "$d" in "" | /usr/include | /usr/local/include) ;; *) includes+=(-isystem "$d") ;; esac
  done
  # vptr checks need the type information of every object, which the GCC-built library's lack.
  "$cxx" "${flags[@]}" -fno-sanitize=vptr -I "$repo/fixtures/lib" -I "$repo/reference/include" "${includes[@]}" \
    "$repo/fuzz/suite_fuzzer.cpp" "$repo/fixtures/lib/case_spec.cpp" "$4" -lmpfi -lmpfr -lgmp -o "$binary"
  # The fields and values of a suite file (docs/fixture-format.md, "Suite files").
  tokens=('"name"' '"model"' '"dtype"' '"B"' '"T"' '"H"' '"HV"' '"K"' '"V"' '"S"' '"M"' '"seed"'
          '"cu_seqlens"' '"initial_state"' '"internals"' '"gradients"' '"keys"' '"ranges"' '"log10"'
          '"cases"' '"suite"' '"comment"' '"F32"' '"BF16"' '"F16"' '"gla"' '"kla"' '"kdn_diagonal"'
          '"kdn_isotropic"' '"dense"' '"information"' '"delta_net"' '"gated_delta_net"' '"kda"' '"Lambda"'
          '"a_bar"' '"g"' '"r"' '"mu"' '"unit"' '"raw"' '16777216' '16777217' '-1' '1e400' 'true' 'null')
fi
dict=$out/$harness.dict
: >"$dict"
for t in "${tokens[@]}"; do
  escaped=${t//\\/\\\\}
  escaped=${escaped//\"/\\\"}
  printf '"%s"\n' "$escaped" >>"$dict"
done

checksum() { (cd "$seeds" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(checksum)
nseeds=$(find "$seeds" -type f | wc -l)

rm -rf "$out/corpus" "$out/artifacts"
mkdir -p "$out/corpus" "$out/artifacts"
log=$out/fuzz.log
common=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/artifacts/" -dict="$dict")
status=0
if [ "$seconds" -eq 0 ]; then
  echo "replaying $nseeds seeds from $seeds"
  "$binary" "${common[@]}" -runs=0 "$out/corpus" "$seeds" >"$log" 2>&1 || status=$?
else
  echo "fuzzing for $seconds s with $nseeds seeds from $seeds (log: $log)"
  "$binary" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    "$out/corpus" "$seeds" >"$log" 2>&1 || status=$?
fi
tail -n 25 "$log"

if [ "$(checksum)" != "$before" ]; then
  echo "FAIL: the repository corpus $seeds was modified" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "---- first report in $log:" >&2
  grep -m1 -A40 -E "ERROR: |runtime error|${harness}_fuzzer: " "$log" >&2 || true
  echo "FAIL: the fuzzer exited with $status; crash inputs in $out/artifacts: $(ls "$out/artifacts")" >&2
  exit "$status"
fi
# libFuzzer reads every seed at start-up; make sure none was skipped (e.g. unreadable).
if ! grep -q "seed corpus: files: $nseeds " "$log"; then
  echo "FAIL: libFuzzer did not read all $nseeds seeds" >&2
  exit 1
fi
echo "PASS: no crash ($( [ "$seconds" -eq 0 ] && echo "corpus replay" || echo "$seconds s" ))"
