#!/usr/bin/env bash
# Builds the container images that upstream's e2e suite (e2e.test of hack/e2e-tools.sh) runs, under
# the framework's exact names (read from `e2e.test --list-images`, never written here by hand), with
# no registry: pods use IfNotPresent for tagged images, so these imported into every node's
# containerd are used as they are (no KUBE_TEST_REPO_LIST).
#   agnhost                  Debian bookworm minbase (mmdebstrap) + the tools upstream's Alpine image has
#                            (dig, curl, nc, ip/ss, iperf, bash, socat, wget, ps, ping, conntrack), /agnhost,
#                            /agnhost-2, porter's /localhost.crt+key, /uploads, /coredns (one DNS test
#                            runs it), uid 1000 in gid 50000 as upstream; ENTRYPOINT /agnhost, CMD pause.
#                            /var/registry, what `agnhost fake-registry-server` serves: upstream fills it
#                            at build time with the images of fakeregistryserver/images.txt
#                            (prepare_registry.sh, from registry.k8s.io); here each is the cluster's
#                            pause image (hack/images.sh), in the same layout (a tag file holding the
#                            manifest's digest, manifests and blobs under sha256/<2>/<digest>/data)
#                            Its archive also carries the framework's other agnhost tag (AgnhostPrev) and
#                            the names glibc-dns-testing (the DNS tests' glibc prober: dig and /coredns),
#                            jessie-dnsutils (older releases' name) and distroless-iptables (one
#                            kube-proxy test's host exec pod: sh, grep, conntrack)
#   busybox                  busybox-static, every applet linked in /bin, /etc/passwd with root and nobody
#   pause                    the cluster's pause image (hack/images.sh), under the framework's pause name
#   regression-issue-74839   its Go main package (k8s.io/kubernetes/test/images) on busybox-static
#   nginx                    busybox-static httpd serving on 80 (the Endpoints/EndpointSlice tests only
#                            need a running container with ports)
# (each under every tag the list has for it) as docker-archive tarballs e2e-NAME.tar in
# ${NFTPROXY_IMAGES:-${NFTPROXY_CACHE:-~/.cache/nftproxy}/images}/e2e/<K8S_VERSION> (each Kubernetes
# version's e2e.test names its own tags), one archive per image holding all its names (containerd's
# import makes one image per name), listed in e2e-images.json there: {"<ref>": "<archive>", ...}. Only registry.k8s.io names are made; the others of the list are logged.
# Rebuilt only when their inputs changed (a stamp per archive): a second run prints "cached".
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/k8s-versions.sh
. hack/k8s-versions.sh
K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT}
export K8S_VERSION
# the Go toolchain k8s.io/kubernetes v1.38 needs (its module is read below for porter's certificate)
export GOTOOLCHAIN=$GO_TOOLCHAIN

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
OUT=${NFTPROXY_IMAGES:-$CACHE/images}
E2E_OUT=$OUT/e2e/$K8S_VERSION   # this version's archives, stamps and e2e-images.json
BIN=$CACHE/k8s/$K8S_VERSION/bin  # e2e.test, agnhost, regression-issue-74839 (hack/e2e-tools.sh)
TOOLBIN=$CACHE/bin               # coredns
STORE=$OUT/storage
RUNROOT=$OUT/run
SUITE=bookworm
PAUSE_REF=localhost/nftproxy-pause:1   # hack/images.sh's
# Upstream's agnhost Dockerfile installs (Alpine) bind-tools curl netcat-openbsd iproute2 iperf bash
# util-linux-misc socat, and its busybox base brings wget, nslookup, ps, ping...
AGNHOST_PKGS=bind9-dnsutils,curl,netcat-openbsd,iproute2,bash,iperf,ca-certificates,socat,wget,procps,iputils-ping,conntrack
E2E_RECIPE=2  # bump when the build steps below change (2: /var/registry filled)

START=$SECONDS
log() { printf '==> [e2e-images %4ss] %s\n' "$((SECONDS - START))" "$*"; }

# The binaries (cached), then the cluster's images (cached; the pause image is retagged here).
bash hack/e2e-tools.sh
bash hack/images.sh

mkdir -p "$OUT" "$RUNROOT" "$E2E_OUT"
exec 9>"$OUT/.images.lock"   # the same lock as hack/images.sh: one buildah storage
flock 9

