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
# "SKIP: cannot install numpy/safetensors from PyPI" and exits 0.
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
venv=$build_dir/interop-venv
pip_user=()
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  py=$venv/bin/python
elif rm -rf "$venv" && "$python" -m venv "$venv" >"$work/venv.log" 2>&1 && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  py=$venv/bin/python
else
  # Debian without python3-venv: ensurepip is missing and venv leaves a half-made directory.
  echo "run_interop: '$python -m venv' is unavailable (apt-get install python3-venv); using pip install --user" >&2
  sed 's/^/  venv: /' "$work/venv.log" >&2 || true
  rm -rf "$venv"
  py=$(command -v "$python")
  pip_user=(--user)
fi

echo "== pip install numpy safetensors ($py${pip_user[*]:+ ${pip_user[*]}})"
if ! "$py" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 "${pip_user[@]}" \
     numpy safetensors >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  # Only an unreachable index may be skipped; any other pip failure is a failure.
  if grep -Eqi 'NewConnectionError|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout|timed out|No matching distribution found|Could not find a version that satisfies|ProxyError|SSLError' "$work/pip.log"; then
    if [ "${KALMAN_ORACLE_ALLOW_OFFLINE:-0}" = 1 ]; then
      echo "SKIP: cannot install numpy/safetensors from PyPI"
      exit 0
    fi
    echo "run_interop: cannot install numpy/safetensors from PyPI (set KALMAN_ORACLE_ALLOW_OFFLINE=1 to skip)" >&2
  else
    echo "run_interop: pip install numpy safetensors failed" >&2
  fi
  exit 1
fi
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
