"""``--config FILE``: kube-proxy's KubeProxyConfiguration read as kube-proxy v1.37 reads it. Every
field of the type is in the one table (the field list is checked in, and compared with kube-proxy's
Go source when the module is on this machine); honoured fields set their flags, ignored ones warn
when set, refused values are errors naming the field; flags on the command line win over the file,
the file over the environment."""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nftproxy.cli import build_parser, kubeproxy_config, main, parse_args
from nftproxy.cli.flags import flag_values, log_level, settings_from_args
from nftproxy.cli.kubeproxy_config import FIELDS, ConfigError, Use, format_go_duration, parse_go_duration
from nftproxy.operator.logs import JSONFormatter
from testkit.k8s import objects as k
from tests.support.run import run_nftproxy

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "kube-proxy"
KUBEADM = GOLDEN / "kubeadm-config.conf"
FIELD_LIST = GOLDEN / "v1alpha1-fields.txt"
MODULES = Path.home() / "go" / "pkg" / "mod" / "k8s.io"
GO_TYPES = (
    MODULES / "kube-proxy@v0.37.2" / "config" / "v1alpha1" / "types.go",
    MODULES / "component-base@v0.37.2" / "config" / "v1alpha1" / "types.go",
    MODULES / "component-base@v0.37.2" / "logs" / "api" / "v1" / "types.go",
)
HEAD = {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration"}


def write(tmp_path: Path, body: dict[str, Any], name: str = "config.conf") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**HEAD, **body}))
    return str(path)


def run_args(*argv: str) -> argparse.Namespace:
    return parse_args(["run", "--node-name", "n1", *argv])


def warned_fields(args: argparse.Namespace) -> set[str]:
    """The fields the file's warnings name (``…: FIELD VALUE is ignored: …``)."""
    out = set()
    for w in args.kube_proxy_config.warnings:
        m = re.match(r"--config \S+: (?:unknown field '([^']+)'|field '([^']+)'|([\w.]+) )", w)
        assert m, w
        out.add(next(g for g in m.groups() if g))
    return out


# -- the table covers the type ------------------------------------------------------------------


def _go_fields() -> list[str]:
    """Every JSON field path of KubeProxyConfiguration, from the Go structs' json tags (the
    component-base types inline where they are embedded)."""
    struct = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.S | re.M)
    member = re.compile(r"^\s*(?:\w+\s+)?([\w.*\[\]]+)\s+`json:\"([^\"]*)\"")
    structs: dict[str, list[tuple[str, str]]] = {}
    for path in GO_TYPES:
        for name, body in struct.findall(path.read_text()):
            rows = [(m.group(1), m.group(2).split(",")[0]) for m in map(member.match, body.splitlines()) if m]
            structs.setdefault(name, rows)

    def walk(name: str, prefix: str) -> list[str]:
        out = []
        for typ, tag in structs[name]:
            base = typ.lstrip("*[]").split(".")[-1]
            if tag == "-" or typ.endswith("TypeMeta"):
                continue
            if tag == "":  # embedded inline
                out += walk(base, prefix)
            elif base in structs and not typ.startswith("[]") and base != "TimeOrMetaDuration":
                out += walk(base, f"{prefix}{tag}.")
            else:
                out.append(prefix + tag)
        return out

    return walk("KubeProxyConfiguration", "")


def test_the_table_has_every_field_of_kube_proxys_configuration_once() -> None:
    paths = [f.path for f in FIELDS]
    assert len(paths) == len(set(paths))
    assert sorted(paths) == sorted(FIELD_LIST.read_text().split())


def test_the_checked_in_field_list_is_kube_proxys_types_go() -> None:
    if not all(p.exists() for p in GO_TYPES):
        pytest.skip(f"kube-proxy's Go source is not on this machine ({GO_TYPES[0]})")
    assert _go_fields() == FIELD_LIST.read_text().split()


def test_every_honoured_field_sets_a_flag_of_run() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    dests = {a.dest for a in sub.choices["run"]._actions}
    detect = {"detect_local_mode", "pod_bridge_interface", "pod_interface_name_prefix"}  # the detect-local flags
    missing = {f.dest for f in FIELDS if f.use is Use.HONOURED and f.dest not in dests} - detect
    assert missing == set()
    assert all(f.dest is None for f in FIELDS if f.use is Use.IGNORED)


# -- kubeadm's file ------------------------------------------------------------------------------


