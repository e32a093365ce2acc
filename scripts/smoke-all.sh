#!/usr/bin/env bash
# Runs tests/py/smoke.py (standard library only) under every CPython 3.7–3.13 on this machine:
# the pyenv versions when pyenv is installed, plus python3.X found on PATH. Fails if any fails,
# or if none is found.
set -u
cd "$(dirname "$0")/.."
declare -A seen=()
pythons=()
root="${PYENV_ROOT:-$HOME/.pyenv}"
for minor in 7 8 9 10 11 12 13; do
  for py in "$root"/versions/3."$minor".*/bin/python "$(command -v python3."$minor" 2>/dev/null)"; do
    [ -x "$py" ] || continue
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    [ -n "${seen[$ver]:-}" ] && continue
    seen[$ver]=1
    pythons+=("$py")
  done
done
if [ ${#pythons[@]} -eq 0 ]; then
  pythons=("$(command -v python3)")
fi
fail=0
for py in "${pythons[@]}"; do
  if ! "$py" tests/py/smoke.py; then
    echo "smoke FAILED under $py" >&2
    fail=1
  fi
done
exit $fail
