#!/usr/bin/env bash
# The fresh-machine checks (docs/testing.md, "On a fresh machine"): what `make test` does on a machine that never ran it.
#   hack/test-fresh.sh [ARGS]     (make test-fresh) a clean clone of HEAD (committed work only) in a
#       temporary directory, run with an empty NFTPROXY_CACHE and empty Go and pip caches:
#       hack/test.sh installs the .venv, builds the Kubernetes tools and the images from nothing,
#       then ruff, mypy, pytest (ARGS go to pytest). About 25 minutes on 2 cores.
#   hack/test-fresh.sh e2e-alone  (make test-e2e-alone) each tests/e2e module in a pytest of its
#       own, each on an empty images cache (NFTPROXY_IMAGES: a new temporary directory; the
#       Kubernetes tools are the cached ones): no module relies on another having run first.
# The temporary directories are under /var/tmp (the tools' build needs a few GB) and are removed at
# the end (KEEP=1 keeps them). NFTPROXY_BIN, NFTPROXY_IMAGES and NFTPROXY_E2E_CLUSTER are unset, so
# nothing from this machine's caches is used.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
unset NFTPROXY_BIN NFTPROXY_IMAGES NFTPROXY_E2E_CLUSTER NFTPROXY_E2E_NO_BUILD

START=$SECONDS
log() { printf '==> [test-fresh %4ss] %s\n' "$((SECONDS - START))" "$*"; }

tmp=$(mktemp -d /var/tmp/nftproxy-fresh.XXXXXX)
cleanup() {
  if [ -n "${KEEP:-}" ]; then log "kept $tmp"; return; fi
  chmod -R u+w "$tmp" 2>/dev/null || true  # the Go module cache is read-only
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ "${1:-}" = e2e-alone ]; then
  shift
  bash hack/install.sh
  bash hack/k8s-tools.sh
  failed=()
  for module in tests/e2e/test_*.py; do
    mkdir -p "$tmp/$(basename "$module" .py)"
    log "$module alone, images in $tmp/$(basename "$module" .py) (empty)"
    t0=$SECONDS
    if NFTPROXY_IMAGES=$tmp/$(basename "$module" .py) .venv/bin/python -m pytest -q -p no:cacheprovider "$module" "$@"; then
      log "$module: passed in $((SECONDS - t0))s"
    else
      log "$module: FAILED in $((SECONDS - t0))s"
      failed+=("$module")
    fi
    rm -rf "${tmp:?}/$(basename "$module" .py)"
  done
  [ ${#failed[@]} -eq 0 ] || { log "failed alone: ${failed[*]}"; exit 1; }
  log "every e2e module passed alone on an empty images cache"
  exit 0
fi

[ -z "$(git status --porcelain --untracked-files=no)" ] || log "warning: uncommitted changes are not in the clone"
git clone -q --no-local "$ROOT" "$tmp/src"
log "clean clone of $(git -C "$tmp/src" log -1 --format='%h %s' | cut -c1-72) in $tmp/src"
mkdir -p "$tmp/cache"
status=0
NFTPROXY_CACHE=$tmp/cache GOCACHE=$tmp/go-build GOMODCACHE=$tmp/go-mod GOPATH=$tmp/go PIP_CACHE_DIR=$tmp/pip \
  bash "$tmp/src/hack/test.sh" "$@" || status=$?
log "hack/test.sh on a clean clone and an empty cache: $([ $status -eq 0 ] && echo passed || echo "FAILED ($status)")"
exit $status
