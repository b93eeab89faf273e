"""``nftproxy explain NAMESPACE/NAME``: one Service's path through the table, in our terms.

Everything comes from the table (the kernel's, or a compiled one for tests): the dispatch maps'
elements carry the comment ``namespace/name:port``, which finds a Service's frontends; each
frontend's verdict names a chain, whose rules are read and described step by step (masquerade,
traffic-policy short-circuits, affinity, load balancing) down to the endpoint map's slots.
A rule this module does not know is shown verbatim, never hidden.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nftproxy.compiler import names
from nftproxy.diagnose.tableview import TableView, normalize
from nftproxy.nft.objects import Element, Key

IP_DISPATCH = names.SERVICE_IPS
NODEPORT_DISPATCH = names.SERVICE_NODEPORTS
NO_EP_IP = names.NO_ENDPOINT_SERVICES
NO_EP_NODEPORT = names.NO_ENDPOINT_NODEPORTS


@dataclass(frozen=True)
class Step:
    kind: str  # chain | masquerade | short-circuit | affinity | load-balance | slot | drop | reject | rule
    text: str
    children: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Frontend:
    family: str  # ip | ip6
    kind: str  # ClusterIP | NodePort | LoadBalancer IP | external IP
    address: str  # the IP, or the NodePort addresses ("198.18.0.1, …")
    protocol: str
    port: int
    port_name: str
    verdict: str  # the dispatch map's verdict, e.g. "goto cluster-2"
    outcome: str  # forwarded | rejected | dropped
    steps: tuple[Step, ...]
    endpoints: tuple[str, ...]  # every endpoint reachable (address:port), sorted

    @property
    def label(self) -> str:
        if self.kind == "NodePort":
            return f"NodePort {self.port}/{self.protocol} on {self.address}"
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.kind} {addr}:{self.port}/{self.protocol}"


@dataclass(frozen=True)
class ApiCheck:
    matches: bool
    reasons: tuple[str, ...]  # why not (or notes when it matches)
    missing: tuple[str, ...] = ()  # elements the API's objects need, absent from the kernel
    extra: tuple[str, ...] = ()  # elements the kernel holds that the API's objects no longer give


@dataclass(frozen=True)
class Explanation:
    service: str
    port: str | None
    tables: tuple[str, ...]  # the tables read (absent ones are said in ``summary``)
    state: str  # not-programmed | no-endpoints | programmed | partly-rejected
    summary: str
    frontends: tuple[Frontend, ...]
    api: ApiCheck | None = None
    notes: tuple[str, ...] = field(default=())


# -- finding a Service's elements --------------------------------------------------------


def comment_matches(comment: str | None, service: str, port: str | None = None) -> bool:
    """Element comments are ``ns/name`` or ``ns/name:port`` (long ones cut to ``start...end``)."""
    if not comment:
        return False
    if "..." in comment and len(comment) >= 120:  # shortened by the compiler: start and end kept
        head, _, tail = comment.partition("...")
        full = service + (f":{port}" if port else "")
        return full.startswith(head) and (port is None or full.endswith(tail))
    name, _, pname = comment.partition(":")
    if name != service:
        return False
    return port is None or pname == port


def _port_name(comment: str | None) -> str:
    if not comment or ":" not in comment:
        return ""
    return comment.rsplit(":", 1)[1]


def _endpoint(value: tuple[str, ...] | None) -> str:
    addr, port = (value or ("?", "?"))[:2]
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def service_elements(view: TableView, service: str) -> list[tuple[str, Element]]:
    """Every element of the table that belongs to ``service``: the ones with its comment, and
    the endpoint-map / firewall elements keyed by one of its frontends."""
    out: list[tuple[str, Element]] = []
    frontends: set[Key] = set()
    for set_name, els in view.elements.items():
        for el in els.values():
            if comment_matches(el.comment, service):
                out.append((set_name, el))
                if set_name in (IP_DISPATCH, NODEPORT_DISPATCH, NO_EP_IP, NO_EP_NODEPORT):
                    frontends.add(el.key)
    own_maps = {  # round-robin: the Service's own maps (keyed by slot only), named by its chains
        el.value[0].removeprefix("goto ")
        for set_name, el in out
        if set_name.startswith(names.RR_PREFIX) and el.value and el.value[0].startswith(f"goto {names.RR_PREFIX}")
    }
    for name in sorted(own_maps):
        out += [(name, el) for el in view.els(name).values()]
    for set_name, els in view.elements.items():
        if (em := names.endpoint_map(set_name)) is not None:
            width = em.width
        elif set_name in (names.FIREWALL_IPS, names.FIREWALL_ALLOW):
            width = names.IP_FRONTEND
        else:
            continue
        out += [(set_name, el) for el in els.values() if el.comment is None and el.key[:width] in frontends]
    return out


def render_element(set_name: str, el: Element) -> str:
    return f"{set_name} {{ {el.render()} }}"


# -- describing chains -------------------------------------------------------------------

_GOTO = re.compile(r"^(goto|jump) (\S+)$")
_VMAP = re.compile(r"^(?P<cond>.*?)\s*(?P<key>(?:ip6? daddr \. )?meta l4proto \. th dport) vmap @(?P<map>\S+)$")
_DNAT = re.compile(r"dnat ip6? to (?P<key>.+) map @(?P<map>\S+)$")
_ALGO = (
    (re.compile(r"numgen random mod (\d+)"), "random"),
    (re.compile(r"numgen inc mod (\d+)"), "round-robin"),
    (re.compile(r"jhash .* mod (\d+)"), "source-hash"),
)


class _Describer:
    def __init__(self, view: TableView, fkey: Key, nodeport: bool) -> None:
        self.view = view
        self.fkey = fkey
        self.nodeport = nodeport
        self.endpoints: set[str] = set()

    def cidrs(self, set_name: str = names.CLUSTER_CIDRS) -> str:
        nets = sorted(k[0] for k in self.view.keys(set_name))
        return ", ".join(nets) or "none configured"

    def pods(self, match: str, short: bool = False) -> str:
        """The local-traffic detector's match (--detect-local-mode), in words: "a pod (...)"
        (``short``: "pod sources (...)")."""
        m = re.fullmatch(r"ip6? saddr (?:!= )?@([\w-]+)", match)
        if m:
            return f"{'pod sources' if short else 'a pod'} ({self.cidrs(m.group(1))})"
        m = re.fullmatch(r'iifname (?:!= )?"([^"]+)"', match)
        if m:
            name = m.group(1)
            how = f"any interface named {name[:-1]}…" if name.endswith("*") else f"the interface {name}"
            return f"{'pod traffic' if short else 'a pod'} (arriving on {how})"
        return match

    def affinity(self) -> int | None:
        el = self.view.els(names.AFFINITY_NODEPORTS if self.nodeport else names.AFFINITY_SERVICES).get(self.fkey)
        if el is None or not el.value:
            return None
        return names.affinity_timeout_of(el.value[0])

    def chain(self, name: str, depth: int = 0) -> Step:
        rules = self.view.chains.get(name)
        if rules is None:
            return Step("rule", f"chain {name} is missing from the table: packets would be refused by nft")
        steps: list[Step] = []
        for rule in rules:
            step, final = self.rule(normalize(rule), depth)
            if step is not None:
                steps.append(step)
            if final:
                break
        return Step("chain", f"chain {name}", tuple(steps))

    def _verdict(self, verdict: str, depth: int) -> Step:
        m = _GOTO.match(verdict)
        if m and depth < 8:
            if m.group(2) == "reject-chain":
                return Step("reject", "rejected (ICMP unreachable / TCP reset)")
            return self.chain(m.group(2), depth + 1)
        if verdict == "drop":
            return Step("drop", "dropped")
        return Step("rule", f"verdict {verdict}")

    def rule(self, rule: str, depth: int) -> tuple[Step | None, bool]:
        """(the step this rule is, does evaluation end here for this frontend?)"""
        if rule in ("jump mark-for-masquerade",):
            return Step("masquerade", "masqueraded (source NAT to the node's address)"), False
        m = re.fullmatch(r"(ip6? saddr != @[\w-]+|iifname != \"[^\"]+\") jump mark-for-masquerade", rule)
        if m:
            return Step("masquerade", f"masqueraded unless the source is {self.pods(m.group(1))}"), False
        if rule == "fib saddr type local jump mark-for-masquerade":
            return Step("masquerade", "traffic from this node itself is masqueraded"), False
        m = _GOTO.match(rule)
        if m:
            return self._verdict(rule, depth), m.group(1) == "goto"
        if rule == "drop":
            return Step("drop", "dropped: no endpoint on this node (externalTrafficPolicy Local)"), True
        m = _VMAP.match(rule)
        if m and m.group("map") in (names.STICKY_SERVICES, names.STICKY_NODEPORTS):
            return self.dnat("", m.group("map")), False
        if m:
            el = self.view.els(m.group("map")).get(self.fkey)
            if el is None or not el.value:
                return None, False
            cond = m.group("cond")
            if not cond:  # a plain dispatch (e.g. round-robin's entry chains): follow it
                return self._verdict(el.value[0], depth), True
            who = (
                self.pods(cond.strip(), short=True)
                if any(f"@{n}" in cond for n in names.POD_SOURCE_SETS) or cond.startswith("iifname")
                else "traffic from this node itself"
                if "fib saddr type local" in cond
                else cond or "all"
            )
            return Step("short-circuit", f"{who}: skip the Local policy, to all endpoints",
                        (self._verdict(el.value[0], depth),)), False  # fmt: skip
        m = _DNAT.search(rule)
        if m:
            return self.dnat(m.group("key"), m.group("map")), not names.is_affinity_map(m.group("map"))
        return Step("rule", f"rule: {rule}"), False

    def dnat(self, key: str, map_name: str) -> Step | None:
        if map_name in (names.STICKY_SERVICES, names.STICKY_NODEPORTS) or names.is_affinity_map(map_name):
            timeout = self.affinity()
            if timeout is None:
                return None
            return Step(
                "affinity",
                f"sessionAffinity ClientIP ({timeout}s): a client seen within {timeout}s on any frontend of "
                "this Service port goes back to its endpoint",
            )
        algo, n = "unknown", "?"
        for pattern, name in _ALGO:
            mm = pattern.search(key)
            if mm:
                algo, n = name, mm.group(1)
                break
        width = len(self.fkey)
        if key.startswith(("numgen", "jhash")):  # a map of its own, keyed by the slot alone
            width = 0
        slots = sorted(
            (int(el.key[width]), _endpoint(el.value))
            for el in self.view.els(map_name).values()
            if el.key[:width] == self.fkey[:width] and len(el.key) == width + 1
        )
        children = []
        em = names.endpoint_map(map_name)
        if em is not None and em.tag == names.MAGLEV_TAG:  # M slots: one line per endpoint
            algo = "maglev"
            held = Counter(ep for _, ep in slots)
            self.endpoints.update(held)
            children = [Step("slot", f"{ep}: {c} of {n} slots") for ep, c in sorted(held.items())]
        for i, ep in slots if algo != "maglev" else ():
            self.endpoints.add(ep)
            children.append(Step("slot", f"slot {i} -> {ep}"))
        how = {
            "random": f"random: one of {n} endpoints",
            "round-robin": f"round-robin: each new connection to the next of {n} endpoints",
            "source-hash": f"source-hash: one of {n} endpoints, chosen by the client address",
            "maglev": f"maglev: one of {len(children)} endpoints by a table of {n} slots, chosen by the client address",
        }
        text = f"the only endpoint (map {map_name})" if n == "1" else f"{how.get(algo, algo)} (map {map_name})"
        if em is not None and em.base.endswith(names.LOCAL_ENDPOINTS):
            text = "this node's endpoints only, client source kept: " + text
        if str(len(slots)) != n:
            text += f"; WARNING: {len(slots)} slots in the map for {n}"
        return Step("load-balance", text, tuple(children))


def _outcome(steps: Sequence[Step]) -> str:
    kinds = set()

    def walk(ss: Iterable[Step]) -> None:
        for s in ss:
            kinds.add(s.kind)
            walk(s.children)

    walk(steps)
    if "load-balance" in kinds:
        return "forwarded"
    if "reject" in kinds:
        return "rejected"
    if "drop" in kinds:
        return "dropped"
    return "unknown"


def _frontend(view: TableView, set_name: str, el: Element) -> Frontend:
    nodeport = set_name in (NODEPORT_DISPATCH, NO_EP_NODEPORT)
    verdict = el.value[0] if el.value else "?"
    if nodeport:
        proto, port = el.key
        addrs = sorted(k[0] for k in view.keys(names.NODEPORT_IPS)) or ["(no NodePort addresses)"]
        address, kind = ", ".join(addrs), "NodePort"
    else:
        address, proto, port = el.key
        if (address,) in view.els(names.CLUSTER_IPS):
            kind = "ClusterIP"
        elif el.key in view.els(names.FIREWALL_IPS):
            kind = "LoadBalancer IP"
        else:
            kind = "external IP"  # an externalIP or a LoadBalancer IP: the table does not say which
    d = _Describer(view, el.key, nodeport)
    steps: list[Step] = []
    if not nodeport and el.key in view.els(names.FIREWALL_IPS):
        # a LoadBalancer IP as a source: a range holds the node's IP (kube-proxy's allowFromNode)
        vips = {k[0] for k in view.keys(names.FIREWALL_IPS)}
        allowed = [
            f"{a} (a LoadBalancer IP: a range holds the node's IP)" if a in vips else a
            for a in sorted(k[3] for k in view.keys(names.FIREWALL_ALLOW) if k[:3] == el.key)
        ]
        steps.append(Step("source-ranges", f"loadBalancerSourceRanges: only from {', '.join(allowed)}; others dropped"))
    if set_name in (NO_EP_IP, NO_EP_NODEPORT):
        if verdict == "drop":
            steps.append(Step("drop", "dropped: endpoints exist, none on this node (internalTrafficPolicy Local)"))
        elif verdict == "goto reject-chain":
            steps.append(Step("reject", "no endpoints: rejected (ICMP unreachable / TCP reset)"))
        else:
            steps.append(d._verdict(verdict, 0))
    else:
        steps.append(d._verdict(verdict, 0))
    return Frontend(
        view.family.value, kind, address, proto, int(port), _port_name(el.comment), verdict,
        _outcome(steps), tuple(steps), tuple(sorted(d.endpoints)),
    )  # fmt: skip


_KIND_ORDER = {"ClusterIP": 0, "external IP": 1, "LoadBalancer IP": 1, "NodePort": 2}


def frontends(view: TableView, service: str, port: str | None = None) -> list[Frontend]:
    """The Service's frontends in this table (``port``: a port name or number, None: all)."""
    found: list[Frontend] = []
    for set_name in (IP_DISPATCH, NO_EP_IP, NODEPORT_DISPATCH, NO_EP_NODEPORT):
        for el in view.els(set_name).values():
            if comment_matches(el.comment, service):
                found.append(_frontend(view, set_name, el))
    if port is not None:
        names = {f.port_name for f in found if f.port_name == port}
        if not names and port.isdigit():  # a port number: the port names that have it
            names = {f.port_name for f in found if str(f.port) == port and f.kind != "NodePort"}
            names |= {f.port_name for f in found if f.kind == "NodePort" and str(f.port) == port}
        found = [f for f in found if f.port_name in names]
    found.sort(key=lambda f: (f.port_name, f.family, _KIND_ORDER.get(f.kind, 3), f.address, f.port))
    return found