def test_kubeadms_config_runs_with_kube_proxys_defaults_for_its_iptables_mode() -> None:
    args = run_args("--config", str(KUBEADM))
    assert (args.sync_period, args.min_sync_period) == (30.0, 1.0)
    assert args.cluster_cidr == ["10.244.0.0/16"]
    assert args.nodeport_addresses == ["all"]  # kube-proxy's default in iptables mode (nftables: primary)
    assert (args.masquerade_bit, args.masquerade_all) == (14, False)
    assert args.kubeconfig == "/var/lib/kube-proxy/kubeconfig.conf"
    assert (args.healthz_bind_address, args.metrics_bind_address) == ("0.0.0.0:10256", "127.0.0.1:10249")
    assert (args.conntrack_max_per_core, args.conntrack_min) == (32768, 131072)
    assert (args.conntrack_tcp_timeout_established, args.conntrack_tcp_timeout_close_wait) == (86400.0, 3600.0)
    assert (args.conntrack_udp_timeout, args.conntrack_udp_timeout_stream) == (0.0, 0.0)
    assert args.node_name == "n1"  # hostnameOverride "": the flag's (kubeadm passes --hostname-override)
    assert (args.verbosity, args.logging_format, args.feature_gates) == (0, "text", "")
    # what changes for a user of kube-proxy's iptables mode, said once each
    assert warned_fields(args) == {"mode", "iptables.localhostNodePorts"}


def test_a_file_of_kube_proxys_defaults_in_nftables_mode_warns_of_nothing(tmp_path: Path) -> None:
    args = run_args("--config", write(tmp_path, {"mode": "nftables"}))
    assert args.kube_proxy_config.warnings == []
    assert args.nodeport_addresses == ["primary"]
    assert args.cluster_cidr is None


# -- honoured ------------------------------------------------------------------------------------


def test_honoured_fields_set_their_flags(tmp_path: Path) -> None:
    body = {
        "mode": "nftables",
        "nftables": {"masqueradeBit": 5, "masqueradeAll": True, "syncPeriod": "1m", "minSyncPeriod": "250ms"},
        "clusterCIDR": "10.244.0.0/16,fd00:10:244::/56",
        "nodePortAddresses": ["192.168.0.0/16", "localhost"],
        "hostnameOverride": " Node-A ",
        "bindAddress": "198.18.0.1",
        "healthzBindAddress": "127.0.0.1",  # kube-proxy appends its port
        "metricsBindAddress": "[::]:9999",
        "bindAddressHardFail": True,
        "logging": {"format": "json", "verbosity": 4},
        "featureGates": {"KubeProxyNFTablesLocalhostNodePorts": True},
        "conntrack": {
            "maxPerCore": 0,  # a pointer: 0 stays 0 (leave nf_conntrack_max alone)
            "min": 1000,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "30m",
            "tcpBeLiberal": True,
            "udpTimeout": "30s",
            "udpStreamTimeout": "5m",
        },
        "clientConnection": {"kubeconfig": "/etc/kube-proxy/kubeconfig"},
    }
    config = write(tmp_path, body)
    args = parse_args(["run", "--config", config])
    assert (args.masquerade_bit, args.masquerade_all, args.sync_period, args.min_sync_period) == (5, True, 60.0, 0.25)
    assert args.cluster_cidr == ["10.244.0.0/16,fd00:10:244::/56"]
    assert args.nodeport_addresses == ["192.168.0.0/16", "localhost"]
    assert (args.node_name, args.node_ip) == ("node-a", ["198.18.0.1"])
    assert (args.healthz_bind_address, args.metrics_bind_address) == ("127.0.0.1:10256", "[::]:9999")
    assert args.bind_address_hard_fail is True
    assert (args.logging_format, args.verbosity) == ("json", 4)
    assert args.feature_gates == "KubeProxyNFTablesLocalhostNodePorts=true"
    assert (args.conntrack_max_per_core, args.conntrack_min, args.conntrack_tcp_timeout_established) == (0, 1000, 0.0)
    assert (args.conntrack_tcp_timeout_close_wait, args.conntrack_tcp_be_liberal) == (1800.0, True)
    assert (args.conntrack_udp_timeout, args.conntrack_udp_timeout_stream) == (30.0, 300.0)
    assert args.kubeconfig == "/etc/kube-proxy/kubeconfig"
    assert args.kube_proxy_config.warnings == []
    assert run_args("--config", config).node_name == "n1"  # kubeadm's --hostname-override=$(NODE_NAME) wins
    settings = settings_from_args(args)
    assert settings.log_level == "debug" and settings.log_format == "json"
    assert settings.proxy.masquerade_bit == 5 and settings.healthz == ("127.0.0.1", 10256)
    assert settings.conntrack is not None and (settings.conntrack.max_per_core, settings.conntrack.min) == (0, 1000)


