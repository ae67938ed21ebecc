#!/usr/bin/env bash
# run_interop.sh BUILD_DIR SOURCE_DIR: every golden fixture reads the same in Python's safetensors.
#
# Sets up numpy and safetensors from the Python package index in a virtual environment
# BUILD_DIR/interop-venv (python3 -m venv; reused when it is already there; when venv is
# unavailable, `pip install --user` instead), then for each fixtures/golden/*.safetensors runs
# `kalman-oracle inspect --json` and tests/interop/read_fixture.py on it, plus read_fixture.py's
# --self-test (corrupted copies of the inspect JSON must be reported). Exits non-zero on any mismatch.
#
# When pip cannot reach the index this fails, unless KALMAN_ORACLE_ALLOW_OFFLINE=1, where it prints
# "SKIP: cannot install numpy safetensors from PyPI" and exits 0 (tests/interop/python_env.sh).
# The tool is BUILD_DIR/fixtures/kalman-oracle unless KALMAN_ORACLE_TOOL names another one.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
tool=${KALMAN_ORACLE_TOOL:-$build_dir/fixtures/kalman-oracle}
script=$source_dir/tests/interop/read_fixture.py
if [ ! -x "$tool" ]; then
  echo "run_interop: $tool is not built (cmake --build $build_dir --target kalman-oracle)" >&2
  exit 1
fi
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "run_interop: no $python" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kalman-oracle-interop.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- numpy and safetensors ---------------------------------------------------------------------
# shellcheck source=tests/interop/python_env.sh
source "$source_dir/tests/interop/python_env.sh"
python_env_setup "$build_dir/interop-venv" "$work" numpy safetensors
"$py" -c 'import numpy, safetensors; print("numpy", numpy.__version__, "safetensors", safetensors.__version__)'

# --- every golden fixture ----------------------------------------------------------------------
shopt -s nullglob
fixtures=("$source_dir"/fixtures/golden/*.safetensors)
if [ ${#fixtures[@]} -eq 0 ]; then
  echo "run_interop: no fixtures in $source_dir/fixtures/golden" >&2
  exit 1
fi
failed=()
for fixture in "${fixtures[@]}"; do
  name=$(basename "$fixture" .safetensors)
  echo "== $name"
  if ! "$tool" inspect --json "$fixture" >"$work/$name.json"; then
    failed+=("$name (inspect)")
    continue
  fi
  "$py" "$script" "$fixture" "$work/$name.json" || failed+=("$name")
  "$py" "$script" --self-test "$fixture" "$work/$name.json" || failed+=("$name (self-test)")
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "run_interop: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run_interop: ${#fixtures[@]} fixtures read identically by Python's safetensors; self-tests caught every corruption"
