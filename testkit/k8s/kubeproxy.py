"""The real kube-proxy (the reference), run inside a node network namespace.

    with KubeProxy(netns, "node-1", cp.kubeconfig, workdir, node_ip="198.18.0.1") as kp:
        kp.wait_synced()

* A ``KubeProxyConfiguration`` file: ``mode`` nftables (or iptables, for benchmarks),
  ``hostnameOverride`` (so endpoint locality and the Node's addresses are the same as for
  nftproxy), ``clusterCIDR``, conntrack ``maxPerCore: 0``/``min: 0`` (a child namespace can't
  write nf_conntrack_max), healthz and metrics bound to the node's address inside the namespace.
* kube-proxy runs inside the namespace (``ip netns exec``), so its tables only ever exist there.
  It reaches the apiserver on the root namespace's 127.0.0.1 through :mod:`testkit.lab.nsforward`:
  a forwarder whose listening socket was created inside the namespace and which connects out
  from the root namespace. The kubeconfig is the caller's with ``server`` pointing at the
  forwarder's 127.0.0.1 port, so the apiserver certificate's 127.0.0.1 SAN stays valid.
* Both processes are stopped by PID (their own process groups), never by name.

``metrics()``/``wait_synced()`` read kube-proxy's Prometheus metrics from inside the namespace
without a subprocess: :func:`connect_in` creates the socket in the namespace (setns of the
calling thread only, and back). The same helpers read nftproxy's ``nftproxy_*`` metrics.

Binary: ``kube-proxy`` from ``$NFTPROXY_BIN`` or ``${NFTPROXY_CACHE:-~/.cache/nftproxy}/k8s/<K8S_VERSION>/bin``
(hack/k8s-tools.sh), found by :func:`testkit.k8s.controlplane.find_binary`.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from testkit.k8s.controlplane import find_binary

__all__ = [
    "KubeProxy",
    "KubeProxyError",
    "connect_in",
    "http_get_in",
    "kube_proxy_config",
    "parse_metrics",
    "wait_synced",
]

_HERE = Path(__file__).resolve().parent
NSFORWARD = _HERE.parent / "lab" / "nsforward.py"
CLONE_NEWNET = 0x40000000


class KubeProxyError(RuntimeError):
    """kube-proxy or its forwarder did not start, or did not sync in time."""


# --------------------------------------------------------------------------- namespace sockets


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def connect_in(netns: str, host: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP socket created inside ``netns`` and connected to host:port there.

    Only the calling thread enters the namespace, and only while the socket is created."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)
    sock.settimeout(timeout)
    try:
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class _NsHTTPConnection(http.client.HTTPConnection):
    def __init__(self, netns: str, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._netns = netns

    def connect(self) -> None:
        self.sock = connect_in(self._netns, self.host, self.port, self.timeout or 5.0)


def http_get_in(netns: str, host: str, port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET http://host:port/path from inside ``netns``: (status, body)."""
    status, _, body = http_request_in(netns, host, port, path, timeout=timeout)
    return status, body


def http_request_in(
    netns: str, host: str, port: int, path: str, method: str = "GET", timeout: float = 5.0
) -> tuple[int, dict[str, str], str]:
    """``method`` http://host:port/path from inside ``netns``: (status, headers, body)."""
    conn = _NsHTTPConnection(netns, host, port, timeout)
    try:
        conn.request(method, path, headers={"Connection": "close"})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode(errors="replace")
    finally:
        conn.close()


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format → {name{labels}: value} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


def _series(metrics: Mapping[str, float], name: str) -> dict[str, float]:
    """The samples of one metric, whatever their labels."""
    return {k: v for k, v in metrics.items() if k == name or k.startswith(name + "{")}


def wait_synced(
    netns: str,
    host: str,
    port: int,
    prefix: str,
    *,
    since: float,
    timeout: float = 60.0,
    quiet: float = 0.5,
    change: bool = False,
) -> float:
    """Wait until a proxy serving ``<prefix>_sync_proxy_rules_*`` metrics has synced every change
    queued so far: its last sync (of any IP family) is after ``since`` (a time.time()), each family
    synced after its last queued change, no change is pending, and its
    sync count stayed the same for ``quiet`` seconds. Works for kube-proxy (``kubeproxy``) and
    nftproxy (``nftproxy``). With ``change``, a change must also have been queued after ``since``
    (the watch event of what the caller just wrote has arrived). Returns the time of the last sync."""
    deadline = time.monotonic() + timeout
    last_key: tuple[float, float] | None = None
    stable_since = 0.0
    last: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            status, body = http_get_in(netns, host, port, "/metrics", timeout=2.0)
        except OSError:
            time.sleep(0.1)
            continue
        if status == 200:
            m = parse_metrics(body)
            last = m
            # kube-proxy labels its timestamps by ip_family (one proxier per family): each
            # family's last sync must be after its last queued change.
            stamps = _series(m, f"{prefix}_sync_proxy_rules_last_timestamp_seconds")
            # A change touches one family: only its proxier syncs (the other's stamp stays old).
            queued = _series(m, f"{prefix}_sync_proxy_rules_last_queued_timestamp_seconds")
            arrived = not change or max(queued.values(), default=0.0) >= since
            synced = (
                arrived
                and max(stamps.values(), default=0.0) >= since
                and all(
                    v >= m.get(k.replace("_last_timestamp_", "_last_queued_timestamp_"), 0.0) for k, v in stamps.items()
                )
            )
            pending = sum(_series(m, f"{prefix}_sync_proxy_rules_service_changes_pending").values()) + sum(
                _series(m, f"{prefix}_sync_proxy_rules_endpoint_changes_pending").values()
            )
            count = sum(_series(m, f"{prefix}_sync_proxy_rules_duration_seconds_count").values())
            ts = max(stamps.values(), default=0.0)
            if synced and pending == 0:
                key = (ts, count)
                now = time.monotonic()
                if key != last_key:
                    last_key, stable_since = key, now
                elif now - stable_since >= quiet:
                    return ts
            else:
                last_key = None
        time.sleep(0.1)
    raise KubeProxyError(
        f"{prefix} in {netns} not synced after {timeout:.0f}s; sync metrics: "
        + json.dumps({k: v for k, v in last.items() if "sync_proxy_rules_last" in k or "pending" in k})
    )


