#!/usr/bin/env bash
# The real kube-proxy as a DaemonSet, from an image built here (no registry): the reference for
# upstream's e2e suite (make upstream-e2e-reference), and the kube-proxy tests/e2e/test_migration.py
# switches from (iptables and nftables modes) and back to:
#   localhost/kube-proxy:<K8S_VERSION>   a Debian bookworm base (hack/base-image.sh) + nftables
#                                        (kube-proxy's nftables mode runs `nft`: bookworm's 1.0.6,
#                                        as the nodes' here) + iptables (its iptables mode, and the
#                                        cleanup of one mode's rules by the other) + that version's
#                                        kube-proxy
# as a docker archive next to hack/images.sh's ($OUT/kube-proxy-<K8S_VERSION>.tar), listed in
# $OUT/kube-proxy-<K8S_VERSION>.json. Cached by a stamp of the binary and this script; needs
# hack/k8s-tools.sh (the binary) first.
# iptables, kept simple: bookworm's iptables 1.8.9, whose default `iptables` is iptables-nft (the
# nf_tables back end, as the nodes' here); iptables-legacy is installed too, not chosen. kubeadm's
# kube-proxy image picks the back end at start with iptables-wrapper (the one holding kubelet's
# rules); this one always uses nft.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/k8s-versions.sh
. hack/k8s-versions.sh
K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT}

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
OUT=${NFTPROXY_IMAGES:-$CACHE/images}
BIN=${NFTPROXY_BIN:-$CACHE/k8s/$K8S_VERSION/bin}
BASE_REF=localhost/nftproxy-base:bookworm
START=$SECONDS
log() { printf '==> [kube-proxy-image %4ss] %s\n' "$((SECONDS - START))" "$*"; }

[ -x "$BIN/kube-proxy" ] || { echo "kube-proxy-image: $BIN/kube-proxy missing (run hack/k8s-tools.sh)" >&2; exit 1; }
version=$(cat "$BIN/.kube-proxy.version")   # K8S_VERSION, and how it was built
REF=localhost/kube-proxy:$K8S_VERSION
NAME=kube-proxy-$K8S_VERSION
mkdir -p "$OUT" "$OUT/run"
exec 9>"$OUT/.images.lock"
flock 9
bah() {
  unshare --mount --propagation private -- \
    buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs "$@"
}
# shellcheck source=hack/base-image.sh
. hack/base-image.sh
base_image bookworm
key="$(sha256sum "$BIN/kube-proxy" hack/kube-proxy-image.sh | sha256sum | cut -c1-16) $(cat "$OUT/.base.stamp" 2>/dev/null)"
if [ -f "$OUT/$NAME.tar" ] && [ "$(cat "$OUT/.$NAME.stamp" 2>/dev/null)" = "$key" ]; then
  log "$REF: cached"
else
  log "[kube-proxy] $REF: $BASE_REF + nftables + iptables + kube-proxy $version"
  c=$(bah from --pull=never "$BASE_REF")
  trap 'bah rm "$c" >/dev/null 2>&1 || true' EXIT
  bah run --network=host --isolation=chroot "$c" -- sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iptables >/dev/null && rm -rf /var/lib/apt/lists/*'
  bah copy "$c" "$BIN/kube-proxy" /usr/local/bin/kube-proxy
  bah config --entrypoint '["/usr/local/bin/kube-proxy"]' --cmd '' "$c"
  bah rmi -f "$REF" >/dev/null 2>&1 || true
  bah commit -q --rm "$c" "$REF" >/dev/null
  trap - EXIT
  rm -f "$OUT/$NAME.tar.tmp"
  bah push -q "$REF" "docker-archive:$OUT/$NAME.tar.tmp:$REF" >/dev/null
  mv -f "$OUT/$NAME.tar.tmp" "$OUT/$NAME.tar"
  echo "$key" > "$OUT/.$NAME.stamp"
  log "[kube-proxy] $REF built ($(du -h "$OUT/$NAME.tar" | cut -f1))"
fi
printf '{"ref": "%s", "archive": "%s"}\n' "$REF" "$OUT/$NAME.tar" > "$OUT/$NAME.json"
