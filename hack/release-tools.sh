#!/usr/bin/env bash
# Builds what `make release` needs beyond helm and buildah, from the Go module proxy:
#   syft    github.com/anchore/syft at SYFT_VERSION (the image's SBOM, SPDX JSON), into
#           ${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}/bin
# `go build` in a throwaway module that requires the pinned version (its go.sum checked against the
# checksum database), with the Go toolchain of every build here (GO_TOOLCHAIN, hack/k8s-versions.sh).
# Idempotent: the binary carries a version stamp, a second run prints "cached". The first build: about
# 45 s to download its modules, 1.5 min to compile on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/k8s-versions.sh
. hack/k8s-versions.sh

SYFT_VERSION=${SYFT_VERSION:-v1.57.2}
SYFT_RECIPE=1  # bump when the build steps below change

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
TOOLBIN=$CACHE/bin
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
[ -x "$GO" ] || { echo "release-tools: Go not found (set GO=/path/to/go)" >&2; exit 1; }
export GOTOOLCHAIN=$GO_TOOLCHAIN
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}

START=$SECONDS
log() { printf '==> [release-tools %4ss] %s\n' "$((SECONDS - START))" "$*"; }

mkdir -p "$TOOLBIN" "$CACHE/build"
exec 9>"$CACHE/.release-tools.lock"
flock 9

stamp="$SYFT_VERSION r$SYFT_RECIPE"
if [ -x "$TOOLBIN/syft" ] && [ "$(cat "$TOOLBIN/.syft.version" 2>/dev/null)" = "$stamp" ]; then
  log "syft $SYFT_VERSION: cached"
  exit 0
fi
work=$CACHE/build/syft-$SYFT_VERSION
mkdir -p "$work"
cd "$work"
printf 'module nftproxy.local/syft\n\ngo 1.26.8\n\nrequire github.com/anchore/syft %s\n' "$SYFT_VERSION" > go.mod
# The module's pure-Go SQLite (modernc.org/sqlite) and the rest of cmd/syft's imports, in go.sum.
log "[syft 1/2] resolving github.com/anchore/syft@$SYFT_VERSION (go get)"
"$GO" get "github.com/anchore/syft/cmd/syft@$SYFT_VERSION"
got=$("$GO" list -m -f '{{.Version}}' github.com/anchore/syft)
[ "$got" = "$SYFT_VERSION" ] || { echo "release-tools: resolved syft $got, not $SYFT_VERSION" >&2; exit 1; }
log "[syft 2/2] compiling syft $SYFT_VERSION (~1.5 min on two cores)"
out=$(mktemp -d "$CACHE/build/out.XXXXXX")
trap 'rm -rf "$out"' EXIT
t=$SECONDS
"$GO" build -trimpath -ldflags "-s -w -X main.version=${SYFT_VERSION#v}" -o "$out/syft" github.com/anchore/syft/cmd/syft
log "[syft 2/2] go build: $((SECONDS - t)) s"
mv -f "$out/syft" "$TOOLBIN/syft.tmp.$$" && mv -f "$TOOLBIN/syft.tmp.$$" "$TOOLBIN/syft"
echo "$stamp" > "$TOOLBIN/.syft.version"
log "built $TOOLBIN/syft ($SYFT_VERSION, $(du -h "$TOOLBIN/syft" | cut -f1)) in $((SECONDS - START)) s"
