"""``nftproxy trace --to IP:PORT[/PROTO]``: the next packets' verdict paths, in our terms.

A temporary, narrow rule ``… meta nftrace set 1`` goes into two base chains of our own table
(see compiler/names.py: named with their deadline, the rule also expires by ``meta time``), hooked at
priority -190: after conntrack (-200), so ``ct state new`` selects the first packet of each new
connection (the one that takes the load-balancing decision; later packets follow conntrack),
and before our filter (-110) and nat (-100) chains. ``nft monitor trace`` (run in the same
network namespace) reports every rule the marked packets go through, in every table; those events
are read back into: which Service (the dispatch element's comment), which endpoint (the packet's
destination after DNAT), masqueraded or not, and why a packet was rejected or dropped.
The rule is removed when done, on Ctrl-C or SIGTERM too; a killed trace's chains are inert after
the deadline and removed by the next full sync (nftproxy run's periodic check triggers one).
"""

from __future__ import annotations

import ipaddress
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nftproxy.compiler import names
from nftproxy.diagnose.tableview import TableView, normalize
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Chain, Family, Hook
from nftproxy.nft.transaction import Transaction

PRIORITY = -190  # after conntrack (-200): ct state is known; before our filter (-110) and nat (-100)
PROTOCOLS = ("tcp", "udp", "sctp")


@dataclass(frozen=True)
class Target:
    address: str
    port: int
    protocol: str | None  # None: tcp, udp and sctp

    @property
    def family(self) -> Family:
        return Family.IP6 if ":" in self.address else Family.IP


def parse_target(text: str) -> Target:
    """``IP:PORT[/PROTO]``; IPv6 as ``[IP]:PORT[/PROTO]``."""
    body, _, proto = text.partition("/")
    proto = proto.lower() or ""
    if proto and proto not in PROTOCOLS:
        raise ValueError(f"--to {text!r}: protocol must be one of {', '.join(PROTOCOLS)}")
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d+)|([0-9.]+):(\d+)", body)
    if not m:
        raise ValueError(f"--to {text!r}: expected IP:PORT[/PROTO] (IPv6: [IP]:PORT)")
    addr, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    try:
        address = str(ipaddress.ip_address(addr))
    except ValueError:
        raise ValueError(f"--to {text!r}: {addr!r} is not an IP address") from None
    if not 0 < int(port) < 65536:
        raise ValueError(f"--to {text!r}: port must be 1-65535")
    return Target(address, int(port), proto or None)


def match_rule(target: Target, source: str | None, deadline: float) -> str:
    ip = target.family.value
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline))
    parts = [f'meta time < "{when}"', "ct state new", f"{ip} daddr {target.address}"]
    if source:
        parts.append(f"{ip} saddr {source}")
    if target.protocol:
        parts.append(f"{target.protocol} dport {target.port}")
    else:
        parts.append(f"meta l4proto {{ tcp, udp, sctp }} th dport {target.port}")
    return " ".join(parts) + f' meta nftrace set 1 comment "{names.TRACE_COMMENT}"'


def install(family: Family, table: str, chains: tuple[str, str], rule: str) -> Transaction:
    tx = Transaction(family, table)
    why = f"{names.TRACE_COMMENT}: temporary, removed when the trace ends"
    for name, hook in zip(chains, ("prerouting", "output"), strict=True):
        tx.add_chain(Chain(name, hook=Hook("filter", hook, PRIORITY, why)))
        tx.add_rule(name, rule)
    return tx


def remove(family: Family, table: str, chains: Iterable[str]) -> Transaction:
    tx = Transaction(family, table)
    for name in chains:
        tx.delete_chain(name)
    return tx


# -- reading trace events -------------------------------------------------------------------

_EVENT = re.compile(r"^trace id (\S+) (ip6?|inet|arp|bridge|netdev) (\S+) (\S+) (packet: |rule |verdict |policy )(.*)$")
_RULE_VERDICT = re.compile(r"^(.*) \(verdict ([^)]*)\)\s*$")


