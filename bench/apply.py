"""`nftproxy apply` benchmark: the whole process, against `nft -f` of a minimal equivalent table.

Run: ``.venv/bin/python -m bench.apply [--services 10000] [--endpoints 10] [--runs 5]``.
It writes, in a temporary directory:
* ``services.json``: one ``v1 List`` of N Services and N EndpointSlices of E endpoints, as
  ``kubectl get svc,endpointslices -A -o json`` prints them (metadata with uid, resourceVersion,
  creationTimestamp, labels, ownerReferences, written compact: ~25 MB at 10k x 10), and
  ``services.yaml``;
* ``minimal.nft``: the smallest table that serves the same traffic (a set of the N Service
  frontends, one map of the N x E endpoints keyed by frontend and slot, one DNAT rule with
  numgen): the kernel's and nft's own cost of loading that many elements;
then, in a network namespace made (and deleted) here, times each command as a whole process,
in turn (A B A B ...): `nftproxy apply -f services.json`, the same from stdin (`-f -`), from YAML,
and `nft -f minimal.nft`; the tables are deleted before each run, outside the timing (a cold
load, as a first apply).
Medians and the ratios to `nft -f`, pair by pair. ``--keep DIR`` writes the files there and
stops (to time them with another tool).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from ipaddress import IPv4Address
from pathlib import Path

from bench.figures import figure
from bench.listed import SERVICE_BASE, cluster_list, endpoint_ip


def minimal_table(services: int, endpoints: int, table: str = "minimal") -> str:
    """The least nft needs for the same traffic: frontends in a set, endpoints in one map."""
    vips = ",\n".join(f"{IPv4Address(SERVICE_BASE + 1 + i)} . tcp . 80" for i in range(services))
    eps = ",\n".join(
        f"{IPv4Address(SERVICE_BASE + 1 + i)} . 80 . {j} : {endpoint_ip(i, j, endpoints)} . 8080"
        for i in range(services)
        for j in range(endpoints)
    )
    return (
        f"table ip {table} {{\n"
        "  set frontends { type ipv4_addr . inet_proto . inet_service; elements = {\n"
        f"{vips} }} }}\n"
        f"  map endpoints {{ typeof ip daddr . th dport . numgen random mod {endpoints} : ip daddr . th dport; "
        "elements = {\n"
        f"{eps} }} }}\n"
        "  chain nat { type nat hook prerouting priority dstnat; policy accept;\n"
        "    meta l4proto tcp ip daddr . meta l4proto . th dport @frontends "
        f"dnat ip to ip daddr . th dport . numgen random mod {endpoints} map @endpoints\n"
        "  }\n}\n"
    )


def write_files(directory: Path, services: int, endpoints: int) -> None:
    import yaml  # noqa: PLC0415

    doc = cluster_list(services, endpoints)
    (directory / "services.json").write_text(json.dumps(doc))
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    (directory / "services.yaml").write_text(yaml.dump(doc, Dumper=dumper))
    (directory / "minimal.nft").write_text(minimal_table(services, endpoints))


def _timed(cmd: list[str], stdin: Path | None) -> float:
    t0 = time.perf_counter()
    with open(stdin or "/dev/null", "rb") as f:
        r = subprocess.run(cmd, stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.decode()[-500:]}")
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--endpoints", type=int, default=10)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--keep", type=Path, help="write the files into this directory and stop")
    args = p.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        write_files(args.keep, args.services, args.endpoints)
        print(f"wrote {args.keep}/services.json, services.yaml, minimal.nft")
        return 0
    work = Path(tempfile.mkdtemp(prefix="nftproxy-apply-"))
    write_files(work, args.services, args.endpoints)
    netns = f"ntbap-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    inns = ["ip", "netns", "exec", netns]
    apply = [*inns, sys.executable, "-m", "nftproxy", "apply", "--node-ip", "198.18.0.1"]
    commands: dict[str, tuple[list[str], Path | None]] = {
        "nftproxy apply -f services.json": ([*apply, "-f", str(work / "services.json")], None),
        "nftproxy apply -f - < services.json": ([*apply, "-f", "-"], work / "services.json"),
        "nftproxy apply -f services.yaml": ([*apply, "-f", str(work / "services.yaml")], None),
        "nft -f minimal.nft": ([*inns, "nft", "-f", str(work / "minimal.nft")], None),
    }
    reset = [*inns, "nft", "delete", "table", "ip", "minimal"]
    cleanup = [*inns, sys.executable, "-m", "nftproxy", "cleanup"]
    times: dict[str, list[float]] = {name: [] for name in commands}
    size = (work / "services.json").stat().st_size / 1e6
    print(f"nftproxy apply vs nft -f ({args.services} Services x {args.endpoints} endpoints, {size:.1f} MB JSON)")
    try:
        for r in range(args.runs + 1):  # the first round warms the page cache, not counted
            for name, (cmd, stdin) in commands.items():
                subprocess.run(reset, check=False, capture_output=True)
                subprocess.run(cleanup, check=True, capture_output=True)
                seconds = _timed(cmd, stdin)
                if r:
                    times[name].append(seconds)
        base = times["nft -f minimal.nft"]
        for name, values in times.items():
            ratios = [a / b for a, b in zip(values, base, strict=True)]
            labels = {"command": name, "services": args.services, "endpoints": args.endpoints}
            figure("median", statistics.median(values), "s", **labels)
            figure("ratio to nft -f (median of pairs)", statistics.median(ratios), "x", **labels)
            print(
                f"  {name:<40} median {statistics.median(values):6.2f} s "
                f"(min {min(values):.2f}, max {max(values):.2f}); "
                f"ratio to nft -f, median of pairs {statistics.median(ratios):.2f}"
            )
    finally:
        subprocess.run(reset, check=False, capture_output=True)
        subprocess.run(cleanup, check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