if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=$(command -v go); else GO=/usr/local/go/bin/go; fi
fi
BUSYBOX=$(command -v busybox)
[ -x /bin/busybox ] && BUSYBOX=/bin/busybox
bah() {
  unshare --mount --propagation private -- \
    buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver vfs "$@"
}
# stamp_ok NAME KEY: E2E_OUT/NAME.tar was built from KEY; one that the earlier layout (one version,
# in $OUT itself) built from KEY is hard-linked in instead of being built again.
stamp_ok() {
  [ -f "$E2E_OUT/$1.tar" ] && [ "$(cat "$E2E_OUT/.$1.stamp" 2>/dev/null)" = "$2" ] && return 0
  [ -f "$OUT/$1.tar" ] && [ "$(cat "$OUT/.$1.stamp" 2>/dev/null)" = "$2" ] || return 1
  ln -f "$OUT/$1.tar" "$E2E_OUT/$1.tar" 2>/dev/null || cp -f "$OUT/$1.tar" "$E2E_OUT/$1.tar"
  echo "$2" > "$E2E_OUT/.$1.stamp"
}
stamp() { echo "$2" > "$E2E_OUT/.$1.stamp"; }
# archive NAME REF...: the image REF (the first) as a docker-archive at $OUT/NAME.tar carrying every
# REF as a name (its manifest.json's RepoTags), atomically.
archive() {
  local name=$1 tmp=$E2E_OUT/$1.tar.tmp; shift
  rm -f "$tmp"
  bah push -q "$1" "docker-archive:$tmp:$1" >/dev/null
  if [ $# -gt 1 ]; then
    # A copy with every name in manifest.json (GNU tar --delete corrupts archives this large).
    python3 - "$tmp" "$@" <<'EOF'
import io, json, os, sys, tarfile
path, refs = sys.argv[1], sys.argv[2:]
with tarfile.open(path) as src, tarfile.open(path + ".tags", "w", format=src.format) as dst:
    for m in src:
        if m.name == "manifest.json":
            manifests = json.load(src.extractfile(m))
            assert len(manifests) == 1, manifests
            manifests[0]["RepoTags"] = refs
            data = json.dumps(manifests).encode()
            m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
        else:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
os.replace(path + ".tags", path)
EOF
  fi
  mv -f "$tmp" "$E2E_OUT/$name.tar"
}
# commit_rootfs REF ROOTFS_TAR CONFIG...: an image of one layer.
commit_rootfs() {
  local ref=$1 tar=$2; shift 2
  bah rmi -f "$ref" >/dev/null 2>&1 || true
  local c; c=$(bah from --pull=never scratch)
  bah add "$c" "$tar" / >/dev/null
  bah config "$@" "$c"
  bah commit -q --rm "$c" "$ref" >/dev/null
}

# ------------------------------------------------------------------ the framework's names
LIST=$("$BIN/e2e.test" --list-images)
declare -A REFS=()   # image name (agnhost, busybox, ...) -> the framework's refs, space-separated
while read -r ref; do
  # Only registry.k8s.io's: the list also has names that must stay unpullable (gcr.io/k8s-authenticated-test/
  # agnhost: a test of pull secrets; invalid.registry.k8s.io/...).
  case $ref in registry.k8s.io/*) ;; *) continue;; esac
  name=${ref##*/}; name=${name%%:*}
  REFS[$name]="${REFS[$name]:+${REFS[$name]} }$ref"
done <<< "$LIST"
# refs NAME...: the framework's refs of those images (those it lists), each image's newest tag first
# (--list-images prints them in no fixed order).
refs() {
  local n
  for n in "$@"; do
    [ -z "${REFS[$n]:-}" ] || tr ' ' '\n' <<< "${REFS[$n]}" | sort -rV
  done
}

declare -A JSON=()   # ref -> archive
made() { local name=$1 r; shift; for r in "$@"; do JSON[$r]=$E2E_OUT/$name.tar; done; }

e2e_version=$(cat "$BIN/.e2e.test.version")
script_key="r$E2E_RECIPE $(sha256sum hack/e2e-images.sh | cut -c1-16) $(sha256sum "$BUSYBOX" | cut -c1-16)"

