"""Input reading: JSON read as JSON, YAML (C loader), stdin as a file. (How addresses are read:
test_address_spellings.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nftproxy.model import manifests
from nftproxy.model.manifests import ManifestError, load
from testkit.k8s import objects as k
from tests.support.run import run_nftproxy

OBJS = [
    k.service("web", ["10.96.0.10"], [k.port(80)]),
    k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2"), k.endpoint("10.244.1.3")], [k.port(8080)]),
]
LIST = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": OBJS}


def test_a_json_list_is_read_by_json_not_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "in.json"
    p.write_text(json.dumps(LIST, indent=4))

    def no_yaml(*_: object, **__: object) -> None:
        raise AssertionError("JSON went to the YAML parser")

    monkeypatch.setattr(yaml, "load_all", no_yaml)
    inputs = load([str(p)])
    assert [s.name for s in inputs.services] == ["web"]
    assert [e.address for e in inputs.slices[0].endpoints] == ["10.244.1.2", "10.244.1.3"]


def test_yaml_uses_the_c_loader_when_present(tmp_path: Path) -> None:
    p = k.write(tmp_path / "in.yaml", OBJS)
    if yaml.__with_libyaml__:
        assert manifests._YAML_LOADER is yaml.CSafeLoader
    assert load([str(p)]) == load([str(k.write(tmp_path / "in2.yaml", [LIST]))])


def test_json_that_json_refuses_falls_back_to_yaml_with_its_line(tmp_path: Path) -> None:
    p = tmp_path / "two.json"
    p.write_text(json.dumps(OBJS[0]) + "\n---\n" + json.dumps(OBJS[1]))  # a YAML stream of JSON docs
    assert len(load([str(p)]).services) == 1 and len(load([str(p)]).slices) == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "Service",\n "metadata": {"name": [}\n')
    with pytest.raises(ManifestError, match=r"bad.json: not valid YAML/JSON \(line 2\)"):
        load([str(bad)])


def test_stdin_reads_like_a_file(tmp_path: Path) -> None:
    p = tmp_path / "in.json"
    p.write_text(json.dumps(LIST))
    cmd = ["render", "--node-ip", "198.18.0.1", "-f"]
    from_file = run_nftproxy(*cmd, str(p), check=True)
    with p.open() as f:
        from_stdin = run_nftproxy(*cmd, "-", stdin=f, check=True)
    assert "10.244.1.2" in from_file.stdout and from_stdin.stdout == from_file.stdout
