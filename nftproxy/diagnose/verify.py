"""The convergence checker: does the kernel's table hold what the API says it should?

``compare(desired, applied)`` is pure: the tables compiled from the API's objects (``compile_tables``)
against the tables read back from the kernel (``Backend.read``), and every difference in words, one
per line, naming the Service (``namespace/name:port``) it concerns. ``nftproxy verify`` wires it to
the API (kubernetes client) and the kernel (libnftables in ``--netns``).

Every element of every (non-dynamic) set is compared; the elements are then explained per frontend
(Service IP . proto . port, or proto . NodePort): missing, extra, wrong endpoints, stale policy,
stale affinity or source ranges. What no explanation covers is still reported, element by element,
so an empty result means the tables' contents are equal.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nftproxy.compiler import ProxyConfig, balancing, compile_tables, names
from nftproxy.compiler.build import Desired
from nftproxy.compiler.config import this_node
from nftproxy.model.parse import SERVICE_NAME_LABEL, parse_endpoint_slice, parse_node, parse_service, parse_service_cidr
from nftproxy.model.types import EndpointSlice, Node, Service, ServiceCIDR, Skipped
from nftproxy.nft.backend import Backend
from nftproxy.nft.objects import Element, Family, Key, Table

_DISPATCH = set(names.DISPATCH_MAPS)  # the verdict finding the frontend: one of these holds it
_WORDS = {
    names.AFFINITY_SERVICES: "session affinity",
    names.AFFINITY_NODEPORTS: "session affinity",
    names.LOCAL_POLICY_SHORT_CIRCUIT: "externalTrafficPolicy short-circuit",
    names.NODEPORT_SHORT_CIRCUIT: "externalTrafficPolicy short-circuit",
    names.FIREWALL_IPS: "loadBalancerSourceRanges",
    names.FIREWALL_ALLOW: "loadBalancerSourceRanges",
}
_CONFIG_SETS = {
    names.CLUSTER_CIDRS: "cluster CIDRs (--cluster-cidr)",
    names.NODE_POD_CIDRS: "this node's pod CIDRs (the Node's spec.podCIDRs, --detect-local-mode NodeCIDR)",
    names.NODEPORT_IPS: "NodePort addresses (--nodeport-addresses, else the Node's IPs)",
}
_COUNT = re.compile(r"-\d+$")


@dataclass(frozen=True)
class Difference:
    """One difference, in words; ``service`` is the "namespace/name" it concerns, when known."""

    text: str
    service: str | None = None

    def __str__(self) -> str:
        return self.text


@dataclass
class _View:
    """What one side holds for one frontend."""

    dispatch: tuple[str, tuple[str, ...] | None] | None = None  # (map, verdict)
    comment: str | None = None
    endpoints: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # kind -> slot -> value
    sizes: dict[str, int] = field(default_factory=dict)  # kind -> N (from the map name)
    extras: dict[str, set[tuple[tuple[str, ...], tuple[str, ...] | None]]] = field(default_factory=dict)


def _frontend_text(fe: Key) -> str:
    return " ".join(fe) if len(fe) == 3 else f"NodePort {fe[0]} {fe[1]}"


def _verdict(v: tuple[str, ...] | None) -> str:
    return " . ".join(v) if v else "(no verdict)"


def _policy_kind(dispatch: tuple[str, tuple[str, ...] | None] | None) -> str:
    """The kind of a dispatch verdict without its endpoint count (goto cluster-3 -> goto cluster)."""
    if dispatch is None:
        return ""
    name, verdict = dispatch
    return f"{name}: {_COUNT.sub('', _verdict(verdict))}"


def _views(table: Table | None, dynamic: set[str]) -> tuple[dict[Key, _View], dict[str, dict[Key, Element]]]:
    """Per frontend views, and the elements of the other sets (by set)."""
    views: dict[Key, _View] = defaultdict(_View)
    rest: dict[str, dict[Key, Element]] = {}
    if table is None:
        return views, rest
    for set_name, els in table.elements.items():
        if set_name in dynamic or names.is_affinity_map(set_name):  # written by the packet path
            continue
        n = names.frontend_width(set_name)
        if n is None:
            rest[set_name] = dict(els)
            continue
        m = names.endpoint_map(set_name)
        for key, el in els.items():
            fe = key[:n]
            v = views[fe]
            if set_name in _DISPATCH:
                if v.dispatch is not None:  # in two dispatch maps: keep both visible
                    v.extras.setdefault("dispatch", set()).add(((set_name, *key), el.value))
                else:
                    v.dispatch = (set_name, el.value)
                    v.comment = el.comment
            elif m:
                v.endpoints.setdefault(m.kind, {})[key[n] if len(key) > n else ""] = el.value or ()
                v.sizes[m.kind] = m.n
            else:
                v.extras.setdefault(set_name, set()).add((key[n:], el.value))
    return views, rest


def _endpoint_list(slots: Mapping[str, tuple[str, ...]]) -> list[str]:
    return sorted({":".join(v) for v in slots.values()})


def _describe(fe: Key, want: _View | None, have: _View | None) -> list[Difference]:
    name = (want.comment if want else None) or (have.comment if have else None) or "?"
    key = None if name == "?" else name.split(":")[0]
    return [Difference(text, key) for text in _describe_texts(fe, name, want, have)]


def _describe_texts(fe: Key, name: str, want: _View | None, have: _View | None) -> list[str]:
    where = _frontend_text(fe)
    svc = f"Service {name}"
    if want is None or want.dispatch is None:
        if have is not None and have.dispatch is not None:
            return [f"{svc} extra: {where} is in the kernel ({_verdict(have.dispatch[1])}), not in the API"]
        if have is not None:
            return [f"{svc}: stale elements for {where} (no Service has it): {_summary(have)}"]
        return []
    if have is None or have.dispatch is None:
        extra = f"; the kernel has stale elements for it: {_summary(have)}" if have else ""
        return [f"{svc} missing: {where} is not in the kernel (want {_verdict(want.dispatch[1])}){extra}"]
    out: list[str] = []
    if _policy_kind(want.dispatch) != _policy_kind(have.dispatch):
        out.append(
            f"{svc} stale policy on {where}: kernel {have.dispatch[0]} {_verdict(have.dispatch[1])}, "
            f"want {want.dispatch[0]} {_verdict(want.dispatch[1])}"
        )
    for kind in sorted(set(want.endpoints) | set(have.endpoints)):
        w, h = want.endpoints.get(kind, {}), have.endpoints.get(kind, {})
        if w == h and want.sizes.get(kind) == have.sizes.get(kind):
            continue
        wl, hl = _endpoint_list(w), _endpoint_list(h)
        missing_eps = sorted(set(wl) - set(hl))
        extra_eps = sorted(set(hl) - set(wl))
        detail = []
        if missing_eps:
            detail.append(f"missing {', '.join(missing_eps)}")
        if extra_eps:
            detail.append(f"extra {', '.join(extra_eps)}")
        if not detail:
            detail.append("same endpoints in other slots")
        out.append(
            f"{svc} wrong endpoints on {where} ({kind}): kernel {len(h)} [{', '.join(hl)}], "
            f"want {len(w)} [{', '.join(wl)}]: {'; '.join(detail)}"
        )
    if not out and want.dispatch != have.dispatch:  # same policy, other count: endpoints above say it
        out.append(
            f"{svc} wrong endpoints on {where}: kernel {_verdict(have.dispatch[1])}, want {_verdict(want.dispatch[1])}"
        )
    for set_name in sorted(set(want.extras) | set(have.extras)):
        w_set, h_set = want.extras.get(set_name, set()), have.extras.get(set_name, set())
        if w_set != h_set:
            words = _WORDS.get(set_name, set_name)
            out.append(
                f"{svc} stale {words} on {where} ({set_name}): kernel {_elements(h_set)}, want {_elements(w_set)}"
            )
    if want.comment != have.comment and not out:
        out.append(f"{svc}: {where} is Service {have.comment}'s in the kernel (element comment), want {want.comment}")
    return out


def _elements(items: Iterable[tuple[tuple[str, ...], tuple[str, ...] | None]]) -> str:
    parts = [(" . ".join(k) or "present") + (f" : {_verdict(v)}" if v else "") for k, v in sorted(items)]
    return "{" + ", ".join(parts) + "}" if parts else "none"


def _summary(v: _View) -> str:
    parts = [f"{kind} [{', '.join(_endpoint_list(s))}]" for kind, s in sorted(v.endpoints.items())]
    parts += [f"{name} {_elements(items)}" for name, items in sorted(v.extras.items())]
    return "; ".join(parts) or "none"


def _ip_owners(views: Mapping[Key, _View]) -> dict[str, str]:
    """Service IP -> the Service claiming it, endpoint address -> a Service using it."""
    owners: dict[str, str] = {}
    for fe, v in sorted(views.items()):
        if not v.comment:
            continue
        if len(fe) == 3:
            owners.setdefault(fe[0], v.comment.split(":")[0])
        for slots in v.endpoints.values():
            for value in slots.values():
                if value:
                    owners.setdefault(value[0], v.comment.split(":")[0])
    return owners


def _compare_rest(
    family: Family, want: Mapping[str, Mapping[Key, Element]], have: Mapping[str, Mapping[Key, Element]],
    owners: Mapping[str, str],
) -> list[Difference]:  # fmt: skip
    out: list[Difference] = []
    rr = _rr_owners(want, have)  # a round-robin map's owner (keyed by slot only: no frontend)
    for set_name in sorted(set(want) | set(have)):
        w, h = want.get(set_name, {}), have.get(set_name, {})
        if w == h:
            continue
        missing = sorted(" . ".join(k) for k in w if h.get(k) != w[k])
        extra = sorted(" . ".join(k) for k in h if w.get(k) != h[k])
        if set_name in _CONFIG_SETS:
            have_text = ", ".join(sorted(" . ".join(k) for k in h))
            want_text = ", ".join(sorted(" . ".join(k) for k in w))
            out.append(
                Difference(
                    f"{family.value}: {_CONFIG_SETS[set_name]} differ: kernel {{{have_text}}}, want {{{want_text}}} "
                    "(are the flags those of `nftproxy run`?)"
                )
            )
        elif set_name == "cluster-ips":
            for ip in missing:
                owner = owners.get(ip)
                out.append(Difference(f"Service {owner or '?'} missing: ClusterIP {ip} not in cluster-ips", owner))
            for ip in extra:
                owner = owners.get(ip)
                text = f"Service {owner or '?'} extra: ClusterIP {ip} in cluster-ips, not in the API"
                out.append(Difference(text, owner))
        elif set_name == "hairpin-endpoints":
            for k in missing:
                ep = k.split(" . ")[0]
                owner = owners.get(ep)
                out.append(Difference(f"Service {owner or '?'}: hairpin endpoint {ep} missing", owner))
            for k in extra:
                ep = k.split(" . ")[0]
                owner = owners.get(ep)
                out.append(Difference(f"Service {owner or '?'}: hairpin endpoint {ep} extra (stale)", owner))
        else:
            for words, keys, side in (("missing", missing, w), ("extra", extra, h)):
                for k in keys:
                    el = side.get(tuple(k.split(" . ")))
                    owner = el.comment.split(":")[0] if el is not None and el.comment else rr.get(set_name)
                    text = f"{family.value}: set {set_name}: element {k} {words}"
                    out.append(Difference(f"Service {owner}: {text}" if owner else text, owner))
    return out


def _rr_owners(*sides: Mapping[str, Mapping[Key, Element]]) -> dict[str, str]:
    """A round-robin Service port's own map (``rr-<tag>-N``, keyed by slot only) -> its Service,
    from the entry maps' elements that go to it (keyed by a frontend, with the Service's comment)."""
    out: dict[str, str] = {}
    for side in sides:
        for set_name in balancing.RR_VMAPS:
            for el in side.get(set_name, {}).values():
                if el.comment and el.value:
                    out.setdefault(el.value[0].removeprefix("goto "), el.comment.split(":")[0])
    return out


def compare_table(desired: Table, applied: Table | None) -> list[Difference]:
    """Every difference between one family's desired table and the kernel's, in words."""
    return [d if isinstance(d, Difference) else Difference(d) for d in _compare_table(desired, applied)]


def _compare_table(desired: Table, applied: Table | None) -> list[Difference | str]:
    fam = desired.family.value
    where = f"table {fam} {desired.name}"
    if applied is None:
        n = sum(len(e) for e in desired.elements.values())
        return [f"{where} missing from the kernel (want {n} elements)"]
    out: list[Difference | str] = []
    if applied.comment != desired.comment:
        out.append(
            f"{where}: layout differs: kernel {applied.comment!r}, want {desired.comment!r} "
            "(another version, or other --masquerade-all/--cluster-cidr flags than `nftproxy run`'s)"
        )
    # Per-count maps and chains (endpoints-3, cluster-3 …) follow from the elements: their
    # differences are reported only when no element difference explains them.
    objects: list[Difference | str] = []
    for what, want_names, have_names in (
        ("chains", set(desired.chains), set(applied.chains)),
        ("sets/maps", set(desired.sets), set(applied.sets)),
        ("counters", set(desired.counters), set(applied.counters)),
    ):
        for words, found in (("missing", want_names - have_names), ("extra (stale)", have_names - want_names)):
            base = sorted(n for n in found if not _COUNT.search(n))
            per_count = sorted(n for n in found if _COUNT.search(n))
            if base:
                out.append(f"{where}: {what} {words}: {', '.join(base)}")
            if per_count:
                objects.append(f"{where}: {what} {words}: {', '.join(per_count)}")
    dynamic = {n for n, s in desired.sets.items() if s.dynamic}
    want_views, want_rest = _views(desired, dynamic)
    have_views, have_rest = _views(applied, dynamic)
    for fe in sorted(set(want_views) | set(have_views)):
        out += _describe(fe, want_views.get(fe), have_views.get(fe))
    owners = {**_ip_owners(have_views), **_ip_owners(want_views)}
    out += _compare_rest(desired.family, want_rest, have_rest, owners)
    return out or objects


def compare(desired: Sequence[Table], applied: Mapping[Family, Table | None]) -> list[Difference]:
    """Every difference between the desired tables (one per family) and the kernel's, in words.

    Pure: ``applied`` is what ``Backend.read`` returned per family (None: no table)."""
    out: list[Difference] = []
    for table in desired:
        out += compare_table(table, applied.get(table.family))
    return out


def equal_contents(desired: Table, applied: Table | None) -> bool:
    """The raw check ``compare_table`` explains: same comment, chains, sets and elements."""
    if applied is None:
        return False
    dynamic = {n for n, s in desired.sets.items() if s.dynamic}

    def els(t: Table) -> dict[str, Mapping[Key, Element]]:
        return {n: e for n, e in t.elements.items() if n not in dynamic and not names.is_affinity_map(n) and e}

    return (
        applied.comment == desired.comment
        and set(applied.chains) == set(desired.chains)
        and set(applied.sets) == set(desired.sets)
        and set(applied.counters) == set(desired.counters)
        and els(applied) == els(desired)
    )


# -- the API and the kernel (the command) ----------------------------------------------------------


@dataclass(frozen=True)
class Report:
    differences: tuple[Difference, ...]
    notes: tuple[str, ...]  # differences explained by invalid API objects, and what was skipped
    services: int  # Services the API's objects program
    elements: int  # elements of the desired tables


def expected(
    services: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    node: Mapping[str, Any] | None,
    config: ProxyConfig,
    service_cidrs: Iterable[Mapping[str, Any]] = (),
) -> tuple[Desired, dict[str, str]]:
    """The tables the API's raw objects call for, and the Services whose API version is unusable
    ("namespace/name" -> reason): for those the proxy keeps serving its last good version."""
    good_services: list[Service] = []
    good_slices: list[EndpointSlice] = []
    ignored: list[str] = []
    tainted: dict[str, str] = {}
    for obj in services:
        r = parse_service(obj, config.service_proxy_name)
        if isinstance(r, Service):
            good_services.append(r)
        elif isinstance(r, Skipped):
            tainted[f"{r.namespace}/{r.name}"] = str(r)
        else:
            meta = obj.get("metadata") or {}
            ignored.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    for obj in slices:
        s = parse_endpoint_slice(obj)
        if isinstance(s, EndpointSlice):
            good_slices.append(s)
        elif isinstance(s, Skipped):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            owner = labels.get(SERVICE_NAME_LABEL) if isinstance(labels, Mapping) else None
            if owner:
                tainted.setdefault(f"{meta.get('namespace') or 'default'}/{owner}", str(s))
    nodes = [n for n in ([parse_node(node)] if node is not None else []) if isinstance(n, Node)]
    cidrs = [c for c in map(parse_service_cidr, service_cidrs) if isinstance(c, ServiceCIDR)]
    config = config.for_node(this_node(nodes, config.node_name)).with_service_cidrs(n for c in cidrs for n in c.cidrs)
    return compile_tables(good_services, good_slices, config, ignored), tainted


def check(desired: Desired, applied: Mapping[Family, Table | None], tainted: Mapping[str, str]) -> Report:
    """compare(), with the differences of Services whose API version is invalid set apart as notes."""
    diffs: list[Difference] = []
    notes: list[str] = []
    for d in compare(desired.tables, applied):
        if d.service is not None and d.service in tainted:
            notes.append(f"{d} (expected: {tainted[d.service]}; the proxy keeps the last good version)")
        else:
            diffs.append(d)
    notes += [f"skipped {s}" for s in desired.skipped]
    n = sum(t.count_elements() for t in desired.tables)
    return Report(tuple(diffs), tuple(notes), desired.services, n)


def read_kernel(backend: Backend, table: str) -> dict[Family, Table | None]:
    return {f: backend.read(f, table) for f in Family}
