"""A real Kubernetes cluster on this machine: control plane on loopback, kubelet nodes in netns.

* etcd (data on tmpfs) + kube-apiserver (ServiceAccount admission on) from testkit.k8s.controlplane,
  kube-controller-manager and kube-scheduler, all on 127.0.0.1 of the machine.
* Nodes ``node-1``, ``node-2``: each a network namespace ``rc-NAME-node-N`` with an address of each
  family on a shared segment (172.30.0.0/24 and fd00:172:30::/64, a bridge in ``rc-NAME-lan``), its
  own containerd and kubelet (``--node-ip`` both: a dual-stack Node) started in a private mount
  namespace (a holder process), pod networking by the bridge + host-local CNI plugins (10.244.N.0/24
  and fd00:10:244:N::/64: dual-stack pods) and routes to the other nodes' pod CIDRs. An outside
  client namespace ``rc-NAME-client`` (172.30.0.100, fd00:172:30::100) sits on the same segment.
  The Services are dual-stack too (the control plane's range of each family).
* A forwarder gives each node 127.0.0.1:APISERVER_PORT (the admin kubeconfig works unchanged) and
  the apiserver an egress proxy into the nodes (``kubectl logs/exec``). The control plane also has
  an address on the segment, 172.30.0.2 in ``rc-NAME-cp`` (forwarded to the apiserver): the
  apiserver advertises it with the lease reconciler on, so ``default/kubernetes`` has a real
  endpoint and pods reach the API through 10.96.0.1, that is through the Service proxy.
* The controllers kubeadm runs (``--controllers=*``), hostPort (portmap in the CNI chain), and
  kubelet's ``clusterDNS`` 10.96.0.10: CoreDNS itself is an addon (testkit.realcluster.addons),
  installed once a Service proxy runs.
* Images from hack/images.sh imported into each node's containerd.

Nothing is configured in the machine's own network namespace, and no sysctl of the machine
changes. Everything is recorded in ``/var/tmp/nftproxy-rc-NAME/state.json`` as it is created, and
``down`` stops every process by PID, kills what is left in the cluster's cgroups, removes the
cgroups, namespaces and directories — also after a failed ``up``, or for a cluster whose owner died.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from testkit.k8s.controlplane import ControlPlane, cache_dir, find_binary
from testkit.process import pid_alive
from testkit.realcluster import images as imagelib
from testkit.realcluster import procs
from testkit.realcluster.node import (
    APISERVER_IP,
    APISERVER_IP6,
    CLIENT_IP,
    CLIENT_IP6,
    LAN6_GATEWAY,
    LAN_GATEWAY,
    NodeSpec,
    cni_conflist,
    containerd_config,
    holder_script,
    kubelet_config,
)

ROOT = Path(__file__).resolve().parents[2]
STATE_BASE = Path("/var/tmp")
ETCD_BASE = Path("/dev/shm")
IMAGE_SLOTS = 4  # persistent containerd roots (images imported once), one cluster at a time each
# What kubeadm runs: every controller on by default (endpoint, endpointslice,
# endpointslicemirroring, clusterrole-aggregation, job, statefulset, ...); the cloud ones and
# node-ipam stay off without a cloud provider or --allocate-node-cidrs.
KCM_CONTROLLERS = "*"

Log = Callable[[str], None]


class ClusterError(RuntimeError):
    pass


def state_dir(name: str) -> Path:
    return STATE_BASE / f"nftproxy-rc-{name}"


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 120.0, input: str | None = None) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, input=input)
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-2000:]}")
    return p.stdout


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait(check: Callable[[], object], timeout: float, what: str, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.2)
    raise ClusterError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f"; {log}:\n{_tail(log)}" if log else "")
    )


class RealCluster:
    """``up()`` / ``down()`` of one named cluster; ``attach(name)`` finds a running one."""

    def __init__(
        self,
        name: str = "demo",
        *,
        nodes: int = 2,
        log: Log | None = None,
        owner: bool = True,
        image_store: bool = True,
    ) -> None:
        self.name = name
        self.dir = state_dir(name)
        # In the command line of every process of ours (paths under the state or the etcd dir).
        self.marker = f"nftproxy-rc-{name}/"
        self.cgroup = f"nftproxy-rc-{name}"
        self.log: Log = log or (lambda s: print(s, flush=True))
        self.owner_pid = os.getpid() if owner else None
        self.nodes = [
            NodeSpec(
                name=f"node-{i}",
                index=i,
                dir=self.dir / "nodes" / f"node-{i}",
                netns=f"rc-{name}-node-{i}",
                cgroup=f"{self.cgroup}/node-{i}",
            )
            for i in range(1, nodes + 1)
        ]
        self.lan_netns = f"rc-{name}-lan"
        self.client_netns = f"rc-{name}-client"
        self.cp_netns = f"rc-{name}-cp"  # the apiserver's address on the node segment
        self.etcd_top = ETCD_BASE / f"nftproxy-rc-{name}"
        self.etcd_dir = self.etcd_top / "etcd"
        self.state: dict[str, Any] = {}
        self.cp: ControlPlane | None = None
        self.images: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        # image_store: the nodes' containerd roots persist between clusters (images imported once,
        # IMAGE_SLOTS clusters at a time); False: fresh roots, every image imported.
        self.image_store = image_store

    # ------------------------------------------------------------------ state

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "cp" / "kubeconfig"

    @property
    def apiserver_port(self) -> int:
        return int(self.state["apiserver_port"])

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.dir / "state.json")

    def _record_proc(self, name: str, pid: int, log: Path | None = None) -> None:
        self.state.setdefault("procs", []).append({"name": name, "pid": pid, "log": str(log) if log else None})
        self._save()

    def _spawn(self, name: str, argv: Sequence[str], log: Path, cgroup: str, **kw: Any) -> int:
        """Start a daemon of the cluster (detached, in CGROUP) and record it in the state."""
        pid = procs.spawn(argv, log, cgroup, **kw)
        self._record_proc(name, pid, log)
        return pid

    @classmethod
    def attach(cls, name: str, log: Log | None = None) -> RealCluster:
        path = state_dir(name) / "state.json"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ClusterError(f"no cluster {name!r} ({path}: {e})") from e
        c = cls(name, log=log, owner=False, nodes=len(state.get("nodes") or {}) or 2)
        c.state = state
        c.images = c.state.get("images", {})
        return c

    def running(self) -> dict[str, bool]:
        return {f"{p['name']}[{p['pid']}]": procs.ours(p["pid"], self.marker) for p in self.state.get("procs", [])}

    # ------------------------------------------------------------------ helpers for users

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120.0,
        kubeconfig: Path | None = None,
    ) -> str:
        return _run(
            [str(find_binary("kubectl")), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            check=check,
            input=input,
            timeout=timeout,
        )

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def helm(self, *args: str, timeout: float = 300.0) -> str:
        env_home = self.dir / "helm"
        env = [
            f"HELM_CACHE_HOME={env_home}/cache",
            f"HELM_CONFIG_HOME={env_home}/config",
            f"HELM_DATA_HOME={env_home}/data",
        ]
        return _run(["env", *env, str(find_binary("helm")), f"--kubeconfig={self.kubeconfig}", *args], timeout=timeout)

    def holder(self, node: str) -> int:
        return int(self.state["nodes"][node]["holder"])

    def node_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """ARGV run on NODE: its network and mount namespaces (what `ssh node` would give)."""
        return ["nsenter", "-t", str(self.holder(node)), "-m", "-n", "--", *argv]

    def node_net_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """ARGV in NODE's network namespace only (a client process on the node)."""
        return ["nsenter", "-t", str(self.holder(node)), "-n", "--", *argv]

    def on_node(self, node: str, *argv: str, check: bool = True, timeout: float = 60.0) -> str:
        return _run(self.node_argv(node, argv), check=check, timeout=timeout)

    def client_argv(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.client_netns}", "--", *argv]

    def node_ip(self, node: str) -> str:
        return str(self.state["nodes"][node]["ip"])

    @property
    def client_ip(self) -> str:
        return CLIENT_IP

    # ------------------------------------------------------------------ up

    def _step(self, what: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        self.log(f"--> {what}")
        fn()
        dt = time.monotonic() - t0
        self.timings[what] = dt
        self.log(f"    {what}: {dt:.1f}s")

    def up(self, *, build: bool = True) -> RealCluster:
        """Start the cluster. BUILD: run hack/images.sh first (cached, locked); without it the
        images must have been built already (else images.ImagesMissing, nothing left behind)."""
        if (self.dir / "state.json").exists():
            raise ClusterError(f"{self.dir} exists: run `python -m testkit.realcluster down --name {self.name}` first")
        self.state = {
            "name": self.name,
            "owner_pid": self.owner_pid,
            "cgroup": self.cgroup,
            "netns": [],
            "etcd_dir": str(self.etcd_dir),
            "procs": [],
            "nodes": {},
        }
        self._save()
        t0 = time.monotonic()
        try:
            if build:
                self._step("images (hack/images.sh)", lambda: setattr(self, "images", imagelib.build(self.log)))
            else:
                self.images = imagelib.load()
            self.state["images"] = self.images
            self._step("network namespaces", self._network)
            self._step("control plane (etcd, kube-apiserver)", self._control_plane)
            self._step("node holders, containerd", self._containerds)
            self._step("images into containerd", self._import_images)
            self._step("kubelets, controller-manager, scheduler", self._kubelets)
            self._step("nodes Ready", self._wait_ready)
        except BaseException:
            self.log(f"up failed after {time.monotonic() - t0:.1f}s: removing what was made")
            self.down()
            raise
        self.timings["up"] = time.monotonic() - t0
        self.state["up_seconds"] = self.timings["up"]
        self._save()
        return self

    def _network(self) -> None:
        def add_ns(ns: str) -> None:
            _run(["ip", "netns", "add", ns])
            self.state["netns"].append(ns)
            self._save()
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

        add_ns(self.lan_netns)
        _run(["ip", "-n", self.lan_netns, "link", "add", "lan", "type", "bridge"])
        _run(["ip", "-n", self.lan_netns, "addr", "add", f"{LAN_GATEWAY}/24", "dev", "lan"])
        _run(["ip", "-n", self.lan_netns, "addr", "add", f"{LAN6_GATEWAY}/64", "dev", "lan", "nodad"])
        _run(["ip", "-n", self.lan_netns, "link", "set", "lan", "up"])
        members = [(n.netns, n.name, n.ip, n.ip6) for n in self.nodes] + [
            (self.client_netns, "client", CLIENT_IP, CLIENT_IP6),
            (self.cp_netns, "cp", APISERVER_IP, APISERVER_IP6),
        ]
        for ns, port, ip, ip6 in members:
            add_ns(ns)
            # Both ends created where they live: nothing appears in the machine's namespace.
            _run(["ip", "-n", self.lan_netns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "-n", self.lan_netns, "link", "set", port, "master", "lan", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
            # nodad: usable at once (duplicate address detection would hold it tentative ~2 s)
            _run(["ip", "-n", ns, "addr", "add", f"{ip6}/64", "dev", "eth0", "nodad"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "route", "add", "default", "via", LAN_GATEWAY])
            _run(["ip", "-n", ns, "-6", "route", "add", "default", "via", LAN6_GATEWAY])
        for n in self.nodes:
            # The control plane answers pods (the `kubernetes` endpoint) as a routed node would.
            _run(["ip", "-n", self.cp_netns, "route", "add", n.pod_cidr, "via", n.ip])
            _run(["ip", "-n", self.cp_netns, "-6", "route", "add", n.pod_cidr6, "via", n.ip6])
            for other in self.nodes:
                if other is not n:
                    _run(["ip", "-n", n.netns, "route", "add", other.pod_cidr, "via", other.ip])
                    _run(["ip", "-n", n.netns, "-6", "route", "add", other.pod_cidr6, "via", other.ip6])
            # Routing between pods, nodes and the LAN; bridged pod traffic through the ip hooks (a
            # ClusterIP answered by a pod on the same bridge is un-DNATed on the way back).
            _run(
                [
                    "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
                    "net.ipv6.conf.all.forwarding=1", "net.bridge.bridge-nf-call-iptables=1",
                    "net.bridge.bridge-nf-call-ip6tables=1", "net.ipv4.conf.all.rp_filter=0",
                ]
            )  # fmt: skip
            self.state["nodes"][n.name] = {
                "ip": n.ip, "ip6": n.ip6, "netns": n.netns, "pod_cidr": n.pod_cidr, "pod_cidr6": n.pod_cidr6,
                "dir": str(n.dir),
            }  # fmt: skip
        self._save()

    def _control_plane(self) -> None:
        procs.make_cgroup(f"{self.cgroup}/control-plane")
        self.etcd_dir.mkdir(parents=True, exist_ok=True)
        cpdir = self.dir / "cp"
        egress = self.dir / "egress.yaml"
        egress.write_text(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n"
            "- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n"
            f"      uds:\n        udsName: {self.dir / 'egress.sock'}\n"
        )
        certs = cpdir / "certs"
        cp = ControlPlane(
            cpdir,
            detached=True,
            service_accounts=True,
            etcd_data_dir=self.etcd_dir,
            advertise_address=APISERVER_IP,
            extra_apiserver_args=[
                f"--egress-selector-config-file={egress}",
                f"--kubelet-client-certificate={certs / 'admin.crt'}",
                f"--kubelet-client-key={certs / 'admin.key'}",
                "--kubelet-preferred-address-types=InternalIP",
            ],
        )
        try:
            cp.start()
        finally:
            for name, pid in cp.pids.items():
                self._record_proc(name, pid, cpdir / "logs" / f"{name}.log")
                procs.move_to_cgroup(pid, f"{self.cgroup}/control-plane")
            cp._etcd = cp._apiserver = None  # ours now: stopped by PID in down()
        self.cp = cp
        self.state["apiserver_port"] = cp.secure_port
        self.state["server"] = cp.server
        self.state["kubeconfig"] = str(cp.kubeconfig)
        self._save()
        # Nodes reach 127.0.0.1:PORT inside their namespace; the apiserver reaches the kubelets.
        ready = self.dir / "forward.ready"
        argv = [sys.executable, "-m", "testkit.realcluster.forward", "--ready-file", str(ready)]
        for n in self.nodes:
            argv += ["--listen", f"/run/netns/{n.netns},{cp.secure_port},{cp.secure_port}"]
        # The advertised address: `default/kubernetes`'s endpoint, what pods reach through 10.96.0.1.
        argv += ["--listen", f"/run/netns/{self.cp_netns},{cp.secure_port},{cp.secure_port},{APISERVER_IP}"]
        argv += ["--egress", f"{self.dir / 'egress.sock'},/run/netns/{self.nodes[0].netns}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = self.dir / "logs" / "forward.log"
        self._spawn("forward", argv, log, f"{self.cgroup}/control-plane", env=env)
        _wait(ready.exists, 15, "the forwarder", log)

    def _image_slot(self) -> int | None:
        """Lock one of the persistent image stores (containerd roots kept between clusters, so
        images are imported once): an fd the node holders inherit, held as long as they live."""
        base = cache_dir() / "containerd"
        base.mkdir(parents=True, exist_ok=True)
        for i in range(IMAGE_SLOTS):
            fd = os.open(base / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.state["image_slot"] = i
            self._save()
            return fd
        return None  # all busy: this cluster imports into roots of its own

    def containerd_root(self, n: NodeSpec) -> Path:
        slot = self.state.get("image_slot")
        if slot is None:
            return n.dir / "containerd" / "root"
        return cache_dir() / "containerd" / f"slot-{slot}" / n.name

    def _containerds(self) -> None:
        lock = self._image_slot() if self.image_store else None
        try:
            self._start_containerds(lock)
        finally:
            if lock is not None:
                os.close(lock)  # the holders keep it

    def _start_containerds(self, lock: int | None) -> None:
        for n in self.nodes:
            for sub in ("containerd", "cni", "cni-ipam", "kubelet/manifests", "pod-logs", "logs"):
                (n.dir / sub).mkdir(parents=True, exist_ok=True)
            procs.make_cgroup(n.cgroup)
            procs.make_cgroup(n.daemons_cgroup)
            script = n.dir / "holder.sh"
            script.write_text(holder_script(n))
            holder = self._spawn(
                f"holder-{n.name}",
                ["nsenter", f"--net=/run/netns/{n.netns}", "--", "unshare", "--mount", "--propagation", "private",
                 "--", "sh", str(script)],
                n.logs / "holder.log",
                n.daemons_cgroup,
                pass_fds=() if lock is None else (lock,),
            )  # fmt: skip
            self.state["nodes"][n.name]["holder"] = holder
            self._save()
        for n in self.nodes:
            _wait(n.ready_file.exists, 15, f"{n.name}'s mount namespace", n.logs / "holder.log")
            if self.state.get("image_slot") is not None:
                self._clean_store(n)
            (n.dir / "containerd.toml").write_text(containerd_config(n, self.images["pause"], self.containerd_root(n)))
            (n.dir / "cni" / "10-nftproxy-rc.conflist").write_text(cni_conflist(n))
            self._spawn(
                f"containerd-{n.name}",
                self.node_argv(n.name, ["containerd", "--config", str(n.dir / "containerd.toml")]),
                n.logs / "containerd.log",
                n.daemons_cgroup,
            )
        for n in self.nodes:
            self._wait_containerd(n)

    def _clean_store(self, n: NodeSpec) -> None:
        """A persistent store still holds the containers of the cluster that used it last (its
        processes are gone): delete them with a containerd without CRI (which would otherwise
        recover them as pods' sandboxes), before the node's own containerd starts."""
        config = containerd_config(n, self.images["pause"], self.containerd_root(n)).replace(
            "disabled_plugins = [", 'disabled_plugins = ["io.containerd.grpc.v1.cri", ', 1
        )
        (n.dir / "containerd-clean.toml").write_text(config)
        pid = procs.spawn(
            self.node_argv(n.name, ["containerd", "--config", str(n.dir / "containerd-clean.toml")]),
            n.logs / "containerd-clean.log",
            n.daemons_cgroup,
        )
        # not recorded: stopped right here (a crash meanwhile leaves it in the node's cgroup, which
        # down() empties)
        try:
            self._wait_containerd(n)
            if containers := self.ctr(n.name, "containers", "ls", "-q").split():
                self.ctr(n.name, "containers", "rm", *containers)
        finally:
            procs.stop(pid, self.marker)

    def _wait_containerd(self, n: NodeSpec) -> None:
        _wait(
            lambda: (
                subprocess.run(
                    ["ctr", "--address", str(n.socket), "version"], capture_output=True, check=False
                ).returncode
                == 0
            ),
            30,
            f"containerd on {n.name}",
            n.logs / "containerd.log",
        )

    def ctr(self, node: str, *args: str, timeout: float = 300.0) -> str:
        sock = self.dir / "nodes" / node / "containerd" / "containerd.sock"
        return self.on_node(node, "ctr", "--address", str(sock), "-n", "k8s.io", *args, timeout=timeout)

    def _import_images(self) -> None:
        """Import what a node's store lacks (all of it the first time; a new nftproxy build)."""
        wanted = {self.images[k]: tar for k, tar in self.images["archives"].items()}

        def one(node: str) -> None:
            if self.ctr(node, "containers", "ls", "-q").split():  # left by a crash: start afresh
                raise ClusterError(f"{node}: containers left in {self.containerd_root(self._node(node))}")
            have = self._import_missing(node, wanted)
            stale = [r for r in have if r.startswith("localhost/nftproxy:") and r not in wanted]
            if stale:
                self.ctr(node, "images", "rm", *stale)

        self._on_each_node(one)

    def import_image(self, ref: str, archive: str | Path) -> None:
        """Import one more image (a docker archive holding REF: e.g. another commit's nftproxy
        build) into every node's containerd, unless it is there. The next ``up`` that uses the same
        image store removes an nftproxy image it did not build."""
        self._on_each_node(lambda node: self._import_missing(node, {ref: str(archive)}))

    def _import_missing(self, node: str, wanted: dict[str, str]) -> set[str]:
        """Import the images of WANTED (ref -> archive) that NODE lacks, or holds from another
        build of the archive (the same tag rebuilt: e.g. agnhost, whose tag is upstream's, built
        anew for another Kubernetes version); return what it had. What each ref was imported
        from is recorded beside the node's containerd root."""
        have = set(self.ctr(node, "images", "ls", "-q").split())
        record = self.containerd_root(self._node(node)).parent / f"{node}.imported.json"
        try:
            imported: dict[str, str] = json.loads(record.read_text())
        except (OSError, ValueError):
            imported = {}
        for ref, tar in wanted.items():
            st = os.stat(tar)
            ident = f"{tar} {st.st_size} {st.st_mtime_ns}"
            if ref not in have or imported.get(ref) != ident:
                self.ctr(node, "images", "import", tar)
                imported[ref] = ident
                record.parent.mkdir(parents=True, exist_ok=True)
                record.write_text(json.dumps(imported, indent=1) + "\n")
        return have

    def _on_each_node(self, fn: Callable[[str], object]) -> None:
        """FN(node name) on every node at once; the first error raised."""
        errors: list[BaseException] = []

        def one(node: str) -> None:
            try:
                fn(node)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(n.name,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def _kubelets(self) -> None:
        assert self.cp is not None
        for n in self.nodes:
            kc = self.cp.client_kubeconfig(n.dir / "kubelet.kubeconfig", f"system:node:{n.name}", "system:nodes")
            (n.dir / "kubelet.json").write_text(kubelet_config(n, self.cp.ca_file))
            argv = [
                str(find_binary("kubelet")),
                f"--config={n.dir / 'kubelet.json'}",
                f"--kubeconfig={kc}",
                f"--hostname-override={n.name}",
                f"--node-ip={n.ip},{n.ip6}",  # a dual-stack Node, IPv4 first
                # one zone per node (zone-a, zone-b, ...): topology-aware routing has zones to use
                f"--node-labels=topology.kubernetes.io/zone={n.zone}",
                f"--root-dir={n.kubelet_dir}",
                f"--cert-dir={n.kubelet_dir / 'pki'}",
                "--v=1",
            ]
            self._spawn(f"kubelet-{n.name}", self.node_argv(n.name, argv), n.logs / "kubelet.log", n.daemons_cgroup)
        logs = self.dir / "logs"
        cg = f"{self.cgroup}/control-plane"
        certs = self.dir / "cp" / "certs"
        kcm = [
            str(find_binary("kube-controller-manager")),
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={KCM_CONTROLLERS}",
            f"--service-account-private-key-file={certs / 'sa.key'}",
            f"--root-ca-file={certs / 'ca.crt'}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--node-monitor-grace-period=20s",
        ]
        self._spawn("kube-controller-manager", kcm, logs / "kube-controller-manager.log", cg)
        sched = [
            str(find_binary("kube-scheduler")),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ]
        self._spawn("kube-scheduler", sched, logs / "kube-scheduler.log", cg)

    def _wait_ready(self) -> None:
        def ready() -> bool:
            self._check_alive()
            out = self.kubectl("get", "nodes", "-o", "json", check=False)
            try:
                items = json.loads(out)["items"]
            except ValueError:
                return False
            ok = {
                i["metadata"]["name"]
                for i in items
                if any(c["type"] == "Ready" and c["status"] == "True" for c in i["status"].get("conditions", []))
            }
            return ok >= {n.name for n in self.nodes}

        _wait(ready, 90, "both nodes Ready", self.nodes[0].logs / "kubelet.log")
        # Pods need the namespace's `default` ServiceAccount (controller-manager) to be admitted.
        _wait(lambda: self.kubectl("get", "serviceaccount", "default", check=False), 30, "the default ServiceAccount")

    def _check_alive(self) -> None:
        for p in self.state.get("procs", []):
            if not pid_alive(p["pid"]):
                log = Path(p["log"]) if p.get("log") else None
                raise ClusterError(f"{p['name']} exited" + (f"; {log}:\n{_tail(log)}" if log else ""))

    # ------------------------------------------------------------------ down

    def down(self) -> None:
        """Stop everything by PID, kill what is left in our cgroups, remove cgroups/netns/dirs."""
        if not self.state and (self.dir / "state.json").exists():
            with contextlib.suppress(OSError, ValueError):
                self.state = json.loads((self.dir / "state.json").read_text())
        plist = list(self.state.get("procs", []))
        errors: list[str] = []
        spent: dict[str, float] = defaultdict(float)

        def step(what: str, fn: Callable[[], object]) -> None:
            t = time.monotonic()
            try:
                fn()
            except Exception as e:  # go on: everything else must still be removed
                errors.append(f"{what}: {e}")
            spent[what.split(" ", maxsplit=1)[0]] += time.monotonic() - t

        order = ("kubelet", "kube-controller-manager", "kube-scheduler")
        for p in plist:
            if p["name"].startswith(order):
                step(f"stop {p['name']}", partial(procs.stop, p["pid"], self.marker, timeout=5))
        # Pods first (their shims and containers), then the node daemons, then the rest.
        for n in self.nodes:
            step(f"cgroup {n.cgroup}", partial(procs.kill_cgroup, n.cgroup))
        for p in reversed(plist):
            step(f"stop {p['name']}", partial(procs.stop, p["pid"], self.marker, timeout=5))
        step(f"cgroup {self.cgroup}", partial(procs.kill_cgroup, self.cgroup))
        for ns in reversed(self.state.get("netns", [])):
            step(f"netns {ns}", partial(_run, ["ip", "netns", "delete", ns], check=False))
        step("files", partial(shutil.rmtree, self.etcd_top, ignore_errors=True))
        leftover = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if self.marker in line]
        if leftover:  # never expected: every mount lived in a node's private mount namespace
            errors.append(f"mounts of {self.dir} visible here: {leftover[:3]}")
        if errors:  # keep the state: `down` again retries what failed
            raise ClusterError("down: " + "; ".join(errors))
        step("files", partial(shutil.rmtree, self.dir, ignore_errors=True))
        self.state = {}
        self.log("    down: " + ", ".join(f"{k} {v:.1f}s" for k, v in spent.items()))


def stale_clusters() -> list[str]:
    """Names of clusters whose owner process is gone (a test session killed hard)."""
    out: list[str] = []
    for d in STATE_BASE.glob("nftproxy-rc-*"):
        try:
            state = json.loads((d / "state.json").read_text())
        except (OSError, ValueError):
            continue
        owner = state.get("owner_pid")
        if owner is not None and not pid_alive(int(owner)):
            out.append(str(state["name"]))
    return out
