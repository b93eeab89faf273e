"""What kube-proxy leaves on a node: find it (``detect``) and remove it (``cleanup``), like
``kube-proxy --cleanup``, touching nothing else.

* nftables mode: tables ``ip kube-proxy`` and ``ip6 kube-proxy``.
* iptables mode (and IPVS mode's iptables part): kube-proxy's chains in nat, filter and mangle
  (``KUBE-SERVICES``, ``KUBE-SVC-…``, ``KUBE-SEP-…``, …) and the rules of other chains that jump
  to them, for IPv4 and IPv6, in both iptables-nft and iptables-legacy (a node may have either,
  or both after a switch). kubelet's own chains (``KUBE-KUBELET-CANARY``, ``KUBE-FIREWALL``)
  are kubelet's, not kube-proxy's, and stay (as ``kube-proxy --cleanup`` leaves them).
* IPVS mode: the virtual servers whose address is on ``kube-ipvs0`` (with ``ipvsadm``), the
  ``kube-ipvs0`` interface, and kube-proxy's ipsets (with ``ipset``). Where the kernel has no
  IPVS (no /proc/net/ip_vs), there are no virtual servers to remove; that is reported.

Commands run in the current network namespace, or in ``netns`` (``ip netns exec``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

TABLES = ("nat", "filter", "mangle")
NFT_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
# kube-proxy's chains (iptables and IPVS modes); kubelet's KUBE-KUBELET-CANARY / KUBE-FIREWALL are not.
CHAINS = frozenset({
    "KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ",
    "KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY", "KUBE-LOAD-BALANCER", "KUBE-NODE-PORT",
    "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER", "KUBE-SOURCE-RANGES-FIREWALL",
})  # fmt: skip
PREFIXES = ("KUBE-SVC-", "KUBE-SEP-", "KUBE-FW-", "KUBE-XLB-", "KUBE-EXT-", "KUBE-SVL-")
IPVS_INTERFACE = "kube-ipvs0"
VARIANTS = ("iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy")


def is_kube_proxy_chain(name: str) -> bool:
    return name in CHAINS or name.startswith(PREFIXES)


def _argv(netns: str | None, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def _run(netns: str | None, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(_argv(netns, argv), input=stdin, capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError as e:  # a tool missing from the image: reported by the caller
        return subprocess.CompletedProcess(list(argv), 127, "", f"{e.filename or argv[0]}: not installed")


def _read(netns: str | None, path: str) -> str | None:
    """A file of /proc or /sys as seen from ``netns`` (None: missing)."""
    if netns is None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None
    r = _run(netns, ["cat", path])
    return r.stdout if r.returncode == 0 else None


def _legacy_loaded(netns: str | None, variant: str, table: str) -> bool:
    """Does this legacy (x_tables) table exist here? Asking iptables-legacy-save otherwise would
    load its kernel module on the host, a side effect a check must not have."""
    names = _read(netns, "/proc/net/ip6_tables_names" if variant.startswith("ip6") else "/proc/net/ip_tables_names")
    return names is not None and table in names.split()


@dataclass(frozen=True)
class IptablesTable:
    variant: str
    table: str
    chains: tuple[str, ...]  # kube-proxy's chains present
    jumps: tuple[str, ...]  # "-A CHAIN … -j KUBE-…" rules of other chains into them


def parse_save(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """iptables-save output -> table -> (kube-proxy chains, rules of other chains jumping to them)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    table = None
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            out[table] = ([], [])
        elif table is None:
            continue
        elif line.startswith(":"):
            name = line[1:].split()[0]
            if is_kube_proxy_chain(name):
                out[table][0].append(name)
        elif line.startswith("-A "):
            chain = line.split()[1]
            m = re.search(r"\s-[jg] (\S+)", line)
            if m and is_kube_proxy_chain(m.group(1)) and not is_kube_proxy_chain(chain):
                out[table][1].append(line)
    return out


