"""``--config FILE``: kube-proxy's own configuration file (a ``KubeProxyConfiguration``,
``kubeproxy.config.k8s.io/v1alpha1``, as kubeadm's ConfigMap ``kube-system/kube-proxy`` holds it
under ``config.conf``), read as kube-proxy v1.37 reads it (cmd/kube-proxy/app/options.go):

* decoded, then defaulted as kube-proxy defaults it (pkg/proxy/apis/config/v1alpha1/defaults.go:
  an absent or null field, and a zero one where kube-proxy's defaulting replaces zeros, takes
  kube-proxy's default), then validated (a value kube-proxy refuses is an error naming the field);
* a wrong ``apiVersion`` or ``kind``, a field of the wrong type or malformed YAML/JSON is an
  error; an unknown or repeated field is a warning naming it (kube-proxy, too, falls back to
  lenient decoding for v1alpha1 and starts);
* the settings of the proxy mode the file names apply (``iptables.*`` in iptables mode, as
  kube-proxy in that mode): nftproxy replaces kube-proxy whatever its mode.

``FIELDS`` is the one table of every field of the type: honoured (mapped onto a flag's argparse
dest), or ignored with a warning when its value is not kube-proxy's default. Values nftproxy cannot
honour without changing how Services behave are errors (``Field.refuse``). docs/operating.md lists
the table (``table_markdown``; a test keeps the two equal).

Precedence: the file replaces the environment's values (the chart's variables) and the built-in
defaults; a flag given on the command line replaces the file's value.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import yaml

from nftproxy.compiler import features
from nftproxy.compiler.config import nodeport_address

GROUP = "kubeproxy.config.k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "KubeProxyConfiguration"


class ConfigError(argparse.ArgumentTypeError):
    """The file cannot be used (the message names the file and the field)."""


class Use(Enum):
    HONOURED = "honoured"
    IGNORED = "ignored"


KEEP = object()  # to_arg: the file says nothing (e.g. hostnameOverride ""): the flag's value stays

# The modes whose section applies (kube-proxy's v1alpha1 conversion: syncPeriod, minSyncPeriod by
# mode; masqueradeAll and masqueradeBit from iptables also in ipvs mode; "" is iptables on Linux).
IPTABLES = ("", "iptables")
IPTABLES_IPVS = ("", "iptables", "ipvs")
IPVS = ("ipvs",)
NFTABLES = ("nftables",)
MODES = ("", "iptables", "ipvs", "nftables")
LOCAL_MODES = ("ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix")
# kube-proxy gates that do not change how a Service behaves (its own web pages, its logs): set to
# anything, a warning; any other gate nftproxy does not have is an error (features.DEFAULTS).
HARMLESS_GATES = frozenset(
    {
        "ComponentFlagz", "ComponentStatusz", "ContextualLogging", "LoggingAlphaOptions", "LoggingBetaOptions",
        "KubeProxyIPVS", "DisableNodeKubeProxyVersion",
    }
)  # fmt: skip
# gates kube-proxy v1.37 reads whose default nftproxy always follows: set to it, a warning; the
# other value changes Services in a way nftproxy does not: an error
FOLLOWED_GATES = {
    "AllowServiceExternalIPs": True,
    "MultiCIDRServiceAllocator": True,
    "PreferSameTrafficDistribution": True,
}


# -- Go's durations (metav1.Duration: time.ParseDuration, time.Duration.String) ----------------

_GO_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_GO_UNITS["h"] = 3600 * 10**9
_GO_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> int:
    """Go's time.ParseDuration -> nanoseconds (ValueError otherwise): ``1h30m``, ``500ms``, ``0``."""
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _GO_PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r} (e.g. 30s, 1m30s, 500ms)")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * round(total)