@dataclass(frozen=True)
class Event:
    table: str  # "ip nftproxy"
    chain: str
    kind: str  # packet | rule | verdict | policy
    text: str  # the packet's headers, the rule, or the verdict
    verdict: str = ""


def parse_event(line: str) -> tuple[str, Event] | None:
    m = _EVENT.match(line.rstrip("\n"))
    if not m:
        return None
    tid, fam, table, chain, kind, rest = m.groups()
    kind = kind.strip().rstrip(":")
    verdict = ""
    if kind == "rule":
        mv = _RULE_VERDICT.match(rest)
        if mv:
            rest, verdict = mv.group(1), mv.group(2)
    elif kind in ("verdict", "policy"):
        verdict = rest.split()[0] if rest.split() else ""
    return tid, Event(f"{fam} {table}", chain, kind, rest.strip(), verdict)


def headers(text: str) -> dict[str, str]:
    """Selected fields of a trace ``packet:`` line."""
    out: dict[str, str] = {}
    for key in ("iif", "oif"):
        m = re.search(rf'\b{key} "([^"]+)"', text)
        if m:
            out[key] = m.group(1)
    for key in ("saddr", "daddr"):
        m = re.search(rf"\bip6? {key} (\S+)", text)
        if m:
            out[key] = m.group(1)
    m = re.search(r"\b(tcp|udp|sctp) sport (\d+) \1 dport (\d+)", text)
    if m:
        out["protocol"], out["sport"], out["dport"] = m.group(1), m.group(2), m.group(3)
    return out


def group(lines: Iterable[str]) -> Iterator[list[Event]]:
    """Each traced packet's events, in order. A packet starts with its ``packet:`` event in one of
    our trace chains (nft reuses trace ids, so an id alone does not delimit a packet)."""
    open_: dict[str, list[Event]] = {}
    order: list[list[Event]] = []
    for line in lines:
        parsed = parse_event(line)
        if parsed is None:
            continue
        tid, ev = parsed
        if ev.kind == "packet" and ev.chain.startswith(names.TRACE_PREFIX):
            open_[tid] = [ev]
            order.append(open_[tid])
        elif tid in open_:
            open_[tid].append(ev)
    yield from order


# -- in our terms ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    protocol: str
    source: str  # address:port
    destination: str
    interface: str  # "in eth0" / "out eth0" (from this node)
    service: str | None  # "ns/name:port" (the dispatch element's comment)
    frontend: str | None  # ClusterIP / NodePort / external … as the dispatch map says
    endpoint: str | None  # where it was DNATed to
    algorithm: str | None  # random | round-robin | source-hash | maglev | affinity
    masqueraded: bool
    verdict: str  # forwarded | delivered | rejected | dropped | untouched
    reason: str
    path: tuple[str, ...]  # our chains, in the order the packet went through them
    other_tables: tuple[str, ...] = field(default=())  # other tables that saw it (e.g. kube-proxy)


def _addr(addr: str, port: str) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _service_of(view: TableView | None, h: dict[str, str]) -> tuple[str | None, str | None]:
    if view is None or "daddr" not in h:
        return None, None
    key = (h["daddr"], h.get("protocol", ""), h.get("dport", ""))
    for set_name in (names.SERVICE_IPS, names.NO_ENDPOINT_SERVICES):
        el = view.els(set_name).get(key)
        if el is not None:
            return el.comment, "ClusterIP" if (h["daddr"],) in view.els(names.CLUSTER_IPS) else "external IP"
    np = (h.get("protocol", ""), h.get("dport", ""))
    for set_name in (names.SERVICE_NODEPORTS, names.NO_ENDPOINT_NODEPORTS):
        el = view.els(set_name).get(np)
        if el is not None:
            return el.comment, "NodePort"
    return None, None


