"""The cluster's images: built by hack/images.sh (cached), listed in images.json.

:func:`build` runs hack/images.sh: a no-op ("cached") when nothing changed, a build when the
images are missing or their inputs changed, and safe when several processes call it at once (the
script holds a lock in the images directory for the whole run). :func:`load` only reads what an
earlier build left, and says how to make it when there is nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testkit.k8s.controlplane import cache_dir

ROOT = Path(__file__).resolve().parents[2]


def images_dir() -> Path:
    """Where hack/images.sh keeps its builds ($NFTPROXY_IMAGES, default CACHE/images)."""
    return Path(os.environ.get("NFTPROXY_IMAGES") or cache_dir() / "images")


def images_json() -> Path:
    return images_dir() / "images.json"


def build(log: Callable[[str], None]) -> dict[str, Any]:
    """Run hack/images.sh (a no-op when nothing changed), its progress lines through LOG."""
    proc = subprocess.Popen(
        ["bash", str(ROOT / "hack" / "images.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-40:], line]
        if line.startswith("==>"):
            log("    " + line)
    if proc.wait() != 0:
        raise RuntimeError("hack/images.sh failed:\n" + "\n".join(tail))
    return load()


class ImagesMissing(FileNotFoundError):
    """No images.json in the images directory: hack/images.sh has not run there."""


def built() -> bool:
    return images_json().is_file()


def load() -> dict[str, Any]:
    """What the last build of hack/images.sh listed (no build: see :func:`build`)."""
    path = images_json()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ImagesMissing(
            f"no images built: {path} is missing (run `make images` or hack/images.sh, "
            "or use RealCluster.up(build=True))"
        ) from None
    data: dict[str, Any] = json.loads(text)
    return data
