"""--config's reading compared with the real kube-proxy v1.37.2's: ``kube-proxy --config FILE
--write-config-to OUT`` decodes, defaults and validates FILE as it does at start, writes the result
and exits (it touches nothing). For each file, nftproxy's defaulted values equal kube-proxy's
(every field kube-proxy keeps in the file's mode), and a file kube-proxy refuses, nftproxy refuses.
Skipped without the binary (hack/k8s-tools.sh builds it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nftproxy.cli import kubeproxy_config
from nftproxy.cli.kubeproxy_config import FIELDS, ConfigError, parse_go_duration

HEAD = {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration"}
KUBEADM = Path(__file__).resolve().parents[1] / "golden" / "kube-proxy" / "kubeadm-config.conf"


@pytest.fixture(scope="module")
def kube_proxy() -> Path:
    from testkit.k8s.controlplane.binaries import find_binary  # noqa: PLC0415

    try:
        return find_binary("kube-proxy")
    except Exception as e:  # not built on this machine
        pytest.skip(f"kube-proxy's binary: {e}")


def kube_proxys_reading(binary: Path, config: Path, tmp_path: Path) -> tuple[int, dict[str, Any] | None, str]:
    out = tmp_path / "written.yaml"
    r = subprocess.run(
        [str(binary), "--config", str(config), "--write-config-to", str(out)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip
    return r.returncode, (yaml.safe_load(out.read_text()) if r.returncode == 0 else None), r.stderr


def _get(doc: dict[str, Any], path: str) -> Any:
    """The field kube-proxy wrote (an omitempty one left out: its default)."""
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return kubeproxy_config.BY_PATH[path].default
        node = node[part]
    return node


def _norm(f: kubeproxy_config.Field, value: Any) -> Any:
    if value is None:
        return None
    if f.type == "duration":
        return parse_go_duration(value)
    if f.type == "flush":
        return kubeproxy_config._flush_ns(value)
    if f.path == "mode":
        return value or "iptables"  # kube-proxy's platform default, as nftproxy reads ""
    if f.type == "map" and not value:
        return None  # featureGates: omitted when empty
    return value


def _kept(f: kubeproxy_config.Field, mode: str) -> bool:
    """kube-proxy writes back the sync periods and masqueradeAll of the file's mode only."""
    section, _, name = f.path.partition(".")
    if section in ("iptables", "ipvs", "nftables") and name in ("syncPeriod", "minSyncPeriod", "masqueradeAll"):
        return f.modes is not None and mode in f.modes
    return True


FILES: list[dict[str, Any]] = [
    {"mode": "nftables"},
    {"mode": "ipvs", "ipvs": {"syncPeriod": "20s", "scheduler": "rr", "excludeCIDRs": ["10.0.0.0/8"]}},
    {
        "mode": "nftables",
        "bindAddress": "fd00::1",  # the default addresses follow its family
        "nftables": {"masqueradeBit": 0, "masqueradeAll": True, "syncPeriod": "1m30s", "minSyncPeriod": "0s"},
        "conntrack": {"maxPerCore": 0, "min": 5, "tcpEstablishedTimeout": "0s", "udpTimeout": "10s"},
        "clientConnection": {"qps": 0, "burst": 0, "contentType": ""},
        "logging": {"flushFrequency": "2s", "verbosity": 3, "format": "json"},
        "oomScoreAdj": 0,
        "configSyncPeriod": "0s",
    },
    {
        "healthzBindAddress": "127.0.0.1",  # a port is appended
        "metricsBindAddress": "::1",
        "iptables": {"localhostNodePorts": False, "masqueradeBit": 31, "syncPeriod": "45s"},
        "detectLocalMode": "InterfaceNamePrefix",
        "detectLocal": {"interfaceNamePrefix": "veth"},
        "nodePortAddresses": ["primary", "10.0.0.0/8"],
        "hostnameOverride": "Node-A",
        "logging": {"flushFrequency": 1000000000},
    },
    {"mode": "nftables", "clusterCIDR": "10.244.0.0/16,fd00:10:244::/56", "featureGates": {"ComponentFlagz": False}},
]


