"""Two identical labs, one programmed by the real kube-proxy, one by nftproxy, and the comparison.

Both labs are built by :func:`build_lab` in the same order, so every namespace has the same
addresses in both (asserted); both proxies run for the node name ``node-1`` against the same
control plane, so they see the same Nodes, Services and EndpointSlices.

Comparison: a probe is the same real connection made in both labs (same source kind, protocol,
destination). Its outcome is the SET of "backend ← source address it saw" or errors (refused,
timeout, …) over several tries; tries continue (up to 80 a side) while the two sets differ, so a
random backend choice can't make a false DIFF. A timeout on one side only, beside answers, is
tried again with a longer wait (``_settle_stalls``: a loaded machine can stall one try). For
session affinity the outcome is how many backends each client reached, not which.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nftproxy.compiler import features
from nftproxy.operator import kube
from testkit.k8s import versions
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import KubeProxy, KubeProxyError, http_request_in, wait_synced
from testkit.lab.netlab import (
    CLUSTER4,
    CLUSTER6,
    EXTERNAL4,
    EXTERNAL6,
    SERVICE4,
    SERVICE6,
    Host,
    NetLab,
    Node,
    ProbeResult,
)
from tests.conformance import cases as c
from tests.conformance.differences import accepted
from tests.support.run import nftproxy_argv

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts" / "nftproxy" / "crds" / "proxystatus.yaml"
TRY_TIMEOUT = 0.5  # seconds per try (an answer here takes a few ms; a drop costs the whole wait)
# A timeout seen on one side only, beside answers, is tried again with this per try (_settle_stalls)
STALL_TIMEOUT = 3.0
STALL_TRIES = 20
REFERENCE_MINOR = versions.minor(versions.current())  # the reference kube-proxy's release (K8S_VERSION)


def lax_validation() -> bool:
    """Can the control plane of the version in use (K8S_VERSION) store the legacy address spellings
    (cases marked ``legacy``)? Up to cases.LAX_VALIDATION_UNTIL, with a gate off (conftest.py)."""
    return REFERENCE_MINOR <= c.LAX_VALIDATION_UNTIL


# both proxies' feature gates: localhost NodePorts on (kube-proxy 1.37's alpha gate; 1.38's default)
FEATURE_GATES = {features.LOCALHOST_NODEPORTS: True}


# --------------------------------------------------------------------------- labs


@dataclass
class Side:
    """One lab: its hosts by role, and the proxy programming node-1."""

    title: str
    lab: NetLab
    hosts: dict[str, Host]  # pod, node, ext1, ext2, pod2
    proxy: Proxy | None = None

    @property
    def node(self) -> Host:
        return self.hosts["node"]


def build_lab(lab: NetLab) -> dict[str, Host]:
    n1 = lab.add_node(c.NODE, 1)
    n2 = lab.add_node(c.OTHER, 2)
    for name, (node, v4, v6) in c.PODS.items():
        pod = lab.add_pod(n1 if node == c.NODE else n2, name, tcp=c.POD_TCP, udp=c.POD_UDP)
        assert (pod.ipv4, pod.ipv6) == (v4, v6), f"{name} got {pod.ipv4}, {pod.ipv6}"
    lab.start_echo(n1, "host-1", tcp=c.HOST_TCP, udp=c.HOST_UDP)
    lab.start_echo(n2, "host-2", tcp=c.HOST_TCP, udp=c.HOST_UDP)
    ext1 = lab.add_client("ext1", 100, via=n1)
    # A real node has a default route: its own connections to LoadBalancer/external IPs are routed
    # (then DNATed in output); unprogrammed ones go to a router that drops them (ext1 does not
    # forward): always a timeout, never an ARP failure that turns into "unreachable" after ~3 s.
    lab.ip(
        n1,
        f"route add {EXTERNAL4} via {ext1.ipv4}",
        f"route add {EXTERNAL6} via {ext1.ipv6}",
        f"route replace {SERVICE4} via {ext1.ipv4}",  # the same for Service IPs no proxy programs
        f"route replace {SERVICE6} via {ext1.ipv6}",
        f"route replace {c.EXTRA_SERVICE_CIDR4} via {ext1.ipv4}",
        *(f"route replace {net} via {ext1.ipv4 if '.' in net else ext1.ipv6}" for net in c.TWO_WIDTHS_SERVICE_CIDR),
    )
    # ... where every Service address answers (AnyIP: refused, a TCP RST or ICMP port unreachable),
    # so that a packet a proxy drops at the node (a timeout: unallocated addresses of the
    # ServiceCIDRs) is told apart from one that left it
    lab.ip(
        ext1,
        f"route add local {SERVICE4} dev lo",
        f"route add local {SERVICE6} dev lo",
        f"route add local {c.EXTRA_SERVICE_CIDR4} dev lo",
        *(f"route add local {net} dev lo" for net in c.TWO_WIDTHS_SERVICE_CIDR),
        f"route add 10.244.1.0/24 via {n1.ipv4}",  # ... and answers node-1's pods
        f"route add fd00:10:244:1::/64 via {n1.ipv6}",
    )
    ext2 = lab.add_client("ext2", 101, via=n1)
    # ext2 is a router outside the cluster with a static route for the Service range via node-1
    # (the case kube-proxy masquerades ClusterIP traffic "from outside cluster" for)
    lab.ip(ext2, f"route add {SERVICE4} via {n1.ipv4}", f"route add {SERVICE6} via {n1.ipv6}")
    return {"pod": lab.pods["c1"], "node": n1, "ext1": ext1, "ext2": ext2, "pod2": lab.pods["c2"]}


def node_objects() -> list[c.Obj]:
    out = []
    for name, idx, zone in ((c.NODE, 1, c.ZONE), (c.OTHER, 2, c.OTHER_ZONE)):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone},
                },
                "spec": {
                    "podCIDR": f"10.244.{idx}.0/24",
                    "podCIDRs": [f"10.244.{idx}.0/24", f"fd00:10:244:{idx}::/64"],
                },
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": f"198.18.0.{idx}"},
                        {"type": "InternalIP", "address": f"fd00:198:18::{idx}"},
                        {"type": "Hostname", "address": name},
                    ]
                },
            }
        )
    return out


# --------------------------------------------------------------------------- proxies


class Proxy:
    title = ""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def wait_synced(self, since: float = 0.0, timeout: float = 90.0, change: bool = False, quiet: float = 0.5) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError


class KubeProxyRef(Proxy):
    title = "kube-proxy"

    def __init__(
        self, side: Side, cp: ControlPlane, workdir: Path, local_config: Mapping[str, Any] | None = None
    ) -> None:
        """``local_config``: the KubeProxyConfiguration fields of local-traffic detection
        (tests/support/detect_local.py; NftProxy gets the flags of the same dict); None: the
        suite's, ClusterCIDR with the lab's pod CIDRs."""
        # localhost NodePorts: kube-proxy's userspace proxy behind its gate (alpha in 1.37), with
        # the keywords; nftproxy gets the same --nodeport-addresses and gates (NftProxy.start)
        self.kp = KubeProxy(
            side.node.netns,
            c.NODE,
            cp.kubeconfig,
            workdir,
            node_ip=c.NODE4,
            cluster_cidrs=(CLUSTER4, CLUSTER6) if local_config is None else (),
            nodeport_addresses=c.NODEPORT_ADDRESSES,
            extra_config={"featureGates": FEATURE_GATES, **(local_config or {})},
        )

    def start(self) -> None:
        self.kp.start()

    def stop(self) -> None:
        self.kp.stop()

    def wait_synced(self, since: float = 0.0, timeout: float = 90.0, change: bool = False, quiet: float = 0.5) -> None:
        self.kp.wait_synced(since=since, timeout=timeout, change=change, quiet=quiet)

    def log_tail(self) -> str:
        return self.kp.log_tail(60)

    def exited(self) -> bool:
        try:
            self.kp.check_running()
        except KubeProxyError:
            return True
        return False


class NftProxy(Proxy):
    title = "nftproxy"

    def __init__(self, side: Side, cp: ControlPlane, workdir: Path, local_flags: Sequence[str] | None = None) -> None:
        """``local_flags``: the flags of local-traffic detection (tests/support/detect_local.py);
        None: the suite's, --cluster-cidr with the lab's pod CIDRs."""
        self.netns = side.node.netns
        self.cp = cp
        self.log = workdir / "nftproxy.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.local_flags = ["--cluster-cidr", f"{CLUSTER4},{CLUSTER6}"] if local_flags is None else list(local_flags)

    def start(self) -> None:
        argv = [
            *nftproxy_argv(), "run",
            "--node-name", c.NODE,
            "--kubeconfig", str(self.cp.kubeconfig),
            "--netns", self.netns,
            *self.local_flags,
            "--healthz-bind-address", f"{c.NODE4}:10256",
            "--metrics-bind-address", f"{c.NODE4}:10249",
            "--min-sync-period", "0",
            "--status-period", "1s",
            "--nodeport-addresses", ",".join(c.NODEPORT_ADDRESSES),
            "--feature-gates", ",".join(f"{g}={str(on).lower()}" for g, on in FEATURE_GATES.items()),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def wait_synced(self, since: float = 0.0, timeout: float = 90.0, change: bool = False, quiet: float = 0.5) -> None:
        assert self.proc is not None
        try:
            wait_synced(
                self.netns, c.NODE4, 10249, "kubeproxy", since=since, timeout=timeout, change=change, quiet=quiet
            )
        except Exception as e:
            raise AssertionError(f"{e}\n{self.log_tail()}") from None
        if self.proc.poll() is not None:
            raise AssertionError(f"nftproxy exited:\n{self.log_tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])
        except OSError:
            return ""


# --------------------------------------------------------------------------- outcomes


def _fmt(r: ProbeResult) -> str:
    return f"{r.pod} ← {r.peer}" if r.ok else str(r.error)


def try_probe(side: Side, p: c.Probe, count: int, source_port: int = 0) -> list[ProbeResult]:
    return side.lab.probe(
        side.hosts[p.src], p.proto, p.host, p.port, count=count, timeout=TRY_TIMEOUT, source_port=source_port
    )


def outcome_sticky(results: Sequence[ProbeResult], client: Host) -> set[str]:
    """How many backends one client reached, and whether they saw its own address (which
    backend, and so which masquerade address, is chosen at random)."""
    pods = {r.pod for r in results if r.ok}
    own = {client.ipv4, client.ipv6}
    if isinstance(client, Node):  # the node's connections leave from its pod gateway or its address
        own |= {client.gateway4, client.gateway6}
    peers = sorted({"client" if r.peer in own else "masqueraded" for r in results if r.ok})
    errors = {str(r.error) for r in results if not r.ok}
    out = {f"{len(pods)} backend(s) ← {','.join(peers)}"} if pods else set()
    return out | errors


def compare_probe(a: Side, b: Side, p: c.Probe) -> tuple[set[str], set[str]]:
    """Outcome sets in both labs; more tries while they differ (random choice converges)."""
    if p.sticky:
        hops = [p, *(dataclasses.replace(p, what=w, host=h, port=n, then=()) for w, h, n in p.then)]
        count = 12 if not p.then else 4
        ra = [r for hop in hops for r in try_probe(a, hop, count)]
        rb = [r for hop in hops for r in try_probe(b, hop, count)]
        return outcome_sticky(ra, a.hosts[p.src]), outcome_sticky(rb, b.hosts[p.src])
    ra, rb = try_probe(a, p, 6), try_probe(b, p, 6)
    sa, sb = {_fmt(r) for r in ra}, {_fmt(r) for r in rb}
    if not any(r.ok for r in (*ra, *rb)) and sa == sb:
        return sa, sb  # the same errors only: deterministic (endpoints that refuse beside ones that
        # time out are a random choice: more tries)
    total = 6
    for more in (14, 20, 20, 20):
        if total >= 20 and sa == sb:
            break
        sa |= {_fmt(r) for r in try_probe(a, p, more)}
        sb |= {_fmt(r) for r in try_probe(b, p, more)}
        total += more
    return _settle_stalls(a, b, p, sa, sb)


def _settle_stalls(a: Side, b: Side, p: c.Probe, sa: set[str], sb: set[str]) -> tuple[set[str], set[str]]:
    """A try that timed out on one side only, where that side also answered, is ambiguous: on
    two cores, with the probes of many cases in flight at once and the rest of the machine busy,
    one try can stall past TRY_TIMEOUT (CI, 2026-12-03: the kube-proxy side of one probe, under a
    benchmark's load). That side is tried again STALL_TRIES times with STALL_TIMEOUT each, and
    the timeout stays only if one of those times out too: a proxy that really drops some of the
    connections (to an endpoint that does not answer, say) drops them whatever the wait."""
    if sa == sb:
        return sa, sb
    settled = []
    for side, mine, other in ((a, sa, sb), (b, sb, sa)):
        if "timeout" in mine and "timeout" not in other and mine - {"timeout"}:
            again = side.lab.probe(side.hosts[p.src], p.proto, p.host, p.port, count=STALL_TRIES, timeout=STALL_TIMEOUT)
            mine = (mine - {"timeout"}) | {_fmt(r) for r in again}
        settled.append(mine)
    return settled[0], settled[1]


_GO_TIME = re.compile(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z"')
# compared on a HealthRequest (cases.py "health checks (kube-proxy map)"); Content-Length not on
# the proxy's port, where it follows the digits of the times
_HEALTH_HEADERS = ("Content-Type", "X-Content-Type-Options", "X-Load-Balancing-Endpoint-Weight", "Content-Length")


def health(side: Side, h: c.HealthCheck) -> str:
    """The outcome of one health check: status, local endpoints and weight; for a
    HealthRequest, also its headers and its whole body (times masked)."""
    method, path = (h.method, h.path) if isinstance(h, c.HealthRequest) else ("GET", "/")
    try:
        status, raw, body = http_request_in(side.node.netns, h.host, h.port, path, method, timeout=3.0)
    except OSError as e:
        return f"error {type(e).__name__}"
    headers = {k.lower(): v for k, v in raw.items()}
    if not isinstance(h, c.HealthRequest):
        try:
            count = json.loads(body).get("localEndpoints")
        except ValueError:
            count = "?"
        return f"HTTP {status} localEndpoints={count} weight={headers.get('x-load-balancing-endpoint-weight', '-')}"
    names = [n for n in _HEALTH_HEADERS if not (n == "Content-Length" and h.port == c.PROXY_HEALTH_PORT)]
    shown = "; ".join(f"{n}: {headers[n.lower()]}" for n in names if n.lower() in headers)
    masked = _GO_TIME.sub('"<time>"', body)
    return f"HTTP {status} [{shown}] body={json.dumps(masked)}"


def health_path(h: c.HealthCheck) -> str:
    host = f"[{h.host}]" if ":" in h.host else h.host
    if not isinstance(h, c.HealthRequest):
        return f"node → healthCheckNodePort {host}:{h.port}"
    what = "healthz port" if h.port == c.PROXY_HEALTH_PORT else "healthCheckNodePort"
    return f"node → {what} {host}:{h.port}{h.path} {h.method}"


def ruleset(side: Side) -> str:
    return side.lab.exec(side.node, "nft", "list", "ruleset").stdout


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    case: str
    path: str
    kube_proxy: str
    nftproxy: str

    @property
    def match(self) -> bool:
        return self.kube_proxy == self.nftproxy

    @property
    def verdict(self) -> str:
        if self.match:
            return "MATCH"
        return "DIFF (intentional)" if accepted(self.case, REFERENCE_MINOR) else "DIFF"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # cases this release's apiserver cannot hold
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, case: str, path: str, kp: Iterable[str] | str, np: Iterable[str] | str) -> Row:
        def text(v: Iterable[str] | str) -> str:
            return v if isinstance(v, str) else ", ".join(sorted(v)) or "-"

        row = Row(case, path, text(kp), text(np))
        with self.lock:
            self.rows.append(row)
        return row

    def unexpected(self, rows: Iterable[Row] | None = None) -> list[Row]:
        return [r for r in (self.rows if rows is None else rows) if r.verdict == "DIFF"]

    def table(self) -> str:
        lines = ["case | source → destination | kube-proxy | nftproxy | MATCH/DIFF", "---|---|---|---|---"]
        lines += [f"{r.case} | {r.path} | {r.kube_proxy} | {r.nftproxy} | {r.verdict}" for r in self.rows]
        n = sum(r.match for r in self.rows)
        lines.append(f"{n} match, {len(self.rows) - n} differ")
        if self.left_out:
            lines.append(f"left out (this release's apiserver refuses to store them): {', '.join(self.left_out)}")
        return "\n".join(lines)


REPORT = Report()


T = TypeVar("T")
R = TypeVar("R")


def parallel(fn: Callable[[T], R], items: Sequence[T], workers: int = 12) -> list[R]:
    """``fn`` over ``items`` in threads (each probe is a subprocess); results in order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def settle(
    sides: Sequence[Side], since: float, timeout: float = 90.0, change: bool = False, quiet: float = 0.5
) -> None:
    """Both proxies have synced every change made so far (after ``since``); with ``change``, the
    watch events of what was written after ``since`` have reached them first; ``quiet``: no sync
    for that long before it counts as settled."""
    time.sleep(0.3)
    for s in sides:
        assert s.proxy is not None
        s.proxy.wait_synced(since=since, timeout=timeout, change=change, quiet=quiet)


# --------------------------------------------------------------------------- objects one by one


class ApiWriter:
    """Creates, patches and deletes objects one at a time through the apiserver's REST API (our
    client, the operator's), so that what it refuses is known object
    by object (``kubectl apply`` of a list goes on past a refused object and reports them all
    together)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.api = kube.connect(str(cp.kubeconfig))

    @staticmethod
    def path(obj: c.Obj, name: bool = False) -> str:
        ns = obj["metadata"].get("namespace")
        kind = obj["kind"]
        if kind == "Namespace":
            base = "/api/v1/namespaces"
        elif kind == "Service":
            base = f"/api/v1/namespaces/{ns}/services"
        elif kind == "EndpointSlice":
            base = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
        else:
            raise ValueError(f"no path for {kind}")
        return f"{base}/{obj['metadata']['name']}" if name else base

    def create(self, obj: c.Obj) -> tuple[c.Obj | None, str]:
        """(the object as stored, "") or (None, the apiserver's reason for refusing it)."""
        try:
            return self.api.request("POST", self.path(obj), body=obj), ""
        except kube.ApiError as e:
            return None, e.message

    def patch_status(self, obj: c.Obj) -> tuple[c.Obj | None, str]:
        """A merge patch of the object's status (a Service's LoadBalancer ingress)."""
        try:
            path = self.path(obj, name=True) + "/status"
            return self.api.request("PATCH", path, body={"status": obj["status"]}), ""
        except kube.ApiError as e:
            return None, e.message

    def put(self, obj: c.Obj) -> c.Obj:
        """Create or replace (the caller's own objects, which must be accepted)."""
        current = self.api.read(self.path(obj, name=True))
        if current is None:
            return dict(self.api.request("POST", self.path(obj), body=obj))
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        return dict(self.api.request("PUT", self.path(obj, name=True), body=body))

    def delete(self, obj: c.Obj) -> None:
        try:
            self.api.request("DELETE", self.path(obj, name=True))
        except kube.ApiError as e:
            if not e.not_found:
                raise

    def close(self) -> None:
        self.api.close()
