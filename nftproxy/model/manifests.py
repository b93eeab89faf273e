"""Read Services, EndpointSlices and Nodes from YAML/JSON files (multi-document, v1 List)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nftproxy.model.parse import (
    Ignored,
    parse_endpoint_slice,
    parse_node,
    parse_service,
    parse_service_cidr,
    warnings_report,
)
from nftproxy.model.types import EndpointSlice, Node, Service, ServiceCIDR, Skipped


class ManifestError(Exception):
    """A file that cannot be read or parsed at all (one line, no traceback)."""


@dataclass(frozen=True)
class Inputs:
    services: tuple[Service, ...]
    slices: tuple[EndpointSlice, ...]
    nodes: tuple[Node, ...]
    skipped: tuple[Skipped, ...]
    ignored: tuple[str, ...]  # "ns/name" of Services deliberately not proxied (headless, …)
    service_cidrs: tuple[ServiceCIDR, ...] = ()


def _read(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()  # bytes: no line-by-line decoding of a 16 MB pipe
        else:
            with open(path, "rb") as f:
                data = f.read()
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


# libyaml's parser when PyYAML was built with it (~10x the pure-Python one); else the same rules.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(path: str, text: str) -> list[Any]:
    """JSON (what ``kubectl get -o json`` prints) is read as JSON: ~100x faster than YAML's
    parser on the same text. Anything else, or JSON that json refuses (e.g. several documents
    one after the other), goes to the YAML parser, which also names the line of an error."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [json.loads(text)]
        except ValueError:
            pass
    try:
        return list(yaml.load_all(text, Loader=_YAML_LOADER))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ManifestError(f"{path}: not valid YAML/JSON{where}: {problem}") from None


def _documents(path: str) -> Iterator[Any]:
    for doc in _parse(path, _read(path)):
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
    cidrs: list[ServiceCIDR] = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            skipped.append(Skipped("object", "", "?", f"not a Kubernetes object: {str(obj)[:40]!r}"))
            continue
        kind = obj.get("kind")
        result: Service | EndpointSlice | Node | ServiceCIDR | Skipped | Ignored
        if kind == "Service":
            result = parse_service(obj, proxy_name)
        elif kind == "EndpointSlice":
            result = parse_endpoint_slice(obj)
        elif kind == "Node":
            result = parse_node(obj)
        elif kind == "ServiceCIDR":
            result = parse_service_cidr(obj)
        else:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
            name = str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"
            skipped.append(Skipped(str(kind), "", name, "not a Service, EndpointSlice, Node or ServiceCIDR"))
            continue
        if isinstance(result, Node | ServiceCIDR) and (report := warnings_report(result)) is not None:
            skipped.append(report)  # used, with an item left out
        if isinstance(result, Service):
            services.append(result)
        elif isinstance(result, EndpointSlice):
            slices.append(result)
        elif isinstance(result, Node):
            nodes.append(result)
        elif isinstance(result, ServiceCIDR):
            cidrs.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
        elif kind == "Service":
            meta = obj["metadata"]
            ignored.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return Inputs(tuple(services), tuple(slices), tuple(nodes), tuple(skipped), tuple(ignored), tuple(cidrs))
