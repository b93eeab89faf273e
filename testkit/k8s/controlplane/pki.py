"""The control plane's certificates (openssl: a CA, the serving and client certificates, EC keys)
and kubeconfig files."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Sequence
from pathlib import Path

from testkit.k8s.controlplane.constants import ADMIN_USER, KUBERNETES_SERVICE_IP, LOOPBACK
from testkit.k8s.controlplane.errors import ControlPlaneError


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path.name,
        cwd=path.parent,
    )


def signed_cert(certs: Path, name: str, subject: str, extensions: str) -> None:
    """certs/NAME.{key,crt}: a P-256 key and a certificate signed by certs/ca.{key,crt}."""
    _ec_key(certs / f"{name}.key")
    (certs / f"{name}.ext").write_text(extensions)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=certs)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-set_serial",
        "0x" + secrets.token_hex(16),
        "-days",
        "3650",
        "-sha256",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.crt",
        cwd=certs,
    )
    (certs / f"{name}.csr").unlink()
    (certs / f"{name}.ext").unlink()


def generate_pki(certs: Path, extra_ips: Sequence[str] = ()) -> None:
    certs.mkdir(parents=True, exist_ok=True)
    _ec_key(certs / "ca.key")
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=nftproxy-test-ca",
        "-days",
        "3650",
        "-sha256",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        "ca.crt",
        cwd=certs,
    )
    sans = [
        f"IP:{LOOPBACK}",
        f"IP:{KUBERNETES_SERVICE_IP}",
        *(f"IP:{ip}" for ip in extra_ips),
        "DNS:localhost",
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
    ]
    signed_cert(
        certs,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
    )
    signed_cert(
        certs,
        "admin",
        f"/O=system:masters/CN={ADMIN_USER}",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    # Service-account token signing key pair.
    _openssl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "sa.key",
        cwd=certs,
    )
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=certs)
    for key in certs.glob("*.key"):
        key.chmod(0o600)


def file_b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], name: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "nftproxy",
                "cluster": {"server": server, "certificate-authority-data": file_b64(ca)},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "nftproxy", "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    # JSON is YAML: kubectl, client-go and the Python client all read it.
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
