"""`nftproxy explain` and `nftproxy trace` against the real kernel, with real packets.

explain: the kernel's table (read back after `nftproxy apply`) explains exactly like the compiled
table (the golden text of tests/unit/test_explain.py), and the endpoints it names are the ones
that answer. trace: the next new connections' paths through the kernel, removed afterwards (also
after SIGTERM and SIGKILL: a killed trace's chains are inert and the next sync deletes them).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.trace import Tracer, parse_target
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, bare_netns, cleanup_stale
from tests.support.golden import CASES, EXTRA, GOLDEN
from tests.support.run import nftproxy_argv, run_nftproxy

pytestmark = pytest.mark.netns

HTTP = [k.port(8080, "http")]


def nftproxy(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_nftproxy(*args, netns=netns, check=check)


def test_kernel_explains_like_the_compiled_table() -> None:
    source, _config = CASES["policies"]
    with bare_netns("op") as ns:
        nftproxy("apply", "-f", str(source), "--node-name", "node-1", "--node-ip", "198.18.0.1",
                 "--cluster-cidr", "10.244.0.0/16", netns=ns)  # fmt: skip
        from nftproxy.model.manifests import load  # noqa: PLC0415

        keys = sorted(s.key for s in load([str(source)]).services)
        texts = [nftproxy("explain", key, "--netns", ns).stdout for key in [*keys, *EXTRA]]
        assert "\n".join(texts) == (GOLDEN / "explain-policies.txt").read_text()
        as_json = json.loads(nftproxy("explain", "default/lb-local", "--netns", ns, "-o", "json").stdout)
        assert json.dumps(as_json, indent=2) + "\n" == (GOLDEN / "explain-lb-local.json").read_text()


def test_explain_without_a_table() -> None:
    with bare_netns("op") as ns:
        r = nftproxy("explain", "default/web", "--netns", ns)
        assert r.stdout.startswith("default/web: not programmed: table ip nftproxy and table ip6 nftproxy")


@dataclass
class Lab:
    lab: NetLab
    node: Node
    a: Pod
    b: Pod
    ext: Client
    manifest: Path

    def apply(self, *objs: k.Obj) -> None:
        k.write(self.manifest, objs)
        r = self.lab.exec(self.node, *nftproxy_argv(), "apply", "-f", str(self.manifest),
                          "--node-name", "node1", "--node-ip", self.node.ipv4,
                          "--cluster-cidr", "10.244.0.0/16", check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr


def objects(a: Pod, b: Pod) -> list[k.Obj]:
    return [
        k.service("web", ["10.96.0.10"], [k.port(80, "http", node_port=30080)], type="NodePort"),
        k.endpoint_slice("web-1", "web", [k.endpoint(a.ipv4, node="node1"), k.endpoint(b.ipv4, node="node1")], HTTP),
        k.service(
            "sticky",
            ["10.96.0.11"],
            [k.port(80, "http")],
            sessionAffinity="ClientIP",
            sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}},
        ),
        k.endpoint_slice("sticky-1", "sticky", [k.endpoint(a.ipv4), k.endpoint(b.ipv4)], HTTP),
        k.service("empty", ["10.96.0.20"], [k.port(80, "http")]),
    ]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale("op")
    with NetLab("op") as nl:
        node = nl.add_node("node1", 1)
        a, b = (nl.add_pod(node, n, tcp=(8080,)) for n in ("a", "b"))
        ext = nl.add_client("ext", 100, via=node)
        lab = Lab(nl, node, a, b, ext, tmp_path_factory.mktemp("explain") / "objects.yaml")
        lab.apply(*objects(a, b))
        yield lab


def test_explain_names_the_endpoints_that_answer(lab: Lab) -> None:
    out = nftproxy("explain", "default/web", "--netns", lab.node.netns, "-o", "json").stdout
    e = json.loads(out)
    assert e["state"] == "programmed"
    kinds = {f["kind"]: f for f in e["frontends"]}
    assert set(kinds) == {"ClusterIP", "NodePort"}
    want = {f"{lab.a.ipv4}:8080", f"{lab.b.ipv4}:8080"}
    assert set(kinds["ClusterIP"]["endpoints"]) == want
    answered = {r.pod for r in lab.lab.probe(lab.ext, "tcp", lab.node.ipv4, 30080, count=30)}
    assert answered == {"a", "b"}
    sticky = nftproxy("explain", "default/sticky", "--netns", lab.node.netns).stdout
    assert "sessionAffinity ClientIP (60s)" in sticky
    empty = nftproxy("explain", "default/empty", "--netns", lab.node.netns).stdout
    assert empty.startswith('default/empty: programmed as "no endpoints → reject"')
    assert lab.lab.probe(lab.node, "tcp", "10.96.0.20", 80)[0].error == "refused"


def _trace(lab: Lab, *args: str) -> subprocess.Popen[str]:
    argv = nftproxy_argv("trace", "--netns", lab.node.netns, "-o", "json", *args)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trace_chains(lab: Lab) -> set[str]:
    backend = KernelBackend(lab.node.netns)
    try:
        return {n for n in backend.chain_names(Family.IP, "nftproxy") or set() if n.startswith("trace-")}
    finally:
        backend.close()


def _wait_installed(lab: Lab, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + 15
    while not _trace_chains(lab):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "trace chains never appeared"
        time.sleep(0.05)


def test_trace_from_the_node_and_from_outside(lab: Lab) -> None:
    proc = _trace(lab, "--to", "10.96.0.10:80/tcp", "--count", "4", "--timeout", "20")
    _wait_installed(lab, proc)
    answered = [r.pod for r in lab.lab.probe(lab.node, "tcp", "10.96.0.10", 80, count=4)]
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    packets = json.loads(out)
    assert len(packets) == 4, packets
    ips = {lab.a.ipv4: "a", lab.b.ipv4: "b"}
    for p in packets:
        assert p["service"] == "default/web:http" and p["frontend"] == "ClusterIP"
        assert p["verdict"] == "forwarded" and p["algorithm"] == "random"
        assert p["masqueraded"] is True  # from the node: source outside the cluster CIDR
        assert p["path"][0] == "filter-output" and {"nat-output", "services", "cluster-2", "load-balance-2"} <= set(
            p["path"]
        ), p["path"]
    # the endpoint the trace names is the pod that answered, connection by connection
    assert [ips[p["endpoint"].split(":")[0]] for p in packets] == answered
    assert not _trace_chains(lab), "trace chains left behind"

    proc = _trace(lab, "--to", f"{lab.node.ipv4}:30080/tcp", "--from", f"{lab.ext.ipv4}/32", "--timeout", "20")
    _wait_installed(lab, proc)
    lab.lab.probe(lab.node, "tcp", lab.node.ipv4, 30080)  # from the node: not --from, not traced
    lab.lab.probe(lab.ext, "tcp", lab.node.ipv4, 30080)
    (p,) = json.loads(proc.communicate(timeout=30)[0])
    assert p["source"].startswith(lab.ext.ipv4) and p["interface"] == "in eth0"
    assert p["frontend"] == "NodePort" and p["verdict"] == "forwarded" and p["masqueraded"] is True


def test_trace_from_a_pod_is_not_masqueraded_and_rejects_are_explained(lab: Lab) -> None:
    proc = _trace(lab, "--to", "10.96.0.11:80", "--timeout", "20")
    _wait_installed(lab, proc)
    r = lab.lab.probe(lab.a, "tcp", "10.96.0.11", 80)[0]
    (p,) = json.loads(proc.communicate(timeout=30)[0])
    assert p["service"] == "default/sticky:http" and p["verdict"] == "forwarded"
    if r.pod == "b":  # a to itself would be hairpin (masqueraded); b: the pod's source is kept
        assert p["masqueraded"] is False
    proc = _trace(lab, "--to", "10.96.0.11:80", "--timeout", "20")
    _wait_installed(lab, proc)
    again = lab.lab.probe(lab.a, "tcp", "10.96.0.11", 80)[0]
    (p,) = json.loads(proc.communicate(timeout=30)[0])
    assert again.pod == r.pod and p["algorithm"] == "affinity", p  # the client's entry wins

    proc = _trace(lab, "--to", "10.96.0.20:80/tcp", "--timeout", "20")
    _wait_installed(lab, proc)
    assert lab.lab.probe(lab.a, "tcp", "10.96.0.20", 80)[0].error == "refused"
    (p,) = json.loads(proc.communicate(timeout=30)[0])
    assert p["verdict"] == "rejected" and "default/empty:http has no endpoints" in p["reason"], p


def test_trace_text_and_timeout(lab: Lab) -> None:
    r = nftproxy("trace", "--netns", lab.node.netns, "--to", "10.96.0.99:80/udp", "--timeout", "1")
    assert r.stdout.strip() == "(0 of 1 packets seen within 1s)"
    assert not _trace_chains(lab)
    r = nftproxy("trace", "--to", "10.96.0.10", check=False)
    assert r.returncode == 2 and "expected IP:PORT[/PROTO]" in r.stderr


def test_sigterm_removes_the_rule_sigkill_leftover_removed_by_the_next_sync(lab: Lab) -> None:
    proc = _trace(lab, "--to", "10.96.0.10:80/tcp", "--timeout", "60")
    _wait_installed(lab, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=15)
    assert not _trace_chains(lab)

    # Killed: the chains stay, but their rule stops marking packets at its deadline …
    backend = KernelBackend(lab.node.netns)
    try:
        tracer = Tracer(backend, Family.IP, "nftproxy")
        tracer.start(parse_target("10.96.0.10:80/tcp"), None, timeout=-4.0)  # deadline 1 s from now
        tracer.names = None  # "crash": close() will not remove them
        tracer.close()
        left = _trace_chains(lab)
        assert len(left) == 2
        dp = Dataplane(backend, ProxyConfig(node_name="node1"))
        for obj in objects(lab.a, lab.b):
            from nftproxy.model.manifests import classify  # noqa: PLC0415

            inputs = classify([obj])
            for s in inputs.services:
                dp.inputs.set_service(s)
            for sl in inputs.slices:
                dp.inputs.set_slice(sl)
        # … nftproxy run's periodic check tolerates a live trace, then repairs the table (full sync)
        dp.sync()
        assert not _trace_chains(lab), "the full sync removes trace chains"
    finally:
        backend.close()
    lab.apply(*objects(lab.a, lab.b))  # back to the module's table (the Dataplane above lacked flags)


def test_check_tolerates_a_live_trace_and_repairs_after_its_deadline(lab: Lab) -> None:
    backend = KernelBackend(lab.node.netns)
    try:
        dp = Dataplane(backend, ProxyConfig(node_name="node1", node_ips=()))
        from nftproxy.model.manifests import classify  # noqa: PLC0415

        inputs = classify(objects(lab.a, lab.b))
        for s in inputs.services:
            dp.inputs.set_service(s)
        for sl in inputs.slices:
            dp.inputs.set_slice(sl)
        dp.sync()
        assert dp.verify()
        tracer = Tracer(backend, Family.IP, "nftproxy")
        tracer.start(parse_target("10.96.0.10:80/tcp"), None, timeout=-3.0)  # deadline in 2 s
        assert dp.verify(), "a live trace is not a change behind our back"
        time.sleep(2.5)
        assert not dp.verify(), "an expired trace's chains are: the next sync repairs"
        dp.sync()
        assert not _trace_chains(lab)
        tracer.names = None
        tracer.close()
    finally:
        backend.close()
    lab.apply(*objects(lab.a, lab.b))


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_a_killed_trace_leaves_no_monitor_behind(lab: Lab) -> None:
    proc = _trace(lab, "--to", "10.96.0.10:80/tcp", "--timeout", "30")
    _wait_installed(lab, proc)
    monitors = [c for c in _children(proc.pid) if "monitor" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(monitors) == 1
    proc.kill()
    proc.wait()
    end = time.monotonic() + 5
    while Path(f"/proc/{monitors[0]}").exists() and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(monitors[0], os.WNOHANG)
        time.sleep(0.05)
    status = Path(f"/proc/{monitors[0]}/status")
    assert not status.exists() or "zombie" in status.read_text(), "nft monitor outlived the killed trace"
    # its chains stay until the deadline; the module's next apply (a full sync) removes them
    assert _trace_chains(lab)
    lab.apply(*objects(lab.a, lab.b))
    assert not _trace_chains(lab)