def format_go_duration(ns: int) -> str:
    """Go's time.Duration.String: ``30s``, ``1m0s``, ``24h0m0s``, ``500ms``, ``0s``."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if ns >= size:
                return sign + _trim(ns / size) + unit
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    secs = _trim(rest / 10**9) + "s"
    if h:
        return f"{sign}{h}h{m}m{secs}"
    if m:
        return f"{sign}{m}m{secs}"
    return sign + secs


def _trim(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".")


def seconds_text(seconds: float) -> str:
    return format_go_duration(round(seconds * 10**9))


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a converter knows beside the value: the file's mode, and where its warnings go."""

    mode: str
    warnings: list[str]
    where: str = "--config"


def _seconds(value: str, _: Context) -> float:
    return parse_go_duration(value) / 10**9


def _same(value: Any, _: Context) -> Any:
    return value


def _keep_empty(value: str, _: Context) -> Any:
    return value or KEEP


def _hostname(value: str, _: Context) -> Any:
    return value.strip().lower() or KEEP  # kube-proxy: trimmed, lower-cased


def _bind_address(value: str, _: Context) -> Any:
    ip = ipaddress.ip_address(value)
    return KEEP if ip.is_unspecified else [str(ip)]


def _cluster_cidr(value: str, _: Context) -> Any:
    return [value] if value else None


def _nodeport_addresses(value: Sequence[str] | None, ctx: Context) -> Any:
    if value:
        return list(value)
    # kube-proxy's default: primary in nftables mode, every address in iptables and ipvs mode
    return ["primary"] if ctx.mode == "nftables" else ["all"]


def _feature_gates(value: Mapping[str, bool], ctx: Context) -> Any:
    ours = {g: on for g, on in value.items() if g in features.DEFAULTS}
    for gate, on in sorted(value.items()):
        if gate in ours:
            continue
        if gate in FOLLOWED_GATES and FOLLOWED_GATES[gate] is not on:
            always = str(FOLLOWED_GATES[gate]).lower()
            raise ValueError(f"{gate}={str(on).lower()}: nftproxy cannot honour it (it always behaves as ={always})")
        if gate not in HARMLESS_GATES and gate not in FOLLOWED_GATES:
            raise ValueError(
                f"nftproxy has no feature gate {gate} (set to {str(on).lower()}): it cannot honour it "
                f"(nftproxy's gates: {', '.join(sorted(features.DEFAULTS))})"
            )
        ctx.warnings.append(
            f"{ctx.where}: featureGates {gate}={str(on).lower()} is ignored: "
            + ("nftproxy always behaves so" if gate in FOLLOWED_GATES else "it changes nothing nftproxy does")
        )
    return ",".join(f"{g}={str(on).lower()}" for g, on in sorted(ours.items()))


def _gates_to_file(value: str) -> dict[str, bool]:
    return features.parse_gates(value or "")


def _duration_to_file(value: float) -> str:
    return seconds_text(value)


def _text(value: str | None) -> str:
    return value or ""


@dataclass(frozen=True)
class Field:
    """One field of KubeProxyConfiguration v1alpha1 (``path``: its JSON names, dotted)."""

    path: str
    use: Use
    type: str  # str, bool, int, float, duration, list, map, flush (ns or duration), any (as decoded from JSON)
    default: Any  # kube-proxy's value after its defaulting, in the file's form
    note: str  # what nftproxy does with it, for operators (docs, warnings)
    dest: str | None = None  # HONOURED: the argparse dest (a flag of `nftproxy run`)
    to_arg: Callable[[Any, Context], Any] = _same  # the file's value -> the dest's (ValueError: refused)
    to_file: Callable[[Any], Any] | None = None  # the dest's value -> the file's (/configz)
    modes: tuple[str, ...] | None = None  # HONOURED only in these modes (the section of the file's mode)
    pointer: bool = False  # Go pointer: only null takes the default (else a zero value does too)
    warn_if: Callable[[Any, str], bool] | None = None  # IGNORED: warn when (value, mode); default: not default
    validate: Callable[[Any], str | None] | None = None  # a message when kube-proxy refuses the value
    refuse: str = ""  # docs: which values are errors
    flag_text: str = ""  # the flag, when not --DEST
    warn_text: str = ""  # docs: when an ignored field is warned of, when not "when set" (not the default)

    @property
    def flag(self) -> str:
        return self.flag_text or "--" + (self.dest or "").replace("_", "-")


