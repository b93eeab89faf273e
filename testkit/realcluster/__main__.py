"""python -m testkit.realcluster up|down|status [--name NAME] [--nodes N]"""

from __future__ import annotations

import argparse
import sys

from testkit.realcluster.cluster import ClusterError, RealCluster, state_dir
from testkit.realcluster.images import ImagesMissing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.realcluster", description=__doc__)
    p.add_argument("cmd", choices=["up", "down", "status"])
    p.add_argument("--name", default="demo", help="cluster name (state in /var/tmp/nftproxy-rc-NAME)")
    p.add_argument("--no-build", action="store_true", help="use the cached images as they are")
    p.add_argument("--nodes", type=int, default=2, help="kubelet nodes, one zone each (zone-a, zone-b, ...)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "up":
            c = RealCluster(args.name, owner=False, nodes=args.nodes).up(build=not args.no_build)
            print(f"cluster {args.name} up in {c.timings['up']:.1f}s")
            print(f"export KUBECONFIG={c.kubeconfig}")
            for n in c.nodes:
                print(f"{n.name} ({n.ip}): {' '.join(c.node_argv(n.name, ['nft', 'list', 'ruleset']))}")
            return 0
        if args.cmd == "down":
            if not (state_dir(args.name) / "state.json").exists():
                print(f"cluster {args.name}: already down")
                return 0
            RealCluster.attach(args.name).down()
            print(f"cluster {args.name}: down, everything removed")
            return 0
        c = RealCluster.attach(args.name)
        running = c.running()
        for what, alive in running.items():
            print(f"{what}: {'running' if alive else 'GONE'}")
        print(f"export KUBECONFIG={c.kubeconfig}")
        return 0 if running and all(running.values()) else 1
    except (ClusterError, ImagesMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
