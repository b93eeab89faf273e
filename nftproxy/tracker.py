"""The syncer's inputs, like kube-proxy's change trackers: the Services and EndpointSlices last
seen, and which Services changed since they were last compiled."""

from __future__ import annotations

from collections import defaultdict

from nftproxy.model.types import EndpointSlice, Service


class InputTracker:
    def __init__(self) -> None:
        self.services: dict[str, Service] = {}
        self.slices: dict[str, EndpointSlice] = {}
        self.slices_by_service: dict[str, dict[str, EndpointSlice]] = defaultdict(dict)
        self.ignored: set[str] = set()  # Services that exist but are not ours to proxy
        self.dirty: set[str] = set()  # Services to recompile

    def set_service(self, svc: Service) -> None:
        self.ignored.discard(svc.key)
        if self.services.get(svc.key) != svc:
            self.services[svc.key] = svc
            self.dirty.add(svc.key)

    def ignore_service(self, key: str) -> None:
        """A Service that exists but is not ours to proxy (headless, other proxy's label …)."""
        self.delete_service(key)
        self.ignored.add(key)

    def delete_service(self, key: str) -> None:
        self.ignored.discard(key)
        if self.services.pop(key, None) is not None:
            self.dirty.add(key)

    def set_slice(self, sl: EndpointSlice) -> None:
        old = self.slices.get(sl.key)
        if old == sl:
            return
        self.slices[sl.key] = sl
        if old is not None and old.service_key != sl.service_key:
            self.slices_by_service[old.service_key].pop(sl.key, None)
            self.dirty.add(old.service_key)
        self.slices_by_service[sl.service_key][sl.key] = sl
        self.dirty.add(sl.service_key)

    def delete_slice(self, key: str) -> None:
        old = self.slices.pop(key, None)
        if old is not None:
            self.slices_by_service[old.service_key].pop(key, None)
            self.dirty.add(old.service_key)

    def inputs(self, key: str) -> tuple[Service | None, list[EndpointSlice]]:
        """A Service (None: gone) and its slices, in name order."""
        slices = self.slices_by_service.get(key)
        return self.services.get(key), [s for _, s in sorted(slices.items())] if slices else []

    def everything_dirty(self) -> None:
        self.dirty.update(self.services)