def _flush_ns(value: Any) -> int | None:
    """logging.flushFrequency: nanoseconds (a number) or a duration string (None: neither)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return parse_go_duration(str(value))
    except ValueError:
        return None


def _range(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be within [{lo}, {hi}]"


def _positive_duration(v: str) -> str | None:
    return None if parse_go_duration(v) > 0 else "must be greater than 0"


def _non_negative_duration(v: str) -> str | None:
    return None if parse_go_duration(v) >= 0 else "must be greater than or equal to 0"


def _non_negative(v: float) -> str | None:
    return None if v >= 0 else "must be greater than or equal to 0"


def _host_port(v: str) -> str | None:
    host, sep, port = v.rpartition(":")
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "must be IP:port"
    return None if sep and port.isdigit() and 1 <= int(port) <= 65535 else "must be IP:port (port 1-65535)"


def _ip(v: str) -> str | None:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return "must be a valid IP address"
    return None


def _cidrs(v: str) -> str | None:
    try:
        nets = [ipaddress.ip_network(c.strip(), strict=False) for c in v.split(",")] if v else []
    except ValueError:
        return "must be a CIDR, or a dual-stack pair of CIDRs separated by a comma"
    if len(nets) > 2 or (len(nets) == 2 and nets[0].version == nets[1].version):
        return "must be a CIDR, or a dual-stack pair of CIDRs separated by a comma"
    return None


def _nodeport_list(v: Sequence[str] | None) -> str | None:
    for item in v or ():
        try:
            nodeport_address(item)
        except ValueError:
            return f"{item!r}: must be a CIDR, primary, localhost or all"
    return None


def _one_of(values: Iterable[str]) -> Callable[[Any], str | None]:
    allowed = tuple(values)
    return lambda v: None if v in allowed else f"must be one of {', '.join(repr(a) for a in allowed)}"


def _section(name: str, masquerade_modes: tuple[str, ...] | None, sync_modes: tuple[str, ...]) -> list[Field]:
    """The masquerading and sync settings of one mode's section (iptables, ipvs, nftables)."""
    out = []
    if masquerade_modes is not None:
        where = " or ".join(m for m in masquerade_modes if m)
        out += [
            Field(
                f"{name}.masqueradeBit", Use.HONOURED, "int", 14, f"in {where} mode",
                "masquerade_bit", pointer=True, validate=_range(0, 31), modes=masquerade_modes,
            ),
            Field(
                f"{name}.masqueradeAll", Use.HONOURED, "bool", False, f"in {where} mode",
                "masquerade_all", modes=masquerade_modes,
            ),
        ]  # fmt: skip
    where = " or ".join(m for m in sync_modes if m)
    out += [
        Field(
            f"{name}.syncPeriod", Use.HONOURED, "duration", "30s", f"in {where} mode",
            "sync_period", _seconds, _duration_to_file, modes=sync_modes, validate=_positive_duration,
        ),
        Field(
            # kube-proxy defaults ipvs.minSyncPeriod to nothing: 0s
            f"{name}.minSyncPeriod", Use.HONOURED, "duration", "0s" if name == "ipvs" else "1s", f"in {where} mode",
            "min_sync_period", _seconds, _duration_to_file, modes=sync_modes, validate=_non_negative_duration,
        ),
    ]  # fmt: skip
    return out


def _iptables_section() -> list[Field]:
    out = _section("iptables", IPTABLES_IPVS, IPTABLES)
    out.insert(
        2,
        Field(
            "iptables.localhostNodePorts", Use.IGNORED, "bool", True,
            "in iptables mode, kube-proxy answers NodePorts on 127.0.0.1 (TCP and UDP); nftproxy answers them on "
            "loopback only when nodePortAddresses lists localhost (TCP, through a userspace proxy), as kube-proxy's "
            "nftables mode",
            pointer=True, warn_if=lambda v, mode: mode in IPTABLES or v is not True,
            warn_text="a warning in iptables mode, and when false",
        ),
    )  # fmt: skip
    return out


