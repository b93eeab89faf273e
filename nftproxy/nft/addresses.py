"""The addresses of a network namespace's interfaces, as kube-proxy's ``net.InterfaceAddrs``:
what a ``--nodeport-addresses`` CIDR is matched against. Read with pyroute2 (rtnetlink
RTM_GETADDR), opened inside the namespace when one is named."""

from __future__ import annotations

import builtins
import threading
from ipaddress import IPv4Address, IPv6Address, ip_address

from pyroute2 import IPRoute  # type: ignore[import-untyped]

IPAddress = IPv4Address | IPv6Address


class LocalAddresses:
    """Lists the namespace's addresses on demand (one rtnetlink dump per call)."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns

    def list(self) -> list[IPAddress]:
        """In a thread of its own: pyroute2's synchronous API runs an asyncio loop of its own,
        which cannot start inside the operator's running one."""
        result: builtins.list[builtins.list[IPAddress] | BaseException] = []
        t = threading.Thread(target=lambda: result.append(self._dump()), name="rtnetlink-addresses")
        t.start()
        t.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def _dump(self) -> builtins.list[IPAddress] | BaseException:
        try:
            kw = {"netns": self.netns} if self.netns else {}
            with IPRoute(**kw) as ipr:
                out: builtins.list[IPAddress] = []
                for msg in ipr.get_addr():
                    raw = msg.get("IFA_LOCAL") or msg.get("IFA_ADDRESS")  # IFA_LOCAL: a p-t-p link's own end
                    if raw:
                        out.append(ip_address(raw.split("%", 1)[0]))
                return out
        except BaseException as e:
            return e

    def close(self) -> None:
        pass
