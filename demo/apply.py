"""Demo of `nftproxy render` and `nftproxy apply` on examples/demo.yaml, with real requests.

Builds a node namespace with three "pods" (real TCP/UDP servers) and an external client, all in
network namespaces it creates and deletes (this machine's own namespace is never touched).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testkit.lab.netlab import NetLab, cleanup_stale

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "demo.yaml"
FLAGS = ["--node-name", "node-1", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48"]


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def main() -> int:
    cleanup_stale()
    nftproxy = [sys.executable, "-m", "nftproxy"]
    say(f"nftproxy render -f {EXAMPLE.name} (first lines; touches nothing)")
    out = subprocess.run([*nftproxy, "render", "-f", str(EXAMPLE), *FLAGS], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    print("\n".join(line[:150] for line in lines if "element" in line and " ip " in line))
    print(f"... {len(lines)} commands in one transaction; skipped: {out.stderr.strip() or 'none'}")

    with NetLab() as lab:
        say("creating namespaces: node-1, pods web-a, web-b, dns, external client")
        node = lab.add_node("node-1", 1)
        pods = [lab.add_pod(node, name, tcp=(8080, 5353), udp=(5353,)) for name in ("web-a", "web-b", "dns")]
        ext = lab.add_client("ext", 100, via=node)
        for p in pods:
            print(f"    pod {p.name:<6} {p.ipv4:<12} {p.ipv6}")

        say(f"nftproxy apply -f {EXAMPLE.name} inside {node.netns}")
        r = lab.exec(node, *nftproxy, "apply", "-f", str(EXAMPLE), *FLAGS, check=False)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0:
            return r.returncode

        say(f"nft list table ip nftproxy (in {node.netns}; maps only)")
        listing = lab.exec(node, "nft", "list", "table", "ip", "nftproxy").stdout
        show = False
        for line in listing.splitlines():
            if line.strip().startswith(("map service-ips", "map service-nodeports", "map no-endpoint-services")):
                show = True
            if show:
                print(line)
                if line.strip() == "}":
                    show = False

        checks = [
            ("pod web-a", pods[0], "tcp", "10.96.0.10", 80, "ClusterIP default/web"),
            ("node-1", node, "tcp", "10.96.0.10", 80, "ClusterIP from the node"),
            ("external", ext, "tcp", "198.18.0.1", 30080, "NodePort default/web"),
            ("external", ext, "tcp", "fd00:198:18::1", 30080, "NodePort default/web, IPv6"),
            ("pod web-b", pods[1], "udp", "10.96.0.53", 53, "ClusterIP kube-system/dns (UDP)"),
            ("pod web-b", pods[1], "tcp", "10.96.0.20", 80, "default/empty: no endpoints"),
        ]
        say("real requests through the Services")
        ok = True
        for who, src, proto, host, port, what in checks:
            res = lab.probe(src, proto, host, port, count=10)
            answers = sorted({f"{x.pod} (saw {x.peer})" if x.ok else str(x.error) for x in res})
            print(f"    {who:<9} -> {proto} {host}:{port:<6} {what:<34} {', '.join(answers)}")
            ok = ok and all(x.ok for x in res) if "empty" not in what else all(x.error == "refused" for x in res)

        say("nftproxy cleanup")
        print(lab.exec(node, *nftproxy, "cleanup").stdout, end="")
    say("namespaces deleted; done" + ("" if ok else " (some requests did not get the expected answer)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
