"""CLI errors are one line, never a traceback; render touches nothing."""

from __future__ import annotations

from pathlib import Path

from testkit.k8s import objects as k
from tests.support.run import run_nftproxy as run


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    r = run("render", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"nftproxy: {tmp_path}/missing.yaml: cannot read: No such file or directory"
    ]


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("kind: Service\nmetadata: {name: [\n")
    r = run("render", "-f", str(p))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not valid YAML/JSON" in lines[0] and "Traceback" not in r.stderr


def test_bad_flag_value(tmp_path: Path) -> None:
    r = run("render", "-f", "x", "--node-ip", "1.2.3")
    assert r.returncode == 2 and "invalid IP address '1.2.3'" in r.stderr


def test_render_prints_both_tables_and_reports_skips(tmp_path: Path) -> None:
    objs = [
        k.service("web", ["10.96.0.10"], [k.port(80)]),
        k.service("bad", ["10.96.0.11"], [k.port(0)]),
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2")], [k.port(8080)])],
        },
    ]
    r = run("render", "-f", str(k.write(tmp_path / "in.yaml", objs)), "--node-ip", "198.18.0.1")
    assert r.returncode == 0, r.stderr
    assert "add table ip nftproxy" in r.stdout and "add table ip6 nftproxy" in r.stdout
    assert (
        'add element ip nftproxy service-ips { 10.96.0.10 . tcp . 80 comment "default/web" : goto cluster-1 }'
        in r.stdout
    )
    assert r.stderr.strip() == "nftproxy: skipped Service default/bad: spec.ports[0]: port 0 is not in 1-65535"
