"""API objects (JSON-shaped dicts, as the builder and the strategies make them) in protobuf, as
the apiserver sends them: the message, its ``k8s\\x00`` envelope, a watch frame; and the JSON
the apiserver would send for the same stored object (``apiserver_json``: Go's encoding/json
drops an empty ``omitempty`` field and sends a plain field's zero value).

``message`` refuses (None) what Go's JSON decoding refuses, so no object the apiserver cannot hold
is compared: a value of the wrong JSON type, an int32 out of range.
"""

from __future__ import annotations

import copy
import struct
from datetime import datetime
from typing import Any

from google.protobuf import descriptor, json_format

from nftproxy.operator import wire
from nftproxy.operator.k8spb import core_v1_pb2, discovery_v1_pb2, meta_v1_pb2, runtime_pb2

Obj = dict[str, Any]
FD = descriptor.FieldDescriptor
_INTS = {FD.TYPE_INT32: (-(2**31), 2**31 - 1), FD.TYPE_INT64: (-(2**63), 2**63 - 1)}


def _go_decodes(value: Any, desc: Any) -> bool:
    """Would Go's encoding/json decode ``value`` into this message type? (null is a zero value)."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    for key, v in value.items():
        field = desc.fields_by_name.get(key) or desc.fields_by_camelcase_name.get(key)
        if field is None or v is None:
            continue  # an unknown field is dropped; null leaves the zero value
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
                return False
        elif field.is_repeated:
            if not isinstance(v, list) or not all(x is not None and _one(x, field) for x in v):
                return False
        elif not _one(v, field):
            return False
    return True


def _one(v: Any, field: Any) -> bool:
    if field.type == FD.TYPE_MESSAGE:
        if field.message_type.full_name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
            return (type(v) is int and -(2**31) <= v < 2**31) or type(v) is str
        if field.message_type.full_name == "k8s.io.apimachinery.pkg.apis.meta.v1.Time":
            return type(v) is str  # RFC 3339
        return _go_decodes(v, field.message_type)
    if field.type in _INTS:
        low, high = _INTS[field.type]
        return type(v) is int and low <= v <= high
    if field.type == FD.TYPE_BOOL:
        return type(v) is bool
    if field.type == FD.TYPE_STRING:
        return type(v) is str
    return False


def _for_protobuf(obj: Any) -> Any:
    """The dict as json_format reads it: an int-or-string as its message, a time as seconds."""
    if isinstance(obj, list):
        return [_for_protobuf(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k == "targetPort" and v is not None:
            v = {"type": 0, "intVal": v} if type(v) is int else {"type": 1, "strVal": v}
        elif k in ("creationTimestamp", "deletionTimestamp") and isinstance(v, str):
            v = {"seconds": int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp())}
        elif k == "kind":
            continue
        else:
            v = _for_protobuf(v)
        out[k] = v
    return out


def message(kind: wire.Kind, obj: Obj) -> Any | None:
    """``obj`` as ``kind``'s message; None when the apiserver could not hold it."""
    desc = kind.message.DESCRIPTOR
    if not _go_decodes(obj, desc):
        return None
    msg = kind.message()
    json_format.ParseDict(_for_protobuf(obj), msg, ignore_unknown_fields=True)
    return msg


def encoded(msg: Any) -> bytes:
    """As the apiserver sends an object: ``k8s\\x00`` and a runtime.Unknown around it."""
    return wire.MAGIC + bytes(runtime_pb2.Unknown(raw=msg.SerializeToString()).SerializeToString())


def list_body(kind: wire.Kind, items: list[Any], version: str, token: str | None = None) -> bytes:
    page = kind.list_message(items=items)
    page.metadata.resourceVersion = version
    if token:
        setattr(page.metadata, "continue", token)
    return encoded(page)


