#!/usr/bin/env bash
# Builds the container images of the local cluster (the real cluster of docs/testing.md) without any registry:
#   localhost/nftproxy-base:trixie     Debian trixie minbase (+ this machine's CAs), made by mmdebstrap (the
#                                      equivalent of the Dockerfile's default, debian:trixie-slim; hack/base-image.sh)
#   localhost/nftproxy:<digest>        the repository's Dockerfile, FROM that base (build argument)
#   localhost/nftproxy-pause:1         busybox-static, a shell that sleeps and reaps orphans (the sandbox image)
#   localhost/nftproxy-echo:1          busybox-static httpd answering {"pod": HOSTNAME, "peer": REMOTE_ADDR}
#   localhost/nftproxy-coredns:<ver>   busybox-static + /coredns (the cluster DNS; hack/e2e-tools.sh builds the binary
#                                      from the Go module proxy: COREDNS_VERSION, only the plugins the cluster needs)
# as docker-archive tarballs in ${NFTPROXY_IMAGES:-${NFTPROXY_CACHE:-~/.cache/nftproxy}/images}
# (imported into each node's containerd by the cluster that reads it), listed in images.json there.
# Rebuilt only when their inputs changed: the nftproxy image's tag is a digest of the Dockerfile,
# .dockerignore, pyproject.toml, LICENSE and the nftproxy package; a second run prints "cached". Its
# label org.opencontainers.image.version is the release (nftproxy/__init__.py's __version__, part of
# the digest). The chart's default image tag is that version (its appVersion); the local cluster sets
# image.tag to the digest.
# buildah uses its own storage under the cache (vfs driver: no mounts at all) and every step runs in
# a private mount namespace, so nothing of it stays mounted in the machine's mount namespace.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
OUT=${NFTPROXY_IMAGES:-$CACHE/images}
STORE=$OUT/storage
RUNROOT=$OUT/run
SUITE=trixie  # the nftproxy image's Debian (Dockerfile; docs/image.md)
BASE_REF=localhost/nftproxy-base:$SUITE
PAUSE_REF=localhost/nftproxy-pause:1
ECHO_REF=localhost/nftproxy-echo:1
BIN=$CACHE/bin

START=$SECONDS
log() { printf '==> [images %4ss] %s\n' "$((SECONDS - START))" "$*"; }

mkdir -p "$OUT" "$RUNROOT"
exec 9>"$OUT/.images.lock"
flock 9

for tool in mmdebstrap buildah busybox; do
  command -v "$tool" >/dev/null || { echo "images: $tool missing (run hack/install.sh)" >&2; exit 1; }
done
BUSYBOX=$(command -v busybox)
# The static one: the images have no libc.
[ -x /bin/busybox ] && BUSYBOX=/bin/busybox
file_static() { ! ldd "$1" >/dev/null 2>&1; }
file_static "$BUSYBOX" || { echo "images: $BUSYBOX is not static (install busybox-static)" >&2; exit 1; }

