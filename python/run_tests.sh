#!/usr/bin/env bash
# run_tests.sh BUILD_DIR SOURCE_DIR: the Python package and its pytest plugin (label python).
#
# Installs the package (./python), pytest and numpy from the Python package index into
# BUILD_DIR/interop-venv (tests/interop/python_env.sh; KALMAN_ORACLE_ALLOW_OFFLINE=1 turns an
# unreachable index into a visible SKIP), then:
#   1. the package's own tests (python/tests) against the golden fixtures;
#   2. the example (examples/python/test_gla_numpy.py) through the plugin, over the golden suite:
#      every GLA fixture must pass;
#   3. the same example with its planted bug (KALMAN_ORACLE_EXAMPLE_BUG=1): it must fail, and the
#      failure must show the tool's table.
# The tool is BUILD_DIR/fixtures/kalman-oracle unless KALMAN_ORACLE_TOOL names another one.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
export KALMAN_ORACLE_TOOL=${KALMAN_ORACLE_TOOL:-$build_dir/fixtures/kalman-oracle}
export KALMAN_ORACLE_GOLDEN=$source_dir/fixtures/golden
work=$(mktemp -d "${TMPDIR:-/tmp}/kalman-oracle-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/interop/python_env.sh
source "$source_dir/tests/interop/python_env.sh"
# pip builds a local package in its directory (build/, *.egg-info): build a copy, not the source tree.
cp -r "$source_dir/python" "$work/package"
rm -rf "$work/package/build" "$work/package"/*.egg-info
python_env_setup "$build_dir/interop-venv" "$work" numpy pytest
# Always this tree's package (pip would keep an installed copy of the same version).
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "${pip_user[@]}" "$work/package" \
  >"$work/pip-package.log" 2>&1 || { cat "$work/pip-package.log" >&2; exit 1; }
cd "$work"  # no stray .pytest_cache in the source tree

echo "== 1. the package's tests"
"$py" -m pytest -q -p pytester -p no:cacheprovider "$source_dir/python/tests"

echo "== 2. the example over the golden suite"
"$py" -m pytest -q -p no:cacheprovider "$source_dir/examples/python" --kalman-oracle-suite "$KALMAN_ORACLE_GOLDEN" -rA |
  tee "$work/example.log"
grep -q "passed" "$work/example.log"

echo "== 3. the example with its planted bug (must fail with the tool's table)"
if KALMAN_ORACLE_EXAMPLE_BUG=1 "$py" -m pytest -q -p no:cacheprovider "$source_dir/examples/python" \
     --kalman-oracle-suite "$KALMAN_ORACLE_GOLDEN" >"$work/bug.log" 2>&1; then
  cat "$work/bug.log"
  echo "run_tests: the planted bug passed" >&2
  exit 1
fi
if ! grep -q "o: worst element\|FAIL" "$work/bug.log"; then
  cat "$work/bug.log"
  echo "run_tests: the planted bug failed without the tool's table" >&2
  exit 1
fi
grep -m3 "FAIL" "$work/bug.log" || true
echo "run_tests: the package's tests pass, the example passes every GLA fixture, its planted bug fails"
