"""Shared by the benchmarks: one proxy (the real kube-proxy, or nftproxy) in one network namespace,
started and stopped the same way for each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit.k8s.controlplane import ControlPlane, find_binary
from testkit.k8s.kubeproxy import KubeProxy

NODE = "bench-node"


METRICS = ("127.0.0.1", 10249)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """CPU seconds the process and its children have spent so far: its user + system time
    (utime, stime), that of the children it has reaped (cutime, cstime: nftproxy's short-lived
    ``nft``, kube-proxy's ``nft`` runs), and that of its children still running, with theirs in
    turn (kube-proxy's ``nft`` of a big sync may still be exiting when the kernel has announced
    the last element), from /proc/PID/stat, in clock ticks of SC_CLK_TCK. A child reaped between
    the reads is missed (not counted twice: the parent is read first)."""
    return _ticks(pid) / os.sysconf("SC_CLK_TCK")


def _ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # reaped since its parent listed it: counted in the parent's cutime or missed
        return 0
    fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on: comm may hold spaces
    total = sum(int(f) for f in fields[11:15])  # fields 14-17: utime, stime, cutime, cstime
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children.update(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:  # thread exited
            continue
    return total + sum(_ticks(c) for c in children)


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

    def __init__(self, netns: str, cp: ControlPlane, workdir: Path, mode: str = "nftables") -> None:
        self.kp = KubeProxy(
            netns, NODE, cp.kubeconfig, workdir, node_ip=METRICS[0], mode=mode, min_sync_period="1s", verbosity=0
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

    def __init__(self, netns: str, cp: ControlPlane, workdir: Path) -> None:
        self.netns, self.cp, self.log = netns, cp, workdir / "nftproxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "nftproxy", "run", "--node-name", NODE, "--kubeconfig", str(self.cp.kubeconfig)]
        argv += ["--netns", self.netns, "--healthz-bind-address", "127.0.0.1:10256"]
        argv += ["--metrics-bind-address", f"{METRICS[0]}:{METRICS[1]}", "--status-period", "10s"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*argv, "--log-level", "warning"], stdout=log, stderr=log, start_new_session=True
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
