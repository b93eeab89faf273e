#!/usr/bin/env bash
# The test command (README, .ci/run): installs everything, then lint, types and all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/install.sh
bash hack/k8s-tools.sh
# upstream's e2e.test, agnhost, CoreDNS (the cluster DNS and the e2e images), in k8s-tools' Go cache
bash hack/e2e-tools.sh
# prometheus-operator's ServiceMonitor CRD (the chart's optional ServiceMonitor is validated against it)
bash hack/crds.sh
# the oldest Kubernetes the chart claims (Chart.yaml kubeVersion): its apiserver, for tests/k8s/test_chart.py
NFTPROXY_CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}/oldest K8S_VERSION=v1.35.4 K8S_TOOLS=kube-apiserver K8S_NO_HELM=1 \
  bash hack/k8s-tools.sh
# trixie's nft in a chroot (cached), for tests/netns/test_nft_versions.py: the image's nft and this machine's
bash hack/trixie-nft.sh
echo "==> ruff"
.venv/bin/ruff check nftproxy testkit tests bench demo
.venv/bin/ruff format --check nftproxy testkit tests bench demo
echo "==> mypy (strict)"
.venv/bin/mypy
echo "==> import-linter (the layers, pyproject.toml)"
.venv/bin/lint-imports
echo "==> pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
