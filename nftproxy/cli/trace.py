"""The ``trace`` subcommand: flags, text or JSON output."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import sys


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", required=True, metavar="IP:PORT[/PROTO]", help="the Service address to trace")
    p.add_argument("--from", dest="source", metavar="CIDR", help="only packets from these sources")
    p.add_argument("--count", type=int, default=1, metavar="N", help="new connections to trace (default 1)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="give up after S seconds (default 30)")
    p.add_argument("--netns", help="trace in this named network namespace")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--raw", help=argparse.SUPPRESS)  # write the monitor's lines to this file (golden tests)
    p.add_argument("--table", default="nftproxy", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: every command builds this parser (`run` too)
    from nftproxy.diagnose.trace import parse_target, render_packet, trace  # noqa: PLC0415

    try:
        target = parse_target(args.to)
        source = str(ipaddress.ip_network(args.source, strict=False)) if args.source else None
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if source and (":" in source) != (target.family.version == 6):
        raise argparse.ArgumentTypeError(f"--from {source} and --to {args.to} are not the same IP family")
    if args.count < 1 or args.timeout <= 0:
        raise argparse.ArgumentTypeError("--count must be >= 1 and --timeout > 0")
    try:
        packets, raw = trace(args.netns, args.table, target, source, args.count, args.timeout)
    except LookupError as e:
        print(f"nftproxy: {e}", file=sys.stderr)
        return 1
    if args.raw:
        with open(args.raw, "w", encoding="utf-8") as f:
            f.writelines(raw)
    if args.output == "json":
        json.dump([dataclasses.asdict(p) for p in packets], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for i, p in enumerate(packets, 1):
            sys.stdout.write(render_packet(i, p))
        if len(packets) < args.count:
            print(f"({len(packets)} of {args.count} packets seen within {args.timeout:g}s)")
    return 0
