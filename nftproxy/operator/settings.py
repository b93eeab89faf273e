"""`nftproxy run` settings: kube-proxy's flags, each also settable from the environment."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

from nftproxy.compiler.config import ProxyConfig
from nftproxy.model.balancing import ALGORITHMS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """ "1s", "500ms", "2m", "0", "1.5" (seconds) -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 1s, 500ms, 2m)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def bind_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"invalid bind address {text!r} (want HOST:PORT)")
    return host.strip("[]") or "0.0.0.0", int(port)


def boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


# flag -> environment variable (the Helm chart sets these)
ENV = {
    "node_name": "NODE_NAME",
    "kubeconfig": "KUBECONFIG",
    "cluster_cidr": "NFTPROXY_CLUSTER_CIDR",
    "nodeport_addresses": "NFTPROXY_NODEPORT_ADDRESSES",
    "masquerade_all": "NFTPROXY_MASQUERADE_ALL",
    "min_sync_period": "NFTPROXY_MIN_SYNC_PERIOD",
    "sync_period": "NFTPROXY_SYNC_PERIOD",
    "healthz_bind_address": "NFTPROXY_HEALTHZ_BIND_ADDRESS",
    "metrics_bind_address": "NFTPROXY_METRICS_BIND_ADDRESS",
    "service_proxy_name": "NFTPROXY_SERVICE_PROXY_NAME",
    "netns": "NFTPROXY_NETNS",
    "status_period": "NFTPROXY_STATUS_PERIOD",
    "log_level": "NFTPROXY_LOG_LEVEL",
    "kopf_liveness": "NFTPROXY_KOPF_LIVENESS",
    "load_balancing": "NFTPROXY_LOAD_BALANCING",
}


def algorithm(text: str) -> str:
    if text not in ALGORITHMS:
        raise argparse.ArgumentTypeError(f"invalid load-balancing {text!r}: one of {', '.join(ALGORITHMS)}")
    return text


@dataclass(frozen=True)
class Settings:
    proxy: ProxyConfig
    kubeconfig: str | None
    min_sync_period: float
    sync_period: float
    healthz: tuple[str, int] | None
    metrics: tuple[str, int] | None
    netns: str | None
    status_period: float
    log_level: str
    node_ips_from_flags: bool
    kopf_liveness: str | None = None  # e.g. http://0.0.0.0:8080/healthz: kopf's own probe endpoint

    @property
    def node_name(self) -> str:
        assert self.proxy.node_name
        return self.proxy.node_name


def add_run_flags(p: argparse.ArgumentParser) -> None:
    def env(name: str, default: str | None = None) -> str | None:
        return os.environ.get(ENV[name], default)

    p.add_argument("--node-name", default=env("node_name"), help="this node (env NODE_NAME)")
    p.add_argument("--kubeconfig", default=env("kubeconfig"), help="kubeconfig; in-cluster config when absent")
    p.add_argument("--node-ip", action="append", metavar="IP", help="override the Node's addresses")
    p.add_argument("--cluster-cidr", action="append", default=_env_list(env("cluster_cidr")), metavar="CIDR")
    p.add_argument("--nodeport-addresses", action="append", default=_env_list(env("nodeport_addresses")))
    p.add_argument(
        "--masquerade-all", type=boolean, nargs="?", const=True, default=boolean(env("masquerade_all") or "")
    )
    p.add_argument("--min-sync-period", type=duration, default=duration(env("min_sync_period", "1s") or "1s"))
    p.add_argument("--sync-period", type=duration, default=duration(env("sync_period", "30s") or "30s"))
    p.add_argument("--healthz-bind-address", default=env("healthz_bind_address", "0.0.0.0:10256"))
    p.add_argument("--metrics-bind-address", default=env("metrics_bind_address", "127.0.0.1:10249"))
    p.add_argument("--service-proxy-name", default=env("service_proxy_name") or None)
    p.add_argument("--netns", default=env("netns") or None, help="program this named network namespace")
    p.add_argument("--status-period", type=duration, default=duration(env("status_period", "5s") or "5s"))
    p.add_argument("--log-level", default=env("log_level", "info"), choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--load-balancing", type=algorithm, default=env("load_balancing", "random"), metavar="|".join(ALGORITHMS),
        help="for Services without the nftproxy.io/load-balancing annotation (env NFTPROXY_LOAD_BALANCING)",
    )  # fmt: skip
    p.add_argument(
        "--kopf-liveness",
        default=env("kopf_liveness") or None,
        metavar="URL",
        help="also serve kopf's liveness endpoint (with the lastSync probe), e.g. http://0.0.0.0:8080/healthz",
    )


def _env_list(value: str | None) -> list[str] | None:
    return [value] if value else None


def settings_from_args(args: argparse.Namespace, base: ProxyConfig) -> Settings:
    if not args.node_name:
        raise argparse.ArgumentTypeError("--node-name (or NODE_NAME) is required")
    return Settings(
        proxy=base,
        kubeconfig=args.kubeconfig,
        min_sync_period=args.min_sync_period,
        sync_period=args.sync_period,
        healthz=bind_address(args.healthz_bind_address) if args.healthz_bind_address else None,
        metrics=bind_address(args.metrics_bind_address) if args.metrics_bind_address else None,
        netns=args.netns,
        status_period=args.status_period,
        log_level=args.log_level,
        node_ips_from_flags=bool(base.node_ips),
        kopf_liveness=args.kopf_liveness,
    )
