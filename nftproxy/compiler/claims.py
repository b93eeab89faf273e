"""Who holds each frontend (Service IP . proto . port, proto . NodePort) that two Services claim.

A contested frontend costs the Service that loses it that frontend only: every other frontend of
it stays programmed (its ClusterIP, its other ports, its NodePorts). kube-proxy programs both
Services and the contested key goes to whichever it writes last in that sync; a Service that
names another's ClusterIP in its ``externalIPs`` can take that port from it. Here the winner is
decided the same way on every node, after every restart, whatever order the Services arrive in:

1. a Service's own ClusterIP or NodePort wins over another's externalIP or LoadBalancer IP;
2. then the older Service (``metadata.creationTimestamp``);
3. then the first by namespace/name.

Pure: no kernel, no Kubernetes. The Assembly programs each Service as ``trimmed`` (its fragment
without the frontends it lost), and re-trims the Services whose holdings a change moved.
"""

from __future__ import annotations

from nftproxy.compiler import names
from nftproxy.compiler.fragment import Fragment
from nftproxy.model.types import Skipped
from nftproxy.nft.objects import Key

Rank = tuple[bool, str, str]  # (an externalIP/LB claim, creationTimestamp, namespace/name): lowest wins


PORT_CONFLICT = "PortConflict"  # the Event reason of a frontend left out


def rank(frag: Fragment, frontend: Key) -> Rank:
    return (frontend in frag.shared, frag.created, frag.key)


def frontend_text(frontend: Key) -> str:
    return " . ".join(frontend)


class Claims:
    def __init__(self, programmed: dict[str, Fragment]) -> None:
        self.owners: dict[Key, str] = {}  # frontend -> the Service holding it
        # contested frontends only: every claimant (Service key) and its rank; nearly every
        # frontend has one claimant, and a second table of 10^5 entries would cost memory
        self.rivals: dict[Key, dict[str, Rank]] = {}
        self.losers: set[str] = set()  # Services holding fewer frontends than they claim
        # the programmed fragments (the ElementStore's, read here only): a Service's whole
        # fragment, except a loser's, which is trimmed; its whole one is kept here
        self.programmed = programmed
        self.kept: dict[str, Fragment] = {}

    def whole(self, key: str) -> Fragment | None:
        """Service ``key``'s whole fragment (its claims, untrimmed), None if it claims nothing."""
        return self.kept.get(key) or self.programmed.get(key)

    def take(self, frag: Fragment) -> set[str]:
        """Claim every frontend of ``frag`` (a Service not claiming any now); for a Service in
        ``losers`` after it, ``trimmed`` gives what to program (for any other: ``frag``). Returns
        the other Services that lost a frontend to it (each to be programmed again, trimmed)."""
        key, owners = frag.key, self.owners
        moved: set[str] = set()
        lost = False
        for c in frag.claims:
            holder = owners.get(c)
            if holder is None:  # the common case: a free frontend
                owners[c] = key
                continue
            if holder == key:
                continue
            contenders = self.rivals.get(c)
            if contenders is None:
                theirs = self.whole(holder)
                assert theirs is not None
                contenders = self.rivals[c] = {holder: rank(theirs, c)}
            contenders[key] = mine = rank(frag, c)
            if mine < contenders[holder]:
                owners[c] = key
                moved.add(holder)
            else:
                lost = True
        if lost:  # kept whole until ``trimmed``; a Service holding all it claims is the store's
            self.kept[key] = frag
            self.losers.add(key)
        else:
            self.losers.discard(key)
        for other in moved:
            self.kept.setdefault(other, self.programmed[other])  # it was whole, or kept already
            self.losers.add(other)
        return moved

    def release(self, frag: Fragment) -> set[str]:
        """Service ``frag.key`` (this its whole fragment) claims nothing any more. Returns the
        Services that won a frontend back (each to be programmed again, trimmed)."""
        key, owners = frag.key, self.owners
        self.kept.pop(key, None)
        self.losers.discard(key)
        moved: set[str] = set()
        for c in frag.claims:
            contenders = self.rivals.get(c)
            if contenders is None:
                if owners.get(c) == key:
                    del owners[c]
                continue
            contenders.pop(key, None)
            if owners.get(c) == key:
                winner = min(contenders, key=contenders.__getitem__)
                owners[c] = winner
                moved.add(winner)
            if len(contenders) == 1:
                del self.rivals[c]
        for other in moved:
            whole = self.kept.get(other)
            if whole is not None:
                self._recount(whole)
        return moved

    def _recount(self, frag: Fragment) -> None:
        owners, key = self.owners, frag.key
        if any(owners[c] != key for c in frag.claims):
            self.losers.add(key)
        else:
            self.losers.discard(key)

    def lost(self, key: str) -> list[Key]:
        """The frontends Service ``key`` claims and another Service holds."""
        if key not in self.losers:
            return []
        frag = self.whole(key)
        assert frag is not None
        owners = self.owners
        return [c for c in frag.claims if owners[c] != key]

    def trimmed(self, key: str) -> Fragment:
        """Service ``key``'s fragment to program: without the frontends it lost."""
        frag = self.whole(key)
        assert frag is not None
        lost = self.lost(key)
        if not lost:
            self.kept.pop(key, None)  # programmed whole: the store holds it
            return frag
        return trim(frag, frozenset(lost))

    def skipped(self) -> list[Skipped]:
        """One report per frontend a Service lost, naming the Service holding it and why."""
        out = []
        for key in sorted(self.losers):
            ns, _, name = key.partition("/")
            for c in self.lost(key):
                out.append(Skipped("Service", ns, name, self.reason(key, c), PORT_CONFLICT))
        return out

    def reason(self, key: str, frontend: Key) -> str:
        holder = self.owners[frontend]
        mine_frag, their_frag = self.whole(key), self.whole(holder)
        assert mine_frag is not None and their_frag is not None
        mine, theirs = rank(mine_frag, frontend), rank(their_frag, frontend)
        what = "NodePort" if len(frontend) == names.NODEPORT_FRONTEND else "ClusterIP"
        if not theirs[0] and mine[0]:
            why = f"it is the {what} of Service {holder}"
        elif theirs[1] != mine[1]:
            why = f"Service {holder} claimed it first (created {theirs[1] or 'earlier'})"
        else:
            why = f"Service {holder} claims it too, and comes first by name"
        return f"{frontend_text(frontend)} is left out for this Service: {why}; its other frontends are programmed"


def trim(frag: Fragment, lost: frozenset[Key]) -> Fragment:
    """``frag`` without what it programs for the frontends in ``lost``: their dispatch, policy,
    affinity and firewall elements, their endpoint-map entries, their UDP flows to check and
    their localhost NodePorts. What the Service shares across frontends stays (its ClusterIP in
    ``cluster-ips``, hairpin entries, per-count objects, affinity records)."""
    elements = []
    for set_name, el in frag.elements:
        width = names.frontend_width(set_name)
        if width is None or el.key[:width] not in lost:
            elements.append((set_name, el))
    return frag._replace(
        elements=tuple(elements),
        spreads=tuple(s for s in frag.spreads if s[1] not in lost),
        udp_serving=tuple(u for u in frag.udp_serving if u[0] not in lost),
        localhost=tuple(lh for lh in frag.localhost if ("tcp", str(lh.node_port)) not in lost),
    )
