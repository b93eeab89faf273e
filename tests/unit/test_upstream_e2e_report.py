"""The upstream e2e runner's parts that need no cluster: the skip list (every skip has a reason),
the JUnit report of ginkgo read into cases and the summary line, and the pods' DNS client's wire
format (testkit.realcluster.upstream, testkit.realcluster.dnsclient)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from testkit.realcluster import dnsclient, upstream

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="1" time="31.5">
  <testsuite name="Kubernetes e2e suite" package="/" tests="4" failures="1" skipped="2" time="31.5">
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods  [Conformance]"
              classname="Kubernetes e2e suite" status="passed" time="10.25"></testcase>
    <testcase name="[It] [sig-network] Services should be rejected when no endpoints exist"
              classname="Kubernetes e2e suite" status="failed" time="20.0">
      <failure message="timed out waiting for the condition" type="failed">stack</failure>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers should be able to create an internal type load balancer"
              classname="Kubernetes e2e suite" status="skipped" time="0.5">
      <skipped message="Only supported for providers [gce gke]"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] CSI mock volume should work" classname="Kubernetes e2e suite"
              status="skipped" time="0"><skipped message="skipped by focus"></skipped></testcase>
  </testsuite>
</testsuites>
"""


def test_junit_cases_of_the_focus_and_the_summary_line(tmp_path: Path) -> None:
    (tmp_path / "junit_01.xml").write_text(JUNIT)
    cases = upstream.parse_junit(tmp_path / "junit_01.xml", upstream.SELECTIONS["full"])
    assert [(c.name.split("] ", 1)[1][:30], c.result, c.seconds) for c in cases] == [
        ("Services should serve a basic ", "passed", 10.25),
        ("Services should be rejected wh", "failed", 20.0),
        ("LoadBalancers should be able t", "skipped", 0.5),
    ]
    assert cases[1].message == "timed out waiting for the condition"
    assert upstream.summary_line(cases) == "upstream e2e: 1 passed, 1 failed, 1 skipped"
    conformance = upstream.parse_junit(tmp_path / "junit_01.xml", upstream.SELECTIONS["conformance"])
    assert [c.result for c in conformance] == ["passed"]


def test_the_projects_skip_list_gives_a_reason_for_every_skip() -> None:
    skips = upstream.read_skips()
    assert skips and all(reason for _, reason in skips)
    rx = upstream.skip_regex("full", skips)
    assert "LoadBalancers should be able to create an internal type load balancer" not in rx  # patterns, not names
    assert upstream.skip_regex("conformance", skips) == ""  # Conformance: nothing is skipped


def test_a_skip_without_a_reason_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "skips.txt"
    f.write_text("# a cloud LoadBalancer\n\\[Feature:LoadBalancer\\]\n\nSSH\n")
    with pytest.raises(ValueError, match="has no reason"):
        upstream.read_skips(f)


def answer(query: bytes, records: list[tuple[int, bytes]], rcode: int = 0) -> bytes:
    """A DNS response to QUERY: its question, then RECORDS (type, rdata) named by a pointer to it."""
    qid = struct.unpack(">H", query[:2])[0]
    head = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, len(records), 0, 0)
    body = b"".join(struct.pack(">HHHIH", 0xC00C, t, 1, 30, len(d)) + d for t, d in records)
    return head + query[12:] + body


def test_dns_client_builds_a_query_and_reads_a_records_and_names() -> None:
    q = dnsclient.build_query(0x1234, "web.default.svc.cluster.local", dnsclient.TYPES["A"])
    assert q[12:] == b"\x03web\x07default\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01"
    a = answer(q, [(1, socket.inet_aton("10.96.0.20")), (1, socket.inet_aton("10.96.0.21"))])
    assert dnsclient.parse(a) == (0x1234, 0, [("A", "10.96.0.20"), ("A", "10.96.0.21")])
    cname_rdata = b"\x03web\x07example\x07invalid\x00"
    assert dnsclient.parse(answer(q, [(5, cname_rdata)]))[2] == [("CNAME", "web.example.invalid")]
    assert dnsclient.parse(answer(q, [], rcode=3))[:2] == (0x1234, 3)  # NXDOMAIN