def read_iptables(netns: str | None, variant: str) -> tuple[list[IptablesTable], str | None]:
    """kube-proxy's chains in nat/filter/mangle of one variant ([], reason) when unavailable."""
    if shutil.which(f"{variant}-save") is None:
        return [], f"{variant}-save not installed"
    found: list[IptablesTable] = []
    for table in TABLES:
        if variant.endswith("-legacy") and not _legacy_loaded(netns, variant, table):
            continue
        r = _run(netns, [f"{variant}-save", "-t", table])
        if r.returncode != 0:
            continue  # the table does not exist in this variant (legacy: module absent)
        parsed = parse_save(r.stdout).get(table)
        if parsed and (parsed[0] or parsed[1]):
            found.append(IptablesTable(variant, table, tuple(parsed[0]), tuple(parsed[1])))
    return found, None


def restore_script(t: IptablesTable) -> str:
    """Jump rules deleted first, then the chains flushed (they reference each other), then deleted."""
    lines = [f"*{t.table}"]
    lines += ["-D " + rule[3:] for rule in t.jumps]
    lines += [f"-F {c}" for c in t.chains]
    lines += [f"-X {c}" for c in t.chains]
    return "\n".join([*lines, "COMMIT", ""])


def _nft_tables(netns: str | None) -> list[tuple[str, str]]:
    """kube-proxy's nftables tables that are here: one terse `nft list table` per candidate (~10 ms
    when absent). `nft list tables` fetches every table's contents first (nft 1.0.6): with our own
    table at 10k Services, 2.5 s of CPU at each check (every --kube-proxy-check-period)."""
    return [t for t in NFT_TABLES if _run(netns, ["nft", "-t", "list", "table", *t]).returncode == 0]


def _ipvs_addresses(netns: str | None) -> list[str]:
    r = _run(netns, ["ip", "-o", "addr", "show", "dev", IPVS_INTERFACE])
    return [line.split()[3].split("/")[0] for line in r.stdout.splitlines() if len(line.split()) > 3]


def _has_link(netns: str | None, name: str) -> bool:
    if netns is None:
        return os.path.exists(f"/sys/class/net/{name}")
    return _run(netns, ["ip", "link", "show", "dev", name]).returncode == 0


def _ipvs_present(netns: str | None) -> bool:
    return _read(netns, "/proc/net/ip_vs") is not None


@dataclass
class Report:
    removed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"removed {x}" for x in self.removed] or ["nothing of kube-proxy's found"]
        lines += [f"note: {x}" for x in self.notes]
        lines += [f"error: {x}" for x in self.errors]
        return "".join(f"nftproxy: {x}\n" for x in lines)


