"""A real Kubernetes control plane (etcd + kube-apiserver) on loopback, for tests and the demo.

Modelled on controller-runtime's envtest: no controller-manager, no scheduler, no kubelet. Objects
are stored and served, RBAC is enforced, service-account tokens are signed, but nothing reconciles
them (namespaces stay Terminating when deleted, Pods never run, no default ServiceAccount appears).

Everything binds to 127.0.0.1 on free random ports; nothing touches the host's network
configuration. etcd and kube-apiserver run as child processes, each in its own process group, with
their data, certificates and logs under one work directory.

Binaries: ``kube-apiserver`` and ``kubectl`` from ``$NFTPROXY_BIN`` or
``${NFTPROXY_CACHE:-~/.cache/nftproxy}/k8s/<K8S_VERSION>/bin`` (built by ``hack/k8s-tools.sh``,
testkit/k8s/versions.py); ``etcd`` from ``$NFTPROXY_BIN`` or ``…/bin``, else ``$PATH`` (Debian's
etcd-server).

CLI (used by the demo)::

    python -m testkit.k8s.controlplane up --dir DIR     # detached; writes DIR/kubeconfig
    python -m testkit.k8s.controlplane status --dir DIR
    python -m testkit.k8s.controlplane down --dir DIR   # stops and removes DIR

Modules: ``plane`` (ControlPlane), ``binaries`` (finding them), ``pki`` (certificates and
kubeconfigs), ``child`` (the child processes), ``errors``, ``cli``.
"""

from testkit.k8s.controlplane.binaries import cache_dir, find_binary
from testkit.k8s.controlplane.constants import (
    ADMIN_USER,
    KUBERNETES_SERVICE_IP,
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_CLUSTER_IP_RANGE,
    STATE_FILE,
)
from testkit.k8s.controlplane.errors import ControlPlaneError, KubectlError
from testkit.k8s.controlplane.plane import ControlPlane

__all__ = [
    "ADMIN_USER",
    "KUBERNETES_SERVICE_IP",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CLUSTER_IP_RANGE",
    "STATE_FILE",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "cache_dir",
    "find_binary",
]
