#!/usr/bin/env bash
# Builds the Kubernetes tools that nftproxy's k8s tests and demo use, from the Go module proxy:
#   kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#                            (k8s.io/kubernetes at K8S_VERSION; kube-proxy is the reference we are
#                            compared with, the others make the real cluster)
#                            into ${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}/k8s/<K8S_VERSION>/bin:
#                            every version apart, so building one never replaces another
#   helm                     (helm.sh/helm/v3, pinned below) into ${NFTPROXY_CACHE:-...}/bin
# K8S_VERSION defaults to K8S_DEFAULT of hack/k8s-versions.sh (the one list of versions: K8S_1_37,
# K8S_1_38, K8S_OLDEST, ...). etcd comes from Debian's etcd-server (hack/install.sh). Idempotent:
# each binary carries a version stamp, a second run prints "cached".
# Needs only Go and the Go module proxy (k8s.io/kubernetes v1.38 declares go 1.27: GOTOOLCHAIN below
# has the go command fetch that toolchain from the proxy); the first run takes a long while on 2 cores.
# K8S_TOOLS="kube-apiserver" builds only those commands, K8S_NO_HELM=1 skips helm: hack/test.sh
# builds the oldest and the newest Kubernetes' apiserver that way (K8S_VERSION=$K8S_OLDEST, ...),
# for the chart tests against them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/k8s-versions.sh
. "$ROOT/hack/k8s-versions.sh"

K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT}   # e.g. K8S_VERSION=$K8S_1_38 (v1.38.0-beta.0)
HELM_VERSION=v3.19.5

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
BIN=$CACHE/k8s/$K8S_VERSION/bin   # this version's Kubernetes commands
TOOLBIN=$CACHE/bin                # helm (and hack/e2e-tools.sh's coredns): not tied to a version
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
[ -x "$GO" ] || { echo "k8s-tools: Go not found (set GO=/path/to/go)" >&2; exit 1; }

# The Go toolchain k8s.io/kubernetes v1.38 needs (fetched once from the module proxy); never a VCS
# checkout: only the module proxy is reachable.
export GOTOOLCHAIN=$GO_TOOLCHAIN
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}

START=$SECONDS
log() { printf '==> [k8s-tools %4ss] %s\n' "$((SECONDS - START))" "$*"; }

# fresh NAME VERSION [DIR]: true when DIR/NAME (default $BIN) exists and was built at VERSION.
fresh() { local d=${3:-$BIN}; [ -x "$d/$1" ] && [ "$(cat "$d/.$1.version" 2>/dev/null)" = "$2" ]; }
# install_bin SRC NAME VERSION [DIR]: atomically move a built binary into place, then stamp it.
install_bin() {
  local d=${4:-$BIN}
  mv -f "$1" "$d/$2.tmp.$$" && mv -f "$d/$2.tmp.$$" "$d/$2"
  echo "$3" > "$d/.$2.version"
}
# adopt NAME VERSION: a binary built at VERSION by the earlier layout (one version in $CACHE/bin, the
# oldest apiserver in $CACHE/oldest/bin) is hard-linked into $BIN instead of being built again; the
# old file stays where it is for whatever still runs from there.
adopt() {
  local d
  for d in "$CACHE/bin" "$CACHE/oldest/bin"; do
    if fresh "$1" "$2" "$d"; then
      ln -f "$d/$1" "$BIN/$1.tmp.$$" 2>/dev/null || cp -f "$d/$1" "$BIN/$1.tmp.$$"
      mv -f "$BIN/$1.tmp.$$" "$BIN/$1"
      echo "$2" > "$BIN/.$1.version"
      log "$1 $2: taken from $d (built there earlier)"
      return 0
    fi
  done
  return 1
}

mkdir -p "$BIN" "$TOOLBIN" "$CACHE/build"
# One build at a time (CI and a developer's `make` may race); the checks below run under the lock.
exec 9>"$CACHE/.k8s-tools.lock"
flock 9
log "go: $("$GO" version); cache: $CACHE"

# ---------------------------------------------------------------- sigs.k8s.io/iptables-wrappers
# k8s.io/kubernetes v1.38 moved pkg/util/iptables out to sigs.k8s.io/iptables-wrappers. When the
# module proxy does not serve that module's source, hack/iptables-wrappers-standin.go stands in
# (read it): the previous release's package with the v1.38 API. The binaries that import it carry
# "+ iptables-wrappers stand-in" in their version stamp (rebuilt once the real module is served).
# shellcheck source=hack/iptables-wrappers.sh
. "$ROOT/hack/iptables-wrappers.sh"
iptables_wrappers "$K8S_VERSION"   # sets IPTW_REPLACE (a go.mod replace line, or empty) and IPTW_STAMP
stamp_of() { case " $IPTW_CMDS " in *" $1 "*) echo "$K8S_VERSION$IPTW_STAMP";; *) echo "$K8S_VERSION";; esac; }

