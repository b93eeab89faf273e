"""Where nftproxy's CPU goes: py-spy's collapsed stacks by category, inclusive shares, top frames."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.churn_vs_kubeproxy.results import Run

CATEGORIES = (
    # (category, substrings of a frame "function (file:line)"), the first that matches the
    # innermost frames wins, looked for from the innermost frame out
    ("JSON decode", ("json/decoder.py", "json/__init__.py", "(json)")),
    ("netlink / kernel", ("nftproxy/nft/",)),
    ("compile", ("nftproxy/compiler/",)),
    ("parse", ("nftproxy/model/",)),
    ("dataplane", ("nftproxy/dataplane/",)),
    ("metrics / status", ("nftproxy/operator/metrics.py", "nftproxy/operator/status.py", "prometheus_client/")),
    ("protobuf read (wire)", ("nftproxy/operator/wire.py", "google/protobuf/")),
    ("http.client reads", ("http/client.py",)),
    ("nftproxy operator", ("nftproxy/operator/", "nftproxy/heap.py")),
    ("kopf", ("kopf/",)),
    ("aiohttp / network", ("aiohttp/", "yarl/", "multidict/", "ssl.py", "asyncio/sslproto.py", "selector_events.py")),
    ("asyncio loop", ("asyncio/",)),
)


def categorize(stack: str) -> str:
    """The category of one collapsed stack (py-spy's raw format: frames outermost first, ';'
    between them): the category of its innermost frame that belongs to one."""
    for frame in reversed(stack.split(";")):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other"


def profile_table(collapsed: str) -> list[tuple[str, int, float]]:
    """(category, samples, share) from py-spy's collapsed output ("stack count" lines), most first."""
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[categorize(stack)] += int(n)
    total = sum(counts.values()) or 1
    return [(k, v, v / total) for k, v in counts.most_common()]


INCLUSIVE = (
    # (what, substrings of any frame of the stack): share of the samples whose stack has one
    ("kopf (its watch stream, queues, workers, and our handlers below it)", ("kopf/",)),
    ("  our kopf handlers (parse + queue)", ("nftproxy/operator/handlers.py",)),
    ("  aiohttp + SSL reads", ("aiohttp/", "ssl.py", "sslproto.py")),
    ("our watches (nftproxy/operator/reflector.py, their threads)", ("nftproxy/operator/reflector.py",)),
    ("  protobuf read (nftproxy/operator/wire.py)", ("nftproxy/operator/wire.py",)),
    ("our watches' batches on the loop (reflector._flush: track)", ("_flush (nftproxy/operator/reflector.py",)),
    ("JSON decode (anywhere)", ("json/decoder.py", "json/__init__.py")),
    ("parse (nftproxy/model)", ("nftproxy/model/",)),
    ("the syncer's sync (nftproxy/operator/syncer.py)", ("nftproxy/operator/syncer.py",)),
    ("  compile (nftproxy/compiler)", ("nftproxy/compiler/",)),
    ("  dataplane (nftproxy/dataplane)", ("nftproxy/dataplane/",)),
    ("  netlink / kernel (nftproxy/nft)", ("nftproxy/nft/",)),
    ("epoll (the event loop waiting or polling)", ("selectors.py",)),
)


def inclusive_table(collapsed: str) -> list[tuple[str, float]]:
    """(what, share of the samples whose stack holds one of its frames), in INCLUSIVE's order."""
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if not (stack and n.isdigit()):
            continue
        total += int(n)
        for what, needles in INCLUSIVE:
            if any(x in stack for x in needles):
                counts[what] += int(n)
    return [(what, counts[what] / (total or 1)) for what, _ in INCLUSIVE]


def self_frames(collapsed: str, top: int = 15) -> list[tuple[str, int]]:
    """The innermost frames with the most samples."""
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[stack.split(";")[-1]] += int(n)
    return counts.most_common(top)


def print_profile(path: Path, r: Run) -> None:
    try:
        collapsed = path.read_text()
    except FileNotFoundError:
        print("  (no profile written)")
        return
    total = r.per_min(r.user_s + r.system_s)
    print(f"\nWhere nftproxy's CPU goes at {r.rate:g} writes/s (py-spy, {r.seconds:.0f} s, {total:.2f} CPU s/min "
          "while profiled; share of the samples, by innermost known frame):")  # fmt: skip
    for name, n, share in profile_table(collapsed):
        print(f"  {name:<20} {share * 100:5.1f} %  ({n} samples)")
    print("  inclusive (a sample counts for each of these its stack passes through):")
    for what, share in inclusive_table(collapsed):
        print(f"    {share * 100:5.1f} %  {what}")
    print("  top frames:")
    for frame, n in self_frames(collapsed):
        print(f"    {n:6d}  {frame[:150]}")