# fake_registry IMAGES_TXT DIR: DIR as agnhost's fake-registry-server reads /var/registry, holding the
# images IMAGES_TXT names ("name tag internal_tag" lines; upstream pulls name:tag from registry.k8s.io,
# here the cluster's pause image stands for "pause") under their internal tags. Each image is pushed
# by buildah as an OCI layout, then its manifest and blobs are laid out as the server looks them up.
fake_registry() {
  local list=$1 dir=$2 name tag internal
  [ -f "$list" ] || { echo "e2e-images: no $list" >&2; exit 1; }
  mkdir -p "$dir"
  while read -r name tag internal; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    [ "$name" = pause ] || { echo "e2e-images: no image here for the fake registry's $name:$tag" >&2; exit 1; }
    rm -rf "$dir.oci"
    bah push -q "$PAUSE_REF" "oci:$dir.oci:$internal" >/dev/null
    python3 - "$dir.oci" "$dir/$name" "$internal" <<'PY'
import hashlib, json, os, sys
src, dst, tag = sys.argv[1:]
def blob(digest):
    algo, h = digest.split(":")
    with open(f"{src}/blobs/{algo}/{h}", "rb") as f:
        return f.read()
def place(kind, data):
    h = hashlib.sha256(data).hexdigest()
    path = f"{dst}/{kind}/sha256/{h[:2]}/{h}/data"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return f"sha256:{h}"
(entry,) = json.load(open(f"{src}/index.json"))["manifests"]
manifest = json.loads(blob(entry["digest"]))
manifest.setdefault("mediaType", entry.get("mediaType", "application/vnd.oci.image.manifest.v1+json"))
for d in [manifest["config"], *manifest["layers"]]:
    assert place("blobs", blob(d["digest"])) == d["digest"], d
digest = place("manifests", json.dumps(manifest).encode())  # the server sends it with its mediaType
with open(f"{dst}/manifests/{tag}", "w") as f:
    f.write(digest + "\n")
PY
    rm -rf "$dir.oci"
    log "[agnhost] fake registry: $name:$internal (the cluster's pause image, for upstream's $name:$tag)"
  done < "$list"
}

# ------------------------------------------------------------------ agnhost (+ glibc-dns-testing, ...)
# agnhost is listed twice (Agnhost and AgnhostPrev): the newest is the image's own name.
mapfile -t agnhost_refs < <(refs agnhost glibc-dns-testing jessie-dnsutils distroless-iptables)
agnhost=${agnhost_refs[0]:-}
[[ $agnhost == */agnhost:* ]] || { echo "e2e-images: e2e.test --list-images lists no agnhost" >&2; exit 1; }
agnhost_key="$script_key ${agnhost_refs[*]} $AGNHOST_PKGS $e2e_version $(cat "$TOOLBIN/.coredns.version")"
agnhost_key+=" $(sha256sum "$BIN/agnhost" "$TOOLBIN/coredns" | cut -c1-16 | tr '\n' ' ') $(cat "$OUT/.pause.stamp")"
if stamp_ok e2e-agnhost "$agnhost_key"; then
  log "$agnhost: cached"
