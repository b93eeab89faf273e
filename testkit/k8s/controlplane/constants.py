"""The control plane's fixed addresses and names."""

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16,fd00:10:96::/112"
# First address of the range: the apiserver allocates it to the `kubernetes` Service.
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "nftproxy-admin"
STATE_FILE = "controlplane.json"  # marks a directory as ours (CLI `down` only removes those)
LOOPBACK = "127.0.0.1"