def _ignored(path: str, type_: str, default: Any, note: str, **kw: Any) -> Field:
    return Field(path, Use.IGNORED, type_, default, note, **kw)


_IPVS_ONLY = "an IPVS setting: nftproxy has no IPVS virtual servers"
_WINDOWS = "a Windows setting: nftproxy runs on Linux nodes"
_LOGGING = "a klog setting nftproxy's logging does not have"

FIELDS: tuple[Field, ...] = (
    Field(
        "featureGates", Use.HONOURED, "map", {},
        "nftproxy's gates; a warning for the gates of kube-proxy's web pages, logs and IPVS mode, and for "
        "AllowServiceExternalIPs, MultiCIDRServiceAllocator and PreferSameTrafficDistribution set to true (what "
        "nftproxy does)",
        "feature_gates", _feature_gates, _gates_to_file,
        refuse="any other gate (nftproxy cannot honour it)",
    ),
    Field(
        "clientConnection.kubeconfig", Use.HONOURED, "str", "", "empty: the pod's service account",
        "kubeconfig", _keep_empty, _text,
    ),
    _ignored(
        "clientConnection.acceptContentTypes", "str", "",
        "nftproxy asks for protobuf for Services and EndpointSlices (as kube-proxy), for JSON otherwise",
    ),
    _ignored(
        "clientConnection.contentType", "str", "application/vnd.kubernetes.protobuf",
        "nftproxy's client sends JSON",
        warn_if=lambda v, _m: v not in ("application/vnd.kubernetes.protobuf", "application/json"),
    ),
    _ignored(
        "clientConnection.qps", "float", 5.0,
        "nftproxy's client does not rate-limit: it sends few requests (the lists at start, its ProxyStatus at most "
        "once per --status-period, Events), its watches are long-lived",
    ),
    _ignored(
        "clientConnection.burst", "int", 10, "as qps: nftproxy's client does not rate-limit", validate=_non_negative
    ),
    Field(
        "logging.format", Use.HONOURED, "str", "text", "text or json", "logging_format",
        validate=_one_of(("text", "json")),
    ),
    _ignored(
        "logging.flushFrequency", "flush", "5s", "nftproxy writes each message when it is logged",
        warn_if=lambda v, _m: _flush_ns(v) != 5 * 10**9,
    ),
    Field(
        "logging.verbosity", Use.HONOURED, "int", 0, "0 to 3 log at info, 4 and more at debug", "verbosity",
        flag_text="-v", validate=_non_negative,
    ),
    _ignored("logging.vmodule", "any", None, _LOGGING, warn_if=lambda v, _m: bool(v)),
    _ignored("logging.options.text.splitStream", "bool", False, _LOGGING),
    _ignored("logging.options.text.infoBufferSize", "any", "0", _LOGGING, warn_if=lambda v, _m: str(v) != "0"),
    _ignored("logging.options.json.splitStream", "bool", False, _LOGGING),
    _ignored("logging.options.json.infoBufferSize", "any", "0", _LOGGING, warn_if=lambda v, _m: str(v) != "0"),
    Field(
        "hostnameOverride", Use.HONOURED, "str", "",
        "empty: the NODE_NAME the chart sets; a --node-name flag (kubeadm's --hostname-override) wins",
        "node_name", _hostname, _text,
    ),
    Field(
        "bindAddress", Use.HONOURED, "str", "0.0.0.0",
        "this node's primary IP (0.0.0.0 or ::: the Node's addresses)", "node_ip", _bind_address,
        lambda v: (v or ["0.0.0.0"])[0], validate=_ip,
    ),
    Field(
        "healthzBindAddress", Use.HONOURED, "str", "0.0.0.0:10256", "",
        "healthz_bind_address", validate=_host_port,
    ),
    Field(
        "metricsBindAddress", Use.HONOURED, "str", "127.0.0.1:10249", "",
        "metrics_bind_address", validate=_host_port,
    ),
    Field(
        "bindAddressHardFail", Use.HONOURED, "bool", False, "", "bind_address_hard_fail"
    ),
    _ignored("enableProfiling", "bool", False, "nftproxy serves no /debug/pprof"),
    _ignored("showHiddenMetricsForVersion", "str", "", "nftproxy has no hidden metrics"),
    _ignored(
        "mode", "str", "",
        "nftproxy programs nftables whatever the mode; the settings of the mode's section apply (iptables.* in "
        "iptables mode, as kube-proxy in that mode)",
        warn_if=lambda v, _m: v != "nftables", validate=_one_of(MODES), warn_text="a warning unless nftables",
    ),
    *_iptables_section(),
    *_section("ipvs", None, IPVS),
    _ignored(
        "ipvs.scheduler", "str", "", f"{_IPVS_ONLY}; --load-balancing round-robin, source-hash or maglev balance as "
        "IPVS's rr, sh and mh schedulers (the default: random, as kube-proxy's iptables and nftables modes)",
        warn_if=lambda v, mode: bool(v) or mode == "ipvs", warn_text="a warning when set, and in ipvs mode",
    ),
    _ignored("ipvs.excludeCIDRs", "list", None, _IPVS_ONLY, warn_if=lambda v, _m: bool(v)),
    _ignored("ipvs.strictARP", "bool", False, f"{_IPVS_ONLY} (no kube-ipvs0 interface answers ARP)"),
    _ignored(
        "ipvs.tcpTimeout", "duration", "0s", f"{_IPVS_ONLY}; conntrack.* set the node's conntrack timeouts",
        validate=_non_negative_duration,
    ),
    _ignored(
        "ipvs.tcpFinTimeout", "duration", "0s", f"{_IPVS_ONLY}; conntrack.* set the node's conntrack timeouts",
        validate=_non_negative_duration,
    ),
    _ignored(
        "ipvs.udpTimeout", "duration", "0s", f"{_IPVS_ONLY}; conntrack.* set the node's conntrack timeouts",
        validate=_non_negative_duration,
    ),
    *_section("nftables", NFTABLES, NFTABLES),
    _ignored("winkernel.networkName", "str", "", _WINDOWS),
    _ignored("winkernel.sourceVip", "str", "", _WINDOWS),
    _ignored("winkernel.enableDSR", "bool", False, _WINDOWS),
    _ignored("winkernel.rootHnsEndpointName", "str", "", _WINDOWS),
    _ignored("winkernel.forwardHealthCheckVip", "bool", False, _WINDOWS),
    Field(
        "detectLocalMode", Use.HONOURED, "str", "ClusterCIDR", "", "detect_local_mode",
        validate=_one_of(LOCAL_MODES),
    ),
    Field(
        "detectLocal.bridgeInterface", Use.HONOURED, "str", "", "", "pod_bridge_interface"
    ),
    Field(
        "detectLocal.interfaceNamePrefix", Use.HONOURED, "str", "", "",
        "pod_interface_name_prefix",
    ),
    Field(
        "clusterCIDR", Use.HONOURED, "str", "", "", "cluster_cidr", _cluster_cidr,
        lambda v: ",".join(c.strip() for x in v or () for c in x.split(",") if c.strip()), validate=_cidrs,
    ),
    Field(
        "nodePortAddresses", Use.HONOURED, "list", None,
        "unset: primary in nftables mode, all in iptables and ipvs mode, as kube-proxy",
        "nodeport_addresses", _nodeport_addresses,
        lambda v: [c.strip() for x in v or () for c in x.split(",") if c.strip()] or ["primary"],
        validate=_nodeport_list,
    ),
    _ignored(
        "oomScoreAdj", "int", -999, "nftproxy leaves its OOM score to the pod (the chart's priorityClassName)",
        pointer=True, validate=_range(-1000, 1000),
    ),
    Field(
        "conntrack.maxPerCore", Use.HONOURED, "int", 32768, "", "conntrack_max_per_core",
        pointer=True, validate=_non_negative,
    ),
    Field(
        "conntrack.min", Use.HONOURED, "int", 131072, "", "conntrack_min", pointer=True,
        validate=_non_negative,
    ),
    Field(
        "conntrack.tcpEstablishedTimeout", Use.HONOURED, "duration", "24h0m0s", "",
        "conntrack_tcp_timeout_established", _seconds, _duration_to_file, pointer=True, validate=_non_negative_duration,
    ),
    Field(
        "conntrack.tcpCloseWaitTimeout", Use.HONOURED, "duration", "1h0m0s", "",
        "conntrack_tcp_timeout_close_wait", _seconds, _duration_to_file, pointer=True, validate=_non_negative_duration,
    ),
    Field(
        "conntrack.tcpBeLiberal", Use.HONOURED, "bool", False, "", "conntrack_tcp_be_liberal"
    ),
    Field(
        "conntrack.udpTimeout", Use.HONOURED, "duration", "0s", "", "conntrack_udp_timeout",
        _seconds, _duration_to_file, validate=_non_negative_duration,
    ),
    Field(
        "conntrack.udpStreamTimeout", Use.HONOURED, "duration", "0s", "",
        "conntrack_udp_timeout_stream", _seconds, _duration_to_file, validate=_non_negative_duration,
    ),
    _ignored(
        "configSyncPeriod", "duration", "15m0s",
        "not needed: nftproxy's watches deliver every change, and --sync-period resyncs the table",
        validate=_positive_duration,
    ),
    _ignored("portRange", "str", "", "unused, as in kube-proxy (a setting of its removed userspace mode)"),
    _ignored("windowsRunAsService", "bool", False, _WINDOWS),
)  # fmt: skip

