"""The Kubernetes fixtures: a real control plane (etcd + kube-apiserver), a local cluster of
node namespaces on it, the reference kube-proxy, and the one builder of API objects (objects)."""
