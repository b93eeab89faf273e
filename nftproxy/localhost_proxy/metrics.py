"""The localhost NodePort proxy's metrics: the counters and gauge it updates (the operator's
prometheus metrics, ``nftproxy.operator.metrics.Metrics``, seen through a protocol), and the
packets the table rejected on localhost NodePorts, read from its named counters."""

from __future__ import annotations

from typing import Protocol

from nftproxy.compiler import names
from nftproxy.compiler.config import ProxyConfig
from nftproxy.nft.backend import Backend
from nftproxy.nft.objects import Family

FAMILY = {4: "IPv4", 6: "IPv6"}  # kube-proxy's ip_family label values


class Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Set(Protocol):
    def set(self, value: float) -> None: ...


class CounterFamily(Protocol):
    def labels(self, *labelvalues: str) -> Inc: ...


class GaugeFamily(Protocol):
    def labels(self, *labelvalues: str) -> Set: ...


class ProxyMetrics(Protocol):
    """What the proxy counts, each labelled by ip_family (``FAMILY``)."""

    @property
    def localhost_listeners(self) -> GaugeFamily: ...
    @property
    def localhost_listener_failures(self) -> CounterFamily: ...
    @property
    def localhost_dial_retries(self) -> CounterFamily: ...
    @property
    def localhost_unserved(self) -> CounterFamily: ...
    @property
    def localhost_connections(self) -> CounterFamily: ...


def localhost_rejections(backend: Backend, config: ProxyConfig) -> dict[tuple[str, str], int]:
    """(ip_family, protocol) -> the packets the table rejected on localhost NodePorts: its named
    counters (kube-proxy's ``kubeproxy_nftables_localhost_nodeport_rejected_packets_total``)."""
    out: dict[tuple[str, str], int] = {}
    for family in Family:
        rejected = config.localhost_rejected(family.version)
        if not rejected:
            continue
        packets = backend.counter_packets(family, config.table)
        for proto in rejected:
            n = packets.get(names.localhost_nodeport_rejected_counter(proto))
            if n is not None:
                out[(FAMILY[family.version], proto.upper())] = n
    return out