BY_PATH = {f.path: f for f in FIELDS}
_PREFIXES = {f.path.rsplit(".", i)[0] for f in FIELDS for i in range(1, f.path.count(".") + 1)}


# -- reading -----------------------------------------------------------------------------------


@dataclass
class Loaded:
    """A file read: its defaulted values (by path), what goes to which dest, and its warnings."""

    path: str
    values: dict[str, Any]
    assignments: dict[str, tuple[Field, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class _Loader(yaml.SafeLoader):
    """SafeLoader that remembers repeated keys (kube-proxy's strict decoding refuses them; its
    lenient one, as ours, takes the last)."""

    repeated: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                self.repeated.append(str(key))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _decode(text: str, where: str) -> tuple[dict[str, Any], list[str]]:
    loader = _Loader(text)
    loader.repeated = []
    try:
        doc = loader.get_single_data()
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not YAML or JSON: {e}") from None
    finally:
        loader.dispose()
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: not a KubeProxyConfiguration (a mapping)")
    return doc, loader.repeated


def _is_zero(f: Field, value: Any) -> bool:
    """Go's zero value of the field's type (kube-proxy's defaulting replaces most of them)."""
    if f.type == "duration":
        try:
            return parse_go_duration(value) == 0
        except (ValueError, AttributeError):
            return False
    if f.type == "flush":
        return _flush_ns(value) == 0
    if f.type == "bool":
        return value is False
    if f.type == "str":
        return bool(value == "")
    if f.type in ("int", "float"):
        return not isinstance(value, bool) and value == 0
    return False


def _check_type(f: Field, value: Any) -> str | None:
    ok = {
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31,
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "duration": isinstance(value, str),
        "list": isinstance(value, list) and all(isinstance(x, str) for x in value),
        "map": isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, bool) for k, v in value.items()),
        "flush": _flush_ns(value) is not None,  # nanoseconds, or a duration string
        "any": True,
    }[f.type]
    if not ok:
        want = {"duration": "a duration string (e.g. 30s)", "list": "a list of strings", "map": "a map of booleans"}
        return f"wrong type {type(value).__name__}: want {want.get(f.type, f.type)}"
    if f.type == "duration":
        try:
            parse_go_duration(value)
        except ValueError as e:
            return str(e)
    return None


