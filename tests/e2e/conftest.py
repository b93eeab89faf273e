"""The real cluster of the end-to-end tests: testkit.realcluster, two kubelet nodes, started once.

No test relies on another having run first, or on what an earlier run left in the cache:

* ``images``: the cluster's images, built by hack/images.sh when they are missing or stale (cached
  after, a few seconds when nothing changed; the script holds a lock in the images directory, so
  two sessions building at once wait for each other). Every test that starts a cluster takes it,
  also when its module runs alone. ``NFTPROXY_E2E_NO_BUILD=1``: never build; a test that needs
  images that are not there is skipped, with the reason.
* ``release_artefacts``: the release's artefacts, as `make release` writes them (hack/release.sh:
  the packaged chart and the image archive tagged nftproxy:<version>; no SBOM), from the working
  tree as it is; test_realcluster.py installs nftproxy from them. Cached with the images.
* ``cluster``: the cluster, removed at the end, also when a test fails; a cluster left by a
  session that was killed is removed by the next one.
* ``previous_release``: the release the upgrade test (test_upgrade.py) starts from, commit
  PREVIOUS_RELEASE: a detached worktree of it (its chart) and its images, built by its own
  hack/images.sh into an images directory of their own (images.build_commit; cached like the
  others, and taken before the cluster starts). Skipped when the commit is not in the repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.realcluster import RealCluster, stale_clusters
from testkit.realcluster import images as imagelib
from testkit.realcluster import release as releaselib
from tests.support.machine import machine_sysctls

# The last commit before the table's layout 3 (layout 2: ClientIP affinity per Service port; 3 added
# the hairpin keyed by port, the service-cidrs set and filter-output-post-dnat).
PREVIOUS_RELEASE = "882ad58"


@pytest.fixture(scope="session")
def sysctls_before() -> dict[str, str]:
    return machine_sysctls()


@pytest.fixture(scope="session")
def images() -> dict[str, Any]:
    """images.json of hack/images.sh, built first when needed (see the module's docstring)."""
    if os.environ.get("NFTPROXY_E2E_NO_BUILD"):
        if not imagelib.built():
            pytest.skip(
                f"NFTPROXY_E2E_NO_BUILD is set and no images are built ({imagelib.images_json()} is missing): "
                "run `make images` first"
            )
        return imagelib.load()
    try:
        return imagelib.build(log=lambda s: print(s, flush=True))
    except Exception as e:
        pytest.fail(f"the images could not be built: {e}", pytrace=False)


@pytest.fixture(scope="session")
def release_artefacts(images: dict[str, Any]) -> releaselib.Release:
    """hack/release.sh's output (see the module's docstring); ``images`` first: it exports their build."""
    if os.environ.get("NFTPROXY_E2E_NO_BUILD"):
        try:
            return releaselib.load()
        except releaselib.ReleaseMissing as e:
            pytest.skip(f"NFTPROXY_E2E_NO_BUILD is set and {e}")
    try:
        return releaselib.build(log=lambda s: print(s, flush=True))
    except Exception as e:
        pytest.fail(f"the release's artefacts could not be built: {e}", pytrace=False)


@pytest.fixture(scope="session")
def previous_release(images: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The previous release, commit PREVIOUS_RELEASE (see the module's docstring): ``commit``,
    ``chart`` (its chart directory), ``image`` (its nftproxy image) and ``archive`` (that image's
    docker archive, for RealCluster.import_image). ``images`` first: its Debian base is reused."""
    try:
        commit = imagelib.resolve(PREVIOUS_RELEASE)
    except imagelib.CommitMissing as e:
        pytest.skip(str(e))
    out = imagelib.commit_images_dir(commit)
    no_build = bool(os.environ.get("NFTPROXY_E2E_NO_BUILD"))
    if no_build and not imagelib.built(out):
        pytest.skip(f"NFTPROXY_E2E_NO_BUILD is set and the images of {PREVIOUS_RELEASE} are not built ({out})")
    with imagelib.checkout(commit, tmp_path_factory.mktemp("previous-release")) as src:
        try:
            built = imagelib.load(out) if no_build else imagelib.build_commit(src, log=lambda s: print(s, flush=True))
        except Exception as e:
            pytest.fail(f"the images of {PREVIOUS_RELEASE} could not be built: {e}", pytrace=False)
        yield {
            "commit": commit,
            "chart": src / "charts" / "nftproxy",
            "image": built["nftproxy"],
            "archive": built["archives"]["nftproxy"],
        }


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, sysctls_before: dict[str, str]) -> Iterator[RealCluster]:
    if name := os.environ.get("NFTPROXY_E2E_CLUSTER"):
        # Development: a cluster made with `python -m testkit.realcluster up --name NAME`, kept.
        yield RealCluster.attach(name)
        return
    request.getfixturevalue("images")  # built (or skipped) before anything of the cluster exists
    for name in stale_clusters():
        RealCluster.attach(name).down()
    c = RealCluster(f"e2e{os.getpid()}", log=lambda s: print(s, flush=True))
    try:
        c.up(build=False)
    except Exception as e:
        pytest.fail(f"the cluster did not come up: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.down()
