"""Read Services, EndpointSlices and Nodes from YAML/JSON files (multi-document, v1 List)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nftproxy.model.parse import Ignored, parse_endpoint_slice, parse_node, parse_service
from nftproxy.model.types import EndpointSlice, Node, Service, Skipped


class ManifestError(Exception):
    """A file that cannot be read or parsed at all (one line, no traceback)."""


@dataclass(frozen=True)
class Inputs:
    services: tuple[Service, ...]
    slices: tuple[EndpointSlice, ...]
    nodes: tuple[Node, ...]
    skipped: tuple[Skipped, ...]
    ignored: tuple[str, ...]  # "ns/name" of Services deliberately not proxied (headless, …)


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def _documents(path: str) -> Iterator[Any]:
    try:
        docs = list(yaml.safe_load_all(_read(path)))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ManifestError(f"{path}: not valid YAML/JSON{where}: {problem}") from None
    for doc in docs:
        if isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ManifestError(f"{path}: {doc.get('kind')}.items is not a list")
            yield from items
        elif doc is not None:
            yield doc


def load(paths: Iterable[str], proxy_name: str | None = None) -> Inputs:
    return classify((obj for p in paths for obj in _documents(p)), proxy_name)


def classify(objects: Iterable[Any], proxy_name: str | None = None) -> Inputs:
    services: list[Service] = []
    slices: list[EndpointSlice] = []
    nodes: list[Node] = []
    skipped: list[Skipped] = []
    ignored: list[str] = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            skipped.append(Skipped("object", "", "?", f"not a Kubernetes object: {str(obj)[:40]!r}"))
            continue
        kind = obj.get("kind")
        result: Service | EndpointSlice | Node | Skipped | Ignored
        if kind == "Service":
            result = parse_service(obj, proxy_name)
        elif kind == "EndpointSlice":
            result = parse_endpoint_slice(obj)
        elif kind == "Node":
            result = parse_node(obj)
        else:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
            name = str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"
            skipped.append(Skipped(str(kind), "", name, "not a Service, EndpointSlice or Node"))
            continue
        if isinstance(result, Service):
            services.append(result)
        elif isinstance(result, EndpointSlice):
            slices.append(result)
        elif isinstance(result, Node):
            nodes.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
        elif kind == "Service":
            meta = obj["metadata"]
            ignored.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return Inputs(tuple(services), tuple(slices), tuple(nodes), tuple(skipped), tuple(ignored))
