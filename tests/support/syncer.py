"""A Syncer over the fake backend, as the syncer's and the initial load's tests build it."""

from __future__ import annotations

from typing import Any

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.settings import Settings
from nftproxy.operator.syncer import Syncer
from testkit.k8s import objects as k


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = {
        "proxy": ProxyConfig(node_name="n1"),
        "kubeconfig": None,
        "min_sync_period": 0.0,
        "sync_period": 30.0,
        "healthz": None,
        "metrics": None,
        "netns": None,
        "status_period": 1.0,
        "log_level": "info",
    }
    return Settings(**{**base, **kw})


def make(**kw: Any) -> tuple[Syncer, FakeBackend]:
    fake = FakeBackend()
    s = settings(**kw)
    return Syncer(Dataplane(fake, s.proxy), s, Metrics()), fake


def svc(name: str, ip: str) -> k.Obj:
    return k.service(name, [ip], [k.port(80, "http")])


def elements(fake: FakeBackend, name: str) -> set[tuple[str, ...]]:
    return set(fake.tables[(Family.IP, "nftproxy")].elements[name])
