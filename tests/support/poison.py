"""A Service the kernel refuses, on purpose: fault injection for the quarantine tests (issue 19).

The compiler has no known input left that the kernel refuses (the last one was an IPv6 /128
source range, fixed), so the tests make one: a Service with a port ``POISON_PORT`` compiles, in
its IPv4 family, to one more element ``10.96.0.999`` in ``cluster-ips``, which nft refuses (it
takes it for a host name it cannot resolve) and the netlink packer of a first load cannot pack.
Changing the port is the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nftproxy.compiler import fragment
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import Fragment
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.objects import Element, Family
from testkit.k8s import objects as k

POISON_PORT = 666
BAD_ADDRESS = "10.96.0.999"

Compile = Callable[[Service, Sequence[EndpointSlice], Family, ProxyConfig], Fragment | None]


def poisoned(compile_fragment: Compile = fragment.compile_fragment) -> Compile:
    def compile_poisoned(
        svc: Service, slices: Sequence[EndpointSlice], family: Family, config: ProxyConfig
    ) -> Fragment | None:
        frag = compile_fragment(svc, slices, family, config)
        if frag is not None and family is Family.IP and any(p.port == POISON_PORT for p in svc.ports):
            frag = frag._replace(elements=(*frag.elements, ("cluster-ips", Element((BAD_ADDRESS,)))))
        return frag

    return compile_poisoned


def objects(i: int, port: int = 80, endpoints: int = 10) -> list[k.Obj]:
    """Service ``svc-NNNN`` (ClusterIP 10.96.i/250.(i%250+1)) and its slice of ``endpoints``."""
    name = f"svc-{i:04d}"
    return [
        k.service(name, [f"10.96.{i // 250}.{i % 250 + 1}"], [k.port(port, "http")]),
        k.endpoint_slice(
            f"{name}-1",
            name,
            [k.endpoint(f"10.244.{i // 250}.{j + 1}") for j in range(endpoints)],
            [k.port(8080, "http")],
        ),
    ]


def feed(dp: Dataplane, objs: list[k.Obj]) -> None:
    inputs = classify(objs)
    for svc in inputs.services:
        dp.inputs.set_service(svc)
    for sl in inputs.slices:
        dp.inputs.set_slice(sl)


def refused_by_the_fake(e: Element) -> str | None:
    """FakeBackend.refuse: what nft says of the bad address (it takes it for a host name)."""
    return "Could not resolve hostname: Name or service not known" if BAD_ADDRESS in e.key else None


def run_poisoned_nftproxy() -> None:
    """``python -m tests.support.poison ARGS``: the nftproxy command with the poison injected."""
    import nftproxy.dataplane.first_load  # noqa: PLC0415
    import nftproxy.dataplane.sync  # noqa: PLC0415
    from nftproxy.cli import entry  # noqa: PLC0415

    for module in (nftproxy.dataplane.sync, nftproxy.dataplane.first_load):  # both compile Services
        setattr(module, "compile_fragment", poisoned())  # noqa: B010
    entry()


if __name__ == "__main__":
    run_poisoned_nftproxy()
