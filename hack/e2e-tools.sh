#!/usr/bin/env bash
# Builds what upstream's e2e suite and the cluster DNS need, from the Go module proxy, beside
# hack/k8s-tools.sh's tools:
#   e2e.test                 k8s.io/kubernetes/test/e2e (`go test -c`), at K8S_VERSION
#   agnhost                  k8s.io/kubernetes/test/images/agnhost (the e2e images' multi-tool), at K8S_VERSION
#   regression-issue-74839   k8s.io/kubernetes/test/images/regression-issue-74839 (one conntrack test's image)
#                            these three into ${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}/k8s/<K8S_VERSION>/bin
#   coredns                  github.com/coredns/coredns at COREDNS_VERSION with only the plugins of
#                            COREDNS_PLUGINS (no `forward`: nothing leaves the machine), its k8s.io
#                            modules pinned to K8S_DEFAULT's staging version (v0.37.2 for v1.37.2), into
#                            ${NFTPROXY_CACHE:-...}/bin: one CoreDNS for every cluster version
# The k8s.io/kubernetes builds use a copy of hack/k8s-tools.sh's wrapper module (made by running it
# when missing) and its -trimpath/-ldflags, so they reuse its Go build cache.
# Idempotent: each binary carries a version stamp, a second run prints "cached".
# E2E_TOOLS="coredns" builds only those (hack/images.sh: the CoreDNS image of every cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=hack/k8s-versions.sh
. "$ROOT/hack/k8s-versions.sh"

K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT}     # the same as hack/k8s-tools.sh's
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
# CoreDNS' plugins, chained in the order of its plugin.cfg (which also names their packages). A
# cluster Corefile may use kubeadm's (errors health ready kubernetes prometheus cache loadbalance,
# less forward/loop/reload) and bind (a hostNetwork CoreDNS on one address); the e2e DNS test's own
# server pod (agnhost image, /coredns) uses hosts and log. No forward: nothing leaves the machine.
COREDNS_PLUGINS="bind ready health prometheus errors log loadbalance cache hosts kubernetes"
E2E_RECIPE=1       # bump when the k8s.io/kubernetes build steps below change
COREDNS_RECIPE=1   # bump when the CoreDNS build steps below change

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
BIN=$CACHE/k8s/$K8S_VERSION/bin   # e2e.test, agnhost, regression-issue-74839 of this version
TOOLBIN=$CACHE/bin                # coredns
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
[ -x "$GO" ] || { echo "e2e-tools: Go not found (set GO=/path/to/go)" >&2; exit 1; }

# The Go toolchain k8s.io/kubernetes v1.38 needs (fetched once from the module proxy); never a VCS
# checkout: only the module proxy is reachable.
export GOTOOLCHAIN=$GO_TOOLCHAIN
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}

START=$SECONDS
log() { printf '==> [e2e-tools %4ss] %s\n' "$((SECONDS - START))" "$*"; }
# timed WHAT CMD...: run CMD, then log how long it took.
timed() {
  local what=$1 t=$SECONDS; shift
  "$@"
  log "$what: $((SECONDS - t)) s"
}

# fresh NAME STAMP [DIR]: true when DIR/NAME (default $BIN) exists and was built with STAMP.
fresh() { local d=${3:-$BIN}; [ -x "$d/$1" ] && [ "$(cat "$d/.$1.version" 2>/dev/null)" = "$2" ]; }
install_bin() {
  local d=${4:-$BIN}
  mv -f "$1" "$d/$2.tmp.$$" && mv -f "$d/$2.tmp.$$" "$d/$2"
  echo "$3" > "$d/.$2.version"
}
# adopt NAME STAMP: a binary built with STAMP by the earlier layout (one version in $CACHE/bin) is
# hard-linked into $BIN instead of being built again; the old file stays for whatever runs from there.
adopt() {
  fresh "$1" "$2" "$TOOLBIN" || return 1
  ln -f "$TOOLBIN/$1" "$BIN/$1.tmp.$$" 2>/dev/null || cp -f "$TOOLBIN/$1" "$BIN/$1.tmp.$$"
  mv -f "$BIN/$1.tmp.$$" "$BIN/$1"
  echo "$2" > "$BIN/.$1.version"
  log "$1: taken from $TOOLBIN (built there earlier at $2)"
}

mkdir -p "$BIN" "$TOOLBIN" "$CACHE/build"
exec 9>"$CACHE/.e2e-tools.lock"
flock 9
log "go: $("$GO" version); cache: $CACHE"

read -r -a WANT <<< "${E2E_TOOLS:-e2e.test agnhost regression-issue-74839 coredns}"
wants() { local w; for w in "${WANT[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
for w in "${WANT[@]}"; do
  case $w in e2e.test|agnhost|regression-issue-74839|coredns) ;;
    *) echo "e2e-tools: unknown tool $w in E2E_TOOLS (e2e.test agnhost regression-issue-74839 coredns)" >&2; exit 2;;
  esac
