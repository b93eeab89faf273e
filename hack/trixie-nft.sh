#!/usr/bin/env bash
# A Debian trixie root filesystem with trixie's nft and libnftables (1.1.x) and python3-nftables,
# used as a chroot to check that tables written by one nft version are read by the other (the
# image runs trixie's libnftables, the nodes may run bookworm's nft 1.0.6: docs/image.md).
#   $NFTPROXY_CACHE/trixie-nft/rootfs     (default ~/.cache/nftproxy/trixie-nft/rootfs)
# Nothing is installed on this machine; the rootfs is only ever entered with `chroot`, inside a
# network namespace of the caller's (tests/netns/test_nft_versions.py). Cached: a second run
# prints "cached". About a minute the first time (mmdebstrap, ~40 MB from the Debian mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
DIR=$CACHE/trixie-nft
PKGS=nftables,python3-nftables,netbase
KEY="trixie $PKGS v1"
START=$SECONDS
log() { printf '==> [trixie-nft %4ss] %s\n' "$((SECONDS - START))" "$*"; }

command -v mmdebstrap >/dev/null || { echo "trixie-nft: mmdebstrap missing (run hack/install.sh)" >&2; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ "$(cat "$DIR/.stamp" 2>/dev/null)" = "$KEY" ] && [ -x "$DIR/rootfs/usr/sbin/nft" ]; then
  log "$DIR/rootfs: cached ($(chroot "$DIR/rootfs" nft --version))"
  exit 0
fi
log "mmdebstrap --variant=minbase trixie (+ $PKGS)"
rm -rf "$DIR/rootfs.tmp" "$DIR/rootfs"
tmp=$(mktemp -d /var/tmp/nftproxy-trixie.XXXXXX)
trap 'rm -rf "$tmp" "$DIR/rootfs.tmp"' EXIT
unshare --mount --propagation private -- mmdebstrap --quiet --variant=minbase --include="$PKGS" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  trixie "$tmp/rootfs.tar"
mkdir -p "$DIR/rootfs.tmp"
tar -C "$DIR/rootfs.tmp" -xf "$tmp/rootfs.tar"
mv "$DIR/rootfs.tmp" "$DIR/rootfs"
echo "$KEY" > "$DIR/.stamp"
log "$DIR/rootfs ready: $(chroot "$DIR/rootfs" nft --version)"