# buildah with our own storage, in a private mount namespace (mounts vanish with it).
bah() {
  unshare --mount --propagation private -- \
    buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs "$@"
}
stamp_ok() { [ -f "$OUT/$1.tar" ] && [ "$(cat "$OUT/.$1.stamp" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" > "$OUT/.$1.stamp"; }
# archive NAME REF: REF as a docker-archive at $OUT/NAME.tar (atomically).
archive() {
  rm -f "$OUT/$1.tar.tmp"
  bah push -q "$2" "docker-archive:$OUT/$1.tar.tmp:$2" >/dev/null
  mv -f "$OUT/$1.tar.tmp" "$OUT/$1.tar"
}

# ------------------------------------------------------------------ the CoreDNS binary (Go, cached)
# Its own lock; prints "coredns ...: cached" when built. The image's tag is the binary's version.
E2E_TOOLS=coredns bash "$ROOT/hack/e2e-tools.sh"
COREDNS_STAMP=$(cat "$BIN/.coredns.version")
COREDNS_REF=localhost/nftproxy-coredns:${COREDNS_STAMP%% *}

# ------------------------------------------------------------------ base (mmdebstrap)
# shellcheck source=hack/base-image.sh
. "$ROOT/hack/base-image.sh"
base_image "$SUITE"

# ------------------------------------------------------------------ nftproxy (Dockerfile)
NFTPROXY_RECIPE=3  # bump when the build steps below change
digest=$( { echo "$NFTPROXY_RECIPE"; cat Dockerfile .dockerignore pyproject.toml LICENSE "$(base_stamp "$SUITE")";
            find nftproxy -type f -name '*.py' -o -type f -name '*.typed' | LC_ALL=C sort | xargs cat; } \
          | sha256sum | cut -c1-12)
NFTPROXY_REF=localhost/nftproxy:$digest
# OCI labels: the release (nftproxy/__init__.py, in the digest), the repository's remote when it has one.
VERSION=$(python3 -B -c 'import nftproxy; print(nftproxy.__version__)')
SOURCE=$(git remote get-url origin 2>/dev/null || true)
if stamp_ok nftproxy "$digest"; then
  log "$NFTPROXY_REF: cached"
else
  log "[nftproxy] buildah bud Dockerfile (FROM $BASE_REF): ~2 min, apt and pip install the runtime packages"
  bah bud -q --pull=never --network=host --isolation=oci --layers=false \
    --build-arg "BASE=$BASE_REF" --build-arg "VERSION=$VERSION" --build-arg "SOURCE=$SOURCE" \
    -t "$NFTPROXY_REF" -f Dockerfile . >/dev/null
  archive nftproxy "$NFTPROXY_REF"
  # Keep only this build in the storage (earlier digests are unreachable anyway).
  for old in $(bah images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/nftproxy:' | grep -v ":$digest\$" || true); do
    bah rmi -f "$old" >/dev/null 2>&1 || true
  done
  stamp nftproxy "$digest"
  log "[nftproxy] $NFTPROXY_REF built ($(du -h "$OUT/nftproxy.tar" | cut -f1))"
fi

# ------------------------------------------------------------------ pause + echo (busybox-static)
small_key="$(sha256sum "$BUSYBOX" | cut -c1-16) $(sha256sum hack/images.sh | cut -c1-16)"
# small NAME REF SETUP: a busybox rootfs, SETUP adds files to it ($1 = rootfs dir), then config.
# KEY_EXTRA (optional): more inputs of the image, in its stamp.
small() {
  local name=$1 ref=$2 setup=$3 key="$small_key${KEY_EXTRA:+ $KEY_EXTRA}"; shift 3
  if stamp_ok "$name" "$key"; then log "$ref: cached"; return; fi
  local tmp; tmp=$(mktemp -d /var/tmp/nftproxy-rc-img.XXXXXX)
  mkdir -p "$tmp/rootfs/bin" "$tmp/rootfs/tmp" "$tmp/rootfs/etc"
  cp "$BUSYBOX" "$tmp/rootfs/bin/busybox"
  for applet in sh sleep usleep hostname httpd wget cat ls ip nc date timeout; do ln -s busybox "$tmp/rootfs/bin/$applet"; done
  echo 'root:x:0:0:root:/:/bin/sh' > "$tmp/rootfs/etc/passwd"
  echo 'root:x:0:' > "$tmp/rootfs/etc/group"
  # PID 1 of a pod (the sandbox, or a container that only waits): sleeps and reaps the orphans
  # that exec'd commands leave (busybox `timeout` leaves one per call; thousands pile up otherwise).
  printf '#!/bin/sh\ntrap "exit 0" TERM INT\nwhile :; do sleep 10 & wait; done\n' > "$tmp/rootfs/bin/init"
  chmod 755 "$tmp/rootfs/bin/init"
  "$setup" "$tmp/rootfs"
  tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
  bah rmi -f "$ref" >/dev/null 2>&1 || true
  local c; c=$(bah from --pull=never scratch)
  bah add "$c" "$tmp/rootfs.tar" / >/dev/null
  bah config --env PATH=/bin "$@" "$c"
  bah commit -q --rm "$c" "$ref" >/dev/null
  archive "$name" "$ref"
  rm -rf "$tmp"
  stamp "$name" "$key"
  log "$ref built"
}
pause_setup() { :; }
echo_setup() {
  mkdir -p "$1/www/cgi-bin"
  cat > "$1/www/cgi-bin/index.cgi" <<'EOF'
#!/bin/sh
# busybox httpd runs this for every request to "/": who answered, and the client address it saw.
printf 'Content-Type: application/json\r\nConnection: close\r\n\r\n{"pod": "%s", "peer": "%s"}\n' "$(hostname)" "$REMOTE_ADDR"
EOF
  chmod 755 "$1/www/cgi-bin/index.cgi"
  # PID 1 ignores SIGTERM without a handler: stop httpd on TERM (after the pod's preStop).
  cat > "$1/bin/echo-server" <<'EOF'
#!/bin/sh
httpd -f -p "0.0.0.0:${PORT:-8080}" -h /www &
trap 'kill $!; exit 0' TERM INT
wait
EOF
  chmod 755 "$1/bin/echo-server"
}
coredns_setup() {
  cp "$BIN/coredns" "$1/coredns"
  mkdir -p "$1/etc/coredns"
}
small pause "$PAUSE_REF" pause_setup --entrypoint '["/bin/init"]'
small echo "$ECHO_REF" echo_setup --entrypoint '["/bin/echo-server"]' --port 8080
# Runs as root (binds 53); the cluster mounts its Corefile at /etc/coredns/Corefile.
KEY_EXTRA="$COREDNS_REF $COREDNS_STAMP $(sha256sum "$BIN/coredns" | cut -c1-16)" \
  small coredns "$COREDNS_REF" coredns_setup --entrypoint '["/coredns"]' --cmd '["-conf", "/etc/coredns/Corefile"]' \
  --port 53/udp --port 53/tcp

cat > "$OUT/images.json.tmp" <<EOF
{"nftproxy": "$NFTPROXY_REF", "pause": "$PAUSE_REF", "echo": "$ECHO_REF", "coredns": "$COREDNS_REF",
 "archives": {"nftproxy": "$OUT/nftproxy.tar", "pause": "$OUT/pause.tar", "echo": "$OUT/echo.tar",
              "coredns": "$OUT/coredns.tar"}}
EOF
mv -f "$OUT/images.json.tmp" "$OUT/images.json"
log "ready: $OUT/images.json"
