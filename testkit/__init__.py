"""The test harness (not shipped), by job: ``lab`` (network namespaces, servers, clients),
``k8s`` (control plane, local cluster, reference kube-proxy, object builder), ``realcluster``
(kubelet nodes), ``scenarios`` (churn and outages). Used by tests/, bench/ and demo/."""