def watch_frame(event_type: str, msg: Any) -> bytes:
    """One frame of a protobuf watch: its length, then the WatchEvent."""
    event = meta_v1_pb2.WatchEvent(type=event_type)
    event.object.raw = encoded(msg)
    data = bytes(event.SerializeToString())
    return struct.pack(">I", len(data)) + data


def gone_frame(message_text: str = "too old resource version") -> bytes:
    return watch_frame("ERROR", meta_v1_pb2.Status(code=410, reason="Expired", message=message_text))


# --------------------------------------------------------------------------- the JSON served

# Go's json tags of the fields the parser reads: plain fields tagged omitempty (left out when
# empty), and plain fields without it (always sent, null read as the zero value)
_OMITEMPTY = {
    "spec": {"type", "clusterIP", "clusterIPs", "externalIPs", "sessionAffinity", "loadBalancerSourceRanges",
             "externalTrafficPolicy", "healthCheckNodePort", "ports"},
    "port": {"name", "protocol", "nodePort"},
    "ingress": {"ip"},
    "hints": {"forZones", "forNodes"},
}  # fmt: skip
_ZERO: dict[str, Obj] = {"port": {"port": 0}, "slice": {"addressType": ""}, "zone": {"name": ""}}


def _drop_empty(d: Obj, keys: set[str]) -> None:
    for key in keys:
        if key in d and d[key] in (None, "", 0, [], {}, False):
            del d[key]


def _zero(d: Obj, zeros: dict[str, Any]) -> None:
    for key, zero in zeros.items():
        if d.get(key) is None:
            d[key] = zero


def _nulls_out(d: Obj) -> None:
    """A null pointer field is left out (omitempty)."""
    for key in [k for k, v in d.items() if v is None]:
        del d[key]


def apiserver_json(kind: wire.Kind, obj: Obj) -> Obj:
    """The JSON the apiserver sends for ``obj`` once stored (for the fields the parser reads)."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata") or {}
    obj["metadata"] = meta
    _drop_empty(meta, {"name", "namespace", "resourceVersion", "labels", "annotations"})
    if kind is wire.SERVICES:
        spec = obj["spec"] = obj.get("spec") or {}
        _nulls_out(spec)
        _drop_empty(spec, _OMITEMPTY["spec"])
        for p in spec.get("ports") or []:
            _nulls_out(p)
            _zero(p, _ZERO["port"])
            _drop_empty(p, _OMITEMPTY["port"])
        config = spec.get("sessionAffinityConfig")
        if isinstance(config, dict):
            _nulls_out(config)
            if isinstance(config.get("clientIP"), dict):
                _nulls_out(config["clientIP"])
        lb = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        obj.pop("status", None)
        if lb:
            for i in lb:
                _nulls_out(i)
                _drop_empty(i, _OMITEMPTY["ingress"])
            obj["status"] = {"loadBalancer": {"ingress": lb}}
        return obj
    _zero(obj, _ZERO["slice"])
    for e in obj.get("endpoints") or []:
        _nulls_out(e)
        e["conditions"] = e.get("conditions") or {}
        _nulls_out(e["conditions"])
        if isinstance(e.get("hints"), dict):
            _nulls_out(e["hints"])
            _drop_empty(e["hints"], _OMITEMPTY["hints"])
            for z in [*e["hints"].get("forZones", []), *e["hints"].get("forNodes", [])]:
                _zero(z, _ZERO["zone"])
    for p in obj.get("ports") or []:
        _nulls_out(p)
    return obj


def lean(kind: wire.Kind, obj: Obj) -> Obj | None:
    """``obj`` sent in protobuf and read back (``wire``); None when the apiserver could not hold it."""
    msg = message(kind, obj)
    if msg is None:
        return None
    item: Obj = kind.list_page(list_body(kind, [msg], "1"))["items"][0]
    return item


__all__ = ["apiserver_json", "core_v1_pb2", "discovery_v1_pb2", "gone_frame", "lean", "list_body", "watch_frame"]
