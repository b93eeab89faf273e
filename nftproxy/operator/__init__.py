"""The per-node operator: kopf feeds caches, a syncer programs the node's nftables.

Layers: ``handlers`` (kopf: only queue changes and wake the syncer) -> ``syncer`` (debounce,
retries, one transaction per sync through ``nftproxy.dataplane.sync``) -> ``status``/``metrics``/
``health`` (what operators see).
"""
