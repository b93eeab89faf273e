"""Leaving a node for good (operator/leaving.py), pure parts: does the DaemonSet's pod template
still go onto this Node (nodeSelector, required node affinity), the decision at a stop, and the
bounded wait for another proxy before the tables go. The real thing (apiserver, SIGTERM, the
kernel's tables): tests/k8s/test_kube_proxy_migration.py."""

from __future__ import annotations

import os
import uuid
from typing import Any, cast

import pytest

from nftproxy.operator import leaving
from nftproxy.operator.leaving import Undecidable, decide, fits
from nftproxy.operator.sockets import Claim

LABELS = {"kubernetes.io/os": "linux", "nftproxy.io/proxy": "nftproxy", "zone": "a", "cores": "8"}


def required(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        out.append({"matchFields": fields})
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": out}}}
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


def test_a_node_selector_needs_every_label_with_its_value() -> None:
    spec = {"nodeSelector": {"kubernetes.io/os": "linux", "nftproxy.io/proxy": "nftproxy"}}
    assert fits(spec, LABELS, "n1")
    assert not fits(spec, {**LABELS, "nftproxy.io/proxy": "kube-proxy"}, "n1")
    assert not fits(spec, {"kubernetes.io/os": "linux"}, "n1")  # the label removed: the switch back
    assert fits({}, {}, "n1")  # nothing asked: every node


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("missing", "In", "a"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),  # absent is not in
        (expr("zone", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("zone", "DoesNotExist"), False),
        (expr("cores", "Gt", "4"), True),
        (expr("cores", "Gt", "8"), False),
        (expr("cores", "Lt", "16"), True),
        (expr("cores", "Lt", "8"), False),
        (expr("zone", "Gt", "1"), False),  # not an integer: no match, as the scheduler
        (expr("missing", "Lt", "1"), False),
    ],
)
def test_each_operator_of_a_node_selector_requirement(requirement: dict[str, Any], matches: bool) -> None:
    assert fits(required([requirement]), LABELS, "n1") is matches


def test_requirements_of_a_term_are_anded_and_terms_ored() -> None:
    both = [expr("zone", "In", "a"), expr("nftproxy.io/proxy", "NotIn", "nftproxy")]
    assert not fits(required(both), LABELS, "n1")
    assert fits(required(both, [expr("zone", "Exists")]), LABELS, "n1")
    assert not fits(required([]), LABELS, "n1")  # an empty term matches no node
    assert not fits(required(), LABELS, "n1")  # no term at all: none either


def test_match_fields_name_the_node() -> None:
    assert fits(required(fields=[expr("metadata.name", "In", "n1")]), LABELS, "n1")
    assert not fits(required(fields=[expr("metadata.name", "In", "n2")]), LABELS, "n1")
    with pytest.raises(Undecidable):
        fits(required(fields=[expr("spec.unknown", "In", "x")]), LABELS, "n1")


def test_the_node_selector_and_the_affinity_both_apply() -> None:
    spec = {"nodeSelector": {"kubernetes.io/os": "linux"}, **required([expr("zone", "In", "b")])}
    assert not fits(spec, LABELS, "n1")
    spec = {"nodeSelector": {"kubernetes.io/os": "linux"}, **required([expr("zone", "In", "a")])}
    assert fits(spec, LABELS, "n1")


def test_an_unknown_operator_is_undecidable() -> None:
    with pytest.raises(Undecidable):
        fits(required([expr("zone", "Near", "a")]), LABELS, "n1")


def daemonset(spec: dict[str, Any], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "nftproxy", "namespace": "kube-system"}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"template": {"spec": spec}}}


NODE = {"metadata": {"name": "n1", "labels": LABELS}}
SWITCHED = {"nodeSelector": {"kubernetes.io/os": "linux", "nftproxy.io/proxy": "nftproxy"}}