@pytest.mark.parametrize(
    ("mode", "sync", "min_sync", "bit", "masquerade_all"),
    [
        ("iptables", 11.0, 1.5, 3, True),  # the iptables section
        ("", 11.0, 1.5, 3, True),  # unset: iptables, as kube-proxy on Linux
        ("ipvs", 22.0, 2.5, 3, True),  # ipvs' sync periods, iptables' masquerading (kube-proxy's conversion)
        ("nftables", 33.0, 3.5, 4, False),
    ],
)
def test_the_section_of_the_files_mode_applies(
    tmp_path: Path, mode: str, sync: float, min_sync: float, bit: int, masquerade_all: bool
) -> None:
    body = {
        "mode": mode,
        "iptables": {"syncPeriod": "11s", "minSyncPeriod": "1.5s", "masqueradeBit": 3, "masqueradeAll": True},
        "ipvs": {"syncPeriod": "22s", "minSyncPeriod": "2.5s"},
        "nftables": {"syncPeriod": "33s", "minSyncPeriod": "3.5s", "masqueradeBit": 4},
    }
    args = run_args("--config", write(tmp_path, body))
    assert (args.sync_period, args.min_sync_period, args.masquerade_bit) == (sync, min_sync, bit)
    assert args.masquerade_all is masquerade_all
    # the other sections' settings are named as ignored (kube-proxy ignores them in that mode)
    others = {f.path for f in FIELDS if f.modes is not None and (mode or "iptables") not in f.modes}
    set_in_file = {f"{s}.{k}" for s, d in body.items() if isinstance(d, dict) for k in d}
    assert others & set_in_file <= warned_fields(args)


def test_detect_local_fields_go_to_the_detect_local_flags(tmp_path: Path) -> None:
    body = {"detectLocalMode": "InterfaceNamePrefix", "detectLocal": {"interfaceNamePrefix": "veth"}}
    loaded = kubeproxy_config.load(write(tmp_path, body))
    args = argparse.Namespace(detect_local_mode="ClusterCIDR", pod_bridge_interface="", pod_interface_name_prefix="")
    kubeproxy_config.apply(loaded, args, given=(), complete=True)
    assert vars(args) == {
        "detect_local_mode": "InterfaceNamePrefix",
        "pod_bridge_interface": "",
        "pod_interface_name_prefix": "veth",
    }


def test_a_setting_this_nftproxy_has_no_flag_for_is_an_error_for_run(tmp_path: Path) -> None:
    loaded = kubeproxy_config.load(write(tmp_path, {"detectLocalMode": "NodeCIDR"}))
    with pytest.raises(ConfigError, match='detectLocalMode "NodeCIDR": this nftproxy cannot honour it'):
        kubeproxy_config.apply(loaded, argparse.Namespace(), given=(), complete=True)
    kubeproxy_config.apply(loaded, argparse.Namespace(), given=(), complete=False)  # render: not its concern
    default = kubeproxy_config.load(write(tmp_path, {"detectLocalMode": "ClusterCIDR"}, "default.conf"))
    kubeproxy_config.apply(default, argparse.Namespace(), given=(), complete=True)  # kube-proxy's default: fine