def _flatten(doc: Mapping[str, Any], prefix: str, out: dict[str, Any], unknown: list[str], where: str) -> None:
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if not prefix and key in ("apiVersion", "kind"):
            continue
        if path in BY_PATH:
            out[path] = value
        elif path in _PREFIXES:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {path}: wrong type {type(value).__name__}: want an object")
            _flatten(value, path + ".", out, unknown, where)
        else:
            unknown.append(path)


def _defaults_for_addresses(values: dict[str, Any], raw: Mapping[str, Any]) -> None:
    """kube-proxy's healthz and metrics defaults follow bindAddress's family, and a port is
    appended to an address without one (its SetDefaults_KubeProxyConfiguration)."""
    v6 = ":" in str(values.get("bindAddress", ""))
    for path, host, port in (
        ("healthzBindAddress", "[::]" if v6 else "0.0.0.0", 10256),
        ("metricsBindAddress", "[::1]" if v6 else "127.0.0.1", 10249),
    ):
        given = raw.get(path)
        if not given:
            values[path] = f"{host}:{port}"
            continue
        try:
            ip = ipaddress.ip_address(str(given))
        except ValueError:
            values[path] = given
            continue
        values[path] = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _validate_together(values: Mapping[str, Any], mode: str) -> str | None:
    """kube-proxy's checks of several fields at once (pkg/proxy/apis/config/validation)."""
    section = {"": "iptables"}.get(mode, mode)
    sync, min_sync = (parse_go_duration(values[f"{section}.{k}"]) for k in ("syncPeriod", "minSyncPeriod"))
    if min_sync > sync:
        return f"{section}.syncPeriod: {_show(values[f'{section}.syncPeriod'])} must be at least minSyncPeriod"
    local = values["detectLocalMode"]
    for want, path in (
        ("BridgeInterface", "detectLocal.bridgeInterface"),
        ("InterfaceNamePrefix", "detectLocal.interfaceNamePrefix"),
    ):
        if local == want and not values[path]:
            return f"{path}: must not be empty with detectLocalMode {want}"
    keywords = [a for a in values["nodePortAddresses"] or () if a in ("primary", "localhost", "all")]
    if len(keywords) != len(set(keywords)):
        return f"nodePortAddresses: {_show(values['nodePortAddresses'])} names a keyword twice"
    if mode == "ipvs":
        for cidr in values["ipvs.excludeCIDRs"] or ():
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                return f"ipvs.excludeCIDRs: {_show(cidr)} must be a valid CIDR"
    return None


