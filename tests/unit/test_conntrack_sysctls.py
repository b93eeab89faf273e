"""The conntrack sysctls `run` sets as kube-proxy does: only what differs, 0 leaves a sysctl
alone, a sysctl that cannot be set is reported and never stops the proxy (a directory of plain
files stands for /proc/sys/net/netfilter here; the real one: tests/netns/test_conntrack_sysctls.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from nftproxy.cli.flags import add_run_flags, settings_from_args
from nftproxy.dataplane.conntrack_sysctls import ConntrackSysctls, apply, online_cpus

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


def limits(tmp_path: Path, conntrack_max: int, hashsize: int) -> tuple[Path, Path]:
    d = sysctl_dir(tmp_path)
    (d / "nf_conntrack_max").write_text(f"{conntrack_max}\n")
    (tmp_path / "hashsize").write_text(f"{hashsize}\n")
    return d, tmp_path / "hashsize"


@pytest.mark.parametrize(
    ("per_core", "minimum", "cpus", "want"),
    [
        (32768, 131072, 2, 131072),  # kube-proxy's defaults on 2 CPUs: the minimum
        (32768, 131072, 8, 262144),  # per core x CPUs over the minimum
        (32768, 131072, 64, 1048576),  # capped at 2^20
        (300000, 131072, 4, 1048576),  # capped even over the minimum
        (1000, 0, 4, 4000),
        (0, 131072, 4, 0),  # 0 per core: the limit and the minimum are left alone
    ],
)
def test_conntrack_max_is_kube_proxys(per_core: int, minimum: int, cpus: int, want: int) -> None:
    assert ConntrackSysctls(max_per_core=per_core, min=minimum).conntrack_max(cpus) == want


def test_conntrack_max_is_raised_and_the_hash_size_to_a_quarter(tmp_path: Path) -> None:
    d, hashsize = limits(tmp_path, conntrack_max=65536, hashsize=16384)
    cfg = ConntrackSysctls(max_per_core=32768, min=131072, cpus=2, directory=str(d), hashsize_file=str(hashsize))
    out = {o.name: (o.before, o.after, o.changed) for o in apply(cfg, None)}
    assert out == {"nf_conntrack_max": (65536, 131072, True), "hashsize": (16384, 32768, True)}
    assert value(d, "nf_conntrack_max") == 131072 and int(hashsize.read_text()) == 32768


def test_conntrack_max_and_hash_size_are_never_lowered(tmp_path: Path) -> None:
    d, hashsize = limits(tmp_path, conntrack_max=262144, hashsize=65536)
    cfg = ConntrackSysctls(max_per_core=32768, min=131072, cpus=2, directory=str(d), hashsize_file=str(hashsize))
    assert not any(o.changed for o in apply(cfg, None))
    assert value(d, "nf_conntrack_max") == 262144 and int(hashsize.read_text()) == 65536


def test_zero_per_core_leaves_the_limit_and_hash_size_alone(tmp_path: Path) -> None:
    d, hashsize = limits(tmp_path, conntrack_max=1000, hashsize=100)
    cfg = ConntrackSysctls(max_per_core=0, min=131072, cpus=2, directory=str(d), hashsize_file=str(hashsize))
    assert apply(cfg, None) == []
    assert value(d, "nf_conntrack_max") == 1000 and int(hashsize.read_text()) == 100


def test_an_unwritable_hash_size_is_reported_and_the_limit_still_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, _ = limits(tmp_path, conntrack_max=1000, hashsize=100)
    cfg = ConntrackSysctls(max_per_core=1000, min=0, cpus=4, directory=str(d), hashsize_file=str(tmp_path / "none"))
    out = {o.name: o for o in apply(cfg, None)}
    assert out["nf_conntrack_max"].changed and value(d, "nf_conntrack_max") == 4000
    assert out["hashsize"].error is not None and "hashsize not set to 1000" in caplog.text


def test_online_cpus_are_counted_as_kube_proxy_counts_them(tmp_path: Path) -> None:
    online = tmp_path / "online"
    online.write_text("0-3,6,8-9\n")
    assert online_cpus(str(online)) == 7
    assert online_cpus(str(tmp_path / "missing")) == (os.cpu_count() or 1)


def test_run_raises_the_limit_by_default_as_kube_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("NFTPROXY_CONNTRACK_")]:
        monkeypatch.delenv(var)
    p = argparse.ArgumentParser()
    add_run_flags(p)
    cfg = settings_from_args(p.parse_args(["--node-name", "n1"])).conntrack
    assert cfg is not None and (cfg.max_per_core, cfg.min) == (32768, 131072)
    cfg = settings_from_args(p.parse_args(["--node-name", "n1", "--conntrack-max-per-core", "0"])).conntrack
    assert cfg is not None and cfg.max_per_core == 0
