#!/usr/bin/env bash
# Builds Prometheus' own tools from the Go module proxy, beside hack/k8s-tools.sh's:
#   promtool     github.com/prometheus/prometheus/cmd/promtool     (`promtool check rules`,
#                `promtool test rules`: tests/unit/test_monitoring_rules.py checks the chart's
#                PrometheusRule with it)
#   prometheus   github.com/prometheus/prometheus/cmd/prometheus   (a real Prometheus server)
# both at PROMETHEUS_VERSION (the module's v0.3XY.Z is Prometheus 3.XY.Z), into
# ${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}/bin, with the pinned Go toolchain (GO_TOOLCHAIN of
# hack/k8s-versions.sh). `go install pkg@version`: the versions of Prometheus' own go.mod, checked
# against the checksum database; never a VCS checkout.
# Service discovery: only file, http and kubernetes (Prometheus' build tags remove_all_sd +
# enable_kubernetes_sd; the cloud providers' SDKs are most of a full build). No built-in web UI
# (its assets are an npm build, not in the Go module): the HTTP API and /metrics work.
# Idempotent: each binary carries a version stamp, a second run prints "cached".
# PROM_TOOLS="promtool" builds only those.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=hack/k8s-versions.sh
. "$ROOT/hack/k8s-versions.sh"

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}   # Prometheus 3.16.0
PROM_TAGS="remove_all_sd enable_kubernetes_sd"
PROM_RECIPE=2   # bump when the build steps below change

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
BIN=$CACHE/bin
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
[ -x "$GO" ] || { echo "prom-tools: Go not found (set GO=/path/to/go)" >&2; exit 1; }
export GOTOOLCHAIN=$GO_TOOLCHAIN
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}

START=$SECONDS
log() { printf '==> [prom-tools %4ss] %s\n' "$((SECONDS - START))" "$*"; }

read -r -a WANT <<< "${PROM_TOOLS:-promtool prometheus}"
for w in "${WANT[@]}"; do
  case $w in promtool|prometheus) ;;
    *) echo "prom-tools: unknown tool $w in PROM_TOOLS (promtool prometheus)" >&2; exit 2;;
  esac
done

mkdir -p "$BIN" "$CACHE/build"
exec 9>"$CACHE/.prom-tools.lock"
flock 9

stamp="$PROMETHEUS_VERSION tags=${PROM_TAGS// /,} r$PROM_RECIPE"
todo=()
for t in "${WANT[@]}"; do
  if [ -x "$BIN/$t" ] && [ "$(cat "$BIN/.$t.version" 2>/dev/null)" = "$stamp" ]; then
    log "$t $PROMETHEUS_VERSION: cached"
  else
    todo+=("$t")
  fi
done
if [ ${#todo[@]} -gt 0 ]; then
  log "go: $("$GO" version); building ${todo[*]} (github.com/prometheus/prometheus@$PROMETHEUS_VERSION, tags: $PROM_TAGS)"
  # Prometheus' release version, as its own build stamps it (.promu.yml): `promtool --version`
  release=${PROMETHEUS_VERSION#v0.}                  # 316.0
  minor=${release%%.*}                               # 316: Prometheus 3.16
  release="${minor:0:1}.$((10#${minor:1})).${release#*.}"   # 3.16.0
  ldflags="-s -w"
  ldflags+=" -X github.com/prometheus/common/version.Version=$release"
  ldflags+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"
  ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD"
  ldflags+=" -X github.com/prometheus/common/version.BuildUser=nftproxy"
  ldflags+=" -X github.com/prometheus/common/version.BuildDate=19700101-00:00:00"
  pkgs=()
  for t in "${todo[@]}"; do pkgs+=("github.com/prometheus/prometheus/cmd/$t@$PROMETHEUS_VERSION"); done
  out=$(mktemp -d "$CACHE/build/prom.XXXXXX")
  trap 'rm -rf "$out"' EXIT
  t0=$SECONDS
  (cd "$out" && GOBIN=$out "$GO" install -trimpath -tags "${PROM_TAGS// /,}" -ldflags "$ldflags" "${pkgs[@]}")
  log "go install ${todo[*]}: $((SECONDS - t0)) s"
  for t in "${todo[@]}"; do
    mv -f "$out/$t" "$BIN/$t.tmp.$$" && mv -f "$BIN/$t.tmp.$$" "$BIN/$t"
    echo "$stamp" > "$BIN/.$t.version"
    log "built $BIN/$t ($("$BIN/$t" --version 2>&1 | head -1), $(du -h "$BIN/$t" | cut -f1))"
  done
  rm -rf "$out"
  trap - EXIT
fi
for t in "${WANT[@]}"; do
  [ -x "$BIN/$t" ] || { echo "prom-tools: $BIN/$t missing after build" >&2; exit 1; }
done
log "ready: ${WANT[*]} in $BIN in $((SECONDS - START)) s"