def load(path: str) -> Loaded:
    """Read, default and validate the file; ``Loaded.assignments``: what each honoured field
    sets (ConfigError: a value refused, naming the field)."""
    where = f"--config {path}"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{where}: {e.strerror or e}") from None
    doc, repeated = _decode(text, where)
    if doc.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{where}: apiVersion {doc.get('apiVersion')!r}: want {API_VERSION!r}")
    if doc.get("kind") != KIND:
        raise ConfigError(f"{where}: kind {doc.get('kind')!r}: want {KIND!r}")
    raw: dict[str, Any] = {}
    unknown: list[str] = []
    _flatten(doc, "", raw, unknown, where)
    warnings = [
        f"{where}: unknown field {u!r} ignored (kube-proxy, too, decodes the file leniently then)" for u in unknown
    ]
    warnings += [f"{where}: field {r!r} given twice: the last value counts" for r in repeated]
    values: dict[str, Any] = {}
    for f in FIELDS:
        value = raw.get(f.path)
        if value is not None:
            problem = _check_type(f, value)
            if problem:
                raise ConfigError(f"{where}: {f.path}: {problem}")
        if value is None or (not f.pointer and _is_zero(f, value)):
            value = f.default
        values[f.path] = value
    _defaults_for_addresses(values, raw)
    mode = str(values["mode"])
    if mode == "nftables" and not values["nodePortAddresses"]:
        values["nodePortAddresses"] = ["primary"]  # kube-proxy's platform default in nftables mode
    for f in FIELDS:
        value = values[f.path]
        section = f.path.split(".")[0]
        if section in ("ipvs", "nftables") and mode != section:
            continue  # kube-proxy validates these sections in their mode only
        problem = f.validate(value) if f.validate and value is not None else None
        if problem:
            raise ConfigError(f"{where}: {f.path}: {_show(value)} {problem}")
    problem = _validate_together(values, mode)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    loaded = Loaded(path, values, warnings=warnings)
    ctx = Context(str(values["mode"]), loaded.warnings, where)
    for f in FIELDS:
        value = values[f.path]
        active = f.use is Use.HONOURED and (f.modes is None or ctx.mode in f.modes)
        if active:
            assert f.dest is not None
            try:
                arg = f.to_arg(value, ctx)
            except ValueError as e:
                raise ConfigError(f"{where}: {f.path}: {e}") from None
            if arg is not KEEP:
                loaded.assignments[f.dest] = (f, arg)
            continue
        warn = f.warn_if(value, ctx.mode) if f.warn_if else value != f.default
        if warn:
            if f.use is Use.HONOURED:  # a section of another mode
                why = f"kube-proxy uses it in {' or '.join(m or 'iptables' for m in f.modes or ())} mode only"
                loaded.warnings.append(f"{where}: {f.path} {_show(value)} is ignored: {why} (mode {_show(ctx.mode)})")
            else:
                loaded.warnings.append(f"{where}: {f.path} {_show(value)} is ignored: {f.note}")
    return loaded


