#!/usr/bin/env bash
# The fast tier (`make check`): ruff (check, format --check), import-linter, mypy (strict), tests/unit and a short
# fuzz run (NFTPROXY_FUZZ=check). Needs no root, no apt and no Kubernetes binaries: the tests that
# need them skip, each with its reason (tests/conftest.py). Extra arguments go to pytest.
#
# Uses .venv; without one it makes it with pip only (no apt, no libnftables Python module, which
# no test of this tier needs). hack/install.sh makes the full one.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version) (pip only)"
  "$PY" -m venv .venv
fi
stamp=.venv/.nftproxy-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> pip install -e .[dev]"
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi

echo "==> ruff"
.venv/bin/ruff check nftproxy testkit tests bench demo
.venv/bin/ruff format --check nftproxy testkit tests bench demo
echo "==> import-linter (the layers, pyproject.toml)"
.venv/bin/lint-imports
# mypy (strict) and pytest side by side: a cold mypy cache costs ~45 s on its own here.
echo "==> mypy (strict) and pytest tests/unit tests/fuzz, side by side"
mypy_out=$(mktemp)
trap 'rm -f "$mypy_out"' EXIT
.venv/bin/mypy >"$mypy_out" 2>&1 &
mypy_pid=$!
rc=0
NFTPROXY_FUZZ=${NFTPROXY_FUZZ:-check} .venv/bin/python -m pytest -q -p no:cacheprovider -rs tests/unit tests/fuzz "$@" || rc=$?
mypy_rc=0
wait "$mypy_pid" || mypy_rc=$?
echo "==> mypy (strict)"
cat "$mypy_out"
[ "$mypy_rc" -eq 0 ] || exit "$mypy_rc"
exit "$rc"