# -- ignored: a warning naming the field ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"mode": "ipvs"}, "mode"),
        ({"mode": "nftables", "ipvs": {"scheduler": "sh"}}, "ipvs.scheduler"),
        ({"mode": "nftables", "ipvs": {"strictARP": True}}, "ipvs.strictARP"),
        ({"mode": "nftables", "ipvs": {"excludeCIDRs": ["10.0.0.0/8"]}}, "ipvs.excludeCIDRs"),
        ({"mode": "nftables", "ipvs": {"tcpTimeout": "900s"}}, "ipvs.tcpTimeout"),
        ({"mode": "nftables", "enableProfiling": True}, "enableProfiling"),
        ({"mode": "nftables", "oomScoreAdj": -500}, "oomScoreAdj"),
        ({"mode": "nftables", "configSyncPeriod": "1m"}, "configSyncPeriod"),
        ({"mode": "nftables", "portRange": "30000-32767"}, "portRange"),
        ({"mode": "nftables", "clientConnection": {"qps": 50, "burst": 100}}, "clientConnection.qps"),
        ({"mode": "nftables", "winkernel": {"enableDSR": True}}, "winkernel.enableDSR"),
        (
            {"mode": "nftables", "logging": {"vmodule": [{"filePattern": "proxier*", "verbosity": 4}]}},
            "logging.vmodule",
        ),
        ({"mode": "nftables", "iptables": {"localhostNodePorts": False}}, "iptables.localhostNodePorts"),
        ({"mode": "nftables", "featureGates": {"ComponentFlagz": False}}, "featureGates"),
        ({"mode": "nftables", "featureGates": {"PreferSameTrafficDistribution": True}}, "featureGates"),
    ],
)
def test_an_ignored_field_set_is_a_warning_naming_it(tmp_path: Path, body: dict[str, Any], field: str) -> None:
    args = run_args("--config", write(tmp_path, body))
    assert field in warned_fields(args), args.kube_proxy_config.warnings


def test_run_logs_the_files_warnings_and_other_commands_print_them(tmp_path: Path) -> None:
    config = write(tmp_path, {"mode": "nftables", "ipvs": {"scheduler": "rr"}})
    objs = k.write(tmp_path / "in.yaml", [k.service("web", ["10.96.0.10"], [k.port(80)])])
    r = run_nftproxy("render", "-f", str(objs), "--config", config)
    assert r.returncode == 0, r.stderr
    note = kubeproxy_config.BY_PATH["ipvs.scheduler"].note
    assert r.stderr.strip() == f'nftproxy: warning: --config {config}: ipvs.scheduler "rr" is ignored: {note}'
    settings_warnings = parse_args(["run", "--node-name", "n1", "--config", config]).kube_proxy_config.warnings
    assert len(settings_warnings) == 1 and "ipvs.scheduler" in settings_warnings[0]


def test_unknown_and_repeated_fields_are_warnings_as_kube_proxys_lenient_decoding(tmp_path: Path) -> None:
    path = tmp_path / "config.conf"
    path.write_text(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"
        "udpIdleTimeout: 250ms\nconntrack:\n  maxPerCore: 1\n  maxPerCore: 2\n  bogus: 1\n"
    )
    args = run_args("--config", str(path))
    assert warned_fields(args) == {"udpIdleTimeout", "conntrack.bogus", "maxPerCore"}
    assert args.conntrack_max_per_core == 2


# -- refused: an error naming the field, nothing starts -------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", "apiVersion"),
        ("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", "kind"),
        ("kind: KubeProxyConfiguration\n", "apiVersion None"),
        ("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: [\n", "not YAML or JSON"),
        ("- a list\n", "not a KubeProxyConfiguration"),
    ],
)
def test_a_file_that_is_not_a_kube_proxy_configuration_is_an_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.conf"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        kubeproxy_config.load(str(path))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"iptables": {"masqueradeAll": "yes"}}, "iptables.masqueradeAll: wrong type str: want bool"),
        ({"conntrack": {"udpTimeout": 30}}, "conntrack.udpTimeout: wrong type int"),
        ({"conntrack": {"udpTimeout": "30 seconds"}}, "conntrack.udpTimeout: invalid duration"),
        ({"conntrack": "none"}, "conntrack: wrong type str: want an object"),
        ({"nftables": {"masqueradeBit": 32}, "mode": "nftables"}, "nftables.masqueradeBit: 32 must be within [0, 31]"),
        ({"mode": "kernelspace"}, 'mode: "kernelspace" must be one of'),
        ({"detectLocalMode": "Everything"}, "detectLocalMode"),
        ({"clusterCIDR": "10.244.0.0/16,10.245.0.0/16"}, "clusterCIDR"),
        ({"nodePortAddresses": ["primary", "some"]}, "nodePortAddresses"),
        ({"healthzBindAddress": "localhost:10256"}, "healthzBindAddress"),
        ({"logging": {"format": "xml"}}, "logging.format"),
        ({"conntrack": {"maxPerCore": -1}}, "conntrack.maxPerCore"),
        ({"iptables": {"syncPeriod": "-1s"}}, "iptables.syncPeriod"),
        ({"oomScoreAdj": -1001}, "oomScoreAdj"),
        ({"iptables": {"syncPeriod": "1s", "minSyncPeriod": "2s"}}, 'iptables.syncPeriod: "1s" must be at least'),
        ({"detectLocalMode": "BridgeInterface"}, "detectLocal.bridgeInterface: must not be empty"),
        ({"nodePortAddresses": ["primary", "primary"]}, 'nodePortAddresses: ["primary", "primary"] names a keyword'),
        ({"mode": "ipvs", "ipvs": {"excludeCIDRs": ["10.0.0.0/33"]}}, 'ipvs.excludeCIDRs: "10.0.0.0/33"'),
        ({"mode": "ipvs", "ipvs": {"udpTimeout": "-1s"}}, "ipvs.udpTimeout"),
        ({"metricsBindAddress": "127.0.0.1:0"}, "metricsBindAddress"),
        # a gate nftproxy does not have would change Services, unhonoured: refused
        ({"featureGates": {"SomeServiceGate": True}}, "featureGates: nftproxy has no feature gate SomeServiceGate"),
        ({"featureGates": {"AllowServiceExternalIPs": False}}, "AllowServiceExternalIPs=false: nftproxy cannot honour"),
    ],
)
def test_a_value_that_cannot_be_honoured_is_an_error_naming_the_field(
    tmp_path: Path, body: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, body)
    with pytest.raises(ConfigError, match=re.escape(message)):
        kubeproxy_config.load(config)
    assert main(["run", "--node-name", "n1", "--config", config]) == 2  # before anything starts
    err = capsys.readouterr().err
    assert err.startswith(f"nftproxy: --config {config}: ") and message in err and "Traceback" not in err