def cleanup(netns: str | None = None) -> Report:
    rep = Report()
    # nftables mode
    for family, name in _nft_tables(netns):
        r = _run(netns, ["nft", "delete", "table", family, name])
        (rep.removed if r.returncode == 0 else rep.errors).append(
            f"nftables table {family} {name}"
            if r.returncode == 0
            else f"nft delete table {family} {name}: {r.stderr.strip()}"
        )
    # IPVS mode: virtual servers on kube-ipvs0's addresses, before the iptables rules that mark for them
    vips = _ipvs_addresses(netns)
    if not _ipvs_present(netns):
        rep.notes.append("IPVS: this kernel has no IPVS (no /proc/net/ip_vs): no virtual servers to remove")
    elif shutil.which("ipvsadm") is None:
        rep.errors.append("IPVS is loaded but ipvsadm is not installed: virtual servers not removed")
    else:
        saved = _run(netns, ["ipvsadm", "-S", "-n"]).stdout
        for line in saved.splitlines():
            m = re.match(r"^-A (-[tuf]) (\S+)", line)
            if m and m.group(2).rsplit(":", 1)[0].strip("[]") in vips:
                r = _run(netns, ["ipvsadm", "-D", m.group(1), m.group(2)])
                if r.returncode == 0:
                    rep.removed.append(f"IPVS virtual server {m.group(2)}")
                else:
                    rep.errors.append(f"ipvsadm -D {m.group(1)} {m.group(2)}: {r.stderr.strip()}")
    # iptables (nft and legacy back ends, both families)
    for variant in VARIANTS:
        tables, why = read_iptables(netns, variant)
        if why:
            rep.notes.append(why)
        for t in tables:
            r = _run(netns, [f"{variant}-restore", "--noflush"], restore_script(t))
            if r.returncode == 0:
                rep.removed.append(
                    f"{variant} {t.table}: {len(t.chains)} KUBE-* chains, {len(t.jumps)} jump rules into them"
                )
            else:
                rep.errors.append(f"{variant}-restore ({t.table}): {r.stderr.strip().splitlines()[:1]}")
    # IPVS mode: the interface holding the Service addresses, and kube-proxy's ipsets
    if _has_link(netns, IPVS_INTERFACE):
        r = _run(netns, ["ip", "link", "delete", IPVS_INTERFACE])
        (rep.removed if r.returncode == 0 else rep.errors).append(
            f"interface {IPVS_INTERFACE}"
            if r.returncode == 0
            else f"ip link delete {IPVS_INTERFACE}: {r.stderr.strip()}"
        )
    if shutil.which("ipset") is not None:
        names = _run(netns, ["ipset", "list", "-n"]).stdout.split()
        for name in [n for n in names if n.startswith("KUBE-")]:
            r = _run(netns, ["ipset", "destroy", name])
            (rep.removed if r.returncode == 0 else rep.errors).append(
                f"ipset {name}" if r.returncode == 0 else f"ipset destroy {name}: {r.stderr.strip()}"
            )
    else:
        rep.notes.append("ipset not installed: IPVS mode's KUBE-* ipsets (if any) not checked")
    return rep


# -- detection (for `nftproxy run`) -----------------------------------------------------------


@dataclass(frozen=True)
class Presence:
    """kube-proxy's rules found on the node: where, and a digest of their contents."""

    places: tuple[str, ...]  # "nftables table ip kube-proxy", "iptables-nft nat (25 chains)", …
    digest: str  # changes when kube-proxy reprograms them (counters excluded)
    # kube-proxy's Services are programmed: its nftables table (written whole by its first sync),
    # or Service chains (KUBE-SVC-…/KUBE-SEP-…) in a nat table, or IPVS' interface. iptables mode
    # creates KUBE-PROXY-CANARY and the empty jump chains before its first sync: not yet serving.
    serving: bool = False


def detect(netns: str | None = None) -> Presence | None:
    places: list[str] = []
    serving = False
    h = hashlib.sha256()
    for family, name in _nft_tables(netns):
        places.append(f"nftables table {family} {name}")
        serving = True
        # the table's handle and contents: kube-proxy rewrites elements/chains on every change
        r = _run(netns, ["nft", "-a", "list", "table", family, name])
        h.update(re.sub(r"packets \d+ bytes \d+", "", r.stdout).encode())
    for variant in VARIANTS:
        if shutil.which(f"{variant}-save") is None:
            continue
        for t in read_iptables(netns, variant)[0]:
            if t.chains:
                places.append(f"{variant} {t.table} ({len(t.chains)} KUBE-* chains)")
                serving |= t.table == "nat" and any(c.startswith(("KUBE-SVC-", "KUBE-SEP-")) for c in t.chains)
                r = _run(netns, [f"{variant}-save", "-t", t.table])
                body = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
                h.update(re.sub(r"\[\d+:\d+\]", "", "\n".join(body)).encode())
    if _has_link(netns, IPVS_INTERFACE):
        places.append(f"interface {IPVS_INTERFACE}")
        serving = True
    if not places:
        return None
    return Presence(tuple(places), h.hexdigest(), serving)


def in_netns_of(netns: str | None) -> str | None:
    """``netns`` unless we already are in it (``ip netns exec`` needs no nesting)."""
    if netns and os.path.exists(f"/run/netns/{netns}"):
        return netns
    return None
