"""Per-event cost of a churned EndpointSlice from the watch's bytes to the change tracker, in µs:
the JSON way (a watch line: ``json.loads``, the parser) and the protobuf way our watches take
(``operator/wire.py``: the frame, the WatchEvent and its object decoded by upb, the lean dict,
the parser), plus the tracker's queueing. No apiserver: the bytes are made here, as the
apiserver sends them (bench.apiserver.stored: defaults and managedFields included; protobuf:
its ``k8s\\x00`` envelope); also json_format.MessageToDict, the generic alternative to the lean
dict.

``python -m bench events [--endpoints 10] [--events 20000]``. What the per-event figures leave
out (kopf's own processing, the event loop's wake-ups, the syncs) is in the py-spy profile of
``python -m bench churn_vs_kubeproxy --profile-seconds 60``; docs/performance.md puts both together.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.protobuf import json_format

from bench.apiserver import stored
from bench.figures import figure
from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.parse import TRIGGER_TIME, parse_endpoint_slice
from nftproxy.nft.fake import FakeBackend
from nftproxy.operator import wire
from nftproxy.operator.k8spb import discovery_v1_pb2, meta_v1_pb2, runtime_pb2
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.settings import Settings
from nftproxy.operator.syncer import Syncer


def _seconds(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def _as_protobuf(obj: dict[str, Any]) -> Any:
    """The slice as its message (managedFields' fieldsV1 as its raw JSON, as stored)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    meta = dict(body["metadata"])
    managed = meta.pop("managedFields", [])
    meta["creationTimestamp"] = {"seconds": _seconds(meta["creationTimestamp"])}
    msg = discovery_v1_pb2.EndpointSlice()
    json_format.ParseDict({**body, "metadata": meta}, msg, ignore_unknown_fields=True)
    for m in managed:
        entry = msg.metadata.managedFields.add(
            manager=m["manager"], operation=m["operation"], apiVersion=m["apiVersion"], fieldsType=m["fieldsType"]
        )
        entry.time.seconds = _seconds(m["time"])
        entry.fieldsV1.Raw = json.dumps(m["fieldsV1"], separators=(",", ":")).encode()
    return msg


def _frame(event_type: str, msg: Any) -> bytes:
    event = meta_v1_pb2.WatchEvent(type=event_type)
    event.object.raw = wire.MAGIC + runtime_pb2.Unknown(raw=msg.SerializeToString()).SerializeToString()
    data = bytes(event.SerializeToString())
    return struct.pack(">I", len(data)) + data


def _per_event(n: int, fn: Callable[[int], Any]) -> float:
    """µs per call of ``fn(i)``, the best of 3 rounds of ``n``."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench events", description=__doc__)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args(argv)
    n = args.events
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    obj = dict(stored(7, args.endpoints, now)[1][1])
    obj["metadata"]["annotations"] = {TRIGGER_TIME: now}
    obj["metadata"]["resourceVersion"] = "1000"
    line = json.dumps({"type": "MODIFIED", "object": obj}, separators=(",", ":")).encode() + b"\n"
    frame = _frame("MODIFIED", _as_protobuf(obj))
    frames = frame * n
    decoded = json.loads(line)["object"]
    event = wire.SLICES.event(frame[4:])[1]
    msg = discovery_v1_pb2.EndpointSlice.FromString(
        wire.unwrap(meta_v1_pb2.WatchEvent.FromString(frame[4:]).object.raw)
    )
    assert parse_endpoint_slice(event) == parse_endpoint_slice(decoded), "the two ways parse alike"

    settings = Settings(
        proxy=ProxyConfig(node_name="n1"), kubeconfig=None, min_sync_period=0.0, sync_period=30.0, healthz=None,
        metrics=None, netns=None, status_period=1.0, log_level="info",
    )  # fmt: skip
    changes = Syncer(Dataplane(FakeBackend(), settings.proxy), settings, Metrics()).changes
    changes.mark_loaded()
    versions = [str(2000 + i) for i in range(n * 3)]

    def track(i: int) -> None:  # a new version each time (else skipped as already held)
        event["metadata"]["resourceVersion"] = versions[i]
        changes.slice_changed("ns7/svc-7-abcde", event)
        if i % 1000 == 999:
            changes.pending.clear()

    parsed = parse_endpoint_slice(event)
    rows = [
        ("json: json.loads of the watch line", _per_event(n, lambda _: json.loads(line))),
        ("protobuf: frame read (wire.frames)", _per_event(1, lambda _: list(wire.frames(io.BytesIO(frames)))) / n),
        (
            "protobuf: WatchEvent + object decoded (upb), lean dict",
            _per_event(n, lambda _: wire.SLICES.event(frame[4:])),
        ),
        ("  of which the lean dict (wire.endpoint_slice)", _per_event(n, lambda _: wire.endpoint_slice(msg))),
        ("  (alternative: json_format.MessageToDict)", _per_event(n, lambda _: json_format.MessageToDict(msg))),
        ("parse (parse_endpoint_slice) of the JSON dict", _per_event(n, lambda _: parse_endpoint_slice(decoded))),
        ("parse (parse_endpoint_slice) of the lean dict", _per_event(n, lambda _: parse_endpoint_slice(event))),
        ("track (ChangeTracker.slice_changed, parse included)", _per_event(n, track)),
    ]
    assert parsed is not None
    print(
        f"one EndpointSlice of {args.endpoints} endpoints: JSON line {len(line):,} B, protobuf frame {len(frame):,} B"
    )
    for what, us in rows:
        print(f"  {what:58s} {us:7.1f} µs")
        figure(what, round(us, 2), "µs", endpoints=args.endpoints)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
