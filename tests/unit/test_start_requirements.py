"""What `nftproxy run` checks before its first sync (nftproxy/dataplane/requirements.py): the
kernel's version, read and judged as kube-proxy's nftables mode does (5.13 or later, its
KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK honoured), and an nf_tables probe; one line when it
refuses. The real command on a kernel that reports an old version, and without CAP_NET_ADMIN:
tests/netns/test_start_requirements.py."""

from __future__ import annotations

import errno

import pytest

from nftproxy.dataplane import requirements
from nftproxy.dataplane.requirements import Unsupported, check, kernel_version, refusal


@pytest.mark.parametrize(
    ("release", "version"),
    [
        ("5.13.0", (5, 13, 0)),
        ("6.18.44-fc-v1252", (6, 18, 44)),
        ("5.15.0-91-generic", (5, 15, 0)),
        ("6.1.0-28-cloud-amd64", (6, 1, 0)),
        ("5.14.0-427.13.1.el9_4.x86_64", (5, 14, 0)),
        ("6.6.87.2-microsoft-standard-WSL2", (6, 6, 87, 2)),
        ("6.12", (6, 12)),
        ("  5.13.0\n", (5, 13, 0)),  # as read from /proc/sys/kernel/osrelease
    ],
)
def test_kernel_release_read_as_kube_proxy_reads_it(release: str, version: tuple[int, ...]) -> None:
    assert kernel_version(release) == version


@pytest.mark.parametrize("release", ["", "garbage", "5", "5-generic", "05.13.0", "linux-5.13", ".5.13"])
def test_unreadable_release_is_a_value_error(release: str) -> None:
    with pytest.raises(ValueError, match="not a kernel release"):
        kernel_version(release)


@pytest.mark.parametrize("release", ["5.13.0", "5.13", "5.13.0-rc1", "6.18.44-fc", "6.1.0-28-cloud-amd64", "10.0.0"])
def test_kernel_513_or_later_is_accepted(release: str) -> None:
    assert refusal(release, None) is None


@pytest.mark.parametrize("release", ["5.12.0-generic", "5.12.19", "4.19.0-26-amd64", "2.6.78-fc-v1252", "5.4"])
def test_kernel_older_than_513_is_refused_with_one_line(release: str) -> None:
    line = refusal(release, None)
    assert line == (
        f"needs Linux 5.13 or later (as kube-proxy's nftables mode), this node runs {release}; "
        "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK=1 skips this check"
    )


def test_kernel_is_compared_by_numbers_not_text() -> None:
    assert refusal("5.9.0", None) is not None  # "5.9" > "5.13" as text
    assert refusal("5.100.0", None) is None


def test_unreadable_release_is_refused_not_guessed() -> None:
    line = refusal("garbage", None)
    assert line == (
        "cannot read the kernel version from 'garbage' (needs Linux 5.13 or later); "
        "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK=1 skips this check"
    )


def test_skip_variable_skips_the_kernel_version_only() -> None:
    assert refusal("5.10.0-generic", None, skip_kernel_check=True) is None
    assert refusal("garbage", None, skip_kernel_check=True) is None
    line = refusal("5.10.0", "Error: Operation not supported", skip_kernel_check=True)
    assert line is not None and line.startswith("nf_tables is not usable here: Operation not supported")


def test_failed_nf_tables_probe_is_refused_with_its_reason() -> None:
    line = refusal("6.18.44-fc", "Error: Could not process rule: Operation not permitted\nlist tables\n^^^^\n")
    assert line == (
        "nf_tables is not usable here: Could not process rule: Operation not permitted (needs the "
        "kernel's nf_tables, libnftables and CAP_NET_ADMIN in the node's network namespace)"
    )
    assert "\n" not in line


def test_old_kernel_is_named_before_the_probe() -> None:
    line = refusal("5.4.0", "Operation not supported")
    assert line is not None and line.startswith("needs Linux 5.13 or later")


def _refused(e: Exception) -> object:
    raise e


def test_check_runs_the_probe_and_reads_the_environment() -> None:
    probed: list[bool] = []
    check(lambda: probed.append(True), release="6.18.44-fc", environ={})
    assert probed == [True]
    with pytest.raises(Unsupported, match=r"^needs Linux 5\.13 or later.*runs 5\.12\.0-generic;"):
        check(lambda: None, release="5.12.0-generic", environ={})
    check(lambda: None, release="5.12.0-generic", environ={requirements.SKIP_KERNEL_CHECK: "true"})
    with pytest.raises(Unsupported, match=r"^needs Linux"):  # empty: not set, as kube-proxy reads it
        check(lambda: None, release="5.12.0-generic", environ={requirements.SKIP_KERNEL_CHECK: ""})


def test_check_turns_the_probe_errors_into_the_line() -> None:
    denied = OSError(errno.EPERM, "Operation not permitted")
    with pytest.raises(Unsupported, match=r"^nf_tables is not usable here: Operation not permitted \(needs"):
        check(lambda: _refused(denied), release="6.18.44-fc", environ={})
    missing = ModuleNotFoundError("No module named 'nftables'")
    with pytest.raises(Unsupported, match=r"^nf_tables is not usable here: No module named 'nftables'"):
        check(lambda: _refused(missing), release="6.18.44-fc", environ={})


def test_check_reads_this_kernel_by_default() -> None:
    check(lambda: None, environ={})  # this machine's kernel (6.18) is new enough
