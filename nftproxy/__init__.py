"""nftproxy: a kube-proxy replacement on nftables verdict maps."""
