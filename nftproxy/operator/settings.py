"""`nftproxy run` settings: every knob of the operator, read from its flags (nftproxy/cli/flags.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
    cleanup_kube_proxy: bool = False  # remove kube-proxy's leftovers (kubeproxy_watch.py)
    # the DaemonSet running this proxy: a stop finding it gone or no longer for this node removes
    # the tables (leaving.py); None: every stop keeps them
    daemonset: str | None = None
    daemonset_namespace: str | None = None
    # the node's conntrack sysctls kube-proxy sets (`run`'s flags default to kube-proxy's values;
    # None, as built by tests: nothing is touched)
    conntrack: ConntrackSysctls | None = None
    # --feature-gates: over the defaults of the cluster's version (compiler/features.py)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    log_format: str = "text"  # --logging-format: text or json (operator/logs.py)
    bind_address_hard_fail: bool = False  # exit when /healthz or /metrics cannot listen (else: retried)
    # the effective KubeProxyConfiguration (v1alpha1, as JSON), served on /configz and logged at
    # start; the flags as given, served on /flagz (cli/kubeproxy_config.py)
    configz: Mapping[str, Any] = field(default_factory=dict)
    flagz: Mapping[str, str] = field(default_factory=dict)
    # what --config's file sets that nftproxy does not use: logged at start
    config_warnings: tuple[str, ...] = ()
    config_file: str | None = None  # --config: watched; a change stops the proxy (config_watch.py)

    @property
    def node_name(self) -> str:
        assert self.proxy.node_name
        return self.proxy.node_name