def test_leaving_for_good_when_the_daemonset_is_gone_deleting_or_no_longer_selects_the_node() -> None:
    assert decide(None, None, "n1", "kube-system/nftproxy").leaving  # helm uninstall
    assert decide(daemonset(SWITCHED, deleting=True), NODE, "n1", "ks/nftproxy").leaving
    unlabelled = {"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}}}
    v = decide(daemonset(SWITCHED), unlabelled, "n1", "kube-system/nftproxy")
    assert v.leaving and "no longer selects this node" in v.why


def test_any_doubt_keeps_the_rules() -> None:
    v = decide(daemonset(SWITCHED), NODE, "n1", "kube-system/nftproxy")  # a restart, an upgrade, a drain
    assert not v.leaving and "still runs a pod on this node" in v.why
    assert not decide(daemonset(SWITCHED), None, "n1", "ks/nftproxy").leaving  # the Node not read
    odd = daemonset(required([expr("zone", "Near", "a")]))
    v = decide(odd, NODE, "n1", "ks/nftproxy")
    assert not v.leaving and "cannot be evaluated" in v.why


def claim() -> Claim:
    """A claim of tables no one else claims (a name of this test process's own)."""
    return Claim(f"test-{os.getpid()}-{uuid.uuid4().hex[:6]}", None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_leaving_waits_for_another_proxy_then_removes_the_tables(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    removed_at: list[float] = []

    def other() -> object | None:  # kube-proxy's rules appear 4 s after the stop
        return type("P", (), {"places": ("nftables table ip kube-proxy",)})() if clock.now >= 4 else None

    def remove() -> list[str]:
        removed_at.append(clock.now)
        return ["table ip nftproxy", "table ip6 nftproxy"]

    caplog.set_level("INFO", "nftproxy.leaving")
    assert leaving.leave(other, remove, claim(), wait=15, poll=0.5, clock=clock, sleep=clock.sleep)
    assert removed_at == [4.0]
    assert "another proxy's rules are on this node (nftables table ip kube-proxy)" in caplog.text
    assert "removed table ip nftproxy, table ip6 nftproxy" in caplog.text


def test_with_no_other_proxy_the_tables_go_after_the_wait_and_the_log_says_so(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    removed_at: list[float] = []

    def remove() -> list[str]:
        removed_at.append(clock.now)
        return ["table ip nftproxy"]

    caplog.set_level("INFO", "nftproxy.leaving")
    assert leaving.leave(lambda: None, remove, claim(), wait=15, poll=0.5, clock=clock, sleep=clock.sleep)
    assert removed_at == [15.0]
    assert "no other proxy's rules on this node after 15s: removing nftproxy's tables anyway" in caplog.text


def test_a_new_nftproxy_that_claimed_the_tables_meanwhile_keeps_them(caplog: pytest.LogCaptureFixture) -> None:
    """An uninstall followed at once by an install: the new release's proxy claims the node's
    tables while the old one waits for another proxy; the old one then leaves them alone."""
    clock = Clock()
    mine = claim()
    newcomer = Claim(mine.address[1:].removeprefix("nftproxy-tables-"), None)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 3:
            assert newcomer.take()  # the new proxy starts 3 s into the wait

    caplog.set_level("INFO", "nftproxy.leaving")
    try:
        removed = leaving.leave(lambda: None, lambda: ["table ip nftproxy"], mine, clock=clock, sleep=sleep)
        assert not removed and clock.now == 3.0
        assert "another nftproxy runs on this node now: the tables are its own and stay" in caplog.text
    finally:
        newcomer.release()
        mine.release()


def test_the_watch_counts_a_deletion_only_of_a_daemonset_it_saw_and_forgets_it_when_one_is_back() -> None:
    watch = leaving.DaemonSetWatch(cast(Any, None), "kube-system", "nftproxy")
    watch._seen(None)  # not found at the first list: a wrong name, maybe
    assert not watch.deleted and watch.missing
    assert not leaving.ask(cast(Any, None), watch, "n1").leaving
    watch._seen(daemonset(SWITCHED))
    assert not watch.deleted
    watch._seen(daemonset(SWITCHED, deleting=True))  # helm uninstall --cascade foreground
    assert watch.deleted
    watch._seen(daemonset(SWITCHED))  # created again (a reinstall)
    assert not watch.deleted
    watch._seen(None)  # deleted (helm uninstall)
    assert watch.deleted
    v = leaving.ask(cast(Any, None), watch, "n1")  # no request needed: the watch saw it
    assert v.leaving and v.why == "the DaemonSet kube-system/nftproxy was deleted"
