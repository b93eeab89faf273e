#!/usr/bin/env bash
# `make release`: the artefacts of the release (nftproxy/__init__.py's __version__) in dist/ (docs/release.md):
#   nftproxy-<chart version>.tgz          the Helm chart (`helm package`; `helm push` to an OCI registry)
#   nftproxy-<version>-image-amd64.tar    the image, a docker archive tagged nftproxy:<version> (the
#                                         packaged chart's default image): `docker load`, `ctr images
#                                         import`, `skopeo copy docker-archive:... docker://...`
#   nftproxy-<version>.spdx.json          the image's SBOM (syft, SPDX JSON; hack/release-tools.sh builds syft)
#   SHA256SUMS                            `sha256sum -c SHA256SUMS`
#   release.json                          what was written (names, image reference), for tools and tests
# The image is hack/images.sh's build (cached by a digest of its inputs), exported under the release's
# tag; the archive is rewritten only when that build changes.
#
# Options:
#   --out DIR       write there instead of dist/
#   --no-sbom       no SBOM (and no syft): the test cluster's install from the artefacts
#   --allow-dirty   build from a working tree with uncommitted changes (tests); a release refuses it
#   --dry-run       print release.json (the names it would write) and stop
set -euo pipefail

OUT= SBOM=1 ALLOW_DIRTY= DRY_RUN=
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=${2:?--out needs a directory}; shift 2;;
    --out=*) OUT=${1#--out=}; shift;;
    --no-sbom) SBOM=; shift;;
    --allow-dirty) ALLOW_DIRTY=1; shift;;
    --dry-run) DRY_RUN=1; shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "release: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
[ -z "$OUT" ] || OUT=$(realpath -m "$OUT")  # relative to where it was called
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/dist}

if [ -z "$ALLOW_DIRTY" ]; then
  if ! changes=$(git status --porcelain 2>/dev/null); then
    echo "release: $ROOT is not a git checkout: a release is built from a commit" >&2; exit 1
  fi
  if [ -n "$changes" ]; then
    echo "release: the working tree has uncommitted changes ($(printf '%s\n' "$changes" | wc -l) paths in git status --porcelain): commit or stash them first" >&2
    exit 1
  fi
fi

VERSION=$(python3 -B -c 'import nftproxy; print(nftproxy.__version__)')
CHART_VERSION=$(sed -n 's/^version: *"\{0,1\}\([^" ]*\)"\{0,1\} *$/\1/p' charts/nftproxy/Chart.yaml)
[ -n "$CHART_VERSION" ] || { echo "release: no version in charts/nftproxy/Chart.yaml" >&2; exit 1; }
ARCH=amd64  # the machine's; docs/release.md says what an arm64 image takes
CHART_TGZ=nftproxy-$CHART_VERSION.tgz
IMAGE=nftproxy:$VERSION   # the packaged chart's default image (values.yaml repository, appVersion)
ARCHIVE=nftproxy-$VERSION-image-$ARCH.tar
SPDX=nftproxy-$VERSION.spdx.json
release_json() {  # the names, and what the image archive holds
  local sbom=null
  [ -n "$SBOM" ] && sbom="\"$SPDX\""
  printf '{"version": "%s", "chart_version": "%s", "chart": "%s", "image": "%s", "image_archive": "%s",\n' \
    "$VERSION" "$CHART_VERSION" "$CHART_TGZ" "$IMAGE" "$ARCHIVE"
  printf ' "architecture": "%s", "sbom": %s, "checksums": "SHA256SUMS", "image_id": "%s"}\n' "$ARCH" "$sbom" "${1:-}"
}
if [ -n "$DRY_RUN" ]; then
  release_json
  exit 0
fi

CACHE=${NFTPROXY_CACHE:-$HOME/.cache/nftproxy}
IMAGES=${NFTPROXY_IMAGES:-$CACHE/images}
HELM=${HELM:-$CACHE/bin/helm}
[ -x "$HELM" ] || HELM=$(command -v helm) || { echo "release: helm missing (run hack/k8s-tools.sh)" >&2; exit 1; }
START=$SECONDS
log() { printf '==> [release %4ss] %s\n' "$((SECONDS - START))" "$*"; }
mkdir -p "$OUT"
exec 8>"$OUT/.release.lock"
flock 8
tmp=$(mktemp -d "$OUT/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ------------------------------------------------------------------ the image
bash hack/images.sh
ref=$(python3 -B -c 'import json, sys; print(json.load(open(sys.argv[1]))["nftproxy"])' "$IMAGES/images.json")
bah() {
  unshare --mount --propagation private -- \
    buildah --root "$IMAGES/storage" --runroot "$IMAGES/run" --storage-driver vfs "$@"
}
exec 9>"$IMAGES/.images.lock"
flock 9  # hack/images.sh's: nobody rebuilds the storage while it is read
image_id=$(bah inspect --format '{{.FromImageID}}' "$ref")
label=$(bah inspect --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$ref")
[ "$label" = "$VERSION" ] || { echo "release: $ref is labelled version '$label', not $VERSION" >&2; exit 1; }
if [ -f "$OUT/$ARCHIVE" ] && [ "$(cat "$OUT/.$ARCHIVE.id" 2>/dev/null)" = "$image_id" ]; then
  log "$ARCHIVE ($IMAGE, image $image_id): unchanged"
else
  # By ID: the archive names only the release's tag, not the build's local one.
  rm -f "$OUT/.$ARCHIVE.id"
  bah push -q "$image_id" "docker-archive:$tmp/$ARCHIVE:$IMAGE" >/dev/null
  mv -f "$tmp/$ARCHIVE" "$OUT/$ARCHIVE"
  echo "$image_id" > "$OUT/.$ARCHIVE.id"
  log "$ARCHIVE: $IMAGE ($(du -h "$OUT/$ARCHIVE" | cut -f1), built as $ref)"
fi
flock -u 9

# ------------------------------------------------------------------ the chart
HELM_HOME=$tmp/helm
HELM_CACHE_HOME=$HELM_HOME/cache HELM_CONFIG_HOME=$HELM_HOME/config HELM_DATA_HOME=$HELM_HOME/data \
  "$HELM" package charts/nftproxy --destination "$tmp" >/dev/null
mv -f "$tmp/$CHART_TGZ" "$OUT/$CHART_TGZ"
log "$CHART_TGZ: chart $CHART_VERSION, default image $IMAGE"

# ------------------------------------------------------------------ the SBOM
files=("$CHART_TGZ" "$ARCHIVE")
if [ -n "$SBOM" ]; then
  bash hack/release-tools.sh
  SYFT_CHECK_FOR_APP_UPDATE=false "$CACHE/bin/syft" scan -q "docker-archive:$OUT/$ARCHIVE" \
    --source-name nftproxy --source-version "$VERSION" -o "spdx-json=$tmp/$SPDX"
  mv -f "$tmp/$SPDX" "$OUT/$SPDX"
  files+=("$SPDX")
  log "$SPDX: $(python3 -B -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["packages"]))' "$OUT/$SPDX") packages"
else
  rm -f "$OUT/$SPDX"  # an SBOM of another build would not match the archive
fi

# ------------------------------------------------------------------ checksums, release.json
(cd "$OUT" && sha256sum "${files[@]}" > "$tmp/SHA256SUMS")
mv -f "$tmp/SHA256SUMS" "$OUT/SHA256SUMS"
release_json "$image_id" > "$OUT/release.json"
log "ready in $OUT: ${files[*]} SHA256SUMS"
