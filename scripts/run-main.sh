#!/usr/bin/env bash
# The main job: installs what is missing, builds the tool, generates the default fixture suite
# (fixtures/suite/default.json) into build/suite (or $KALMAN_ORACLE_SUITE_OUT), checks that its
# SHA-256 manifest equals the checked-in fixtures/suite/default.sha256 (generation is
# deterministic), and shows the conformance summary of the reference run in binary32 over the
# suite (`kalman-oracle conform`). Extra arguments go to `kalman-oracle generate` (e.g. --jobs 4).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target kalman-oracle
tool=./build/fixtures/kalman-oracle
out=${KALMAN_ORACLE_SUITE_OUT:-build/suite}
start=$(date +%s)
"$tool" generate --out "$out" "$@"
echo "generation: $(( $(date +%s) - start )) s wall"
if cmp -s "$out/MANIFEST.sha256" fixtures/suite/default.sha256; then
  echo "manifest: $out/MANIFEST.sha256 equals fixtures/suite/default.sha256 (byte-identical suite)"
elif [ -f "$out/MANIFEST.sha256" ]; then
  echo "manifest: $out/MANIFEST.sha256 DIFFERS from fixtures/suite/default.sha256" >&2
  exit 1
fi
echo
echo "conformance of the reference run in binary32 (kalman-oracle run) over $out:"
"$tool" conform --suite "$out" -- "$tool" run {fixture} {output}