# -- precedence: command line > file > environment ---------------------------------------------------


def test_a_section_of_another_mode_is_not_validated_only_warned_of_as_kube_proxy(tmp_path: Path) -> None:
    body = {"mode": "iptables", "nftables": {"masqueradeBit": 40}, "ipvs": {"excludeCIDRs": ["bogus"]}}
    args = run_args("--config", write(tmp_path, body))
    assert {"nftables.masqueradeBit", "ipvs.excludeCIDRs"} <= warned_fields(args)
    assert args.masquerade_bit == 14


def test_flags_given_on_the_command_line_win_over_the_file(tmp_path: Path) -> None:
    body = {"mode": "nftables", "nftables": {"masqueradeBit": 5, "syncPeriod": "1m"}, "clusterCIDR": "10.0.0.0/8"}
    config = write(tmp_path, body)
    args = run_args("--config", config, "--masquerade-bit", "3", "--cluster-cidr", "10.1.0.0/16", "-v", "2")
    assert (args.masquerade_bit, args.cluster_cidr, args.verbosity) == (3, ["10.1.0.0/16"], 2)
    assert args.sync_period == 60.0  # not given: the file's
    # a flag given with its default value is given too (pflag's Changed)
    assert run_args("--config", config, "--masquerade-bit=14").masquerade_bit == 14


def test_the_file_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NFTPROXY_MASQUERADE_BIT", "7")
    monkeypatch.setenv("NFTPROXY_CLUSTER_CIDR", "10.9.0.0/16")
    monkeypatch.setenv("NFTPROXY_SYNC_PERIOD", "5m")
    assert run_args().masquerade_bit == 7  # without a file: the environment's
    args = run_args("--config", write(tmp_path, {"mode": "nftables", "nftables": {"masqueradeBit": 5}}))
    assert (args.masquerade_bit, args.cluster_cidr, args.sync_period) == (5, None, 30.0)


def test_the_config_file_may_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NFTPROXY_CONFIG", write(tmp_path, {"mode": "nftables", "nftables": {"masqueradeBit": 9}}))
    assert run_args().masquerade_bit == 9


# -- the effective configuration (/configz, the start's log line) --------------------------------------


