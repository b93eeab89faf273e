"""nftproxy: a kube-proxy replacement on nftables verdict maps."""

__version__ = "0.1.0"
