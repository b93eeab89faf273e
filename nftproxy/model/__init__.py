"""The Kubernetes objects nftproxy reads, as typed frozen dataclasses (no kopf, no kernel)."""

from nftproxy.model.types import (
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Node,
    Service,
    ServicePort,
    Skipped,
)

__all__ = [
    "Endpoint",
    "EndpointPort",
    "EndpointSlice",
    "Node",
    "Service",
    "ServicePort",
    "Skipped",
]
