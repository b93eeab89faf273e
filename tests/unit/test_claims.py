"""A frontend two Services claim: the loser loses that frontend only, a Service's own ClusterIP
or NodePort wins over another's externalIP or LoadBalancer IP, then the older Service, then the
first by name; the same result whatever the order of arrival; one report per lost frontend."""

from __future__ import annotations

import itertools
from typing import Any

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.compiler.build import Desired
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.fake import FakeBackend, dump_of
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.builders import CFG

DNS_IP = "10.96.0.10"
OLD, NEW, NEWER = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"


def _svc(name: str, ns: str, created: str, cluster_ip: str, ports: list[Any], **kw: Any) -> Service:
    obj = k.service(name, [cluster_ip], ports, namespace=ns, metadata={"creationTimestamp": created}, **kw)
    s = k.parsed(obj)
    assert isinstance(s, Service), s
    return s


def _slice(svc: Service, ip: str, ports: list[Any]) -> EndpointSlice:
    obj = k.endpoint_slice(f"{svc.name}-1", svc.name, [k.endpoint(ip)], ports, namespace=svc.namespace)
    s = k.parsed(obj)
    assert isinstance(s, EndpointSlice), s
    return s


def kube_dns() -> tuple[Service, EndpointSlice]:
    ports = [k.port(53, "dns", "UDP"), k.port(53, "dns-tcp"), k.port(9153, "metrics")]
    dns = _svc("kube-dns", "kube-system", OLD, DNS_IP, ports)
    eps = [k.port(53, "dns", "UDP"), k.port(53, "dns-tcp"), k.port(9153, "metrics")]
    return dns, _slice(dns, "10.244.1.53", eps)


def tenant(
    name: str = "x", created: str = NEW, external_ips: tuple[str, ...] = (DNS_IP,)
) -> tuple[Service, EndpointSlice]:
    cluster_ip = f"10.96.5.{ord(name[0])}"
    svc = _svc(name, "default", created, cluster_ip, [k.port(53, "dns", "UDP")], external_ips=list(external_ips))
    return svc, _slice(svc, "10.244.2.66", [k.port(53, "dns", "UDP")])


def holder(desired: Desired, key: tuple[str, ...]) -> str | None:
    """The Service whose rules a frontend reaches (by the dispatch element's comment)."""
    t = next(t for t in desired.tables if t.family is Family.IP)
    for name in ("service-ips", "no-endpoint-services", "service-nodeports", "no-endpoint-nodeports"):
        el = t.elements.get(name, {}).get(key)
        if el is not None:
            return (el.comment or "").split(":")[0]
    return None


def compile_all(*pairs: tuple[Service, EndpointSlice]) -> Desired:
    return compile_tables([s for s, _ in pairs], [e for _, e in pairs], CFG)


def test_a_tenants_external_ip_on_kube_dns_takes_nothing_from_it() -> None:
    desired = compile_all(kube_dns(), tenant())
    for port in (("udp", "53"), ("tcp", "53"), ("tcp", "9153")):
        assert holder(desired, (DNS_IP, *port)) == "kube-system/kube-dns", port
    assert holder(desired, (f"10.96.5.{ord('x')}", "udp", "53")) == "default/x"  # the tenant keeps its own ClusterIP
    assert [str(s) for s in desired.skipped] == [
        "Service default/x: 10.96.0.10 . udp . 53 is left out for this Service: it is the ClusterIP of Service "
        "kube-system/kube-dns; its other frontends are programmed"
    ]


def test_a_clusterip_wins_even_over_an_older_service() -> None:
    desired = compile_all(kube_dns(), tenant(created="2020-01-01T00:00:00Z"))
    assert holder(desired, (DNS_IP, "udp", "53")) == "kube-system/kube-dns"


def test_two_external_ips_the_older_service_wins_whatever_the_names() -> None:
    def ext(name: str, created: str) -> tuple[Service, EndpointSlice]:
        ports = [k.port(80, "http"), k.port(443, "https")]
        svc = _svc(name, "default", created, f"10.96.7.{ord(name[0])}", ports, external_ips=["198.19.0.7"])
        return svc, _slice(svc, f"10.244.3.{ord(name[0])}", [k.port(8080, "http"), k.port(8443, "https")])

    older_later_name, newer_first_name = ext("zz-old", OLD), ext("aa-new", NEW)
    desired = compile_all(older_later_name, newer_first_name)
    for port in ("80", "443"):
        assert holder(desired, ("198.19.0.7", "tcp", port)) == "default/zz-old"
    assert holder(desired, (f"10.96.7.{ord('a')}", "tcp", "80")) == "default/aa-new"
    assert len(desired.skipped) == 2
    assert all("claimed it first (created 2026-01-01" in s.reason for s in desired.skipped)
    # the same second: the first by name
    desired = compile_all(ext("zz", OLD), ext("aa", OLD))
    assert holder(desired, ("198.19.0.7", "tcp", "80")) == "default/aa"