def test_the_effective_configuration_is_kube_proxys_type_with_what_nftproxy_runs(tmp_path: Path) -> None:
    body = {"mode": "iptables", "iptables": {"masqueradeBit": 5, "syncPeriod": "1m"}, "enableProfiling": True}
    args = run_args("--config", write(tmp_path, body), "--conntrack-min", "5000")
    eff = kubeproxy_config.effective(args, args.kube_proxy_config)
    assert (eff["apiVersion"], eff["kind"], eff["mode"]) == (
        kubeproxy_config.API_VERSION,
        "KubeProxyConfiguration",
        "nftables",
    )
    assert eff["nftables"] == {"masqueradeBit": 5, "masqueradeAll": False, "syncPeriod": "1m0s", "minSyncPeriod": "1s"}
    assert eff["iptables"]["masqueradeBit"] == 5  # the file's, as it was
    assert eff["conntrack"]["min"] == 5000 and eff["conntrack"]["tcpEstablishedTimeout"] == "24h0m0s"
    assert eff["enableProfiling"] is True and eff["hostnameOverride"] == "n1" and eff["nodePortAddresses"] == ["all"]
    assert json.loads(json.dumps(eff)) == eff
    # without a file: kube-proxy's defaults with nftproxy's flags, in nftables mode
    plain = kubeproxy_config.effective(run_args(), None)
    assert plain["mode"] == "nftables" and plain["nftables"]["masqueradeBit"] == 14
    assert plain["metricsBindAddress"] == "127.0.0.1:10249" and plain["nodePortAddresses"] == ["primary"]


def test_flagz_lists_every_flag_of_run_with_its_value() -> None:
    flags = flag_values(run_args("--masquerade-bit", "3", "--cluster-cidr", "10.0.0.0/8"))
    assert flags["masquerade-bit"] == "3" and flags["cluster-cidr"] == "10.0.0.0/8" and flags["node-name"] == "n1"
    assert "fn" not in flags and "kube-proxy-config" not in flags


# -- Go durations, -v, JSON logs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ns", "back"),
    [
        ("0", 0, "0s"),
        ("0s", 0, "0s"),
        ("30s", 30 * 10**9, "30s"),
        ("1m", 60 * 10**9, "1m0s"),
        ("24h", 86400 * 10**9, "24h0m0s"),
        ("1h30m", 5400 * 10**9, "1h30m0s"),
        ("1.5s", 1_500_000_000, "1.5s"),
        ("250ms", 250_000_000, "250ms"),
        ("2m0.5s", 120_500_000_000, "2m0.5s"),
    ],
)
def test_durations_read_and_written_as_gos(text: str, ns: int, back: str) -> None:
    assert parse_go_duration(text) == ns
    assert format_go_duration(ns) == back


@pytest.mark.parametrize("text", ["", "1", "5 s", "1d", "s"])
def test_a_duration_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)


@pytest.mark.parametrize(("v", "level"), [(None, "warning"), (0, "info"), (3, "info"), (4, "debug"), (9, "debug")])
def test_verbosity_maps_to_a_level_as_klogs(v: int | None, level: str) -> None:
    argv = ["--log-level", "warning"] + ([] if v is None else ["-v", str(v)])
    assert log_level(run_args(*argv)) == level


def test_json_logs_are_one_object_per_line() -> None:
    record = logging.LogRecord("nftproxy.sync", logging.INFO, __file__, 1, "synced %d Services", (3,), None)
    line = JSONFormatter().format(record)
    assert "\n" not in line
    obj = json.loads(line)
    assert set(obj) == {"ts", "level", "logger", "msg"}
    assert (obj["level"], obj["logger"], obj["msg"]) == ("info", "nftproxy.sync", "synced 3 Services")
    assert abs(obj["ts"] - record.created) < 1e-5


# -- the rendered table carries the masquerade bit ------------------------------------------------------


def test_render_with_the_config_file_marks_with_its_masquerade_bit(tmp_path: Path) -> None:
    objs = k.write(tmp_path / "in.yaml", [k.service("web", ["10.96.0.10"], [k.port(80)])])
    plain = run_nftproxy("render", "-f", str(objs))
    assert plain.returncode == 0, plain.stderr
    assert "meta mark set meta mark | 0x00004000" in plain.stdout or "meta mark | 0x4000" in plain.stdout
    config = write(tmp_path, {"mode": "nftables", "nftables": {"masqueradeBit": 3}})
    r = run_nftproxy("render", "-f", str(objs), "--config", config)
    assert r.returncode == 0, r.stderr
    assert "0x4000" not in r.stdout and "0x00004000" not in r.stdout
    assert "meta mark set meta mark | 0x8" in r.stdout and "meta mark & 0x8 == 0 return" in r.stdout
    assert r.stdout == run_nftproxy("render", "-f", str(objs), "--masquerade-bit", "3").stdout


# -- the docs list the table ------------------------------------------------------------------------------


def test_the_operating_doc_lists_the_table() -> None:
    doc = (ROOT / "docs" / "operating.md").read_text()
    assert kubeproxy_config.table_markdown() in doc