def interpret(events: list[Event], ours: str, view: TableView | None) -> Packet:
    """One packet's events (``ours``: our table, "ip nftproxy") in our terms."""
    first = headers(events[0].text)
    service, frontend = _service_of(view, first)
    path: list[str] = []
    others: list[str] = []
    endpoint = algorithm = None
    masq = False
    verdict, reason = "untouched", "no rule of ours acted on it: not a Service frontend on this node"
    dnat_seen = False
    for ev in events[1:]:
        if ev.table != ours:
            if ev.table not in others:
                others.append(ev.table)
            continue
        if ev.chain.startswith(names.TRACE_PREFIX):
            continue
        if ev.chain not in path:
            path.append(ev.chain)
        rule = normalize(ev.text)
        if ev.kind == "packet":
            h = headers(ev.text)
            if dnat_seen and endpoint is None and h.get("daddr") and h.get("daddr") != first.get("daddr"):
                endpoint = _addr(h["daddr"], h.get("dport", "?"))
            continue
        if ev.kind != "rule":
            continue
        jumped = re.fullmatch(r"(?:jump|goto) (\S+)", ev.verdict)
        if jumped and jumped.group(1) not in path:  # a chain entered: shown even if none of its rules matched
            path.append(jumped.group(1))
        if "dnat" in rule and ev.verdict == "accept":
            dnat_seen = True
            algorithm = (
                "affinity"
                if "saddr map @affinity-" in rule
                else "round-robin"
                if "numgen inc" in rule
                else "maglev"
                if "jhash" in rule and f"-{names.MAGLEV_TAG}-" in rule  # its map: endpoints-mg-M …
                else "source-hash"
                if "jhash" in rule
                else "random"
            )
            verdict, reason = "forwarded", f"DNAT ({algorithm}) in chain {ev.chain}"
        elif rule.startswith("masquerade") and ev.verdict == "accept":
            masq = True
        elif ev.verdict == "goto reject-chain" or (ev.chain == "reject-chain" and rule == "reject"):
            verdict = "rejected"
            reason = f"{service or 'the Service'} has no endpoints (chain {path[-2] if len(path) > 1 else ev.chain})"
        elif ev.chain.startswith(names.LOCALHOST_NODEPORT_REJECT_CHAIN) and rule.endswith("reject"):
            verdict = "rejected"
            reason = "a UDP/SCTP NodePort on loopback: only TCP is served there (by the userspace proxy)"
        elif ev.chain == "cluster-ips-check" and rule.endswith("reject"):
            verdict, reason = "rejected", "a ClusterIP on a port no Service serves"
        elif ev.verdict == "drop":
            verdict = "dropped"
            if ev.chain == "firewall-check":
                reason = "source not in the Service's loadBalancerSourceRanges"
            elif "no-endpoint" in rule:
                reason = "internalTrafficPolicy Local: endpoints exist, none on this node"
            elif rule == "drop":
                reason = f"externalTrafficPolicy Local: no endpoint on this node (chain {ev.chain})"
            else:
                reason = f"dropped by rule {rule!r} in chain {ev.chain}"
    if verdict == "forwarded" and endpoint is None:
        endpoint = "(not seen: the packet left before a later hook)"
    if verdict == "forwarded" and endpoint is not None:
        reason += f" to {endpoint}"
    iface = f"in {first['iif']}" if "iif" in first else f"from this node, out {first.get('oif', '?')}"
    return Packet(
        first.get("protocol", "?"),
        _addr(first.get("saddr", "?"), first.get("sport", "?")),
        _addr(first.get("daddr", "?"), first.get("dport", "?")),
        iface, service, frontend, endpoint, algorithm, masq, verdict, reason, tuple(path), tuple(others),
    )  # fmt: skip


