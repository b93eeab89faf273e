"""`down` removes everything the cluster made, also after an `up` that failed half-way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testkit.realcluster import ClusterError, RealCluster, procs
from testkit.realcluster.images import ImagesMissing

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]


def leftovers(c: RealCluster, pids: list[int]) -> dict[str, object]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {
        "netns": [line for line in netns.splitlines() if line.startswith(f"rc-{c.name}-")],
        "processes": [p for p in pids if procs.ours(p, c.marker)],
        "cgroups": [str(h / c.cgroup) for h in procs.hierarchies() if (h / c.cgroup).exists()],
        "mounts": [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if c.marker in m],
        "dirs": [str(d) for d in (c.dir, c.etcd_top) if d.exists()],
    }


def test_a_failed_up_leaves_nothing(images: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # `images`: built here when missing (this test fails after the import into containerd)
    c = RealCluster(f"fail{os.getpid()}", log=lambda s: None)
    started: list[int] = []

    def kubelets_fail() -> None:
        # everything but the kubelets runs: control plane, forwarder, holders (mounts), containerds
        started.extend(p["pid"] for p in c.state["procs"])
        assert len(started) >= 7
        assert all(procs.ours(p, c.marker) for p in started)
        assert c.on_node("node-1", "sh", "-c", f"grep -c {c.marker} /proc/self/mountinfo").strip() != "0"
        raise ClusterError("kubelet failed (on purpose)")

    monkeypatch.setattr(c, "_kubelets", kubelets_fail)
    with pytest.raises(ClusterError, match="on purpose"):
        c.up(build=False)
    assert started
    assert leftovers(c, started) == {"netns": [], "processes": [], "cgroups": [], "mounts": [], "dirs": []}


def test_up_without_build_on_an_empty_images_cache_says_so_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NFTPROXY_IMAGES", str(tmp_path / "images"))  # nothing built there
    c = RealCluster(f"noimg{os.getpid()}", log=lambda s: None)
    with pytest.raises(ImagesMissing, match=r"no images built: .*/images/images\.json is missing \(run `make images`"):
        c.up(build=False)
    assert leftovers(c, []) == {"netns": [], "processes": [], "cgroups": [], "mounts": [], "dirs": []}
    assert not (tmp_path / "images").exists()  # up(build=False) builds nothing
