"""The syncer's inputs, like kube-proxy's change trackers: the Services and EndpointSlices last
seen, and which Services changed since they were last compiled."""

from __future__ import annotations

from collections import defaultdict

from nftproxy.model.types import EndpointSlice, Service, Skipped


class InputTracker:
    def __init__(self) -> None:
        self.services: dict[str, Service] = {}
        self.slices: dict[str, EndpointSlice] = {}
        self.slices_by_service: dict[str, dict[str, EndpointSlice]] = defaultdict(dict)
        self.ignored: set[str] = set()  # Services that exist but are not ours to proxy
        self.dirty: set[str] = set()  # Services to recompile
        self.orphaned: set[str] = set()  # Service keys with slices but no Service (not ignored)

    def set_service(self, svc: Service) -> None:
        self.ignored.discard(svc.key)
        self.orphaned.discard(svc.key)
        if self.services.get(svc.key) != svc:
            self.services[svc.key] = svc
            self.dirty.add(svc.key)

    def ignore_service(self, key: str) -> None:
        """A Service that exists but is not ours to proxy (headless, other proxy's label …)."""
        self.delete_service(key)
        self.ignored.add(key)
        self.orphaned.discard(key)

    def delete_service(self, key: str) -> None:
        self.ignored.discard(key)
        if self.services.pop(key, None) is not None:
            self.dirty.add(key)
        self._check_orphan(key)

    def set_slice(self, sl: EndpointSlice) -> None:
        old = self.slices.get(sl.key)
        if old == sl:
            return
        self.slices[sl.key] = sl
        if old is not None and old.service_key != sl.service_key:
            self._drop(old)
        self.slices_by_service[sl.service_key][sl.key] = sl
        self.dirty.add(sl.service_key)
        self._check_orphan(sl.service_key)

    def delete_slice(self, key: str) -> None:
        old = self.slices.pop(key, None)
        if old is not None:
            self._drop(old)

    def _drop(self, old: EndpointSlice) -> None:
        by = self.slices_by_service[old.service_key]
        by.pop(old.key, None)
        if not by:
            del self.slices_by_service[old.service_key]
        self.dirty.add(old.service_key)
        self._check_orphan(old.service_key)

    def _check_orphan(self, key: str) -> None:
        if self.slices_by_service.get(key) and key not in self.services and key not in self.ignored:
            self.orphaned.add(key)
        else:
            self.orphaned.discard(key)

    def orphans(self) -> list[Skipped]:
        """EndpointSlices of no (known) Service, with the reason: as many as there are, no more."""
        return [
            Skipped("EndpointSlice", s.namespace, s.name, f"no Service {s.service_key}")
            for key in sorted(self.orphaned)
            for s in self.slices_by_service[key].values()
        ]

    def inputs(self, key: str) -> tuple[Service | None, list[EndpointSlice]]:
        """A Service (None: gone) and its slices, in name order."""
        slices = self.slices_by_service.get(key)
        if not slices:
            return self.services.get(key), []
        if len(slices) == 1:  # most Services
            return self.services.get(key), list(slices.values())
        return self.services.get(key), [s for _, s in sorted(slices.items())]

    def everything_dirty(self) -> None:
        self.dirty.update(self.services)
