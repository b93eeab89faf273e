#!/usr/bin/env bash
# Third-party CRDs the chart's optional objects are checked against (tests/k8s/test_chart.py):
# prometheus-operator's ServiceMonitor and PrometheusRule, from its Go module (the Go module proxy,
# checked against the checksum database by `go mod download`), into
# ${NFTPROXY_CACHE:-~/.cache/nftproxy}/crds.
set -euo pipefail
# shellcheck source=hack/k8s-versions.sh
. "$(dirname "$0")/k8s-versions.sh"
export GOTOOLCHAIN=$GO_TOOLCHAIN
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
OUT=$CACHE/crds
CRDS="monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml"
mkdir -p "$OUT"
todo=()
for crd in $CRDS; do
  if [ -f "$OUT/$crd" ] && [ "$(cat "$OUT/.$crd.version" 2>/dev/null)" = "$PROMETHEUS_OPERATOR_VERSION" ]; then
    echo "==> [crds] $crd ($PROMETHEUS_OPERATOR_VERSION): cached"
  else
    todo+=("$crd")
  fi
done
[ ${#todo[@]} -gt 0 ] || exit 0
dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
for crd in "${todo[@]}"; do
  cp "$dir/example/prometheus-operator-crd/$crd" "$OUT/$crd.tmp"
  mv "$OUT/$crd.tmp" "$OUT/$crd"
  echo "$PROMETHEUS_OPERATOR_VERSION" > "$OUT/.$crd.version"
  echo "==> [crds] $crd from prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
done
