"""The one flag set: every command that shapes or reads our table (render, apply, run, verify,
explain) takes the same proxy flags, read into one ``ProxyConfig`` the same way.

Each flag can also be set from the environment (``ENV``; the Helm chart sets these on the
DaemonSet), so a command run inside the pod (``kubectl exec … nftproxy explain``) sees the
configuration the proxy runs with: e.g. its ``--load-balancing``, which names the endpoint maps
(``endpoints-sh-N`` for source-hash). A flag given on the command line wins over its variable.
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import os
import re
from collections.abc import Sequence

from nftproxy.compiler import features
from nftproxy.compiler.config import (
    BRIDGE_INTERFACE,
    CLUSTER_CIDR,
    INTERFACE_NAME_PREFIX,
    LOCAL_MODES,
    ProxyConfig,
    interface_name_problem,
    nodeport_address,
)
from nftproxy.dataplane.conntrack_sysctls import DEFAULT_DIR, ConntrackSysctls
from nftproxy.model.balancing import ALGORITHMS
from nftproxy.model.types import IPAddress, IPNetwork
from nftproxy.operator.settings import Settings

# flag -> environment variable (the Helm chart sets these)
ENV = {
    "node_name": "NODE_NAME",
    "kubeconfig": "KUBECONFIG",
    "cluster_cidr": "NFTPROXY_CLUSTER_CIDR",
    "detect_local_mode": "NFTPROXY_DETECT_LOCAL_MODE",
    "pod_bridge_interface": "NFTPROXY_POD_BRIDGE_INTERFACE",
    "pod_interface_name_prefix": "NFTPROXY_POD_INTERFACE_NAME_PREFIX",
    "nodeport_addresses": "NFTPROXY_NODEPORT_ADDRESSES",
    "masquerade_all": "NFTPROXY_MASQUERADE_ALL",
    "service_counters": "NFTPROXY_SERVICE_COUNTERS",
    "min_sync_period": "NFTPROXY_MIN_SYNC_PERIOD",
    "sync_period": "NFTPROXY_SYNC_PERIOD",
    "healthz_bind_address": "NFTPROXY_HEALTHZ_BIND_ADDRESS",
    "metrics_bind_address": "NFTPROXY_METRICS_BIND_ADDRESS",
    "service_proxy_name": "NFTPROXY_SERVICE_PROXY_NAME",
    "netns": "NFTPROXY_NETNS",
    "status_period": "NFTPROXY_STATUS_PERIOD",
    "log_level": "NFTPROXY_LOG_LEVEL",
    "kopf_liveness": "NFTPROXY_KOPF_LIVENESS",
    "load_balancing": "NFTPROXY_LOAD_BALANCING",
    "feature_gates": "NFTPROXY_FEATURE_GATES",
    "kube_proxy_check_period": "NFTPROXY_KUBE_PROXY_CHECK_PERIOD",
    "cleanup_kube_proxy": "NFTPROXY_CLEANUP_KUBE_PROXY",
    "daemonset": "NFTPROXY_DAEMONSET",
    "daemonset_namespace": "POD_NAMESPACE",
    "conntrack_tcp_timeout_established": "NFTPROXY_CONNTRACK_TCP_TIMEOUT_ESTABLISHED",
    "conntrack_tcp_timeout_close_wait": "NFTPROXY_CONNTRACK_TCP_TIMEOUT_CLOSE_WAIT",
    "conntrack_tcp_be_liberal": "NFTPROXY_CONNTRACK_TCP_BE_LIBERAL",
    "conntrack_udp_timeout": "NFTPROXY_CONNTRACK_UDP_TIMEOUT",
    "conntrack_udp_timeout_stream": "NFTPROXY_CONNTRACK_UDP_TIMEOUT_STREAM",
    "conntrack_sysctl_dir": "NFTPROXY_CONNTRACK_SYSCTL_DIR",
    "conntrack_max_per_core": "NFTPROXY_CONNTRACK_MAX_PER_CORE",
    "conntrack_min": "NFTPROXY_CONNTRACK_MIN",
    "masquerade_bit": "NFTPROXY_MASQUERADE_BIT",
    "bind_address_hard_fail": "NFTPROXY_BIND_ADDRESS_HARD_FAIL",
    "logging_format": "NFTPROXY_LOGGING_FORMAT",
    "verbosity": "NFTPROXY_VERBOSITY",
    "config": "NFTPROXY_CONFIG",
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$|^\s*((?:\d+(?:\.\d+)?(?:ms|s|m|h))+)\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """ "1s", "500ms", "2m", "0", "1.5" (seconds), and Go's "24h0m0s" (as kube-proxy's flags)
    -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 1s, 500ms, 2m, 1h0m0s)")
    if m.group(1) is not None:
        return float(m.group(1))
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(m.group(2)))


