# Sourced by the Python tests (run_interop.sh, python/run_tests.sh): a Python with the packages
# they need, from the Python package index.
#
#   python_env_setup VENV WORK PACKAGE...
#
# sets `py` to a Python that has PACKAGE... (pip arguments: names or paths): the virtual environment
# VENV (python3 -m venv; reused when it is already there) or, where venv is unavailable, the system
# Python with `pip install --user`. When pip cannot reach the index the caller fails, unless
# KALMAN_ORACLE_ALLOW_OFFLINE=1, where it prints "SKIP: cannot install PACKAGE... from PyPI" and
# exits 0. Logs go to WORK. $python (default python3) is the interpreter to start from.

python_env_setup() {
  local venv=$1 work=$2
  shift 2
  local python=${python:-${PYTHON:-python3}}
  command -v "$python" >/dev/null || { echo "python_env: no $python" >&2; exit 1; }
  pip_user=()
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    py=$venv/bin/python
  elif rm -rf "$venv" && "$python" -m venv "$venv" >"$work/venv.log" 2>&1 &&
       "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    py=$venv/bin/python
  else
    # Debian without python3-venv: ensurepip is missing and venv leaves a half-made directory.
    echo "python_env: '$python -m venv' is unavailable (apt-get install python3-venv); using pip install --user" >&2
    sed 's/^/  venv: /' "$work/venv.log" >&2 || true
    rm -rf "$venv"
    py=$(command -v "$python")
    pip_user=(--user)
  fi
  echo "== pip install $* ($py${pip_user[*]:+ ${pip_user[*]}})"
  if ! "$py" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 "${pip_user[@]}" \
       "$@" >"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    # Only an unreachable index may be skipped; any other pip failure is a failure.
    if grep -Eqi 'NewConnectionError|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|ReadTimeout|timed out|No matching distribution found|Could not find a version that satisfies|ProxyError|SSLError' "$work/pip.log"; then
      if [ "${KALMAN_ORACLE_ALLOW_OFFLINE:-0}" = 1 ]; then
        echo "SKIP: cannot install $* from PyPI"
        exit 0
      fi
      echo "python_env: cannot install $* from PyPI (set KALMAN_ORACLE_ALLOW_OFFLINE=1 to skip)" >&2
    else
      echo "python_env: pip install $* failed" >&2
    fi
    exit 1
  fi
}
