"""Services and EndpointSlices as the apiserver sends them in protobuf, read into the lean
JSON-shaped dicts ``model/parse.py`` takes.

kube-proxy's informers ask for protobuf (``application/vnd.kubernetes.protobuf``): a churned
EndpointSlice is ~0.8 KB on the wire against ~1.9 KB as JSON, and it decodes in C (the
``protobuf`` package's upb backend) with the classes ``hack/gen-proto.sh`` generates from
upstream's ``generated.proto`` (``k8spb``). Each object (in a list's ``items``, in a watch event)
is read into a dict of the fields the parser and the change tracker read, spelled as the
apiserver's JSON spells them, and nothing else (as kube-proxy's informer drops managedFields):
``parse.py`` stays the one parser, and the JSON and protobuf forms of one object parse the same
(tests/unit/test_wire.py, tests/k8s/test_lean_watch.py against a real apiserver).

How a field reads in JSON, from Go's ``encoding/json``, and so here: a pointer field (``*bool``,
``*string``, ``*int32``) is there when set, whatever its value (protobuf's presence tells); a
plain field tagged ``omitempty`` is left out when empty, zero or false; a plain field without it
is always there (an empty list as ``[]``: the parser reads ``null`` and ``[]`` alike).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

from nftproxy.model.balancing import ANNOTATION as BALANCING_ANNOTATION
from nftproxy.model.parse import HEADLESS_LABEL, PROXY_NAME_LABEL, SERVICE_NAME_LABEL, TRIGGER_TIME
from nftproxy.operator.k8spb import core_v1_pb2, discovery_v1_pb2, meta_v1_pb2, runtime_pb2

MAGIC = b"k8s\x00"  # before every protobuf-encoded object: a runtime.Unknown follows

Obj = dict[str, Any]
SERVICE_LABELS = (PROXY_NAME_LABEL,)
SERVICE_ANNOTATIONS = (BALANCING_ANNOTATION,)
SLICE_LABELS = (SERVICE_NAME_LABEL, HEADLESS_LABEL)
SLICE_ANNOTATIONS = (TRIGGER_TIME,)


class WireError(ValueError):
    """Not what the apiserver sends in protobuf."""


def unwrap(data: bytes) -> bytes:
    """The raw object inside the ``k8s\\x00`` + runtime.Unknown envelope."""
    if not data.startswith(MAGIC):
        raise WireError(f"not a Kubernetes protobuf object (starts {data[:4]!r})")
    unknown = runtime_pb2.Unknown.FromString(data[len(MAGIC) :])
    return bytes(unknown.raw)


def status_message(data: bytes) -> str | None:
    """An error answer's ``metav1.Status`` message (None when the body is not one)."""
    try:
        status = meta_v1_pb2.Status.FromString(unwrap(data))
    except (WireError, ValueError, Exception):  # a DecodeError is an Exception
        return None
    return status.message or status.reason or None


# --------------------------------------------------------------------------- objects


