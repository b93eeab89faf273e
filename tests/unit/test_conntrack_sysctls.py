"""The conntrack sysctls `run` sets as kube-proxy does: only what differs, 0 leaves a sysctl
alone, a sysctl that cannot be set is reported and never stops the proxy (a directory of plain
files stands for /proc/sys/net/netfilter here; the real one: tests/netns/test_conntrack_sysctls.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from nftproxy.cli.flags import add_run_flags, settings_from_args
from nftproxy.dataplane.conntrack_sysctls import ConntrackSysctls, apply

NAMES = ("established", "close_wait")


def sysctl_dir(tmp_path: Path, established: int = 432000, close_wait: int = 60) -> Path:
    for name, value in (("established", established), ("close_wait", close_wait)):
        (tmp_path / f"nf_conntrack_tcp_timeout_{name}").write_text(f"{value}\n")
    (tmp_path / "nf_conntrack_tcp_be_liberal").write_text("0\n")
    (tmp_path / "nf_conntrack_udp_timeout").write_text("30\n")
    return tmp_path


def value(d: Path, name: str) -> int:
    return int((d / name).read_text())


def test_kube_proxys_defaults_are_what_run_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("NFTPROXY_CONNTRACK_")]:
        monkeypatch.delenv(var)
    p = argparse.ArgumentParser()
    add_run_flags(p)
    cfg = settings_from_args(p.parse_args(["--node-name", "n1"])).conntrack
    assert cfg is not None
    assert cfg.wanted() == {"nf_conntrack_tcp_timeout_established": 86400, "nf_conntrack_tcp_timeout_close_wait": 3600}
    assert cfg.directory == "/proc/sys/net/netfilter"
    args = ["--node-name", "n1", "--conntrack-tcp-timeout-established", "0"]
    args += ["--conntrack-tcp-timeout-close-wait=2h0m0s"]
    cfg = settings_from_args(p.parse_args(args)).conntrack
    assert cfg is not None and cfg.wanted() == {"nf_conntrack_tcp_timeout_close_wait": 7200}


def test_environment_sets_them_as_the_chart_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NFTPROXY_CONNTRACK_TCP_TIMEOUT_CLOSE_WAIT", "0")
    monkeypatch.setenv("NFTPROXY_CONNTRACK_TCP_BE_LIBERAL", "true")
    monkeypatch.setenv("NFTPROXY_CONNTRACK_UDP_TIMEOUT", "30s")
    monkeypatch.setenv("NFTPROXY_CONNTRACK_SYSCTL_DIR", "/host/proc/sys/net/netfilter")
    p = argparse.ArgumentParser()
    add_run_flags(p)
    cfg = settings_from_args(p.parse_args(["--node-name", "n1"])).conntrack
    assert cfg is not None and cfg.directory == "/host/proc/sys/net/netfilter"
    assert cfg.wanted() == {
        "nf_conntrack_tcp_timeout_established": 86400,
        "nf_conntrack_tcp_be_liberal": 1,
        "nf_conntrack_udp_timeout": 30,
    }


def test_only_what_differs_is_written(tmp_path: Path) -> None:
    d = sysctl_dir(tmp_path, established=86400)
    before = (d / "nf_conntrack_tcp_timeout_established").stat().st_mtime_ns
    out = apply(ConntrackSysctls(tcp_established=86400, tcp_close_wait=3600, directory=str(d)), None)
    assert {o.name: (o.before, o.after, o.changed) for o in out} == {
        "nf_conntrack_tcp_timeout_established": (86400, 86400, False),
        "nf_conntrack_tcp_timeout_close_wait": (60, 3600, True),
    }
    assert value(d, "nf_conntrack_tcp_timeout_close_wait") == 3600
    assert (d / "nf_conntrack_tcp_timeout_established").stat().st_mtime_ns == before


def test_zero_leaves_a_sysctl_alone(tmp_path: Path) -> None:
    d = sysctl_dir(tmp_path)
    assert apply(ConntrackSysctls(directory=str(d)), None) == []
    assert value(d, "nf_conntrack_tcp_timeout_close_wait") == 60
    assert value(d, "nf_conntrack_udp_timeout") == 30


def test_a_sysctl_that_cannot_be_set_is_reported_and_the_others_are_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = sysctl_dir(tmp_path)
    (d / "nf_conntrack_tcp_timeout_established").unlink()  # e.g. nf_conntrack not loaded
    out = apply(ConntrackSysctls(tcp_established=86400, tcp_close_wait=3600, directory=str(d)), None)
    errors = {o.name: o.error for o in out if o.error}
    assert list(errors) == ["nf_conntrack_tcp_timeout_established"]
    assert "cannot read" in str(errors["nf_conntrack_tcp_timeout_established"])
    assert value(d, "nf_conntrack_tcp_timeout_close_wait") == 3600
    assert "nf_conntrack_tcp_timeout_established not set to 86400" in caplog.text


def test_a_read_only_sysctl_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/sys in a pod without the chart's mount: writing fails with EROFS."""
    import builtins  # noqa: PLC0415
    import errno  # noqa: PLC0415

    d = sysctl_dir(tmp_path)
    real_open = builtins.open

    def read_only(path: str, mode: str = "r", *a: object, **kw: object) -> object:
        if "w" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, mode, *a, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", read_only)
    (out,) = apply(ConntrackSysctls(tcp_close_wait=3600, directory=str(d)), None)
    assert out.error is not None and "Read-only file system" in out.error and not out.changed
    monkeypatch.undo()
    assert value(d, "nf_conntrack_tcp_timeout_close_wait") == 60
