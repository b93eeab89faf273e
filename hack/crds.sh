#!/usr/bin/env bash
# Third-party CRDs the chart's optional objects are checked against (tests/k8s/test_chart.py):
# prometheus-operator's ServiceMonitor, from its Go module (the Go module proxy, checked against
# the checksum database by `go mod download`), into ${NFTPROXY_CACHE:-~/.cache/nftproxy}/crds.
set -euo pipefail
# shellcheck source=hack/k8s-versions.sh
. "$(dirname "$0")/k8s-versions.sh"
export GOTOOLCHAIN=$GO_TOOLCHAIN
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
OUT=$CACHE/crds
CRD=monitoring.coreos.com_servicemonitors.yaml
mkdir -p "$OUT"
if [ -f "$OUT/$CRD" ] && [ "$(cat "$OUT/.$CRD.version" 2>/dev/null)" = "$PROMETHEUS_OPERATOR_VERSION" ]; then
  echo "==> [crds] $CRD ($PROMETHEUS_OPERATOR_VERSION): cached"
  exit 0
fi
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
cp "$dir/example/prometheus-operator-crd/$CRD" "$OUT/$CRD.tmp"
mv "$OUT/$CRD.tmp" "$OUT/$CRD"
echo "$PROMETHEUS_OPERATOR_VERSION" > "$OUT/.$CRD.version"
echo "==> [crds] $CRD from prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
