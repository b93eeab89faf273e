"""The sync engine: inputs in, one nftables transaction per sync out (``sync.Dataplane``), the
change tracker of its inputs (``tracker``) and the cleanups after a sync (``stale``). No kopf,
no Kubernetes client: the operator drives it, and so do ``nftproxy apply`` and the benchmarks."""