@pytest.mark.parametrize("body", [None, *FILES], ids=["kubeadm", *(f"file{i}" for i in range(len(FILES)))])
def test_nftproxy_defaults_a_file_as_kube_proxy(kube_proxy: Path, tmp_path: Path, body: dict[str, Any] | None) -> None:
    config = tmp_path / "config.conf"
    config.write_text(KUBEADM.read_text() if body is None else yaml.safe_dump({**HEAD, **body}))
    rc, written, err = kube_proxys_reading(kube_proxy, config, tmp_path)
    assert rc == 0 and written is not None, err
    ours = kubeproxy_config.load(str(config)).values
    mode = str(ours["mode"]) or "iptables"
    differ = {
        f.path: (ours[f.path], _get(written, f.path))
        for f in FIELDS
        if _kept(f, mode) and f.path != "hostnameOverride" and _norm(f, ours[f.path]) != _norm(f, _get(written, f.path))
    }
    assert differ == {}
    # written as given; kube-proxy trims and lower-cases it when it uses it (nodeutil.GetHostname), as nftproxy
    assert _get(written, "hostnameOverride") == ours["hostnameOverride"]


REFUSED: list[dict[str, Any]] = [
    {"iptables": {"masqueradeBit": 32}},
    {"mode": "nftables", "nftables": {"masqueradeBit": -1}},
    {"mode": "kernelspace"},
    {"detectLocalMode": "Everything"},
    {"detectLocalMode": "BridgeInterface"},
    {"clusterCIDR": "10.244.0.0/16,10.245.0.0/16"},
    {"nodePortAddresses": ["primary", "primary"]},
    {"nodePortAddresses": ["10.0.0.0/33"]},
    {"healthzBindAddress": "localhost:10256"},
    {"metricsBindAddress": "[::1]"},  # not an IP: no port is appended
    {"metricsBindAddress": "127.0.0.1:0"},
    {"bindAddress": "node-1"},
    {"conntrack": {"maxPerCore": -1}},
    {"conntrack": {"udpTimeout": "-1s"}},
    {"iptables": {"syncPeriod": "1s", "minSyncPeriod": "2s"}},
    {"oomScoreAdj": 1001},
    {"clientConnection": {"burst": -1}},
    {"configSyncPeriod": "-1m"},
    {"logging": {"format": "xml"}},
    {"mode": "ipvs", "ipvs": {"excludeCIDRs": ["bogus"]}},
    {"mode": "ipvs", "ipvs": {"tcpTimeout": "-1s"}},
    {"iptables": {"masqueradeAll": "yes"}},
    {"conntrack": {"udpTimeout": 30}},
    {"featureGates": {"NoSuchGate": True}},
]


@pytest.mark.parametrize("body", REFUSED, ids=[str(b) for b in REFUSED])
def test_a_file_kube_proxy_refuses_nftproxy_refuses(kube_proxy: Path, tmp_path: Path, body: dict[str, Any]) -> None:
    config = tmp_path / "config.conf"
    config.write_text(yaml.safe_dump({**HEAD, **body}))
    rc, _, _ = kube_proxys_reading(kube_proxy, config, tmp_path)
    assert rc != 0
    with pytest.raises(ConfigError):
        kubeproxy_config.load(str(config))


def test_a_file_kube_proxy_accepts_leniently_nftproxy_accepts_with_warnings(kube_proxy: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.conf"
    config.write_text(yaml.safe_dump({**HEAD, "mode": "nftables", "udpIdleTimeout": "250ms", "conntrack": {"x": 1}}))
    rc, written, err = kube_proxys_reading(kube_proxy, config, tmp_path)
    assert rc == 0 and written is not None, err
    assert len(kubeproxy_config.load(str(config)).warnings) == 2
