"""`nftproxy trace`'s reading of `nft monitor trace` events, on events recorded from the kernel.

tests/golden/trace-events.txt was recorded by `nftproxy trace --raw` (re-recorded for layout 2) in the lab of
tests/netns/test_explain_trace.py (objects: trace-objects.yaml): a ClusterIP from the node, a
NodePort from outside, a Service without endpoints, the same client twice to a sessionAffinity
Service, and a ClusterIP port no Service serves.
"""

from __future__ import annotations

import os
import time
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables, names
from nftproxy.diagnose.tableview import view_of
from nftproxy.diagnose.trace import group, interpret, match_rule, parse_target, render_packet
from nftproxy.model.manifests import load
from nftproxy.nft.objects import Family
from tests.support.golden import GOLDEN

CONFIG = ProxyConfig(
    node_name="node1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),)
)


def render_recorded() -> str:
    inputs = load([str(GOLDEN / "trace-objects.yaml")])
    table = next(t for t in compile_tables(inputs.services, inputs.slices, CONFIG).tables if t.family is Family.IP)
    lines = (GOLDEN / "trace-events.txt").read_text().splitlines(keepends=True)
    packets = [interpret(evs, "ip nftproxy", view_of(table)) for evs in group(lines)]
    return "".join(render_packet(i, p) for i, p in enumerate(packets, 1))


def test_trace_golden() -> None:
    text = render_recorded()
    path = GOLDEN / "trace.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_recorded_verdicts() -> None:
    text = render_recorded()
    assert text.count("verdict: forwarded") == 4 and text.count("verdict: rejected") == 2
    assert "chosen by affinity" in text and "masqueraded: no (source kept)" in text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("10.96.0.10:80", ("10.96.0.10", 80, None)),
        ("10.96.0.10:80/UDP", ("10.96.0.10", 80, "udp")),
        ("[fd00:10:96::10]:443/tcp", ("fd00:10:96::10", 443, "tcp")),
    ],
)
def test_parse_target(text: str, want: tuple[str, int, str | None]) -> None:
    t = parse_target(text)
    assert (t.address, t.port, t.protocol) == want


@pytest.mark.parametrize("bad", ["10.96.0.10", "10.96.0.10:0", "10.96.0.10:80/icmp", "fd00::1:80", "x:80"])
def test_parse_target_errors(bad: str) -> None:
    with pytest.raises(ValueError, match="--to"):
        parse_target(bad)


def test_rule_is_narrow_and_expires() -> None:
    deadline = time.time() + 60
    rule = match_rule(parse_target("10.96.0.10:80/tcp"), "198.18.0.0/24", deadline)
    assert (
        rule.startswith('meta time < "')
        and "ct state new ip daddr 10.96.0.10 ip saddr 198.18.0.0/24 tcp dport 80" in rule
    )
    assert rule.endswith('meta nftrace set 1 comment "nftproxy trace"')
    pre, out = names.trace_chains(deadline, 42)
    assert names.live_trace_chains({pre, out, "services"}) == {pre, out}
    assert names.live_trace_chains({pre}, now=deadline + 1) == set()
