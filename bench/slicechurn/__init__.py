"""Shared by the benchmarks under EndpointSlice churn (churn_vs_kubeproxy, controlplane_vs_kubeproxy):
the stream of writes (``stream``: rolling Deployments, pure), sending them and putting the slices
back (``api``), the counting forwarder between a proxy and the apiserver (``forwarder``)."""