def explain(
    views: Sequence[TableView | None], table_names: Sequence[str], service: str, port: str | None
) -> Explanation:
    """``views``: one per family (None: that table does not exist)."""
    present = [v for v in views if v is not None]
    fronts = [f for v in present for f in frontends(v, service, port)]
    what = service + (f" port {port}" if port else "")
    absent = [n for n, v in zip(table_names, views, strict=True) if v is None]
    if not present:
        summary = (
            f"{what}: not programmed: {' and '.join(f'table {n}' for n in absent)} do(es) not exist "
            "(nftproxy has not programmed this node, or was cleaned up)"
        )
        return Explanation(service, port, tuple(table_names), "not-programmed", summary, ())
    if not fronts:
        summary = (
            f"{what}: not programmed: no element of {' or '.join(f'table {v.family.value} {v.name}' for v in present)} "
            "names it (unknown to this node's nftproxy, ignored — headless, ExternalName, another proxy's — "
            "or skipped: see `kubectl get proxystatus` or run with --kubeconfig)"
        )
        return Explanation(service, port, tuple(table_names), "not-programmed", summary, ())
    outcomes = {f.outcome for f in fronts}
    eps = sorted({e for f in fronts for e in f.endpoints})
    if outcomes == {"rejected"}:
        state = "no-endpoints"
        summary = f'{what}: programmed as "no endpoints → reject" (every frontend refuses new connections)'
    elif outcomes == {"dropped"}:
        state = "no-local-endpoints"
        summary = f"{what}: programmed as no endpoints on this node -> drop (Local traffic policy)"
    elif outcomes != {"forwarded"}:
        state = "partly-rejected"
        others = ", ".join(sorted(outcomes - {"forwarded"}))
        summary = f"{what}: programmed; some frontends forward to {', '.join(eps) or '-'}, others are {others}"
    else:
        state = "programmed"
        summary = f"{what}: programmed, {len(fronts)} frontend(s), {len(eps)} endpoint(s): {', '.join(eps)}"
    return Explanation(service, port, tuple(table_names), state, summary, tuple(fronts))


