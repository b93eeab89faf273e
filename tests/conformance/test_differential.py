"""kube-proxy (the reference) and nftproxy side by side: same API objects, same real packets.

One control plane holds one set of Nodes, Services and EndpointSlices (tests/conformance/cases.py);
two identical labs (harness.py) each have node-1 programmed by one proxy: lab A by the real
kube-proxy (nftables mode; the one in $NFTPROXY_BIN or ${NFTPROXY_CACHE}/bin, built by
hack/k8s-tools.sh at its K8S_VERSION; the table's title names it), lab B by ``nftproxy run
--netns``. Every probe is made in both labs and the outcomes compared; the table ``case | source →
destination | kube-proxy | nftproxy | MATCH/DIFF`` is printed at the end of the run, with ``N match,
M differ``. A DIFF fails the suite unless its case is in tests/conformance/differences.py (the
README mirrors that list).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_get_in
from testkit.lab.netlab import NetLab, cleanup_stale
from tests.conformance import cases as c
from tests.conformance import worlds
from tests.conformance.differences import accepted
from tests.conformance.harness import (
    CRD,
    REPORT,
    ApiWriter,
    KubeProxyRef,
    NftProxy,
    Row,
    Side,
    _fmt,
    build_lab,
    compare_probe,
    health,
    health_path,
    lax_validation,
    node_objects,
    parallel,
    ruleset,
    settle,
    try_probe,
)

pytestmark = [pytest.mark.conformance, pytest.mark.k8s, pytest.mark.netns]


IPAddr = IPv4Address | IPv6Address


@dataclass
class Duo:
    cp: ControlPlane
    a: Side  # kube-proxy
    b: Side  # nftproxy
    cases: list[c.Case]
    flows: list[c.FlowCase]
    changes: list[c.ChangeCase]

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.a, self.b

    def apply(self, objects: list[c.Obj]) -> None:
        if not objects:
            return
        self.cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects), timeout=120)
        patches = [o for o in objects if o["kind"] == "Service" and "status" in o]
        with ThreadPoolExecutor(max_workers=4) as pool:  # status is a subresource: apply ignores it
            list(pool.map(self._patch_status, patches))

    def _patch_status(self, svc: c.Obj) -> None:
        meta = svc["metadata"]
        self.cp.kubectl(
            "patch", "service", meta["name"], "-n", meta["namespace"], "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": svc["status"]}),
        )  # fmt: skip


@pytest.fixture(scope="module")
def duo(conformance_control_plane: ControlPlane) -> Iterator[Duo]:
    cp = conformance_control_plane
    cleanup_stale("kp")
    workdir = Path(tempfile.mkdtemp(prefix="kp-conformance-"))
    cases, flows, changes = c.catalog(), c.flow_cases(), c.change_cases()
    if not lax_validation():
        REPORT.left_out[:] = [x.name for x in cases if x.legacy]
        cases = [x for x in cases if not x.legacy]
    if only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY"):  # a regex of case names, for development
        cases = [x for x in cases if re.search(only, x.name)]
        flows = [x for x in flows if re.search(only, x.name)]
        changes = [x for x in changes if re.search(only, x.name)]
    with NetLab("kp") as lab_a, NetLab("kp") as lab_b:
        a = Side("kube-proxy", lab_a, build_lab(lab_a))
        b = Side("nftproxy", lab_b, build_lab(lab_b))
        duo = Duo(cp, a, b, cases, flows, changes)
        # addresses some cases have node-1 hold on its interface (a VIP, as kube-vip adds it); an
        # IPv6 one deprecated, so that the node's connections to the other LoadBalancer IPs (the same
        # /64) still leave from its own address (RFC 6724: else the longest matching prefix wins)
        held = [f"addr add {x}/128 dev eth0 nodad preferred_lft 0" if ":" in x else f"addr add {x}/32 dev eth0"
                for case in cases for x in case.node_addresses]  # fmt: skip
        for s in (a, b) if held else ():
            s.lab.ip(s.node, *held)
        try:
            cp.wait_default_service_cidr()  # kube-proxy reads the ServiceCIDRs once, at its start
            cp.kubectl("apply", "-f", str(CRD))
            cp.kubectl("wait", "--for=condition=Established", "crd/proxystatuses.nftproxy.io", "--timeout=30s")
            objects: list[c.Obj] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.NS}}]
            objects += node_objects()
            for case in cases:
                objects += case.objects
            for flow in flows:
                objects += flow.before
            for change in changes:
                objects += change.before
            duo.apply(objects)
            (workdir / "a").mkdir()
            (workdir / "b").mkdir()
            a.proxy = KubeProxyRef(a, cp, workdir / "a")
            b.proxy = NftProxy(b, cp, workdir / "b")
            since = time.time()
            a.proxy.start()
            b.proxy.start()
            # kube-proxy learns its Node's zone from a Node informer of its own, after its first
            # sync may already have run (pkg/proxy/config NodeTopologyConfig -> the proxier's
            # OnTopologyChange -> Sync(), at most once per --min-sync-period, 1 s): settled after
            # 0.5 s of quiet, a make test on a fresh machine caught it before that resync, without
            # topology hints (every topo-* case differed). Quiet for longer than one sync period.
            settle(duo.sides, since, quiet=2.5)
            _reference_drops_unallocated(duo)
            yield duo
        finally:
            for s in (a, b):
                if s.proxy is not None:
                    s.proxy.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def _reference_drop_ranges(a: Side, family: str) -> tuple[str, list[tuple[IPAddr, IPAddr]]]:
    """kube-proxy's table of ``family`` and the address ranges of its rule "Drop traffic to
    unallocated ClusterIPs" (nft prints adjacent CIDRs merged: 10.96.0.0-10.97.0.255)."""
    out = subprocess.run(
        ["ip", "netns", "exec", a.node.netns, "nft", "list", "table", family, "kube-proxy"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    ranges: list[tuple[IPAddr, IPAddr]] = []
    for line in out.splitlines():
        if "unallocated ClusterIPs" not in line or " drop" not in line:
            continue
        elements = line.split("daddr", 1)[1].split(" drop", 1)[0].strip().strip("{}")
        for e in (x.strip() for x in elements.split(",")):
            if "-" in e:
                lo, hi = e.split("-", 1)
                ranges.append((ipaddress.ip_address(lo), ipaddress.ip_address(hi)))
            else:
                net = ipaddress.ip_network(e, strict=False)
                ranges.append((net[0], net[-1]))
    return out, ranges


def _reference_drops_unallocated(duo: Duo, attempts: int = 3) -> None:
    """The reference drops the unallocated addresses of the default ServiceCIDR's ranges, in both
    of its tables. kube-proxy does not wait for its ServiceCIDR informer before its first full
    sync, and adds the ranges only at its next full sync (hourly): a kube-proxy whose first sync
    (either family's proxier) ran before they arrived would differ on every case that meets the
    drop for that reason alone (differences.py: chg-service-cidr-added). It is restarted, as its
    DaemonSet would restart it, until both tables drop them."""
    a = duo.a
    assert a.proxy is not None
    cidrs = [ipaddress.ip_network(x) for x in duo.cp.wait_default_service_cidr()["spec"]["cidrs"]]
    missing: list[str] = []
    tables: dict[str, str] = {}
    for attempt in range(attempts):
        if attempt:
            a.proxy.stop()
            since = time.time()
            a.proxy.start()
            settle([a], since, quiet=2.5)
        missing = []
        for cidr in cidrs:
            family = "ip6" if cidr.version == 6 else "ip"
            tables[family], ranges = _reference_drop_ranges(a, family)
            first, last = int(cidr[0]), int(cidr[-1])
            if not any(int(lo) <= first and last <= int(hi) for lo, hi in ranges if lo.version == cidr.version):
                missing.append(f"{family} {cidr}")
        if not missing:
            return
    drops = "\n".join(f"{f}: {x.strip()}" for f, out in tables.items() for x in out.splitlines() if " drop" in x)
    pytest.fail(
        f"kube-proxy does not drop the unallocated addresses of {missing} after {attempts} starts:\n{drops}\n"
        + a.proxy.log_tail()
    )


def _check(rows: list[Row]) -> None:
    bad = REPORT.unexpected(rows)
    assert not bad, "kube-proxy and nftproxy differ:\n" + "\n".join(
        f"{r.case} | {r.path} | {r.kube_proxy} | {r.nftproxy}" for r in bad
    )


def test_every_frontend_answers_as_kube_proxy(duo: Duo) -> None:
    jobs = [(case.name, p) for case in duo.cases for p in case.probes]

    def one(job: tuple[str, c.Probe]) -> tuple[set[str], set[str]]:
        return compare_probe(duo.a, duo.b, job[1])

    results = parallel(one, jobs)
    rows = [REPORT.add(name, p.path(), kp, np) for (name, p), (kp, np) in zip(jobs, results, strict=True)]
    _check(rows)


def test_health_check_node_ports_answer_as_kube_proxy(duo: Duo) -> None:
    rows = []
    for case in duo.cases:
        for h in case.health:
            rows.append(REPORT.add(case.name, health_path(h), health(duo.a, h), health(duo.b, h)))
    assert rows or os.environ.get("NFTPROXY_CONFORMANCE_ONLY")
    _check(rows)


def test_services_neither_proxy_programs(duo: Duo) -> None:
    rules = {s.title: ruleset(s) for s in duo.sides}
    rows = []
    for case in duo.cases:
        if case.rules_mention:
            seen = {
                t: (
                    "programmed" if case.rules_mention + ":" in r or case.rules_mention + '"' in r else "not programmed"
                )
                for t, r in rules.items()
            }
            rows.append(REPORT.add(case.name, "ruleset mentions the Service", seen["kube-proxy"], seen["nftproxy"]))
    assert rows or os.environ.get("NFTPROXY_CONFORMANCE_ONLY")
    _check(rows)


def test_changes_reach_the_kernel_as_with_kube_proxy(duo: Duo) -> None:
    """Services and slices changed or deleted while both proxies run (partial syncs)."""
    if not duo.changes:
        pytest.skip("no change case selected (NFTPROXY_CONFORMANCE_ONLY)")

    def probe_all(label: str, before: bool = False) -> list[Row]:
        jobs = [
            (ch.name, dataclasses.replace(p, sticky=before and ch.sticky_before))
            for ch in duo.changes
            for p in ch.probes
        ]
        results = parallel(lambda job: compare_probe(duo.a, duo.b, job[1]), jobs)
        return [
            REPORT.add(name, f"{p.path()} {label}", kp, np) for (name, p), (kp, np) in zip(jobs, results, strict=True)
        ]

    rows = probe_all("before the change", before=True)  # also: affinity entries exist when affinity is turned off
    since = time.time()
    duo.apply([o for ch in duo.changes for o in ch.after])
    for ch in duo.changes:
        for kind, name in ch.deletes:
            duo.cp.kubectl("delete", kind, name, "-n", c.NS, "--wait=false")
    settle(duo.sides, since, change=True)
    rows += probe_all("after the change")
    _check(rows)


def _delete(duo: Duo, flows: list[c.FlowCase]) -> None:
    for f in flows:
        for kind, name in f.deletes:
            duo.cp.kubectl("delete", kind, name, "-n", c.NS, "--wait=false")


def _flow(duo: Duo, flows: list[c.FlowCase], label: str) -> list[Row]:
    """One datagram of each flow (fixed source port), in both labs."""
    out: list[Row] = []

    def one(f: c.FlowCase) -> tuple[set[str], set[str]]:
        ra = try_probe(duo.a, f.probe, 1, source_port=f.source_port)
        rb = try_probe(duo.b, f.probe, 1, source_port=f.source_port)
        return {_fmt(r) for r in ra}, {_fmt(r) for r in rb}

    results = parallel(one, flows)
    for f, (kp, np) in zip(flows, results, strict=True):
        p = f.probe
        h = f"[{p.host}]" if ":" in p.host else p.host
        out.append(REPORT.add(f.name, f"{p.src}:{f.source_port} → {p.what} {h}:{p.port}/udp {label}", kp, np))
    return out


def _new_flows(duo: Duo, flows: list[c.FlowCase], label: str) -> list[Row]:
    """New flows (fresh source ports) to the same frontends, after the open flow's datagram."""
    probes = [f.probe for f in flows]
    results = parallel(lambda p: compare_probe(duo.a, duo.b, p), probes)
    return [
        REPORT.add(f.name, f"{p.path()} new flows {label}", kp, np)
        for f, p, (kp, np) in zip(flows, probes, results, strict=True)
    ]


def test_open_udp_flows_across_changes(duo: Duo) -> None:
    if not duo.flows:
        pytest.skip("no flow case selected (NFTPROXY_CONFORMANCE_ONLY)")
    live = [f for f in duo.flows if not f.restart]
    restart = [f for f in duo.flows if f.restart]
    rows = _flow(duo, duo.flows, "first datagram")
    since = time.time()
    duo.apply([o for f in live for o in f.after])
    _delete(duo, live)
    settle(duo.sides, since, change=True)
    rows += _flow(duo, live, "after the change")
    rows += _new_flows(duo, live, "after the change")

    # the same flows across a restart: both proxies stopped, the change made, both started again
    for s in duo.sides:
        assert s.proxy is not None
        s.proxy.stop()
    duo.apply([o for f in restart for o in f.after])
    _delete(duo, restart)
    since = time.time()
    for s in duo.sides:
        assert s.proxy is not None
        s.proxy.start()
    settle(duo.sides, since)
    _reference_drops_unallocated(duo)
    rows += _flow(duo, restart, "after a restart")
    rows += _new_flows(duo, restart, "after a restart")
    _check(rows)


# ---------------------------------------------------------------------------------------- fuzzed worlds

# The short run of make test: FUZZ_WORLDS worlds from FUZZ_SEED (NFTPROXY_FUZZ_SEED and
# NFTPROXY_FUZZ_WORLDS override both; NFTPROXY_FUZZ_MINUTES stops starting worlds after that long;
# NFTPROXY_FUZZ_OUT: the totals as JSON). The long run: `make fuzz-differential` (worlds.run).
FUZZ_SEED = 1
FUZZ_WORLDS = 6


def test_fuzzed_worlds_answer_as_kube_proxy(duo: Duo) -> None:
    """Random worlds (tests/conformance/worlds.py), one after the other: each created through the
    apiserver object by object (what it refuses is left out of the world and counted), both
    proxies settled, every probe derived from the stored objects made in both labs and compared
    as the catalog's are, the world deleted and both proxies settled again. An unexplained DIFF
    fails the test, once every world has run, with the world's seed and objects."""
    if (only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY")) and not re.search(only, "fuzz"):
        pytest.skip("not selected (NFTPROXY_CONFORMANCE_ONLY)")
    seed = int(os.environ.get("NFTPROXY_FUZZ_SEED", FUZZ_SEED))
    count = int(os.environ.get("NFTPROXY_FUZZ_WORLDS", FUZZ_WORLDS))
    minutes = float(os.environ.get("NFTPROXY_FUZZ_MINUTES", "0"))
    out = os.environ.get("NFTPROXY_FUZZ_OUT")
    run = _FuzzRun(duo)
    started = time.monotonic()
    failures: list[str] = []
    try:
        for s in itertools.count(seed):
            if run.totals.worlds >= count or (minutes and time.monotonic() - started > minutes * 60):
                break
            run.totals.next_seed = s + 1
            try:
                if failure := run.world(s):
                    failures.append(failure)
            except BaseException:
                run.totals.failing_seeds.append(s)
                raise
    finally:
        run.api.close()
        if out:
            run.totals.dump(Path(out))
    print(f"\nfuzzed worlds from seed {seed}: {run.totals.line()}")
    assert not failures, "\n\n".join(failures)


class _FuzzRun:
    def __init__(self, duo: Duo) -> None:
        self.duo = duo
        self.api = ApiWriter(duo.cp)
        self.totals = worlds.Totals()
        self.flips = 0
        self.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": worlds.NS}})
        self.api.put(
            k.service(worlds.SENTINEL, [worlds.SENTINEL_IP], [k.port(80, "", target=8080)], namespace=worlds.NS)
        )

    def flip_sentinel(self) -> None:
        """A change of the sentinel's slice, written after the world's objects: settle(change=True)
        then waits for a sync that follows it, even when nothing of the world is proxied."""
        self.flips += 1
        pod = "a1" if self.flips % 2 else "a2"
        self.api.put(
            k.endpoint_slice(
                f"{worlds.SENTINEL}-a", worlds.SENTINEL, [k.endpoint(c.PODS[pod][1], node=c.PODS[pod][0])],
                [k.port(8080, "")], namespace=worlds.NS,
            )
        )  # fmt: skip

    def world(self, seed: int) -> str:
        """Runs one world; returns the failure text ("" when every row matched or is accepted)."""
        duo, totals = self.duo, self.totals
        world = worlds.generate(seed)
        stored: list[c.Obj] = []  # as the apiserver keeps them
        kept: list[c.Obj] = []  # as written (the world, less what was refused)
        refused: list[str] = []

        def refuse(what: str, why: str) -> None:
            totals.refused += 1
            refused.append(f"{what}: {why}")
            reason = re.sub(r'"[^"]*"', '"…"', why.split(" is invalid: ", 1)[-1])[:200]
            totals.refusals[reason] = totals.refusals.get(reason, 0) + 1

        since = time.time()
        for obj in world.objects:
            totals.objects += 1
            what = f"{obj['kind']} {obj['metadata']['name']}"
            got, why = self.api.create(obj)
            if got is None:
                refuse(what, why)
                continue
            if obj["kind"] == "Service" and obj.get("status"):
                patched, why = self.api.patch_status(obj)
                if patched is None:
                    refuse(f"{what} status", why)
                    obj = {key: v for key, v in obj.items() if key != "status"}
                else:
                    got = patched
            stored.append(got)
            kept.append(obj)
        self.flip_sentinel()
        settle(duo.sides, since, change=True)

        services = [o for o in stored if o["kind"] == "Service"]
        tagged = worlds.probes(seed, services, [o for o in stored if o["kind"] == "EndpointSlice"])
        results = parallel(lambda t: compare_probe(duo.a, duo.b, t.probe), tagged)
        case = f"fuzz-{seed}"
        rows = [
            REPORT.add(t.case, t.probe.path() if t.case == case else f"({case}) {t.probe.path()}", kp, np)
            for t, (kp, np) in zip(tagged, results, strict=True)
        ]
        for hp in worlds.health_checks(seed, services, [o for o in stored if o["kind"] == "EndpointSlice"]):
            kp, np = health(duo.a, hp.check), health(duo.b, hp.check)
            tag = hp.case if hp.case == case or hp.explained(kp, np) else case  # other counts: unexplained
            rows.append(
                REPORT.add(tag, health_path(hp.check) if tag == case else f"({case}) {health_path(hp.check)}", kp, np)
            )

        since = time.time()
        for obj in reversed(stored):
            self.api.delete(obj)
        self.flip_sentinel()
        settle(duo.sides, since, change=True)

        totals.worlds += 1
        totals.probes += len(rows)
        totals.matches += sum(r.match for r in rows)
        totals.accepted += sum(not r.match and accepted(r.case) is not None for r in rows)
        bad = REPORT.unexpected(rows)
        totals.unexplained += len(bad)
        totals.diffs += [[str(seed), r.case, r.path, r.kube_proxy, r.nftproxy] for r in rows if not r.match]
        if not bad:
            return ""
        totals.failing_seeds.append(seed)
        lines = [
            f"fuzzed world {seed}: {len(bad)} unexplained difference(s) "
            f"(replay: NFTPROXY_FUZZ_SEED={seed} NFTPROXY_FUZZ_WORLDS=1; "
            f"python -m tests.conformance.worlds show {seed})",
            *(f"  {r.case} | {r.path} | kube-proxy: {r.kube_proxy} | nftproxy: {r.nftproxy}" for r in bad),
            *(f"  refused {r}" for r in refused),
            world.yaml(kept),
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------- metrics


# client-go's apiserver request metrics, which the kubernetes-mixin's proxy dashboard reads
_CLIENT_GO_METRICS = ("rest_client_requests_total", "rest_client_request_duration_seconds")


def _metric_shapes(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``kubeproxy_*`` metric families, and client-go's of _CLIENT_GO_METRICS, in a Prometheus
    text exposition: name -> (type, label names)."""
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind
            labels.setdefault(name, set())
        elif line and not line.startswith("#"):
            series = line.split(" ", 1)[0]
            name, _, rest = series.partition("{")
            for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
                base = name.removesuffix(suffix)
                if base != name and base in types:
                    name = base
                    break
            if name in types:
                labels[name].update(
                    k.strip() for k, _, _ in (kv.partition("=") for kv in rest.rstrip("}").split(",")) if k.strip()
                )
    # prometheus_client writes a counter's TYPE without "_total" (the OpenMetrics family name)
    out = {}
    for name, kind in types.items():
        full = name + "_total" if kind == "counter" and not name.endswith("_total") else name
        if full.startswith("kubeproxy_") or full in _CLIENT_GO_METRICS:
            out[full] = (kind, frozenset(labels[name] - {"le"}))
    return out


def test_metrics_as_kube_proxy(duo: Duo) -> None:
    """Every ``kubeproxy_*`` metric (and client-go's ``rest_client_*`` the mixin's dashboard reads)
    the real kube-proxy (nftables mode) exports after the same syncs
    exists in nftproxy's /metrics with the same type and label names, except those in
    differences.METRICS, each with its reason."""
    from tests.conformance.differences import METRICS  # noqa: PLC0415

    got = {}
    for s in duo.sides:
        for probe in ("/healthz", "/livez"):  # their counters appear once asked
            assert http_get_in(s.node.netns, c.NODE4, 10256, probe, timeout=5.0)[0] == 200, (s.title, probe)
        status, body = http_get_in(s.node.netns, c.NODE4, 10249, "/metrics", timeout=5.0)
        assert status == 200, (s.title, status)
        got[s.title] = _metric_shapes(body)
    kp, np = got["kube-proxy"], got["nftproxy"]
    assert len(kp) >= 10, sorted(kp)  # the scrape found kube-proxy's families
    rows = []
    for name in sorted(kp):
        want = f"{kp[name][0]} {{{', '.join(sorted(kp[name][1]))}}}"
        have = f"{np[name][0]} {{{', '.join(sorted(np[name][1]))}}}" if name in np else "missing"
        rows.append(REPORT.add(f"metric:{name}", "/metrics: type {label names}", want, have))
    unexpected = REPORT.unexpected(rows)
    assert not unexpected, "kube-proxy metrics nftproxy lacks or shapes differently:\n" + "\n".join(
        f"{r.case}: kube-proxy {r.kube_proxy}, nftproxy {r.nftproxy}" for r in unexpected
    )
    stale = sorted(set(METRICS) - {r.case.removeprefix("metric:") for r in rows if not r.match})
    assert not stale, f"allowed in differences.METRICS but not different (remove them): {stale}"


def test_no_local_endpoint_counts_as_kube_proxy(duo: Duo) -> None:
    """``kubeproxy_sync_proxy_rules_no_local_endpoints_total``: the Service ports with usable
    endpoints but none on this node under a Local policy, per policy and family, the same number
    in both (the same Services)."""

    def samples(s: Side) -> dict[str, float]:
        status, body = http_get_in(s.node.netns, c.NODE4, 10249, "/metrics", timeout=5.0)
        assert status == 200, (s.title, status)
        name = "kubeproxy_sync_proxy_rules_no_local_endpoints_total{"
        out = {}
        for line in body.splitlines():
            if line.startswith(name):
                series, value = line.rsplit(" ", 1)
                labels = dict(kv.split("=", 1) for kv in series[len(name) : -1].split(","))
                out[f"{labels['traffic_policy'].strip(chr(34))} {labels['ip_family'].strip(chr(34))}"] = float(value)
        return out

    kp, np = samples(duo.a), samples(duo.b)
    assert kp, "kube-proxy exported no no_local_endpoints samples"
    rows = [  # one case per policy and family: an intentional difference names its own
        REPORT.add(f"no-local-endpoint-counts-{k.replace(' ', '-').lower()}",
                   f"/metrics no_local_endpoints_total {{{k}}}", f"{kp.get(k, 0):g}", f"{np.get(k, 0):g}")
        for k in sorted(set(kp) | set(np))
    ]  # fmt: skip
    _check(rows)


def _wait_status(s: Side, path: str, want: int, timeout: float = 15.0) -> int:
    """The status of ``path`` on the node's healthz port, once it is ``want`` (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status = http_get_in(s.node.netns, c.NODE4, 10256, path, timeout=3.0)[0]
        except OSError:
            status = 0
        if status == want or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_healthz_when_the_node_is_tainted_for_deletion(duo: Duo) -> None:
    """healthcheck/proxy_health.go NodeEligible: a Node tainted ToBeDeletedByClusterAutoscaler
    makes /healthz 503 (load balancers drain the node), /livez stays 200; untainted, 200 again."""
    name = "node-tainted-for-deletion"
    if (only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY")) and not re.search(only, name):
        pytest.skip("not selected (NFTPROXY_CONFORMANCE_ONLY)")
    taint = {"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}]}}
    rows = []
    try:
        duo.cp.kubectl("patch", "node", c.NODE, "--type=merge", "-p", json.dumps(taint))
        for path, want in (("/healthz", 503), ("/livez", 200)):
            got = [_wait_status(s, path, want) for s in duo.sides]
            rows.append(REPORT.add(name, f"node → {path} while tainted", f"HTTP {got[0]}", f"HTTP {got[1]}"))
    finally:
        duo.cp.kubectl("patch", "node", c.NODE, "--type=merge", "-p", json.dumps({"spec": {"taints": None}}))
    got = [_wait_status(s, "/healthz", 200) for s in duo.sides]
    rows.append(REPORT.add(name, "node → /healthz untainted again", f"HTTP {got[0]}", f"HTTP {got[1]}"))
    _check(rows)


def test_node_zone_change(duo: Duo) -> None:
    """proxier.go OnTopologyChange: node-1's zone label changes, then back; a Service with zone
    hints for both zones follows it (before the Node IP change, which restarts kube-proxy)."""
    name, objects, probes = c.node_zone_change()
    if (only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY")) and not re.search(only, name):
        pytest.skip("not selected (NFTPROXY_CONFORMANCE_ONLY)")
    since = time.time()
    duo.apply(objects)
    settle(duo.sides, since, change=True)

    def probe_all(label: str) -> list[Row]:
        results = parallel(lambda p: compare_probe(duo.a, duo.b, p), probes)
        return [REPORT.add(name, f"{p.path()} {label}", kp, np) for p, (kp, np) in zip(probes, results, strict=True)]

    def zone(z: str) -> None:
        since = time.time()
        duo.cp.kubectl("label", "node", c.NODE, f"topology.kubernetes.io/zone={z}", "--overwrite")
        settle(duo.sides, since, quiet=2.5)

    rows = probe_all(f"in {c.ZONE}")
    try:
        zone(c.OTHER_ZONE)
        rows += probe_all(f"in {c.OTHER_ZONE}")
    finally:
        zone(c.ZONE)
    rows += probe_all(f"back in {c.ZONE}")
    _check(rows)


# ---------------------------------------------------------------------------------------- last: the Node changes


def _node_addresses(duo: Duo, ipv4: str) -> None:
    addresses = [
        {"type": "InternalIP", "address": ipv4},
        {"type": "InternalIP", "address": c.NODE6},
        {"type": "Hostname", "address": c.NODE},
    ]
    duo.cp.kubectl(
        "patch", "node", c.NODE, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"addresses": addresses}}),
    )  # fmt: skip


def _after_node_change(duo: Duo, label: str, since: float) -> list[Row]:
    """kube-proxy v1.37 exits when its Node's IPs change (pkg/proxy/node.go NodeManager): it is
    started again, as its DaemonSet would; nftproxy must go on running and resync by itself."""
    a, b = duo.a.proxy, duo.b.proxy
    assert isinstance(a, KubeProxyRef) and isinstance(b, NftProxy)
    deadline = time.time() + 30
    while not a.exited() and time.time() < deadline:
        time.sleep(0.2)
    kp_state = "exited (restarted, as its DaemonSet would)" if a.exited() else "running"
    np_state = "running" if b.running() else "exited"
    rows = [REPORT.add("node-ip-changed", f"the proxy process when the Node's IPs changed {label}", kp_state, np_state)]
    if a.exited():
        a.stop()
        a.start()
    settle(duo.sides, since, change=True, quiet=2.5)
    return rows


def test_node_ip_change(duo: Duo) -> None:
    """Item 5. Last: it changes node-1's Node (then restores it), which every NodePort case uses."""
    name, objects, probes = c.node_ip_change()
    if (only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY")) and not re.search(only, name):
        pytest.skip("not selected (NFTPROXY_CONFORMANCE_ONLY)")
    for s in duo.sides:
        s.lab.ip(s.node, f"addr add {c.NODE4_NEW}/24 dev eth0")
    since = time.time()
    duo.apply(objects)
    settle(duo.sides, since, change=True)

    def probe_all(label: str) -> list[Row]:
        results = parallel(lambda p: compare_probe(duo.a, duo.b, p), probes)
        return [
            REPORT.add(f"{name}-probes", f"{p.path()} {label}", kp, np)
            for p, (kp, np) in zip(probes, results, strict=True)
        ]

    rows = probe_all("before")
    since = time.time()
    _node_addresses(duo, c.NODE4_NEW)
    rows += _after_node_change(duo, "(to the new address)", since)
    rows += probe_all("after the change")
    since = time.time()
    _node_addresses(duo, c.NODE4)  # back, for any test after this one
    rows += _after_node_change(duo, "(back)", since)
    rows += probe_all("after the change back")
    _check(rows)
