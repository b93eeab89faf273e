"""The ``list`` subcommand: every Service frontend the kernel's tables program, as text or JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

DESCRIPTION = """\
Every Service frontend programmed on this node, one row each, read from the kernel's tables
(table ip nftproxy and table ip6 nftproxy), not from the API: what the node does now.

Columns (text):
  SERVICE   namespace/name          PORT  the Service port's name (- unnamed)
  TYPE      ClusterIP, NodePort, LoadBalancer (a LoadBalancer IP with source ranges), or
            External (an externalIP or a LoadBalancer IP: without source ranges the table
            does not tell them apart; `nftproxy explain --kubeconfig` does)
  FRONTEND  address:port/protocol (NodePorts: 0.0.0.0 / [::], the addresses listed below)
  POLICY    iTP=Local / eTP=Local (internal-/externalTrafficPolicy Local; Cluster not shown),
            affinity=Ns (sessionAffinity ClientIP), lb=round-robin|source-hash|maglev (random
            not shown; with one endpoint nothing is chosen), ranges=… (loadBalancerSourceRanges)
  BACKENDS  the endpoints new connections go to (under a Local policy: this node's), "(xN)"
            for an endpoint in N slots (maglev: its share of the table's M); eTP Local: also
            those pods and the node itself reach;
            "(no endpoints: rejected)", "(none on this node: dropped)"
The table holds no endpoint conditions: ready, serving and terminating endpoints look alike.

JSON (-o json): {"tables": ["ip nftproxy", …], "nodeport_addresses": {"ip": […], "ip6": […]},
"frontends": [row, …]}, each row with the keys: service, port_name, family (ip|ip6), type,
address (null for a NodePort), port, protocol (TCP|UDP|SCTP), state (active | no-endpoints |
no-local-endpoints), backends and short_circuit_backends ([{address, port, slots}]),
traffic_policy (Cluster | Local | null: no endpoints), session_affinity_timeout (seconds |
null), load_balancing (random | round-robin | source-hash | maglev | null), source_ranges ([…]).

Exit 0; 1 when neither table exists (nothing programmed here); 2 for an unknown --netns."""


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--netns", help="read the tables of this named network namespace")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--table", default="nftproxy", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: every command builds this parser (`run` too)
    from nftproxy.cli.explain import read_counted, read_views  # noqa: PLC0415
    from nftproxy.diagnose import counters  # noqa: PLC0415
    from nftproxy.diagnose.counters import PortCounts  # noqa: PLC0415
    from nftproxy.diagnose.services import Row, listing, render_text  # noqa: PLC0415

    if args.netns and not os.path.exists(f"/run/netns/{args.netns}"):
        print(f"nftproxy list: no network namespace {args.netns!r}", file=sys.stderr)
        return 2
    result = listing(read_views(args.netns, args.table))
    counted = {  # --service-counters: (family, frontend) -> its counts
        (f.value, key): c
        for f, listed in read_counted(args.netns, args.table).items()
        for key, c in counters.per_frontend(listed).items()
    }

    def counts(r: Row) -> PortCounts | None:
        port = str(r.port)
        key = (r.protocol.lower(), port) if r.address is None else (r.address, r.protocol.lower(), port)
        return counted.get((r.family, key))

    if args.output == "json":
        doc = dataclasses.asdict(result)
        if counted:
            for row, r in zip(doc["frontends"], result.frontends, strict=True):
                c = counts(r)
                row["counters"] = counters.as_json(c) if c else None
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(result))
        if counted:
            sys.stdout.write("Counters (--service-counters):\n")
            for r in result.frontends:
                c = counts(r)
                if c is not None:
                    name = f"{r.service}:{r.port_name}" if r.port_name else r.service
                    sys.stdout.write(f"  {name} {r.frontend}: {counters.describe(c)}\n")
    if not result.tables:
        print(f"nftproxy list: neither table ip {args.table} nor ip6 {args.table} exists", file=sys.stderr)
        return 1
    return 0