# -- text rendering ------------------------------------------------------------------------


def _phrase(s: Step) -> str:
    """A step in a few words: load balancing as "random over N" / "the only endpoint"."""
    if s.kind == "load-balance":
        return s.text.split(" (map ")[0]
    return s.text


def _flatten(steps: Iterable[Step]) -> list[str]:
    out: list[str] = []
    for s in steps:
        if s.kind == "slot":
            continue
        if s.kind == "short-circuit":  # a branch: say where it leads, without its details
            inner = [_phrase(x) for x in _walk(s.children) if x.kind in ("load-balance", "drop", "reject")]
            out.append(f"{s.text.split(':')[0]} -> all endpoints ({', '.join(inner)})")
            continue
        if s.kind != "chain":
            out.append(_phrase(s))
        out.extend(_flatten(s.children))
    return out


def _walk(steps: Iterable[Step]) -> Iterable[Step]:
    for s in steps:
        yield s
        yield from _walk(s.children)


def words(f: Frontend) -> str:
    parts = _flatten(f.steps)
    text = f"{f.label}: " + "; ".join(parts)
    if f.endpoints:
        text += f" -> {', '.join(f.endpoints)}"
    return text + "."


def _tree(step: Step, prefix: str, last: bool, lines: list[str]) -> None:
    lines.append(f"{prefix}{'└─ ' if last else '├─ '}{step.text}")
    child_prefix = prefix + ("   " if last else "│  ")
    for i, c in enumerate(step.children):
        _tree(c, child_prefix, i == len(step.children) - 1, lines)