def _show(value: Any) -> str:
    return json.dumps(value)


def apply(loaded: Loaded, args: argparse.Namespace, given: Iterable[str], complete: bool) -> None:
    """Set ``args`` from the file: each honoured field's dest, unless its flag was ``given`` on
    the command line. ``complete``: ``args`` is `run`'s, which has every dest, so a dest it lacks
    is a setting this nftproxy cannot honour (an error unless the value is kube-proxy's default)."""
    explicit = set(given)
    for dest, (f, arg) in loaded.assignments.items():
        if dest in explicit:
            continue
        if not hasattr(args, dest):
            if complete and loaded.values[f.path] != f.default:
                value = _show(loaded.values[f.path])
                raise ConfigError(f"--config {loaded.path}: {f.path} {value}: this nftproxy cannot honour it")
            continue
        setattr(args, dest, arg)


def effective(args: argparse.Namespace, loaded: Loaded | None) -> dict[str, Any]:
    """The KubeProxyConfiguration nftproxy runs with (v1alpha1, nested, as /configz serves it):
    the file's values (kube-proxy's defaults without one), ``mode: nftables``, and in the place of
    each honoured field the value of its flag (the nftables section has those of the file's mode)."""
    values = dict(loaded.values) if loaded else {f.path: f.default for f in FIELDS}
    if loaded is None:
        values["nodePortAddresses"] = ["primary"]
    mode = loaded.values["mode"] if loaded else "nftables"
    values["mode"] = "nftables"
    for f in FIELDS:
        if f.use is not Use.HONOURED or f.dest is None or not hasattr(args, f.dest):
            continue
        if f.modes is not None and mode not in f.modes:
            continue
        value = getattr(args, f.dest)
        if f.to_file is not None:
            value = f.to_file(value)
        elif f.type == "duration":
            value = seconds_text(value)
        target = f.path
        if f.modes is not None:  # the section of the file's mode is nftables' now
            target = "nftables." + f.path.split(".", 1)[1]
        if value is None and f.type == "int":
            value = f.default
        values[target] = value
    return {"apiVersion": API_VERSION, "kind": KIND, **_nest(values)}


def _nest(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in values.items():
        node = out
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def table_markdown() -> str:
    """The table as docs/operating.md lists it."""
    rows = ["| Field | nftproxy | Notes |", "| --- | --- | --- |"]
    for f in FIELDS:
        use = f"`{f.flag}`" if f.use is Use.HONOURED else f"ignored: {f.warn_text or 'a warning when set'}"
        note = "; ".join(x for x in (f.note, f"an error: {f.refuse}" if f.refuse else "") if x)
        rows.append(f"| `{f.path}` | {use} | {note} |")
    return "\n".join(rows) + "\n"
