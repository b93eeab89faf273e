#!/usr/bin/env bash
# The test command (README, .ci/run): installs everything, then lint, types and all tests.
# K8S_VERSION (default: K8S_DEFAULT of hack/k8s-versions.sh) is the Kubernetes of the control
# planes, the real cluster and the reference kube-proxy: K8S_VERSION=v1.38.0-beta.0 make test.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/k8s-versions.sh
. hack/k8s-versions.sh
export K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT}
# the Go toolchain k8s.io/kubernetes v1.38 declares (the go command fetches it from the module proxy)
export GOTOOLCHAIN=$GO_TOOLCHAIN
echo "==> Kubernetes $K8S_VERSION"
bash hack/install.sh
bash hack/k8s-tools.sh
# upstream's e2e.test, agnhost, CoreDNS (the cluster DNS and the e2e images), in k8s-tools' Go cache
bash hack/e2e-tools.sh
# prometheus-operator's ServiceMonitor CRD (the chart's optional ServiceMonitor is validated against it)
bash hack/crds.sh
# trixie's nft in a chroot (cached), for tests/netns/test_nft_versions.py: the image's nft and this machine's
bash hack/trixie-nft.sh
# ---- a separate step: Prometheus' promtool and server (cached), in one `go install`: promtool for
# tests/monitoring (the chart's alerts checked by `promtool check rules` and `promtool test rules`),
# the server for tests/e2e/test_monitoring.py (a real Prometheus scraping nftproxy on the real
# cluster). Their first build costs minutes on a fresh machine (docs/testing.md).
PROM_TOOLS=${PROM_TOOLS:-promtool prometheus} bash hack/prom-tools.sh
# the oldest and the newest Kubernetes the chart claims (Chart.yaml kubeVersion): their apiservers,
# for tests/k8s/test_chart_versions.py. They build beside the checks and the tests, at the lowest
# CPU priority (the tests' processes go first); the tests that use them wait for
# $NFTPROXY_APISERVER_BUILDS/rc (tests/support/controlplanes.py), the build's log beside it.
NFTPROXY_APISERVER_BUILDS=$(mktemp -d "${TMPDIR:-/tmp}/nftproxy-apiservers.XXXXXX")
export NFTPROXY_APISERVER_BUILDS
# shellcheck disable=SC2016
setsid bash -c '
  rc=0
  for v in "$@"; do
    K8S_VERSION=$v K8S_TOOLS=kube-apiserver K8S_NO_HELM=1 nice -n 19 bash hack/k8s-tools.sh || rc=$?
  done
  echo "$rc" > "$NFTPROXY_APISERVER_BUILDS/rc"
' apiservers "$K8S_OLDEST" "$K8S_1_38" > "$NFTPROXY_APISERVER_BUILDS/log" 2>&1 &
builds=$!
trap 'kill -- "-$builds" 2>/dev/null || true' EXIT
echo "==> ruff"
.venv/bin/ruff check nftproxy testkit tests bench demo
.venv/bin/ruff format --check nftproxy testkit tests bench demo
echo "==> mypy (strict)"
.venv/bin/mypy
echo "==> import-linter (the layers, pyproject.toml)"
.venv/bin/lint-imports
echo "==> pytest"
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 tests "$@" || rc=$?
wait "$builds" || true
echo "==> the apiservers of the claimed range: $(tail -n 1 "$NFTPROXY_APISERVER_BUILDS/log")"
rm -rf "$NFTPROXY_APISERVER_BUILDS"
exit "$rc"