def render_text(e: Explanation) -> str:
    lines = [e.summary]
    if e.frontends:
        lines += ["", "In words:"]
        lines += [f"  {words(f)}" for f in e.frontends]
        lines += ["", "As a tree:", f"Service {e.service}"]
        by_port: dict[str, list[Frontend]] = {}
        for f in e.frontends:
            by_port.setdefault(f.port_name or "(unnamed port)", []).append(f)
        ports = list(by_port.items())
        for pi, (pname, fs) in enumerate(ports):
            plast = pi == len(ports) - 1
            lines.append(f"{'└─ ' if plast else '├─ '}port {pname}")
            pprefix = "   " if plast else "│  "
            for fi, f in enumerate(fs):
                node = Step("frontend", f"{f.label} [{f.family}] -> {f.verdict}", f.steps)
                _tree(node, pprefix, fi == len(fs) - 1, lines)
    if e.api is not None:
        lines += ["", "Against the API:"]
        lines.append(
            "  the kernel matches what the API holds now" if e.api.matches else "  the kernel does NOT match the API"
        )
        lines += [f"  - {r}" for r in e.api.reasons]
        for title, items in (
            ("missing from the kernel", e.api.missing),
            ("in the kernel, not in the API", e.api.extra),
        ):
            if items:
                lines.append(f"  {title}:")
                lines += [f"    {x}" for x in items[:20]]
                if len(items) > 20:
                    lines.append(f"    … {len(items) - 20} more")
    lines += [f"note: {n}" for n in e.notes]
    return "\n".join(lines) + "\n"
