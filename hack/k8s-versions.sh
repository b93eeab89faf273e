# The Kubernetes versions nftproxy is built, tested and compared with: the one list, sourced by the
# hack/ scripts and read by testkit/k8s/versions.py (so: plain NAME=VALUE lines, a value either a
# version or $NAME of an earlier line).
#
# Every version's binaries (kube-apiserver, kubectl, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy; e2e.test, agnhost) live apart, in $NFTPROXY_CACHE/k8s/<version>/bin, so any
# of them can be built beside the others. K8S_VERSION (environment) picks the one a command uses.

K8S_1_37=v1.37.2           # the previous minor release's newest patch
K8S_1_38=v1.38.0-beta.0    # the newest minor (its release, once served by the Go module proxy: this line)
K8S_OLDEST=v1.35.4         # the oldest Kubernetes the chart claims (Chart.yaml kubeVersion): its apiserver only
K8S_DEFAULT=$K8S_1_37      # make test, make demo, the real cluster, the reference kube-proxy
K8S_OTHER=$K8S_1_38        # the other one the differential suite and upstream's e2e run against

GO_TOOLCHAIN=go1.27.3      # the Go toolchain of every build here: k8s.io/kubernetes v1.38 declares go 1.27 (the go command fetches it from the module proxy)