def render_packet(i: int, p: Packet) -> str:
    lines = [f"packet {i}: {p.protocol} {p.source} -> {p.destination} ({p.interface})"]
    if p.service:
        lines.append(f"  Service {p.service} ({p.frontend})")
    else:
        lines.append("  no Service of ours at this address and port")
    lines.append(f"  verdict: {p.verdict}: {p.reason}")
    if p.endpoint:
        lines.append(f"  endpoint: {p.endpoint} (chosen by {p.algorithm})")
    if p.verdict == "forwarded":
        lines.append(f"  masqueraded: {'yes' if p.masqueraded else 'no (source kept)'}")
    lines.append(f"  path: {' -> '.join(p.path) or '-'}")
    if p.other_tables:
        lines.append(f"  also seen by: {', '.join(p.other_tables)}")
    return "\n".join(lines) + "\n"


# -- running ----------------------------------------------------------------------------------


class Tracer:
    """Installs the rule, runs the monitor, removes both (also from ``close`` after a signal)."""

    def __init__(self, backend: KernelBackend, family: Family, table: str) -> None:
        self.backend = backend
        self.family = family
        self.table = table
        self.names: tuple[str, str] | None = None
        self.monitor: subprocess.Popen[bytes] | None = None

    def start(self, target: Target, source: str | None, timeout: float) -> None:
        if self.backend.chain_names(self.family, self.table) is None:
            raise LookupError(f"table {self.family.value} {self.table} does not exist: nftproxy is not programming it")
        # The monitor starts first (a child of the backend's thread: same netns; it dies with us).
        self.monitor = self.backend.monitor("trace")
        time.sleep(0.2)  # the monitor subscribes before the first marked packet
        deadline = time.time() + timeout + 5
        self.names = names.trace_chains(deadline, os.getpid())
        self.backend.apply(install(self.family, self.table, self.names, match_rule(target, source, deadline)))

    def lines(self, count: int, timeout: float) -> Iterator[str]:
        """Monitor lines until ``count`` packets have started (+ a short grace) or the timeout."""
        assert self.monitor is not None and self.monitor.stdout is not None
        fd = self.monitor.stdout.fileno()  # read unbuffered: select() does not see a file's buffer
        end = time.monotonic() + timeout
        started = 0
        grace_end: float | None = None
        pending = b""
        while True:
            now = time.monotonic()
            limit = min(end, grace_end) if grace_end is not None else end
            if now >= limit:
                return
            ready, _, _ = select.select([fd], [], [], limit - now)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                line = raw.decode(errors="replace") + "\n"
                yield line
                parsed = parse_event(line)
                if parsed and parsed[1].kind == "packet" and parsed[1].chain.startswith(names.TRACE_PREFIX):
                    started += 1
                    if started >= count and grace_end is None:
                        grace_end = time.monotonic() + 0.5

    def close(self) -> None:
        if self.names is not None:
            names, self.names = self.names, None
            have = self.backend.chain_names(self.family, self.table) or set()
            gone = [n for n in names if n in have]
            if gone:
                self.backend.apply(remove(self.family, self.table, gone))
        if self.monitor is not None:
            self.monitor.terminate()
            try:
                self.monitor.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.monitor.kill()
            self.monitor = None


def trace(
    netns: str | None, table: str, target: Target, source: str | None, count: int, timeout: float
) -> tuple[list[Packet], list[str]]:
    """Trace the next ``count`` new connections to ``target``: (packets, raw monitor lines)."""
    from nftproxy.diagnose.tableview import read_view  # noqa: PLC0415

    backend = KernelBackend(netns)
    tracer = Tracer(backend, target.family, table)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    raw: list[str] = []
    try:
        view = read_view(backend, target.family, table)
        tracer.start(target, source, timeout)
        try:
            for line in tracer.lines(count, timeout):
                raw.append(line)
        except KeyboardInterrupt:
            pass  # report what was seen; the rule is removed below
    finally:
        try:
            tracer.close()
        finally:
            signal.signal(signal.SIGTERM, old)
            backend.close()
    ours = f"{target.family.value} {table}"
    packets = [interpret(evs, ours, view) for evs in group(raw)][:count]
    return packets, raw
