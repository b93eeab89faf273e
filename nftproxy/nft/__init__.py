"""nftables layer: objects, one-transaction scripts, the libnftables backend and a fake.

Knows nothing of Kubernetes (modelled on kubernetes-sigs/knftables).
"""

from nftproxy.nft.objects import Chain, Element, Family, Hook, Set, Table
from nftproxy.nft.transaction import Transaction

__all__ = ["Chain", "Element", "Family", "Hook", "Set", "Table", "Transaction"]
