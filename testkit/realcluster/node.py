"""Configuration files of one node: containerd (own root, state, socket, runc root, pause image),
the CNI conflist (bridge + host-local, this node's pod CIDRs: one per family), kubelet (cgroupfs under the cluster's
cgroup, its own directories, no kernel tunables), and the holder script of its mount namespace."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# The cluster is dual-stack, IPv4 first: the node segment, the pods and the Services (the control
# plane's --service-cluster-ip-range) have both families.
LAN_PREFIX = "172.30.0"
LAN_GATEWAY = f"{LAN_PREFIX}.1"
CLIENT_IP = f"{LAN_PREFIX}.100"
LAN6_PREFIX = "fd00:172:30::"  # /64
LAN6_GATEWAY = f"{LAN6_PREFIX}1"
CLIENT_IP6 = f"{LAN6_PREFIX}100"
# The control plane's address on the node segment (a namespace of its own, `rc-NAME-cp`): the
# apiserver advertises it, so `default/kubernetes` has a real endpoint that pods reach.
APISERVER_IP = f"{LAN_PREFIX}.2"
APISERVER_IP6 = f"{LAN6_PREFIX}2"
CLUSTER_DNS_IP = "10.96.0.10"  # the kube-dns Service (CoreDNS), kubelet's clusterDNS
CLUSTER_DOMAIN = "cluster.local"
CLUSTER_CIDR = "10.244.0.0/16"
CLUSTER_CIDR6 = "fd00:10:244::/48"
CLUSTER_CIDRS = (CLUSTER_CIDR, CLUSTER_CIDR6)
CNI_BIN = "/usr/lib/cni"

# kubelet sets these machine-wide sysctls at start (and no setting skips it): inside the node's
# mount namespace, files holding the values it wants are bind-mounted over them.
KUBELET_SYSCTLS = {
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


@dataclass(frozen=True)
class NodeSpec:
    name: str  # node-1
    index: int  # 1
    dir: Path  # its state directory
    netns: str  # rc-NAME-node-1
    cgroup: str  # nftproxy-rc-NAME/node-1 (kubelet's cgroupRoot)

    @property
    def ip(self) -> str:
        return f"{LAN_PREFIX}.{10 + self.index}"

    @property
    def ip6(self) -> str:
        return f"{LAN6_PREFIX}{10 + self.index}"

    @property
    def zone(self) -> str:
        return f"zone-{chr(ord('a') + self.index - 1)}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def pod_cidr6(self) -> str:
        return f"fd00:10:244:{self.index}::/64"

    @property
    def daemons_cgroup(self) -> str:
        return f"{self.cgroup}-daemons"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.dir / "kubelet"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def ready_file(self) -> Path:
        return self.dir / "holder.ready"


def containerd_config(node: NodeSpec, pause_image: str, root: Path) -> str:
    """ROOT: content, snapshots and metadata (may outlive the node: images kept); state is the node's."""
    c = node.dir / "containerd"
    return f"""version = 2
root = "{root}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  # runc can't set oom_score_adj below the current one without CAP_SYS_RESOURCE (not in this
  # machine's bounding set): sandboxes failed with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{c / "runc"}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{node.dir / "cni"}"
"""


def cni_conflist(node: NodeSpec) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "nftproxy-rc",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,  # pod-to-pod keeps its source; nodes route the pod CIDRs
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_cidr}], [{"subnet": node.pod_cidr6}]],
                        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                        "dataDir": str(node.dir / "cni-ipam"),
                    },
                },
                # hostPort, as every kubeadm-style CNI setup chains it (kube-proxy doesn't do it)
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet_config(node: NodeSpec, ca_file: Path) -> str:
    k = node.kubelet_dir
    return json.dumps(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": "/" + node.cgroup,
            "failCgroupV1": False,
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{node.socket}",
            "address": "0.0.0.0",
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            # No registry to pull from again: never garbage-collect images.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "volumePluginDir": str(k / "volume-plugins"),
            "podLogsDir": str(node.dir / "pod-logs"),
            "staticPodPath": str(k / "manifests"),
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            "maxPods": 60,
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [CLUSTER_DNS_IP],
            "fileCheckFrequency": "5s",
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "shutdownGracePeriod": "0s",
        },
        indent=2,
    )


def holder_script(node: NodeSpec) -> str:
    """sh script run as `nsenter --net=NETNS unshare --mount --propagation private sh -c SCRIPT`.

    Its private mount namespace is where containerd, kubelet and the pods' mounts live: they vanish
    with the last process in it. /run, /var/lib and /var/log are the node's own directories there
    (shim sockets, pod network namespaces, CNI state), and kubelet's sysctls are files.
    """
    d = node.dir
    lines = ["set -e"]
    for sub, target in (("run", "/run"), ("var-lib", "/var/lib"), ("var-log", "/var/log")):
        lines += [f"mkdir -p {d / sub}", f"mount --bind {d / sub} {target}"]
    lines.append(f"mkdir -p {d / 'sysctl'}")
    for key, value in KUBELET_SYSCTLS.items():
        f = d / "sysctl" / key.replace("/", ".")
        lines += [f"echo {value} > {f}", f"mount --bind {f} /proc/sys/{key}"]
    lines += [
        f"touch {node.ready_file}",
        "trap 'kill $child 2>/dev/null; exit 0' TERM INT",
        "sleep 2147483647 & child=$!",
        "wait",
    ]
    return "\n".join(lines) + "\n"