# --------------------------------------------------------------------------- kube-proxy


def kube_proxy_config(
    *,
    node_name: str,
    kubeconfig: str,
    cluster_cidrs: Sequence[str],
    healthz_bind_address: str,
    metrics_bind_address: str,
    mode: str = "nftables",
    min_sync_period: str = "0s",
    sync_period: str = "30s",
    nodeport_addresses: Sequence[str] | None = None,
    masquerade_all: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``KubeProxyConfiguration`` (kubeproxy.config.k8s.io/v1alpha1) for a node namespace."""
    if mode not in ("nftables", "iptables"):
        raise ValueError(f"mode must be nftables or iptables, not {mode!r}")
    periods = {"minSyncPeriod": min_sync_period, "syncPeriod": sync_period, "masqueradeAll": masquerade_all}
    cfg: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": mode,
        "hostnameOverride": node_name,
        "clusterCIDR": ",".join(cluster_cidrs),
        "detectLocalMode": "ClusterCIDR",
        "clientConnection": {"kubeconfig": kubeconfig},
        # A child namespace can't write nf_conntrack_max / hashsize: 0 skips them.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "healthzBindAddress": healthz_bind_address,
        "metricsBindAddress": metrics_bind_address,
        "nftables": dict(periods),
        "iptables": {**periods, "localhostNodePorts": False},
        # Lowering the OOM score needs CAP_SYS_RESOURCE, which these machines lack; 0 leaves it.
        "oomScoreAdj": 0,
    }
    if nodeport_addresses is not None:
        cfg["nodePortAddresses"] = list(nodeport_addresses)
    if extra:
        cfg.update(extra)
    return cfg


class KubeProxy:
    """One real kube-proxy in ``netns`` (a namespace name under /run/netns) for node ``node_name``.

    ``kubeconfig`` is a kubeconfig valid from the root namespace (server on 127.0.0.1);
    ``workdir`` receives the generated files and ``kube-proxy.log``. ``node_ip`` is where healthz
    (``healthz_port``) and metrics (``metrics_port``) listen inside the namespace.
    """

    def __init__(
        self,
        netns: str,
        node_name: str,
        kubeconfig: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        *,
        node_ip: str,
        mode: str = "nftables",
        cluster_cidrs: Sequence[str] = ("10.244.0.0/16", "fd00:10:244::/48"),
        healthz_port: int = 10256,
        metrics_port: int = 10249,
        min_sync_period: str = "0s",
        sync_period: str = "30s",
        nodeport_addresses: Sequence[str] | None = None,
        masquerade_all: bool = False,
        extra_config: Mapping[str, Any] | None = None,
        verbosity: int = 2,
    ) -> None:
        self.netns = netns
        self.node_name = node_name
        self.source_kubeconfig = Path(kubeconfig)
        self.workdir = Path(workdir)
        self.node_ip = node_ip
        self.mode = mode
        self.cluster_cidrs = tuple(cluster_cidrs)
        self.healthz_port = healthz_port
        self.metrics_port = metrics_port
        self.min_sync_period = min_sync_period
        self.sync_period = sync_period
        self.nodeport_addresses = nodeport_addresses
        self.masquerade_all = masquerade_all
        self.extra_config = dict(extra_config or {})
        self.verbosity = verbosity
        self.forward_port = 0
        self._forwarder: subprocess.Popen[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    # ----------------------------------------------------------------- files

    @property
    def log_path(self) -> Path:
        return self.workdir / "kube-proxy.log"

    @property
    def config_path(self) -> Path:
        return self.workdir / "kube-proxy-config.yaml"

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kube-proxy.kubeconfig"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def forwarder_pid(self) -> int | None:
        return self._forwarder.pid if self._forwarder is not None and self._forwarder.poll() is None else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> KubeProxy:
        if self._proc is not None:
            raise KubeProxyError("kube-proxy already started")
        binary = find_binary("kube-proxy")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_forwarder()
            self._write_kubeconfig()
            cfg = kube_proxy_config(
                node_name=self.node_name,
                kubeconfig=str(self.kubeconfig_path),
                cluster_cidrs=self.cluster_cidrs,
                healthz_bind_address=f"{_hostport(self.node_ip, self.healthz_port)}",
                metrics_bind_address=f"{_hostport(self.node_ip, self.metrics_port)}",
                mode=self.mode,
                min_sync_period=self.min_sync_period,
                sync_period=self.sync_period,
                nodeport_addresses=self.nodeport_addresses,
                masquerade_all=self.masquerade_all,
                extra=self.extra_config,
            )
            self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            log = self.log_path.open("ab")
            self.started_at = time.time()
            argv = ["ip", "netns", "exec", self.netns, str(binary), f"--config={self.config_path}"]
            self._proc = subprocess.Popen(
                [*argv, f"--v={self.verbosity}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
            log.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_forwarder(self) -> None:
        server = _kubeconfig_server(self.source_kubeconfig)
        host, _, port = server.rpartition("//")[2].rpartition(":")
        if host not in ("127.0.0.1", "localhost"):
            raise KubeProxyError(f"expected an apiserver on 127.0.0.1, kubeconfig says {server}")
        self._forwarder = subprocess.Popen(
            [sys.executable, "-I", "-S", str(NSFORWARD), "--netns", self.netns, "--target-port", port.rstrip("/")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=(self.workdir / "nsforward.log").open("ab"),
            start_new_session=True,
        )
        assert self._forwarder.stdout is not None
        line = self._forwarder.stdout.readline().decode().split()
        self._forwarder.stdout.close()
        if len(line) != 2 or line[0] != "READY":
            self._forwarder.wait(timeout=5)
            log = (self.workdir / "nsforward.log").read_text(errors="replace")
            raise KubeProxyError(f"forwarder into {self.netns} failed: {log.strip()}")
        self.forward_port = int(line[1])

    def _write_kubeconfig(self) -> None:
        data = yaml.safe_load(self.source_kubeconfig.read_text())
        for cluster in data.get("clusters", []):
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.forward_port}"
            ca = cluster["cluster"].get("certificate-authority")
            if ca and not os.path.isabs(ca):
                cluster["cluster"]["certificate-authority"] = str((self.source_kubeconfig.parent / ca).resolve())
        for user in data.get("users", []):
            for key in ("client-certificate", "client-key"):
                path = user["user"].get(key)
                if path and not os.path.isabs(path):
                    user["user"][key] = str((self.source_kubeconfig.parent / path).resolve())
        self.kubeconfig_path.write_text(yaml.safe_dump(data, sort_keys=False))

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM kube-proxy, then the forwarder (each by its PID's process group); SIGKILL
        after ``timeout``. kube-proxy leaves its tables (as on a real node): delete the
        namespace, or :meth:`delete_tables`."""
        for proc in (self._proc, self._forwarder):
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._proc = None
        self._forwarder = None

    def delete_tables(self) -> None:
        """Delete kube-proxy's nftables tables inside its namespace (never anywhere else)."""
        for family in ("ip", "ip6"):
            subprocess.run(
                ["ip", "netns", "exec", self.netns, "nft", "delete", "table", family, "kube-proxy"],
                capture_output=True,
                check=False,
            )

    def __enter__(self) -> KubeProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- observation

    def check_running(self) -> None:
        if self._proc is None:
            raise KubeProxyError("kube-proxy not started")
        if self._proc.poll() is not None:
            raise KubeProxyError(f"kube-proxy exited ({self._proc.returncode}):\n{self.log_tail()}")

    def metrics(self) -> dict[str, float]:
        status, body = http_get_in(self.netns, self.node_ip, self.metrics_port, "/metrics")
        if status != 200:
            raise KubeProxyError(f"/metrics answered {status}")
        return parse_metrics(body)

    def healthz(self) -> tuple[int, str]:
        return http_get_in(self.netns, self.node_ip, self.healthz_port, "/healthz")

    def wait_synced(
        self, since: float | None = None, timeout: float = 60.0, quiet: float = 0.5, change: bool = False
    ) -> float:
        """Wait until every change queued so far is in the kernel (see :func:`wait_synced`);
        ``since`` defaults to the start time (the first sync)."""
        self.check_running()
        try:
            return wait_synced(
                self.netns,
                self.node_ip,
                self.metrics_port,
                "kubeproxy",
                since=self.started_at if since is None else since,
                timeout=timeout,
                quiet=quiet,
                change=change,
            )
        except KubeProxyError as e:
            self.check_running()
            raise KubeProxyError(f"{e}\n{self.log_tail()}") from None

    def ruleset(self) -> str:
        """``nft list ruleset`` inside the namespace."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, "nft", "list", "ruleset"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _kubeconfig_server(path: Path) -> str:
    data = yaml.safe_load(path.read_text())
    clusters = data.get("clusters") or []
    if not clusters:
        raise KubeProxyError(f"{path}: no cluster")
    return str(clusters[0]["cluster"]["server"])
