"""A real Kubernetes cluster on this machine (kubelet nodes in network namespaces): see cluster.py."""

from testkit.realcluster.cluster import ClusterError, RealCluster, stale_clusters, state_dir

__all__ = ["ClusterError", "RealCluster", "stale_clusters", "state_dir"]