def _time(t: Any) -> str | None:
    """A metav1.Time as its JSON (RFC 3339, seconds, UTC); None for the zero time (JSON null)."""
    if not t.seconds:
        return None
    return datetime.fromtimestamp(t.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(m: Any, labels: tuple[str, ...], annotations: tuple[str, ...], created: bool = False) -> Obj:
    """``created``: with creationTimestamp (a Service's; its text costs ~2 µs, and the parser reads
    no slice's)."""
    meta: Obj = {}
    if m.name:
        meta["name"] = m.name
    if m.namespace:
        meta["namespace"] = m.namespace
    if m.resourceVersion:
        meta["resourceVersion"] = m.resourceVersion
    if m.labels:
        found = {k: m.labels[k] for k in labels if k in m.labels}
        if found:
            meta["labels"] = found
    if m.annotations:
        found = {k: m.annotations[k] for k in annotations if k in m.annotations}
        if found:
            meta["annotations"] = found
    if created and (text := _time(m.creationTimestamp)) is not None:
        meta["creationTimestamp"] = text
    return meta


def service(s: Any) -> Obj:
    """A core/v1 Service (its message) as the lean dict ``parse_service`` reads."""
    spec = s.spec
    out: Obj = {}
    if spec.type:
        out["type"] = spec.type
    if spec.clusterIP:
        out["clusterIP"] = spec.clusterIP
    if spec.clusterIPs:
        out["clusterIPs"] = list(spec.clusterIPs)
    if spec.ports:
        ports = []
        for p in spec.ports:
            port: Obj = {"port": p.port}
            if p.name:
                port["name"] = p.name
            if p.protocol:
                port["protocol"] = p.protocol
            if p.nodePort:
                port["nodePort"] = p.nodePort
            ports.append(port)
        out["ports"] = ports
    if spec.externalIPs:
        out["externalIPs"] = list(spec.externalIPs)
    if spec.loadBalancerSourceRanges:
        out["loadBalancerSourceRanges"] = list(spec.loadBalancerSourceRanges)
    if spec.externalTrafficPolicy:
        out["externalTrafficPolicy"] = spec.externalTrafficPolicy
    if spec.HasField("internalTrafficPolicy"):  # *string
        out["internalTrafficPolicy"] = spec.internalTrafficPolicy
    if spec.healthCheckNodePort:
        out["healthCheckNodePort"] = spec.healthCheckNodePort
    if spec.sessionAffinity:
        out["sessionAffinity"] = spec.sessionAffinity
    if spec.HasField("sessionAffinityConfig"):  # *SessionAffinityConfig
        config: Obj = {}
        if spec.sessionAffinityConfig.HasField("clientIP"):
            client = spec.sessionAffinityConfig.clientIP
            config["clientIP"] = {"timeoutSeconds": client.timeoutSeconds} if client.HasField("timeoutSeconds") else {}
        out["sessionAffinityConfig"] = config
    obj: Obj = {"metadata": _meta(s.metadata, SERVICE_LABELS, SERVICE_ANNOTATIONS, created=True), "spec": out}
    ingress = s.status.loadBalancer.ingress
    if ingress:
        lbs = []
        for i in ingress:
            lb: Obj = {}
            if i.ip:
                lb["ip"] = i.ip
            if i.HasField("ipMode"):  # *string
                lb["ipMode"] = i.ipMode
            lbs.append(lb)
        obj["status"] = {"loadBalancer": {"ingress": lbs}}
    return obj


def endpoint_slice(s: Any) -> Obj:
    """A discovery/v1 EndpointSlice (its message) as the lean dict ``parse_endpoint_slice`` reads."""
    endpoints = []
    for e in s.endpoints:
        c = e.conditions
        cond: Obj = {}
        if c.HasField("ready"):
            cond["ready"] = c.ready
        if c.HasField("serving"):
            cond["serving"] = c.serving
        if c.HasField("terminating"):
            cond["terminating"] = c.terminating
        ep: Obj = {"addresses": list(e.addresses), "conditions": cond}
        if e.HasField("nodeName"):
            ep["nodeName"] = e.nodeName
        if e.HasField("zone"):
            ep["zone"] = e.zone
        if e.HasField("hints"):
            hints: Obj = {}
            if e.hints.forZones:
                hints["forZones"] = [{"name": z.name} for z in e.hints.forZones]
            if e.hints.forNodes:
                hints["forNodes"] = [{"name": n.name} for n in e.hints.forNodes]
            ep["hints"] = hints
        endpoints.append(ep)
    ports = []
    for p in s.ports:
        port: Obj = {}
        if p.HasField("name"):
            port["name"] = p.name
        if p.HasField("protocol"):
            port["protocol"] = p.protocol
        if p.HasField("port"):
            port["port"] = p.port
        ports.append(port)
    return {
        "metadata": _meta(s.metadata, SLICE_LABELS, SLICE_ANNOTATIONS),
        "addressType": s.addressType,  # a plain field, no omitempty: always sent
        "endpoints": endpoints,
        "ports": ports,
    }


class Kind:
    """One resource read in protobuf: its message classes and its lean dict."""

    def __init__(self, message: Any, items: Any, lean: Callable[[Any], Obj]) -> None:
        self.message = message
        self.list_message = items
        self.lean = lean

    def list_page(self, data: bytes) -> Obj:
        """A list's page, shaped as its JSON (``metadata.resourceVersion``/``continue``, ``items``)."""
        page = self.list_message.FromString(unwrap(data))
        meta: Obj = {}
        if page.metadata.resourceVersion:
            meta["resourceVersion"] = page.metadata.resourceVersion
        if page.metadata.HasField("continue"):
            meta["continue"] = getattr(page.metadata, "continue")
        return {"metadata": meta, "items": [self.lean(item) for item in page.items]}

    def event(self, frame: bytes) -> tuple[str, Obj]:
        """A watch frame: (its type, the object as a lean dict; for ERROR, ``{"code", "message"}``
        of its Status; for BOOKMARK, only ``metadata.resourceVersion``)."""
        event = meta_v1_pb2.WatchEvent.FromString(frame)
        raw = unwrap(event.object.raw)
        if event.type == "ERROR":
            status = meta_v1_pb2.Status.FromString(raw)
            return event.type, {"code": status.code, "message": status.message, "reason": status.reason}
        obj = self.message.FromString(raw)
        if event.type == "BOOKMARK":
            return event.type, {"metadata": {"resourceVersion": obj.metadata.resourceVersion}}
        return event.type, self.lean(obj)


SERVICES = Kind(core_v1_pb2.Service, core_v1_pb2.ServiceList, service)
SLICES = Kind(discovery_v1_pb2.EndpointSlice, discovery_v1_pb2.EndpointSliceList, endpoint_slice)

_LENGTH = struct.Struct(">I")
MAX_FRAME = 64 << 20  # a bigger frame is no object of ours (the apiserver's limit is lower)


def frames(stream: BinaryIO) -> Iterator[bytes]:
    """A protobuf watch's frames (each a 4-byte big-endian length, then a WatchEvent), until
    the stream ends."""
    read = stream.read
    while True:
        head = read(4)
        if not head:
            return
        if len(head) < 4:
            head += _exactly(read, 4 - len(head))
        (n,) = _LENGTH.unpack(head)
        if n > MAX_FRAME:
            raise WireError(f"watch frame of {n} bytes")
        yield _exactly(read, n)


def _exactly(read: Callable[[int], bytes], n: int) -> bytes:
    data = read(n)
    while len(data) < n:
        more = read(n - len(data))
        if not more:
            raise WireError("watch stream cut inside a frame")
        data += more
    return data