def bind_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"invalid bind address {text!r} (want HOST:PORT)")
    return host.strip("[]") or "0.0.0.0", int(port)


def boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def algorithm(text: str) -> str:
    if text not in ALGORITHMS:
        raise argparse.ArgumentTypeError(f"invalid load-balancing {text!r}: one of {', '.join(ALGORITHMS)}")
    return text


def masquerade_bit(text: str) -> int:
    try:
        bit = int(text)
    except ValueError:
        bit = -1
    if not 0 <= bit <= 31:
        raise argparse.ArgumentTypeError(f"invalid masquerade bit {text!r}: an integer from 0 to 31")
    return bit


def count(text: str) -> int:
    """A non-negative integer (kube-proxy's int32 conntrack settings)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: a non-negative integer")
    return n


def verbosity(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"invalid verbosity {text!r}: a non-negative integer, as klog's -v")
    return v


def _ip(text: str) -> IPAddress:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid IP address {text!r}") from None


def _cidr(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid CIDR {text!r}") from None


def _nodeport_address(text: str) -> tuple[IPNetwork | str, ...]:
    try:
        return nodeport_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid --nodeport-addresses value {text!r}: a CIDR, primary, localhost or all"
        ) from None


def _local_mode(text: str) -> str:
    """A --detect-local-mode value; empty is the default, ClusterCIDR (as kube-proxy's)."""
    if not text:
        return CLUSTER_CIDR
    if text not in LOCAL_MODES:
        raise argparse.ArgumentTypeError(f"invalid --detect-local-mode {text!r}: one of {', '.join(LOCAL_MODES)}")
    return text


def _interface(args: argparse.Namespace, mode: str, dest: str) -> str:
    """--pod-bridge-interface / --pod-interface-name-prefix: required (as kube-proxy's validation)
    and a possible interface name in its mode; ignored in the other modes, as kube-proxy's."""
    value: str = getattr(args, dest, "") or ""
    if _local_mode(getattr(args, "detect_local_mode", "")) != mode:
        return ""
    problem = interface_name_problem(value)
    if problem is not None:
        flag = "--" + dest.replace("_", "-")
        raise argparse.ArgumentTypeError(f"{flag} {value!r} (--detect-local-mode {mode}): {problem}")
    return value


def _split(values: Sequence[str] | None) -> list[str]:
    return [v.strip() for value in values or () for v in value.split(",") if v.strip()]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV[name], default)


def _env_list(value: str | None) -> list[str] | None:
    return [value] if value else None


