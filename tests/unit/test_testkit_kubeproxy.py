"""testkit.k8s.kubeproxy and testkit.lab.nftwatch pieces that need no namespace: the configuration we hand
the real kube-proxy, the metrics parsing the sync wait relies on, the netlink key layout."""

from __future__ import annotations

import pytest

from testkit.k8s.kubeproxy import _series, kube_proxy_config, parse_metrics
from testkit.lab.nftwatch import service_key


def test_config_for_a_node_namespace() -> None:
    cfg = kube_proxy_config(
        node_name="node-1",
        kubeconfig="/tmp/kc",
        cluster_cidrs=["10.244.0.0/16", "fd00:10:244::/48"],
        healthz_bind_address="198.18.0.1:10256",
        metrics_bind_address="198.18.0.1:10249",
    )
    assert cfg["kind"] == "KubeProxyConfiguration" and cfg["apiVersion"] == "kubeproxy.config.k8s.io/v1alpha1"
    assert cfg["mode"] == "nftables" and cfg["hostnameOverride"] == "node-1"
    assert cfg["clusterCIDR"] == "10.244.0.0/16,fd00:10:244::/48"
    assert cfg["conntrack"] == {"maxPerCore": 0, "min": 0}  # a child namespace can't write nf_conntrack_max
    assert cfg["clientConnection"]["kubeconfig"] == "/tmp/kc"
    assert "nodePortAddresses" not in cfg  # kube-proxy's default: the node's primary IPs
    assert kube_proxy_config(
        node_name="n", kubeconfig="k", cluster_cidrs=[], healthz_bind_address="", metrics_bind_address="",
        mode="iptables",
    )["mode"] == "iptables"  # fmt: skip
    with pytest.raises(ValueError, match="ipvs"):
        kube_proxy_config(
            node_name="n", kubeconfig="k", cluster_cidrs=[], healthz_bind_address="", metrics_bind_address="",
            mode="ipvs",
        )  # fmt: skip


def test_metrics_by_family() -> None:
    text = (
        "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds x\n"
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7e+09\n'
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.6e+09\n'
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending 0\n"
        "nftproxy_sync_proxy_rules_last_timestamp_seconds 5\n"
    )
    m = parse_metrics(text)
    assert _series(m, "kubeproxy_sync_proxy_rules_last_timestamp_seconds") == {
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}': 1.7e9,
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"}': 1.6e9,
    }
    assert _series(m, "nftproxy_sync_proxy_rules_last_timestamp_seconds") == {
        "nftproxy_sync_proxy_rules_last_timestamp_seconds": 5.0
    }
    assert _series(m, "kubeproxy_sync_proxy_rules_endpoint_changes_pending") == {
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending": 0.0
    }


def test_service_key_pads_every_field_to_four_bytes() -> None:
    assert service_key("10.96.0.10", "tcp", 80).hex() == "0a60000a" + "06000000" + "00500000"
    assert len(service_key("fd00:10:96::10", "udp", 53)) == 16 + 4 + 4
