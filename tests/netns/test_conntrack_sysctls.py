"""`run` sets the node's conntrack timeouts as kube-proxy does (CLOSE_WAIT 1 h, ESTABLISHED 24 h),
in the node's network namespace only, and a real TCP connection left in CLOSE_WAIT then carries
that timeout (upstream's e2e "KubeProxy should set TCP CLOSE_WAIT timeout" checks the same with
`conntrack -L`). The namespaces are the test's own; the machine's values are read, never written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nftproxy.dataplane.conntrack_sysctls import ConntrackSysctls, apply
from testkit.lab.netlab import bare_netns

pytestmark = pytest.mark.netns

SYSCTL = Path("/proc/sys/net/netfilter")
PORT = 11302  # upstream's test port

# A server that closes first: the client's side of the connection is left in CLOSE_WAIT.
CLOSE_WAIT = f"""
import socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", {PORT})); srv.listen(1)
cli = socket.create_connection(("127.0.0.1", {PORT}))
conn, _ = srv.accept(); conn.close()
time.sleep(0.3)
print("ready", flush=True)
sys.stdin.read()
"""


def in_ns(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True).stdout


def read(ns: str, name: str) -> int:
    return int(in_ns(ns, "cat", str(SYSCTL / name)))


def close_wait_timeout(ns: str) -> int:
    """The timeout of a fresh connection's conntrack entry once it is in CLOSE_WAIT."""
    with subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", CLOSE_WAIT],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as p:  # fmt: skip
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "ready"
        try:
            out = in_ns(ns, "conntrack", "-L", "-p", "tcp", "--dport", str(PORT))
        finally:
            p.stdin.close()
    lines = [line for line in out.splitlines() if "CLOSE_WAIT" in line]
    assert len(lines) == 1, out
    return int(lines[0].split()[2])


def test_run_sets_close_wait_and_established_in_the_nodes_namespace_only() -> None:
    names = ("nf_conntrack_tcp_timeout_close_wait", "nf_conntrack_tcp_timeout_established")
    machine = {n: int((SYSCTL / n).read_text()) for n in names}
    with bare_netns("ctsys") as ns:
        in_ns(ns, "ip", "link", "set", "lo", "up")
        # conntrack runs in a namespace once a rule needs it
        in_ns(ns, "nft", "add table ip tracking; add chain ip tracking out { type filter hook output priority 0; }; "
              "add rule ip tracking out ct state new counter")  # fmt: skip
        default = close_wait_timeout(ns)
        assert default <= 60, default  # the kernel's default: 60 s

        out = apply(ConntrackSysctls(tcp_established=86400, tcp_close_wait=3600), ns)
        assert [(o.name, o.changed, o.error) for o in out] == [(names[1], True, None), (names[0], True, None)]
        assert (read(ns, names[0]), read(ns, names[1])) == (3600, 86400)
        timeout = close_wait_timeout(ns)
        assert 3600 - 60 < timeout <= 3600, timeout  # upstream's check: within 60 s of 1 h

        # a second start finds them set and writes nothing
        assert not any(o.changed for o in apply(ConntrackSysctls(tcp_established=86400, tcp_close_wait=3600), ns))
    assert {n: int((SYSCTL / n).read_text()) for n in names} == machine
