"""Shared by the benchmarks: one proxy (the real kube-proxy, or nftproxy) in one network namespace,
started and stopped the same way for each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testkit.k8s.controlplane import ControlPlane, find_binary
from testkit.k8s.kubeproxy import KubeProxy

NODE = "bench-node"


METRICS = ("127.0.0.1", 10249)


def kube_proxy_version() -> str:
    """What the kube-proxy binary the runners start says it is (``kube-proxy --version``)."""
    out = subprocess.run([str(find_binary("kube-proxy")), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().removeprefix("Kubernetes ").strip()


class Runner:
    """One proxy in one namespace: start, pid, prefix of its sync metrics, stop."""

    prefix = ""

    def start(self) -> None:
        raise NotImplementedError

    def pid(self) -> int:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class KubeProxyRunner(Runner):
    prefix = "kubeproxy"

    def __init__(self, netns: str, cp: ControlPlane, workdir: Path, mode: str = "nftables", node: str = NODE) -> None:
        self.kp = KubeProxy(
            netns, node, cp.kubeconfig, workdir, node_ip=METRICS[0], mode=mode, min_sync_period="1s", verbosity=0
        )

    def start(self) -> None:
        self.kp.start()

    def pid(self) -> int:
        pid = self.kp.pid
        if pid is None:
            raise RuntimeError(f"kube-proxy exited:\n{self.kp.log_tail()}")
        return pid

    def stop(self) -> None:
        self.kp.stop()


class NftproxyRunner(Runner):
    prefix = "kubeproxy"  # nftproxy exports kube-proxy's sync metrics under their names

    def __init__(
        self,
        netns: str,
        cp: ControlPlane,
        workdir: Path,
        extra: tuple[str, ...] = (),
        node: str = NODE,
        status_period: str = "10s",
    ) -> None:
        self.netns, self.cp, self.log = netns, cp, workdir / "nftproxy.log"
        self.extra = extra  # more flags (e.g. --service-counters)
        self.node, self.status_period = node, status_period
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "nftproxy", "run", "--node-name", self.node]
        argv += ["--kubeconfig", str(self.cp.kubeconfig), "--netns", self.netns]
        argv += ["--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", f"{METRICS[0]}:{METRICS[1]}"]
        argv += ["--status-period", self.status_period]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*argv, *self.extra, "--log-level", "warning"], stdout=log, stderr=log, start_new_session=True
            )

    def pid(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"nftproxy exited:\n{self.log.read_text()[-3000:]}")
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