else
  kdir=$(GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@${e2e_version%% *}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$kdir/test/images/agnhost/porter/localhost.crt" ] || { echo "e2e-images: no porter certificate in $kdir" >&2; exit 1; }
  log "[agnhost] mmdebstrap --variant=minbase $SUITE + $AGNHOST_PKGS: ~3 min, downloads from the Debian mirror"
  tmp=$(mktemp -d /var/tmp/nftproxy-e2e-agnhost.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  cp "$BIN/agnhost" "$TOOLBIN/coredns" "$kdir/test/images/agnhost/porter/localhost.crt" \
    "$kdir/test/images/agnhost/porter/localhost.key" "$tmp/"
  chmod 644 "$tmp/localhost.crt" "$tmp/localhost.key"
  fake_registry "$kdir/test/images/agnhost/fakeregistryserver/images.txt" "$tmp/registry"
  unshare --mount --propagation private -- mmdebstrap --quiet --variant=minbase --include="$AGNHOST_PKGS" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="copy-in $tmp/agnhost $tmp/coredns $tmp/localhost.crt $tmp/localhost.key /" \
    --customize-hook="copy-in $tmp/registry /var" \
    --customize-hook='chroot "$1" sh -ec "
      ln -s agnhost /agnhost-2
      ln -s /usr/bin/iperf /usr/local/bin/iperf
      mkdir -p /uploads
      groupadd -g 50000 group-defined-in-image
      useradd -u 1000 -m -s /bin/sh -G group-defined-in-image user-defined-in-image"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$SUITE" "$tmp/rootfs.tar"
  log "[agnhost] rootfs $(du -h "$tmp/rootfs.tar" | cut -f1); importing into buildah"
  commit_rootfs "$agnhost" "$tmp/rootfs.tar" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --workingdir / \
    --entrypoint '["/agnhost"]' --cmd '["pause"]' \
    --port 80 --port 8080 --port 8081 --port 9376 --port 5000
  archive e2e-agnhost "${agnhost_refs[@]}"
  bah rmi -f "$agnhost" >/dev/null 2>&1 || true   # the archive is what is used
  rm -rf "$tmp"
  trap - EXIT
  stamp e2e-agnhost "$agnhost_key"
  log "[agnhost] ${agnhost_refs[*]} built ($(du -h "$E2E_OUT/e2e-agnhost.tar" | cut -f1))"
fi
made e2e-agnhost "${agnhost_refs[@]}"

# ------------------------------------------------------------------ busybox-static images
# small NAME KEY SETUP CONFIG... -- REF...: a busybox rootfs (every applet in /bin), SETUP adds to it.
small() {
  local name=$1 key=$2 setup=$3; shift 3
  local config=()
  while [ "$1" != -- ]; do config+=("$1"); shift; done
  shift
  key="$script_key $key $*"
  if stamp_ok "$name" "$key"; then log "$*: cached"; made "$name" "$@"; return; fi
  local tmp; tmp=$(mktemp -d /var/tmp/nftproxy-e2e-img.XXXXXX)
  mkdir -p "$tmp/rootfs/bin" "$tmp/rootfs/etc" "$tmp/rootfs/root" "$tmp/rootfs/home" "$tmp/rootfs/var/spool/mail"
  install -d -m 1777 "$tmp/rootfs/tmp"
  cp "$BUSYBOX" "$tmp/rootfs/bin/busybox"
  for applet in $("$BUSYBOX" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$tmp/rootfs/bin/$applet"
  done
  # As Docker Hub's busybox image.
  cat > "$tmp/rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  cat > "$tmp/rootfs/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
nogroup:x:65534:
EOF
  "$setup" "$tmp/rootfs"
  tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
  commit_rootfs "$1" "$tmp/rootfs.tar" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${config[@]}"
  archive "$name" "$@"
  bah rmi -f "$1" >/dev/null 2>&1 || true
  rm -rf "$tmp"
  stamp "$name" "$key"
  log "$* built ($(du -h "$E2E_OUT/$name.tar" | cut -f1))"
  made "$name" "$@"
}

busybox_setup() { :; }
mapfile -t r < <(refs busybox)
if [ ${#r[@]} -gt 0 ]; then small e2e-busybox "" busybox_setup --cmd '["sh"]' -- "${r[@]}"; fi

regression_setup() { cp "$BIN/regression-issue-74839" "$1/regression-issue-74839"; }
mapfile -t r < <(refs regression-issue-74839)
if [ ${#r[@]} -gt 0 ]; then
  small e2e-regression-issue-74839 "$e2e_version $(sha256sum "$BIN/regression-issue-74839" | cut -c1-16)" \
    regression_setup --entrypoint '["/regression-issue-74839"]' -- "${r[@]}"
fi

nginx_setup() {
  mkdir -p "$1/usr/share/nginx/html"
  echo '<html><body>nftproxy e2e: busybox httpd standing in for nginx</body></html>' > "$1/usr/share/nginx/html/index.html"
  # PID 1 ignores SIGTERM without a handler: stop httpd on TERM.
  cat > "$1/bin/nginx-standin" <<'EOF'
#!/bin/sh
httpd -f -p 80 -h /usr/share/nginx/html &
trap 'kill $!; exit 0' TERM INT QUIT
wait
EOF
  chmod 755 "$1/bin/nginx-standin"
}
mapfile -t r < <(refs nginx)
if [ ${#r[@]} -gt 0 ]; then small e2e-nginx "" nginx_setup --entrypoint '["/bin/nginx-standin"]' --port 80 -- "${r[@]}"; fi

# ------------------------------------------------------------------ pause (the cluster's, renamed)
mapfile -t r < <(refs pause)
if [ ${#r[@]} -gt 0 ]; then
  pause_key="$script_key $(cat "$OUT/.pause.stamp") ${r[*]}"
  if stamp_ok e2e-pause "$pause_key"; then
    log "${r[*]}: cached"
  else
    bah tag "$PAUSE_REF" "${r[0]}"
    archive e2e-pause "${r[@]}"
    bah rmi "${r[0]}" >/dev/null 2>&1 || true
    stamp e2e-pause "$pause_key"
    log "${r[*]} built (from $PAUSE_REF)"
  fi
  made e2e-pause "${r[@]}"
fi

# ------------------------------------------------------------------ the listing
missing=()
while read -r ref; do
  [ -n "$ref" ] && [ -z "${JSON[$ref]:-}" ] && missing+=("$ref")
done <<< "$LIST"
log "not made here (${#missing[@]} of the list): $(printf '%s\n' "${missing[@]}" | LC_ALL=C sort | tr '\n' ' ')"
{
  echo "{"
  sep=
  for ref in $(printf '%s\n' "${!JSON[@]}" | LC_ALL=C sort); do
    printf '%s "%s": "%s"' "$sep" "$ref" "${JSON[$ref]}"
    sep=$',\n'
  done
  echo
  echo "}"
} > "$E2E_OUT/e2e-images.json.tmp"
mv -f "$E2E_OUT/e2e-images.json.tmp" "$E2E_OUT/e2e-images.json"
log "ready: $E2E_OUT/e2e-images.json (${#JSON[@]} images, Kubernetes $K8S_VERSION) in $((SECONDS - START)) s"
