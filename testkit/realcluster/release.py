"""The release's artefacts (hack/release.sh, `make release`): the packaged chart and the image as a
docker archive, what an operator installs, for installing nftproxy on the real cluster from them.

:func:`build` runs hack/release.sh into :func:`release_dir` (under the images directory) without the
SBOM (no syft needed) and from the working tree as it is (``--allow-dirty``: a test runs on
uncommitted changes too); the script runs hack/images.sh (cached) and rewrites the image archive only
when that build changed, so the nodes' persistent image stores import it once per build.
:func:`load` reads what an earlier run wrote (release.json).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testkit.realcluster.images import ROOT, images_dir


@dataclass(frozen=True)
class Release:
    dir: Path
    version: str  # nftproxy's __version__
    chart_version: str
    chart: Path  # nftproxy-<chart version>.tgz
    image: str  # the archive's tag, the packaged chart's default image: nftproxy:<version>
    archive: Path  # the image as a docker archive
    image_id: str  # the image's ID: the sha256 (hex) of its config
    checksums: Path  # SHA256SUMS

    @property
    def containerd_ref(self) -> str:
        """The image's name in containerd (and in the CRI): docker's normalization of ``image``."""
        name = self.image
        first = name.split("/", 1)[0]
        if "/" not in name:
            return f"docker.io/library/{name}"
        if "." not in first and ":" not in first and first != "localhost":
            return f"docker.io/{name}"
        return name


class ReleaseMissing(FileNotFoundError):
    """No release.json in the release directory: hack/release.sh has not run there."""


def release_dir() -> Path:
    return images_dir() / "release"


def build(log: Callable[[str], None], out: Path | None = None) -> Release:
    """Run hack/release.sh --no-sbom --allow-dirty into OUT (default :func:`release_dir`), its
    progress lines through LOG; RuntimeError with the output's tail when it fails."""
    out = out or release_dir()
    argv = ["bash", str(ROOT / "hack" / "release.sh"), "--no-sbom", "--allow-dirty", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=os.environ)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-40:], line]
        if line.startswith("==> [release"):
            log("    " + line)
    if proc.wait() != 0:
        raise RuntimeError("hack/release.sh failed:\n" + "\n".join(tail))
    return load(out)


def load(out: Path | None = None) -> Release:
    """What the last run of hack/release.sh into OUT wrote (no build: see :func:`build`)."""
    out = out or release_dir()
    try:
        data = json.loads((out / "release.json").read_text())
    except FileNotFoundError:
        raise ReleaseMissing(f"no release built: {out / 'release.json'} is missing (run hack/release.sh)") from None
    return Release(
        dir=out,
        version=data["version"],
        chart_version=data["chart_version"],
        chart=out / data["chart"],
        image=data["image"],
        archive=out / data["image_archive"],
        image_id=data["image_id"],
        checksums=out / data["checksums"],
    )
