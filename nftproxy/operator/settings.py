"""`nftproxy run` settings: every knob of the operator, read from its flags (nftproxy/cli/flags.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nftproxy.compiler.config import ProxyConfig
from nftproxy.dataplane.conntrack_sysctls import ConntrackSysctls


@dataclass(frozen=True)
class Settings:
    proxy: ProxyConfig  # the proxy flags, before the Node is merged in (ProxyConfig.for_node)
    kubeconfig: str | None
    min_sync_period: float
    sync_period: float
    healthz: tuple[str, int] | None
    metrics: tuple[str, int] | None
    netns: str | None
    status_period: float
    log_level: str
    kopf_liveness: str | None = None  # e.g. http://0.0.0.0:8080/healthz: kopf's own probe endpoint
    kube_proxy_check_period: float = 30.0  # seconds between looks for kube-proxy's rules (0: never)
    # the node's conntrack sysctls kube-proxy sets (`run`'s flags default to kube-proxy's values;
    # None, as built by tests: nothing is touched)
    conntrack: ConntrackSysctls | None = None
    # --feature-gates: over the defaults of the cluster's version (compiler/features.py)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)

    @property
    def node_name(self) -> str:
        assert self.proxy.node_name
        return self.proxy.node_name
