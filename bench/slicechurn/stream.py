"""The stream of EndpointSlice writes: rolling Deployments, the same writes for the same seed (pure)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from ipaddress import IPv4Address
from typing import Any

from bench.apiserver import NS
from testkit.k8s import objects

TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
ENDPOINTS = 10
NEW_POD_BASE = int(IPv4Address("10.192.0.0"))  # the stream's new pods (the bulk is 10.128.0.0 on)


@dataclass
class Pod:
    address: str
    node: str
    state: str = "ready"  # "new" (not ready yet), "ready", "terminating"


@dataclass
class Rollout:
    """One Service's slice while its Deployment rolls: each ``step()`` is the next write."""

    index: int
    pods: list[Pod]
    replaced: int = 0  # pods replaced so far
    phase: int = 0  # 0: add a new pod; 1: it turns ready, the oldest ready turns terminating; 2: drop it

    def done(self) -> bool:
        return self.replaced >= ENDPOINTS and self.phase == 0

    def step(self, new_address: Callable[[], str]) -> str | None:
        """Advance one write; returns the address that turned ready by it (phase 1), else None."""
        if self.phase == 0:
            self.pods.append(Pod(new_address(), f"n{(self.index + self.replaced) % 50}", "new"))
            self.phase = 1
            return None
        if self.phase == 1:
            new = next(p for p in self.pods if p.state == "new")
            new.state = "ready"
            old = next(p for p in self.pods if p.state == "ready")
            old.state = "terminating"
            self.phase = 2
            return new.address
        self.pods = [p for p in self.pods if p.state != "terminating"]
        self.replaced += 1
        self.phase = 0
        return None

    def body(self, trigger: str) -> dict[str, Any]:
        eps = []
        for p in self.pods:
            if p.state == "new":
                eps.append(objects.endpoint(p.address, ready=False, serving=False, terminating=False, node=p.node))
            elif p.state == "ready":
                eps.append(objects.endpoint(p.address, node=p.node))
            else:
                eps.append(objects.endpoint(p.address, ready=False, serving=True, terminating=True, node=p.node))
        return objects.endpoint_slice(
            f"s{self.index}-x", f"s{self.index}", eps, [objects.port(8080, "http")], namespace=NS,
            metadata={"annotations": {TRIGGER: trigger}},
        )  # fmt: skip


def initial_pods(i: int) -> list[Pod]:
    """The pods of bench.apiserver.endpoint_slice(i, 10): what the bulk holds."""
    base = int(IPv4Address("10.128.0.0")) + i * ENDPOINTS
    return [Pod(str(IPv4Address(base + j)), f"n{j % 50}") for j in range(ENDPOINTS)]


@dataclass(frozen=True)
class Write:
    index: int  # the Service
    body: dict[str, Any]  # its slice after this write; the trigger time is set when it is sent
    ready: str | None  # the address this write makes ready, if any


def stream(services: int, concurrent: int, seed: int) -> Iterator[Write]:
    """The writes, in order: ``concurrent`` Services roll at once, round-robin; a finished one
    hands its place to the next Service of a shuffled order (all rolled: the order again, each
    from the pods it has then). Same arguments, same writes."""
    rng = random.Random(seed)
    order = list(range(services))
    rng.shuffle(order)
    pods: dict[int, list[Pod]] = {}
    counter = iter(range(1 << 30))
    position = iter(range(1 << 30))

    def new_address() -> str:
        return str(IPv4Address(NEW_POD_BASE + next(counter)))

    rolling: list[Rollout] = []

    def fresh() -> Rollout:
        busy = {r.index for r in rolling}
        while (i := order[next(position) % services]) in busy:  # a Service rolls once at a time
            pass
        return Rollout(i, pods.pop(i) if i in pods else initial_pods(i))

    for _ in range(min(concurrent, services)):
        rolling.append(fresh())
    while True:
        for k in range(len(rolling)):
            if rolling[k].done():
                pods[rolling[k].index] = rolling[k].pods
                rolling[k] = fresh()
            r = rolling[k]
            ready = r.step(new_address)
            yield Write(r.index, r.body(""), ready)


def touched(services: int, rate: float, seconds: float, seed: int) -> set[int]:
    """The Services a stream touches in ``seconds`` at ``rate`` (with a margin of 20 %)."""
    writes = stream(services, max(1, round(rate)), seed)
    return {next(writes).index for _ in range(int(rate * seconds * 1.2) + 10)}


def rfc3339(t: float) -> str:
    """``t`` (time.time()) as the endpointslice controller writes the trigger time (RFC 3339, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
