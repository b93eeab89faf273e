# Sourced by hack/images.sh and hack/kube-proxy-image.sh (under their lock, with their bah, log, OUT):
#   base_image SUITE   localhost/nftproxy-base:SUITE, Debian SUITE minbase (+ this machine's CAs) made by
#                      mmdebstrap (the equivalent of debian:SUITE-slim), cached by its stamp:
#                      $OUT/.base.stamp for bookworm (the name older commits' images.sh use),
#                      $OUT/.base-SUITE.stamp for the others. BASE_PKGS: its extra packages.
# trixie is the nftproxy image's (Dockerfile), bookworm kube-proxy's (the reference, unchanged).
BASE_PKGS=${BASE_PKGS:-ca-certificates}

base_stamp() { if [ "$1" = bookworm ]; then echo "$OUT/.base.stamp"; else echo "$OUT/.base-$1.stamp"; fi; }

base_image() {
  local suite=$1 ref="localhost/nftproxy-base:$1" stamp_file key tmp c
  stamp_file=$(base_stamp "$suite")
  key="$suite $BASE_PKGS v2 $(cat /usr/local/share/ca-certificates/* 2>/dev/null | sha256sum | cut -c1-12)"
  if [ "$(cat "$stamp_file" 2>/dev/null)" = "$key" ] && bah inspect --type image "$ref" >/dev/null 2>&1; then
    log "$ref: cached"
    return
  fi
  log "[base] mmdebstrap --variant=minbase $suite (+ $BASE_PKGS): ~2 min, downloads ~60 MB from the Debian mirror"
  tmp=$(mktemp -d /var/tmp/nftproxy-rc-base.XXXXXX)
  # Like debian:*-slim: no docs or caches.
  # This machine's own extra CAs (/usr/local/share/ca-certificates: e.g. an egress proxy's) are
  # trusted inside too, so the Dockerfile's apt and pip steps reach their mirrors as the host does.
  if ! unshare --mount --propagation private -- mmdebstrap --quiet --variant=minbase --include="$BASE_PKGS" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$suite" "$tmp/rootfs.tar"; then
    rm -rf "$tmp"
    return 1
  fi
  log "[base] rootfs $(du -h "$tmp/rootfs.tar" | cut -f1); importing into buildah"
  bah rmi -f "$ref" >/dev/null 2>&1 || true
  c=$(bah from --pull=never scratch)
  bah add "$c" "$tmp/rootfs.tar" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$c"
  bah commit -q --rm "$c" "$ref" >/dev/null
  rm -rf "$tmp"
  echo "$key" > "$stamp_file"
  log "[base] $ref built"
}