# ---------------------------------------------------------------- k8s.io/kubernetes commands
read -r -a K8S_CMDS <<< "${K8S_TOOLS:-kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy}"
missing=()
for c in "${K8S_CMDS[@]}"; do fresh "$c" "$(stamp_of "$c")" || adopt "$c" "$(stamp_of "$c")" || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then
  log "${K8S_CMDS[*]} $K8S_VERSION: cached"
else
  staging_version=v0.${K8S_VERSION#v1.}          # v1.34.12 -> v0.34.12
  work=$CACHE/build/kubernetes-$K8S_VERSION
  mkdir -p "$work"
  cd "$work"

  log "[1/3] downloading k8s.io/kubernetes@$K8S_VERSION from the module proxy (large)"
  kmod=$(GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$kmod" ] || { echo "k8s-tools: could not download k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }

  # k8s.io/kubernetes replaces its staging modules (k8s.io/api, client-go, ...) with local
  # directories, so it cannot be `go install`ed. A wrapper module requires it and replaces each
  # staging module with the matching published v0.X.Y release instead.
  go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")
  godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$kmod")
  mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$kmod")
  [ "${#staging[@]}" -gt 10 ] || { echo "k8s-tools: no staging replaces found in $kmod" >&2; exit 1; }
  {
    echo "// Generated by nftproxy hack/k8s-tools.sh: builds k8s.io/kubernetes $K8S_VERSION commands."
    echo "module nftproxy.local/k8s-tools"
    echo
    echo "go ${go_directive:-1.24.0}"
    [ -n "$godebug" ] && echo "godebug $godebug"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
    [ -n "$IPTW_REPLACE" ] && echo "	$IPTW_REPLACE"
    echo ")"
  } > go.mod.new
  if ! cmp -s go.mod.new go.mod.in 2>/dev/null; then
    mv go.mod.new go.mod.in
    cp go.mod.in go.mod
    rm -f go.sum
  else
    rm -f go.mod.new
  fi

  pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "[2/3] resolving dependencies (${#staging[@]} staging modules -> $staging_version)"
  gets=()
  for p in "${pkgs[@]}"; do gets+=("$p@$K8S_VERSION"); done
  "$GO" get "${gets[@]}"

  # Same version stamps as Kubernetes' own hack/lib/version.sh, so `kubectl version` and
  # /version report the release rather than v0.0.0-master.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done

  log "[3/3] compiling ${missing[*]} (the slow part: ~5-15 min on 2 cores the first time)"
  out=$(mktemp -d "$CACHE/build/out.XXXXXX")
  "$GO" build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
  for c in "${missing[@]}"; do
    install_bin "$out/$c" "$c" "$(stamp_of "$c")"
    log "built $BIN/$c ($(stamp_of "$c"))"
  done
  rmdir "$out"
fi

# ---------------------------------------------------------------- helm
if [ -n "${K8S_NO_HELM:-}" ]; then
  log "helm: not wanted here (K8S_NO_HELM)"
elif fresh helm "$HELM_VERSION" "$TOOLBIN"; then
  log "helm $HELM_VERSION: cached"
else
  log "building helm $HELM_VERSION (go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION)"
  out=$(mktemp -d "$CACHE/build/out.XXXXXX")
  GOBIN=$out "$GO" install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  install_bin "$out/helm" helm "$HELM_VERSION" "$TOOLBIN"
  rmdir "$out"
  log "built $TOOLBIN/helm ($HELM_VERSION)"
fi

wanted=()
for c in "${K8S_CMDS[@]}"; do wanted+=("$BIN/$c"); done
helm_note=", no helm"
[ -n "${K8S_NO_HELM:-}" ] || { wanted+=("$TOOLBIN/helm"); helm_note=", $TOOLBIN/helm $HELM_VERSION"; }
for b in "${wanted[@]}"; do
  [ -x "$b" ] || { echo "k8s-tools: $b missing after build" >&2; exit 1; }
done
log "ready: $BIN (${K8S_CMDS[*]} $K8S_VERSION$helm_note)"