def add_proxy_flags(p: argparse.ArgumentParser) -> None:
    """The flags that shape the table (render, apply, run, verify, explain)."""
    p.add_argument("--node-name", default=_env("node_name"), help="this node (env NODE_NAME)")
    p.add_argument("--node-ip", action="append", metavar="IP", help="override the Node's addresses (repeat or a,b)")
    p.add_argument(
        "--cluster-cidr", action="append", default=_env_list(_env("cluster_cidr")), metavar="CIDR",
        help="the cluster's pod CIDR(s), one per family (repeat or a,b): with --detect-local-mode ClusterCIDR, "
        "traffic from inside them is local (from pods)",
    )  # fmt: skip
    p.add_argument(
        "--detect-local-mode", dest="detect_local_mode", type=_local_mode,
        default=_local_mode(_env("detect_local_mode") or CLUSTER_CIDR), metavar="|".join(LOCAL_MODES),
        help="how traffic from pods (local traffic) is told apart, as kube-proxy's: by source address in "
        "--cluster-cidr (ClusterCIDR, the default) or in this node's Node.spec.podCIDRs (NodeCIDR), or by the "
        "interface it arrives on: --pod-bridge-interface (BridgeInterface) or any interface whose name starts "
        "with --pod-interface-name-prefix (InterfaceNamePrefix). ClusterIP traffic that is not local is "
        "masqueraded; local traffic to an externalTrafficPolicy Local LoadBalancer IP, externalIP or NodePort "
        "goes to all endpoints. Without a CIDR of a family (ClusterCIDR, NodeCIDR), that family has no "
        "local-traffic detection (env NFTPROXY_DETECT_LOCAL_MODE)",
    )  # fmt: skip
    p.add_argument(
        "--pod-bridge-interface", dest="pod_bridge_interface", default=_env("pod_bridge_interface") or "",
        metavar="NAME",
        help="with --detect-local-mode BridgeInterface: traffic arriving on this bridge is local "
        "(env NFTPROXY_POD_BRIDGE_INTERFACE)",
    )  # fmt: skip
    p.add_argument(
        "--pod-interface-name-prefix", dest="pod_interface_name_prefix",
        default=_env("pod_interface_name_prefix") or "", metavar="PREFIX",
        help="with --detect-local-mode InterfaceNamePrefix: traffic arriving on any interface whose name begins "
        "with this prefix (e.g. veth, eni) is local (env NFTPROXY_POD_INTERFACE_NAME_PREFIX)",
    )  # fmt: skip
    p.add_argument(
        "--nodeport-addresses", action="append", default=_env_list(_env("nodeport_addresses")),
        metavar="CIDR|primary|localhost|all",
        help="where NodePorts answer, as kube-proxy's: CIDRs and the keywords primary (the node's IPs, the default), "
        "localhost (127.0.0.0/8 and ::1: TCP NodePorts served on 127.0.0.1 and ::1 by a userspace proxy in `run`, "
        "UDP and SCTP rejected) and all",
    )  # fmt: skip
    p.add_argument(
        "--masquerade-all", type=boolean, nargs="?", const=True, default=boolean(_env("masquerade_all") or ""),
        help="SNAT all traffic to Service IPs",
    )  # fmt: skip
    p.add_argument(
        "--service-counters", type=boolean, nargs="?", const=True,
        default=boolean(_env("service_counters") or ""),
        help="count each Service port's packets, bytes, new connections and packets refused for lack of "
        "endpoints, per frontend (ClusterIP, NodePort, external), in nftables set elements; `run` exports them "
        "as nftproxy_service_* metrics",
    )  # fmt: skip
    p.add_argument(
        "--service-proxy-name", default=_env("service_proxy_name") or None,
        help="handle only Services with this service-proxy-name label",
    )  # fmt: skip
    p.add_argument(
        "--load-balancing", type=algorithm, default=algorithm(_env("load_balancing", "random") or "random"),
        metavar="|".join(ALGORITHMS),
        help="for Services without the nftproxy.io/load-balancing annotation (env NFTPROXY_LOAD_BALANCING)",
    )  # fmt: skip
    p.add_argument(
        "--feature-gates", default=_env("feature_gates") or "", metavar="GATE=true|false,...",
        help="kube-proxy's feature gates, as its flag: " + ", ".join(sorted(features.DEFAULTS)) + ". "
        "`run` and `verify` start from the defaults of the cluster's Kubernetes version (its apiserver's); "
        "render and apply, which ask no cluster, from all off (env NFTPROXY_FEATURE_GATES)",
    )  # fmt: skip
    p.add_argument(
        "--masquerade-bit", type=masquerade_bit, default=masquerade_bit(_env("masquerade_bit", "14") or "14"),
        metavar="0-31",
        help="the bit of the packet mark that marks connections to masquerade, as kube-proxy's "
        "--iptables-masquerade-bit (default 14: mark 0x4000); change it only if another component of the node "
        "uses that bit",
    )  # fmt: skip
    p.add_argument(
        "--config", default=_env("config") or None, metavar="FILE",
        help="read kube-proxy's configuration file (a KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1, as "
        "kubeadm's ConfigMap kube-system/kube-proxy holds it under config.conf): its settings replace the "
        "environment's, flags given on the command line replace its; settings nftproxy does not use are logged "
        "(docs/operating.md: \"Reading kube-proxy's configuration\") (env NFTPROXY_CONFIG)",
    )  # fmt: skip
    p.add_argument("--table", default="nftproxy", help=argparse.SUPPRESS)


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """``run`` (and ``verify``, which compares with what ``run`` programs): the proxy flags and
    the operator's own."""
    add_proxy_flags(p)
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="kubeconfig; in-cluster config when absent")
    p.add_argument("--min-sync-period", type=duration, default=duration(_env("min_sync_period", "1s") or "1s"))
    p.add_argument("--sync-period", type=duration, default=duration(_env("sync_period", "30s") or "30s"))
    p.add_argument("--healthz-bind-address", default=_env("healthz_bind_address", "0.0.0.0:10256"))
    p.add_argument("--metrics-bind-address", default=_env("metrics_bind_address", "127.0.0.1:10249"))
    p.add_argument("--netns", default=_env("netns") or None, help="program this named network namespace")
    p.add_argument(
        "--status-period", type=duration, default=duration(_env("status_period", "5s") or "5s"),
        help="ProxyStatus: a change is written within this period; the sync's own fields alone "
        "(last sync time, syncs, checksum) once a minute",
    )  # fmt: skip
    p.add_argument(
        "--log-level", default=_env("log_level", "info"), choices=["debug", "info", "warning", "error"],
        help="the least severe messages logged (-v, when given, decides instead)",
    )  # fmt: skip
    p.add_argument(
        "-v", "--v", dest="verbosity", type=verbosity, default=verbosity(v) if (v := _env("verbosity")) else None,
        metavar="N",
        help="kube-proxy's log verbosity (klog's -v): 0 to 3 log at info, 4 and more at debug",
    )  # fmt: skip
    p.add_argument(
        "--logging-format", default=_env("logging_format", "text"), choices=["text", "json"],
        help="text: one line per message; json: one JSON object per line (ts, level, logger, msg), as kube-proxy's "
        "--logging-format json",
    )  # fmt: skip
    p.add_argument(
        "--bind-address-hard-fail", type=boolean, nargs="?", const=True,
        default=boolean(_env("bind_address_hard_fail") or ""),
        help="exit when the health or metrics server cannot listen on its address; without it, as kube-proxy, the "
        "error is logged and the server tries again every 5 seconds",
    )  # fmt: skip
    p.add_argument(
        "--kopf-liveness", default=_env("kopf_liveness") or None, metavar="URL",
        help="also serve kopf's liveness endpoint (with the lastSync probe), e.g. http://0.0.0.0:8080/healthz",
    )  # fmt: skip
    p.add_argument(
        "--kube-proxy-check-period", type=duration,
        default=duration(_env("kube_proxy_check_period", "30s") or "30s"),
        help="how often to look for kube-proxy's rules on the node (0: never)",
    )  # fmt: skip
    p.add_argument(
        "--cleanup-kube-proxy", type=boolean, nargs="?", const=True,
        default=boolean(_env("cleanup_kube_proxy") or ""),
        help="remove kube-proxy's leftover rules from the node, as `nftproxy cleanup --kube-proxy` does (nftables "
        "tables, KUBE-* iptables chains, IPVS), once nftproxy has synced and a check (--kube-proxy-check-period) finds "
        "them unchanged since the previous one: kube-proxy no longer runs here. Never while they change (kube-proxy "
        "still running) nor with --service-proxy-name (kube-proxy serves the other Services); logged, with an Event "
        "on the Node. Keep kube-proxy off the node first: a running kube-proxy with nothing to change looks the same "
        "as its leftovers (env NFTPROXY_CLEANUP_KUBE_PROXY)",
    )  # fmt: skip
    p.add_argument(
        "--daemonset", default=_env("daemonset") or None, metavar="NAME",
        help="the DaemonSet running this proxy (env NFTPROXY_DAEMONSET; the chart sets it). When it stops and that "
        "DaemonSet is gone, being deleted, or no longer selects this node, nftproxy is leaving the node for good: it "
        "waits up to 15s for another proxy's rules, then removes its tables. Any other stop keeps them. Unset: every "
        "stop keeps them",
    )  # fmt: skip
    p.add_argument(
        "--daemonset-namespace", default=_env("daemonset_namespace") or None, metavar="NAMESPACE",
        help="the namespace of --daemonset (env POD_NAMESPACE)",
    )  # fmt: skip
    # kube-proxy's conntrack flags, names, defaults and meaning (0: leave the sysctl alone)
    for flag, default, what in (
        ("established", "24h", "ESTABLISHED"),
        ("close_wait", "1h", "CLOSE_WAIT"),
    ):
        name = f"conntrack_tcp_timeout_{flag}"
        p.add_argument(
            "--" + name.replace("_", "-"), type=duration, default=duration(_env(name, default) or default),
            help=f"the node's conntrack timeout of {what} TCP connections (0: leave it alone)",
        )  # fmt: skip
    p.add_argument(
        "--conntrack-tcp-be-liberal", type=boolean, nargs="?", const=True,
        default=boolean(_env("conntrack_tcp_be_liberal") or ""),
        help="accept TCP packets outside the window (nf_conntrack_tcp_be_liberal)",
    )  # fmt: skip
    for name, what in (("conntrack_udp_timeout", "UDP"), ("conntrack_udp_timeout_stream", "UDP stream")):
        p.add_argument(
            "--" + name.replace("_", "-"), type=duration, default=duration(_env(name, "0") or "0"),
            help=f"the node's conntrack timeout of {what} flows (0: leave it alone)",
        )  # fmt: skip
    p.add_argument(
        "--conntrack-max-per-core", type=count,
        default=count(_env("conntrack_max_per_core", "32768") or "32768"),
        help="raise the node's nf_conntrack_max to this many entries per CPU (never lowered; 0: leave the limit and "
        "--conntrack-min alone), and its conntrack hash size to a quarter of it, as kube-proxy",
    )  # fmt: skip
    p.add_argument(
        "--conntrack-min", type=count, default=count(_env("conntrack_min", "131072") or "131072"),
        help="the least nf_conntrack_max --conntrack-max-per-core raises it to, whatever the number of CPUs",
    )  # fmt: skip
    p.add_argument(
        "--conntrack-sysctl-dir", default=_env("conntrack_sysctl_dir", DEFAULT_DIR) or DEFAULT_DIR,
        help="where the node's net/netfilter sysctls are (the chart mounts them: /proc/sys is read-only in a pod)",
    )  # fmt: skip