def test_a_load_balancer_ip_on_another_services_clusterip_port() -> None:
    """An LB controller that hands out a ClusterIP: the ClusterIP's Service keeps that port, and
    the LoadBalancer keeps everything else (its other ports on that IP, its NodePort)."""
    web = _svc("web", "default", OLD, "10.96.0.20", [k.port(80, "http")])
    web_eps = _slice(web, "10.244.1.20", [k.port(80, "http")])
    ports = [k.port(80, "http", node_port=30080), k.port(8443, "alt", node_port=30443)]
    lb = _svc("lb", "other", OLD, "10.96.0.21", ports, type="LoadBalancer", lb_ips=["10.96.0.20"])
    lb_eps = _slice(lb, "10.244.1.21", [k.port(80, "http"), k.port(8443, "alt")])
    desired = compile_all((web, web_eps), (lb, lb_eps))
    assert holder(desired, ("10.96.0.20", "tcp", "80")) == "default/web"
    assert holder(desired, ("10.96.0.20", "tcp", "8443")) == "other/lb"
    assert holder(desired, ("tcp", "30080")) == "other/lb"
    assert holder(desired, ("10.96.0.21", "tcp", "80")) == "other/lb"
    assert [s.name for s in desired.skipped] == ["lb"]


def test_the_loser_takes_the_frontend_back_when_the_winner_goes() -> None:
    dns, dns_eps = kube_dns()
    x, x_eps = tenant()
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for s in (dns, x):
        dp.inputs.set_service(s)
    for e in (dns_eps, x_eps):
        dp.inputs.set_slice(e)
    dp.sync()
    key = (DNS_IP, "udp", "53")

    def comment() -> str | None:
        return fake.tables[(Family.IP, "nftproxy")].elements["service-ips"][key].comment

    assert comment() == "kube-system/kube-dns:dns"
    dp.inputs.delete_service(dns.key)
    result = dp.sync()
    assert not result.full
    assert comment() == "default/x:dns"
    assert [s for s in dp.stats()[2] if s.kind == "Service"] == []
    dp.inputs.set_service(dns)  # back: it takes its ClusterIP's port again, in a partial sync
    assert not dp.sync().full
    assert comment() == "kube-system/kube-dns:dns"
    assert [s.name for s in dp.stats()[2]] == ["x"]


def test_any_order_of_arrival_gives_the_same_table() -> None:
    web = _svc("web", "default", NEW, "198.19.0.9", [k.port(80, "http")])  # a ClusterIP outside the usual range
    pairs = [
        kube_dns(),
        tenant("x", NEW),
        tenant("y", OLD),
        tenant("z", NEWER),
        (web, _slice(web, "10.244.1.9", [k.port(80, "http")])),
        tenant("w", OLD, external_ips=("198.19.0.9", DNS_IP)),
    ]
    want = compile_all(*pairs)
    for order in itertools.islice(itertools.permutations(range(len(pairs))), 0, 720, 37):
        fake = FakeBackend()
        dp = Dataplane(fake, CFG)
        for i in order:
            dp.inputs.set_service(pairs[i][0])
            dp.inputs.set_slice(pairs[i][1])
            dp.sync()
        assert fake.dump() == dump_of(*want.tables), order
        assert sorted(map(str, dp.stats()[2])) == sorted(map(str, want.skipped)), order


def test_a_service_without_conflicts_costs_no_bookkeeping() -> None:
    dp = Dataplane(FakeBackend(), ProxyConfig())
    dns, eps = kube_dns()
    dp.inputs.set_service(dns)
    dp.inputs.set_slice(eps)
    dp.sync()
    a = dp.assemblies[Family.IP]
    assert a.claims.rivals == {} and a.claims.kept == {} and a.claims.losers == set()


def test_a_first_load_in_chunks_leaves_no_entry_of_a_lost_frontend() -> None:
    """A chunked first load sends each chunk's endpoint-map entries as it compiles it, and only
    adds: the Services that may contest a frontend go together in the last chunk, so a tenant
    named before kube-dns (an earlier chunk, by name) never leaves its entries for kube-dns's
    port in the kernel."""
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.bulk_elements, dp.stream_services, dp.stream_chunks = 1, 1, 3
    pairs = [tenant("a-tenant"), *(tenant(f"m{i}", external_ips=()) for i in range(6)), kube_dns()]
    for s, e in pairs:
        dp.inputs.set_service(s)
        dp.inputs.set_slice(e)
    assert dp.sync().full and dp.batched > 0
    assert fake.dump() == dump_of(*compile_all(*pairs).tables)
    got = fake.tables[(Family.IP, "nftproxy")].elements
    assert got["service-ips"][(DNS_IP, "udp", "53")].comment == "kube-system/kube-dns:dns"
