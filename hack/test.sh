#!/usr/bin/env bash
# The test command (README, .ci/run): installs everything, then lint, types and all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/install.sh
bash hack/k8s-tools.sh
echo "==> ruff"
.venv/bin/ruff check nftproxy testkit tests bench demo
.venv/bin/ruff format --check nftproxy testkit tests bench demo
echo "==> mypy (strict)"
.venv/bin/mypy
echo "==> import-linter (the layers, pyproject.toml)"
.venv/bin/lint-imports
echo "==> pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