def feature_gates(args: argparse.Namespace) -> dict[str, bool]:
    """--feature-gates as {gate: on} (ArgumentTypeError on an unknown gate or a bad value)."""
    try:
        return features.parse_gates(args.feature_gates or "")
    except features.FeatureGateError as e:
        raise argparse.ArgumentTypeError(f"--feature-gates: {e}") from None


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The proxy flags as a ProxyConfig (raises ArgumentTypeError on a bad value, before any I/O).
    Its gates are --feature-gates alone (no cluster version yet: ``ProxyConfig.with_gates``)."""
    return ProxyConfig(
        node_name=args.node_name,
        node_ips=tuple(_ip(v) for v in _split(args.node_ip)),
        cluster_cidrs=tuple(_cidr(v) for v in _split(args.cluster_cidr)),
        detect_local_mode=_local_mode(getattr(args, "detect_local_mode", "")),
        pod_bridge_interface=_interface(args, BRIDGE_INTERFACE, "pod_bridge_interface"),
        pod_interface_name_prefix=_interface(args, INTERFACE_NAME_PREFIX, "pod_interface_name_prefix"),
        nodeport_addresses=tuple(a for v in _split(args.nodeport_addresses) for a in _nodeport_address(v)),
        masquerade_all=args.masquerade_all,
        service_counters=args.service_counters,
        service_proxy_name=args.service_proxy_name,
        load_balancing=args.load_balancing,
        masquerade_bit=args.masquerade_bit,
        table=args.table,
        enabled_gates=features.enabled(None, feature_gates(args)),
    )


def log_level(args: argparse.Namespace) -> str:
    """The level logged: -v's as klog's verbosity (0-3: info, 4 and more: debug) when given, else
    --log-level."""
    if args.verbosity is None:
        return str(args.log_level)
    return "debug" if args.verbosity >= 4 else "info"


def settings_from_args(args: argparse.Namespace) -> Settings:
    base = config_from_args(args)
    if not args.node_name:
        raise argparse.ArgumentTypeError("--node-name (or NODE_NAME) is required")
    if args.daemonset and not args.daemonset_namespace:
        raise argparse.ArgumentTypeError("--daemonset needs --daemonset-namespace (or POD_NAMESPACE)")
    return Settings(
        proxy=base,
        feature_gates=feature_gates(args),
        kubeconfig=args.kubeconfig,
        min_sync_period=args.min_sync_period,
        sync_period=args.sync_period,
        healthz=bind_address(args.healthz_bind_address) if args.healthz_bind_address else None,
        metrics=bind_address(args.metrics_bind_address) if args.metrics_bind_address else None,
        netns=args.netns,
        status_period=args.status_period,
        log_level=log_level(args),
        log_format=args.logging_format,
        bind_address_hard_fail=args.bind_address_hard_fail,
        config_file=args.config,
        kopf_liveness=args.kopf_liveness,
        kube_proxy_check_period=args.kube_proxy_check_period,
        cleanup_kube_proxy=args.cleanup_kube_proxy,
        daemonset=args.daemonset,
        daemonset_namespace=args.daemonset_namespace,
        conntrack=ConntrackSysctls(
            tcp_established=int(args.conntrack_tcp_timeout_established),
            tcp_close_wait=int(args.conntrack_tcp_timeout_close_wait),
            tcp_be_liberal=args.conntrack_tcp_be_liberal,
            udp=int(args.conntrack_udp_timeout),
            udp_stream=int(args.conntrack_udp_timeout_stream),
            max_per_core=args.conntrack_max_per_core,
            min=args.conntrack_min,
            directory=args.conntrack_sysctl_dir,
        ),
    )


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests of the flags given on ``argv`` (not defaulted, not from the environment): the
    command line parsed again with every default suppressed (pflag's ``Changed``)."""
    quiet = copy.deepcopy(parser)
    stack = [quiet]
    while stack:
        p = stack.pop()
        for action in p._actions:
            action.default = argparse.SUPPRESS
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
        p._defaults.clear()
    return set(vars(quiet.parse_args(argv)))


def flag_values(args: argparse.Namespace) -> dict[str, str]:
    """Every flag of the command with its value (``/flagz``), named as on the command line."""
    hidden = {"fn", "command", "kube_proxy_config", "table"}
    out = {}
    for dest, value in sorted(vars(args).items()):
        if dest in hidden:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        out[dest.replace("_", "-")] = "" if value is None else str(value)
    return out
