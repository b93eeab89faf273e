"""The cluster's images: built by hack/images.sh (cached), listed in images.json.

:func:`build` runs hack/images.sh: a no-op ("cached") when nothing changed, a build when the
images are missing or their inputs changed, and safe when several processes call it at once (the
script holds a lock in the images directory for the whole run). :func:`load` only reads what an
earlier build left, and says how to make it when there is nothing.

The images of an earlier commit (an upgrade test's "previous release"): :func:`checkout` makes a
detached git worktree of it, :func:`build_commit` runs that commit's own hack/images.sh there into
an images directory of its own (``images_dir()/commits/SHA``: its own buildah storage, archives and
images.json), so the current build's images.json and storage stay as they are; the nftproxy
image's tag (a digest of its inputs) differs from the current one's when its sources do. The
cluster imports it with ``RealCluster.import_image``.

The CoreDNS image (the cluster DNS) is one of hack/images.sh's: images.json's "coredns" (its binary
comes from hack/e2e-tools.sh). Upstream's e2e suite: :func:`build_e2e` runs hack/e2e-images.sh (which
runs hack/e2e-tools.sh: e2e.test, agnhost, ...), whose images carry the e2e framework's exact names
(``e2e.test --list-images``); :func:`e2e_test` is the test binary.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testkit.k8s import versions
from testkit.k8s.controlplane import cache_dir

ROOT = Path(__file__).resolve().parents[2]
# hack/base-image.sh's Debian bases and their stamps: trixie (the nftproxy image's, hack/images.sh),
# bookworm (kube-proxy's image, and the nftproxy image's before the move to trixie).
BASES = (("localhost/nftproxy-base:trixie", ".base-trixie.stamp"), ("localhost/nftproxy-base:bookworm", ".base.stamp"))


def images_dir() -> Path:
    """Where hack/images.sh keeps its builds ($NFTPROXY_IMAGES, default CACHE/images)."""
    return Path(os.environ.get("NFTPROXY_IMAGES") or cache_dir() / "images")


def images_json(out: Path | None = None) -> Path:
    return (out or images_dir()) / "images.json"


def build(log: Callable[[str], None], *, source: Path = ROOT, out: Path | None = None) -> dict[str, Any]:
    """Run hack/images.sh (a no-op when nothing changed), its progress lines through LOG. SOURCE: the
    tree whose script and sources to build (another commit's worktree, which gets no K8S_VERSION:
    its scripts build with their own default); OUT: the images directory (default images_dir())."""
    _run_script(source, "images.sh", log, out)
    return load(out)


def _run_script(source: Path, script: str, log: Callable[[str], None], out: Path | None) -> None:
    """SOURCE/hack/SCRIPT (images into OUT, default images_dir()), its ``==>`` lines through LOG;
    RuntimeError with the output's tail when it fails."""
    env = dict(os.environ)
    if source != ROOT:  # another commit's scripts may know no such version (nor its Go toolchain)
        env.pop("K8S_VERSION", None)
        env.pop("GOTOOLCHAIN", None)
    if out is not None:
        env["NFTPROXY_IMAGES"] = str(out)
    proc = subprocess.Popen(
        ["bash", str(source / "hack" / script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=source,
        env=env,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-40:], line]
        if line.startswith("==>"):
            log("    " + line)
    if proc.wait() != 0:
        raise RuntimeError(f"{source}/hack/{script} failed:\n" + "\n".join(tail))


class ImagesMissing(FileNotFoundError):
    """No images.json in the images directory: hack/images.sh has not run there."""


def built(out: Path | None = None) -> bool:
    return images_json(out).is_file()


def load(out: Path | None = None) -> dict[str, Any]:
    """What the last build of hack/images.sh listed (no build: see :func:`build`)."""
    path = images_json(out)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ImagesMissing(
            f"no images built: {path} is missing (run `make images` or hack/images.sh, "
            "or use RealCluster.up(build=True))"
        ) from None
    data: dict[str, Any] = json.loads(text)
    return data


# ---------------------------------------------------------------------------------------------- upstream's e2e


def e2e_images_json(out: Path | None = None) -> Path:
    """This Kubernetes version's (K8S_VERSION) e2e images list: each version's e2e.test names its own tags."""
    return (out or images_dir()) / "e2e" / versions.current() / "e2e-images.json"


def e2e_test() -> Path:
    """Upstream's e2e.test (hack/e2e-tools.sh; :func:`build_e2e` makes it)."""
    return versions.bin_dir(cache_dir()) / "e2e.test"


def build_e2e(log: Callable[[str], None], *, out: Path | None = None) -> dict[str, str]:
    """Run hack/e2e-images.sh (cached: a no-op when nothing changed; the first time it builds e2e.test,
    agnhost and CoreDNS from the Go module proxy, ~10 min with hack/k8s-tools.sh's Go cache warm, and
    the images, ~4 min), its progress lines through LOG; return {framework image ref: docker archive}
    (several refs may share one archive, which carries all their names). OUT: the images directory."""
    _run_script(ROOT, "e2e-images.sh", log, out)
    return load_e2e(out)


def load_e2e(out: Path | None = None) -> dict[str, str]:
    """What the last build of hack/e2e-images.sh listed: {ref: archive} (no build: see :func:`build_e2e`)."""
    path = e2e_images_json(out)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ImagesMissing(f"no e2e images built: {path} is missing (run hack/e2e-images.sh)") from None
    data: dict[str, str] = json.loads(text)
    return data


def coredns_ref(images: dict[str, Any] | None = None) -> str:
    """The CoreDNS image's ref (images.json's "coredns"; IMAGES: a loaded images.json)."""
    ref: str = (images if images is not None else load())["coredns"]
    return ref


# ---------------------------------------------------------------------------------------------- another commit


class CommitMissing(LookupError):
    """The commit is not in this repository (e.g. a shallow clone, or a tarball without .git)."""


def _git(*args: str) -> str:
    p = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stdout.strip()


def resolve(commit: str) -> str:
    """COMMIT's full id, or CommitMissing."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except RuntimeError:
        raise CommitMissing(f"commit {commit} is not in {ROOT} (a shallow clone or no .git?)") from None


@contextlib.contextmanager
def checkout(commit: str, parent: Path) -> Iterator[Path]:
    """A detached git worktree of COMMIT under PARENT, removed after."""
    sha = resolve(commit)
    path = parent / f"src-{sha[:12]}"
    _git("worktree", "add", "--detach", "--quiet", str(path), sha)
    try:
        yield path
    finally:
        with contextlib.suppress(RuntimeError):
            _git("worktree", "remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)


def commit_images_dir(commit: str) -> Path:
    """The images directory of COMMIT's build: under the current one's, a directory of its own."""
    return images_dir() / "commits" / resolve(commit)


def build_commit(source: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Build the images of the commit checked out at SOURCE (:func:`checkout`) with its own
    hack/images.sh, into :func:`commit_images_dir`; return its images.json."""
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    out = commit_images_dir(head.stdout.strip())
    out.mkdir(parents=True, exist_ok=True)
    _seed_base(out, log)
    return build(log, source=source, out=out)


def _seed_base(out: Path, log: Callable[[str], None]) -> None:
    """Copy the current images directory's Debian bases into OUT's buildah storage, with their
    stamps, when OUT has none: hack/images.sh would otherwise make the same base again with
    mmdebstrap (~3 min, a Debian download). Only a cache: an images.sh whose base key differs from
    the copied stamp's rebuilds the base anyway, and a failed copy leaves the build to images.sh."""
    src = images_dir()
    for ref, stamp_name in BASES:
        stamp = src / stamp_name
        if (out / stamp_name).exists() or not stamp.exists():
            continue
        bah = ["unshare", "--mount", "--propagation", "private", "--", "buildah", "--storage-driver", "vfs"]
        dest = f"containers-storage:[vfs@{out / 'storage'}+{out / 'run'}]{ref}"
        with open(src / ".images.lock", "a") as lock:  # held while its storage is read
            fcntl.flock(lock, fcntl.LOCK_EX)
            argv = [*bah, "--root", str(src / "storage"), "--runroot", str(src / "run"), "push", "-q", ref, dest]
            p = subprocess.run(argv, capture_output=True, text=True, check=False)
            key = stamp.read_text()
        if p.returncode != 0:
            log(f"    (the base could not be copied from {src}, images.sh makes it: {p.stderr.strip()[-300:]})")
            continue
        (out / stamp_name).write_text(key)
        log(f"    {ref}: copied from {src}")