done

staging_version=v0.${K8S_VERSION#v1.}          # v1.37.2 -> v0.37.2
coredns_staging=v0.${K8S_DEFAULT#v1.}          # CoreDNS' client libraries: the default version's
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
# The same version stamps as hack/k8s-tools.sh (and Kubernetes' hack/lib/version.sh).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# ---------------------------------------------------------------- k8s.io/kubernetes: e2e.test, agnhost, ...
k8s_stamp="$K8S_VERSION r$E2E_RECIPE"
IPTW_REPLACE="" IPTW_STAMP=""
if wants e2e.test; then
  # e2e.test imports pkg/kubelet, so sigs.k8s.io/iptables-wrappers from v1.38 (hack/iptables-wrappers.sh)
  # shellcheck source=hack/iptables-wrappers.sh
  . "$ROOT/hack/iptables-wrappers.sh"
  iptables_wrappers "$K8S_VERSION"
fi
e2e_stamp="$k8s_stamp$IPTW_STAMP"
cmds=()     # the main packages under test/images wanted and not fresh
want_e2e=
for t in agnhost regression-issue-74839; do
  wants "$t" && ! fresh "$t" "$k8s_stamp" && ! adopt "$t" "$k8s_stamp" && cmds+=("$t")
done
wants e2e.test && ! fresh e2e.test "$e2e_stamp" && ! adopt e2e.test "$e2e_stamp" && want_e2e=1
if [ ${#cmds[@]} -eq 0 ] && [ -z "$want_e2e" ]; then
  for t in e2e.test agnhost regression-issue-74839; do wants "$t" && log "$t $K8S_VERSION: cached"; done
else
  base=$CACHE/build/kubernetes-$K8S_VERSION
  if [ ! -f "$base/go.sum" ]; then
    log "no wrapper module in $base: running hack/k8s-tools.sh first"
    timed "hack/k8s-tools.sh" env K8S_VERSION="$K8S_VERSION" bash "$ROOT/hack/k8s-tools.sh"
  fi
  work=$CACHE/build/e2e-$K8S_VERSION
  mkdir -p "$work"
  cd "$work"
  # A copy of k8s-tools' wrapper module (k8s.io/kubernetes + its staging modules as published
  # v0.X.Y releases), taken afresh each build; the test-only modules are added to the copy only.
  sed 's#^module .*#module nftproxy.local/e2e-tools#' "$base/go.mod" > go.mod
  cp "$base/go.sum" go.sum
  if [ -n "$IPTW_REPLACE" ] && ! grep -qF "$IPTW_REPLACE" go.mod; then printf '\nreplace %s\n' "$IPTW_REPLACE" >> go.mod; fi

  pkgs=()
  [ -n "$want_e2e" ] && pkgs+=(k8s.io/kubernetes/test/e2e)
  for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/test/images/$c"); done
  gets=()
  for p in "${pkgs[@]}"; do gets+=("$p@$K8S_VERSION"); done
  log "[k8s 1/3] resolving the test dependencies (go get -t ${pkgs[*]})"
  timed "[k8s 1/3] go get -t" "$GO" get -t "${gets[@]}"

  out=$(mktemp -d "$CACHE/build/out.XXXXXX")
  trap 'rm -rf "$out"' EXIT
  if [ ${#cmds[@]} -gt 0 ]; then
    log "[k8s 2/3] compiling ${cmds[*]}"
    bpkgs=()
    for c in "${cmds[@]}"; do bpkgs+=("k8s.io/kubernetes/test/images/$c"); done
    timed "[k8s 2/3] go build ${cmds[*]}" "$GO" build -trimpath -ldflags "$ldflags" -o "$out/" "${bpkgs[@]}"
    for c in "${cmds[@]}"; do
      install_bin "$out/$c" "$c" "$k8s_stamp"
      log "built $BIN/$c ($K8S_VERSION, $(du -h "$BIN/$c" | cut -f1))"
    done
  fi
  if [ -n "$want_e2e" ]; then
    log "[k8s 3/3] compiling e2e.test (go test -c k8s.io/kubernetes/test/e2e: ~3-4 min with k8s-tools' Go cache warm)"
    timed "[k8s 3/3] go test -c e2e.test" \
      "$GO" test -c -trimpath -ldflags "$ldflags" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
    install_bin "$out/e2e.test" e2e.test "$e2e_stamp"
    log "built $BIN/e2e.test ($K8S_VERSION, $(du -h "$BIN/e2e.test" | cut -f1))"
  fi
  rm -rf "$out"
  trap - EXIT
  cd "$ROOT"
fi

# ---------------------------------------------------------------- CoreDNS
coredns_stamp="$COREDNS_VERSION k8s.io=$coredns_staging plugins=${COREDNS_PLUGINS// /,} r$COREDNS_RECIPE"
if ! wants coredns; then
  :
elif fresh coredns "$coredns_stamp" "$TOOLBIN"; then
  log "coredns $COREDNS_VERSION: cached"
else
  work=$CACHE/build/coredns-$COREDNS_VERSION
  mkdir -p "$work"
  cd "$work"
  cdir=$(GOFLAGS=-mod=mod "$GO" mod download -json "github.com/coredns/coredns@$COREDNS_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$cdir/plugin.cfg" ] || { echo "e2e-tools: could not download github.com/coredns/coredns@$COREDNS_VERSION" >&2; exit 1; }
  go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$cdir/go.mod")
  # plugin.cfg: "name:package" in the chain's order (package: under plugin/, or a full import path).
  directives=() imports=()
  while IFS=: read -r name pkg; do
    [[ $name == \#* || -z $name ]] && continue
    for p in $COREDNS_PLUGINS; do
      if [ "$p" = "$name" ]; then
        directives+=("$name")
        [[ $pkg == */* ]] && imports+=("$pkg") || imports+=("github.com/coredns/coredns/plugin/$pkg")
      fi
    done
  done < "$cdir/plugin.cfg"
  for p in $COREDNS_PLUGINS; do
    [[ " ${directives[*]} " == *" $p "* ]] || { echo "e2e-tools: no plugin $p in CoreDNS $COREDNS_VERSION's plugin.cfg" >&2; exit 1; }
  done
  {
    echo "// Generated by nftproxy hack/e2e-tools.sh: CoreDNS $COREDNS_VERSION with the plugins: $COREDNS_PLUGINS."
    echo "module nftproxy.local/coredns"
    echo
    echo "go ${go_directive:-1.26.0}"
    echo
    echo "require github.com/coredns/coredns $COREDNS_VERSION"
    echo
    echo "// The client libraries of Kubernetes $K8S_DEFAULT (its staging modules)."
    echo "replace ("
    for m in k8s.io/api k8s.io/apimachinery k8s.io/client-go; do echo "	$m => $m $coredns_staging"; done
    echo ")"
  } > go.mod.new
  {
    echo "// Generated by nftproxy hack/e2e-tools.sh: CoreDNS with only the plugins that the cluster's"
    echo "// Corefile and the e2e tests use (no forward: names outside the cluster fail at once)."
    echo "package main"
    echo
    echo "import ("
    echo '	"github.com/coredns/coredns/core/dnsserver"'
    echo '	"github.com/coredns/coredns/coremain"'
    echo
    for p in "${imports[@]}"; do echo "	_ \"$p\""; done
    echo ")"
    echo
    echo "func main() {"
    printf '	dnsserver.Directives = []string{'
    sep=
    for p in "${directives[@]}"; do printf '%s"%s"' "$sep" "$p"; sep=", "; done
    echo "}"
    echo "	coremain.Run()"
    echo "}"
  } > main.go.new
  if ! cmp -s go.mod.new go.mod.in 2>/dev/null; then
    mv go.mod.new go.mod.in
    cp go.mod.in go.mod
    rm -f go.sum
  else
    rm -f go.mod.new
  fi
  mv main.go.new main.go
  log "[coredns 1/2] resolving github.com/coredns/coredns@$COREDNS_VERSION (k8s.io/* => $coredns_staging)"
  timed "[coredns 1/2] go mod tidy" "$GO" mod tidy
  for m in k8s.io/api k8s.io/apimachinery k8s.io/client-go; do
    got=$("$GO" list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$m")
    [ "$got" = "$coredns_staging" ] || { echo "e2e-tools: coredns uses $m $got, not $coredns_staging" >&2; exit 1; }
  done
  log "[coredns 2/2] compiling coredns (plugins: $COREDNS_PLUGINS)"
  out=$(mktemp -d "$CACHE/build/out.XXXXXX")
  trap 'rm -rf "$out"' EXIT
  timed "[coredns 2/2] go build coredns" "$GO" build -trimpath \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=nftproxy-$COREDNS_VERSION" -o "$out/coredns" .
  install_bin "$out/coredns" coredns "$coredns_stamp" "$TOOLBIN"
  rm -rf "$out"
  trap - EXIT
  log "built $TOOLBIN/coredns ($COREDNS_VERSION, $(du -h "$TOOLBIN/coredns" | cut -f1))"
  cd "$ROOT"
fi

for b in "${WANT[@]}"; do
  d=$BIN; [ "$b" = coredns ] && d=$TOOLBIN
  [ -x "$d/$b" ] || { echo "e2e-tools: $d/$b missing after build" >&2; exit 1; }
done
log "ready: $BIN (${WANT[*]}; k8s $K8S_VERSION, coredns $COREDNS_VERSION in $TOOLBIN) in $((SECONDS - START)) s"
