"""Upstream kube-proxy's classic nftables layout, for comparison only: a chain per Service with
an anonymous ``numgen random mod N vmap {…}`` and a chain per endpoint (pkg/proxy/nftables)."""

from __future__ import annotations

from bench.workload import cluster


def classic_script(services: int, endpoints: int) -> str:
    svcs, slices = cluster(services, endpoints)
    out = [
        "add table ip kube-proxy",
        "add chain ip kube-proxy mark-for-masquerade",
        "add rule ip kube-proxy mark-for-masquerade meta mark set meta mark | 0x4000",
        "add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
        "add chain ip kube-proxy services",
        "add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
        "add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100; }",
        "add rule ip kube-proxy nat-prerouting jump services",
    ]
    elements = []
    for i, (svc, sl) in enumerate(zip(svcs, slices, strict=True)):
        chain = f"service-{i}-{svc.namespace}-{svc.name}-tcp-http"
        eps = []
        for j, ep in enumerate(sl.endpoints):
            ep_chain = f"endpoint-{i}-{j}-{svc.namespace}-{svc.name}-tcp-http"
            out += [
                f"add chain ip kube-proxy {ep_chain}",
                f"add rule ip kube-proxy {ep_chain} ip saddr {ep.address} jump mark-for-masquerade",
                f"add rule ip kube-proxy {ep_chain} meta l4proto tcp dnat to {ep.address}:8080",
            ]
            eps.append(f"{j} : goto {ep_chain}")
        out += [
            f"add chain ip kube-proxy {chain}",
            f"add rule ip kube-proxy {chain} numgen random mod {len(eps)} vmap {{ {', '.join(eps)} }}",
        ]
        elements.append(f"{svc.cluster_ips[0]} . tcp . 80 : goto {chain}")
    out.append(f"add element ip kube-proxy service-ips {{ {', '.join(elements)} }}")
    return "\n".join(out) + "\n"
