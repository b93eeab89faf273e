"""One file configures both proxies: kube-proxy's KubeProxyConfiguration fields of local-traffic
detection, and the nftproxy flags that say the same (tests/conformance/test_detect_local.py
starts kube-proxy with the dict, nftproxy with ``nftproxy_flags`` of the same dict).

Only the fields of local-traffic detection are mapped here (``clusterCIDR``, ``detectLocalMode``,
``detectLocal.bridgeInterface``, ``detectLocal.interfaceNamePrefix``): an unknown field is an
error, so a dict with more in it cannot silently configure one proxy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# each mode as a cluster would configure kube-proxy (the lab's pods: routed veths named veth<n>,
# one pod on the bridge cbr0; the cluster's pod CIDRs 10.244.0.0/16 and fd00:10:244::/48)
MODES: dict[str, dict[str, Any]] = {
    "ClusterCIDR": {"detectLocalMode": "ClusterCIDR", "clusterCIDR": "10.244.0.0/16,fd00:10:244::/48"},
    "NodeCIDR": {"detectLocalMode": "NodeCIDR"},
    "BridgeInterface": {"detectLocalMode": "BridgeInterface", "detectLocal": {"bridgeInterface": "cbr0"}},
    "InterfaceNamePrefix": {"detectLocalMode": "InterfaceNamePrefix", "detectLocal": {"interfaceNamePrefix": "veth"}},
}

_TOP = {"clusterCIDR": "--cluster-cidr", "detectLocalMode": "--detect-local-mode"}
_DETECT_LOCAL = {"bridgeInterface": "--pod-bridge-interface", "interfaceNamePrefix": "--pod-interface-name-prefix"}


def nftproxy_flags(config: Mapping[str, Any]) -> list[str]:
    """The nftproxy flags of a KubeProxyConfiguration's local-traffic detection fields."""
    flags: list[str] = []
    for key, value in config.items():
        if key == "detectLocal":
            for sub, v in value.items():
                if sub not in _DETECT_LOCAL:
                    raise ValueError(f"detectLocal.{sub}: not mapped onto nftproxy's flags")
                flags += [_DETECT_LOCAL[sub], str(v)]
        elif key in _TOP:
            if value:
                flags += [_TOP[key], str(value)]
        else:
            raise ValueError(f"{key}: not mapped onto nftproxy's flags")
    return flags
