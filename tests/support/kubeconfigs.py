"""Kubeconfigs for the client's tests: one file, one context, and an exec credential plugin (as
EKS's ``aws eks get-token`` and GKE's ``gke-gcloud-auth-plugin`` are used)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

EXEC_API = "client.authentication.k8s.io/v1"


def write(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def exec_plugin(directory: Path, token: str, expires: str | None = None) -> dict[str, Any]:
    """A plugin (a Python script) that prints an ExecCredential with ``token`` and counts its runs
    in ``runs`` beside it; the kubeconfig's ``users[].user.exec`` that runs it."""
    status: dict[str, Any] = {"token": token}
    if expires:
        status["expirationTimestamp"] = expires
    credential = {"apiVersion": EXEC_API, "kind": "ExecCredential", "status": status}
    script = directory / "plugin.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(directory / 'runs')!r})\n"
        "runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else '1')\n"
        f"json.dump({json.dumps(credential)}, sys.stdout)\n"
    )
    return {
        "exec": {"apiVersion": EXEC_API, "command": sys.executable, "args": [str(script)], "interactiveMode": "Never"}
    }


def runs(directory: Path) -> int:
    path = directory / "runs"
    return int(path.read_text()) if path.exists() else 0
