"""A real Kubernetes control plane (etcd + kube-apiserver) on loopback, for tests and the demo.

Modelled on controller-runtime's envtest: no controller-manager, no scheduler, no kubelet. Objects
are stored and served, RBAC is enforced, service-account tokens are signed, but nothing reconciles
them (namespaces stay Terminating when deleted, Pods never run, no default ServiceAccount appears).

Everything binds to 127.0.0.1 on free random ports; nothing touches the host's network
configuration. etcd and kube-apiserver run as child processes, each in its own process group, with
their data, certificates and logs under one work directory.

Binaries: ``kube-apiserver`` and ``kubectl`` from ``$NFTPROXY_BIN`` or
``${NFTPROXY_CACHE:-~/.cache/nftproxy}/k8s/<K8S_VERSION>/bin`` (built by ``hack/k8s-tools.sh``,
testkit/k8s/versions.py); ``etcd`` from ``$NFTPROXY_BIN`` or ``…/bin``, else ``$PATH`` (Debian's
etcd-server).

CLI (used by the demo)::

    python -m testkit.k8s.controlplane up --dir DIR     # detached; writes DIR/kubeconfig
    python -m testkit.k8s.controlplane status --dir DIR
    python -m testkit.k8s.controlplane down --dir DIR   # stops and removes DIR
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testkit.k8s import versions
from testkit.process import cmdline, pid_alive

__all__ = [
    "SERVICE_CLUSTER_IP_RANGE",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "find_binary",
]

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16,fd00:10:96::/112"
# First address of the range: the apiserver allocates it to the `kubernetes` Service.
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "nftproxy-admin"
STATE_FILE = "controlplane.json"  # marks a directory as ours (CLI `down` only removes those)
_LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or a binary is missing."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; str() includes its stderr."""

    def __str__(self) -> str:
        stderr = (self.stderr or "").strip()
        return f"{super().__str__()}\nstderr: {stderr}" if stderr else super().__str__()


# --------------------------------------------------------------------------- binaries


def cache_dir() -> Path:
    return Path(os.environ.get("NFTPROXY_CACHE") or Path.home() / ".cache" / "nftproxy")


def find_binary(name: str, version: str | None = None) -> Path:
    """Locate NAME in $NFTPROXY_BIN, the k8s-tools cache (a Kubernetes binary: in its version's
    directory, ``version`` or else K8S_VERSION's, testkit/k8s/versions.py), then (etcd only) $PATH."""
    candidates: list[Path] = []
    if env_bin := os.environ.get("NFTPROXY_BIN"):
        candidates.append(Path(env_bin) / name)
    if name in versions.VERSIONED:
        candidates.append(versions.bin_dir(cache_dir(), version) / name)
    else:
        candidates.append(cache_dir() / "bin" / name)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    if name == "etcd" and (found := shutil.which("etcd")):
        return Path(found)
    hint = (
        "install Debian's etcd-server (hack/install.sh)"
        if name == "etcd"
        else f"run K8S_VERSION={version or versions.current()} hack/k8s-tools.sh (or hack/e2e-tools.sh) to build it"
    )
    raise ControlPlaneError(
        f"{name} not found (looked in {', '.join(str(c) for c in candidates)}): {hint}, "
        "or point NFTPROXY_BIN at a directory that has it"
    )


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return int(s.getsockname()[1])


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


def _signed_cert(certs: Path, name: str, subject: str, extensions: str) -> None:
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


def _generate_pki(certs: Path, extra_ips: Sequence[str] = ()) -> None:
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
        f"IP:{_LOOPBACK}",
        f"IP:{KUBERNETES_SERVICE_IP}",
        *(f"IP:{ip}" for ip in extra_ips),
        "DNS:localhost",
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
    ]
    _signed_cert(
        certs,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
    )
    _signed_cert(
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


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], name: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "nftproxy",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
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


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """preexec_fn: have the kernel SIGTERM the child when the forking thread's process dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- processes


class _Proc:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], log: Path, *, detached: bool) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.detached = detached
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        logf: IO[bytes]
        with self.log.open("ab") as logf:
            logf.write(f"\n=== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            logf.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg reaches all of it
                preexec_fn=None if self.detached else _die_with_parent,  # noqa: PLW1509
                close_fds=True,
            )

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        p = self.popen
        if p is None:
            return
        self.popen = None
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # Anything left in the group (nothing, normally: these binaries don't fork).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- the control plane


class ControlPlane:
    """etcd + kube-apiserver on 127.0.0.1, with an admin kubeconfig (client cert, system:masters).

    ``workdir``: where data, certs, logs and the kubeconfig go; by default a fresh temp directory,
    deleted by ``stop()``. A given ``workdir`` is kept. ``detached``: children don't die with this
    process (for the CLI ``up``); otherwise the kernel also SIGTERMs them if Python dies hard.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        detached: bool = False,
        start_timeout: float = 90.0,
        extra_apiserver_args: Sequence[str] = (),
        service_accounts: bool = False,
        etcd_data_dir: str | os.PathLike[str] | None = None,
        audit: bool = False,
        apiserver_bin: str | os.PathLike[str] | None = None,
        advertise_address: str | None = None,
        service_cluster_ip_range: str = SERVICE_CLUSTER_IP_RANGE,
    ) -> None:
        # advertise_address: the address the `kubernetes` Service's endpoint gets (the lease
        # reconciler on, the serving certificate carries it): one that pods reach, where something
        # forwards it to the apiserver on 127.0.0.1 (the real cluster). None: 127.0.0.1 and no
        # endpoint at all (127.0.0.1 is not a valid endpoint address).
        self.advertise_address = advertise_address
        # service_cluster_ip_range: the default ServiceCIDR (a benchmark of more than the /16's
        # 65,534 Services asks for a bigger one).
        self.service_cluster_ip_range = service_cluster_ip_range
        self._own_workdir = workdir is None
        self._apiserver_bin_arg = Path(apiserver_bin) if apiserver_bin is not None else None
        self._workdir_arg = Path(workdir).resolve() if workdir is not None else None
        self._workdir: Path | None = self._workdir_arg
        self.detached = detached
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        # service_accounts: keep the ServiceAccount admission plugin on (a real cluster, with a
        # controller-manager that creates the `default` ServiceAccounts and kube-root-ca.crt).
        self.service_accounts = service_accounts
        # audit: log every request (Metadata level: who, verb, resource, response code; no bodies)
        # as JSON lines to ``audit_log`` (see read_audit_log). Off by default: it costs a write per request.
        self.audit = audit
        # etcd_data_dir: etcd's data elsewhere than WORKDIR/etcd (e.g. on tmpfs: a disk busy with
        # image layers made etcd's fdatasync take minutes); the caller removes it.
        self.etcd_data_dir = Path(etcd_data_dir) if etcd_data_dir is not None else None
        self._own_etcd_dir: Path | None = None  # made on tmpfs by start(), removed by stop()
        self.etcd_port = 0
        self.etcd_peer_port = 0
        self.secure_port = 0
        self._etcd: _Proc | None = None
        self._apiserver: _Proc | None = None
        self._kubectl_bin: Path | None = None

    # ----------------------------------------------------------- paths / properties

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ControlPlaneError("control plane not started")
        return self._workdir

    @property
    def cert_dir(self) -> Path:
        return self.workdir / "certs"

    @property
    def ca_file(self) -> Path:
        return self.cert_dir / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (client certificate in group system:masters)."""
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{_LOOPBACK}:{self.secure_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{_LOOPBACK}:{self.etcd_port}"

    @property
    def etcd_log(self) -> Path:
        return self.workdir / "logs" / "etcd.log"

    @property
    def apiserver_log(self) -> Path:
        return self.workdir / "logs" / "kube-apiserver.log"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log (JSON lines), when started with ``audit=True``."""
        return self.workdir / "logs" / "audit.log"

    def read_audit_log(self) -> list[dict[str, Any]]:
        """Every audit event logged so far (``audit.k8s.io/v1`` Event objects)."""
        if not self.audit:
            raise ControlPlaneError("control plane started without audit=True")
        try:
            text = self.audit_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        # The last line may be half written: only complete lines.
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n") and line.strip()]

    @property
    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for proc in (self._etcd, self._apiserver):
            if proc is not None and proc.pid is not None and proc.running():
                out[proc.name] = proc.pid
        return out

    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.running()

    # ----------------------------------------------------------- lifecycle

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver; return once /readyz answers ok."""
        if self._etcd is not None:
            raise ControlPlaneError("control plane already started")
        etcd_bin = find_binary("etcd")
        apiserver_bin = self._apiserver_bin_arg or find_binary("kube-apiserver")
        self._kubectl_bin = find_binary("kubectl")
        if self._workdir_arg is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="nftproxy-k8s-"))
        else:
            self._workdir = self._workdir_arg
            self._workdir.mkdir(parents=True, exist_ok=True)
        if self.etcd_data_dir is None and not self.detached and Path("/dev/shm").is_dir():
            # etcd on tmpfs: on a disk busy with other tests (image layers, big nft loads) its
            # fdatasync took seconds and the apiserver's /readyz failed its etcd check.
            self._own_etcd_dir = self.etcd_data_dir = Path(tempfile.mkdtemp(prefix="nftproxy-etcd-", dir="/dev/shm"))
        try:
            _generate_pki(self.cert_dir, [self.advertise_address] if self.advertise_address else [])
            self.etcd_port, self.etcd_peer_port, self.secure_port = (
                _free_port(),
                _free_port(),
                _free_port(),
            )
            self._etcd = _Proc("etcd", self._etcd_argv(etcd_bin), self.etcd_log, detached=self.detached)
            self._etcd.start()
            self._wait_etcd()
            self._apiserver = _Proc(
                "kube-apiserver",
                self._apiserver_argv(apiserver_bin),
                self.apiserver_log,
                detached=self.detached,
            )
            self._apiserver.start()
            self._wait_ready()
            _write_kubeconfig(
                self.kubeconfig,
                self.server,
                self.ca_file,
                {
                    "client-certificate-data": _b64(self.cert_dir / "admin.crt"),
                    "client-key-data": _b64(self.cert_dir / "admin.key"),
                },
                ADMIN_USER,
            )
            self._write_state()
        except BaseException:  # also KeyboardInterrupt: never leave children behind
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop kube-apiserver and etcd (process groups), wait for them; remove a temp workdir."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()
        self._apiserver = None
        self._etcd = None
        if self._own_etcd_dir is not None:
            shutil.rmtree(self._own_etcd_dir, ignore_errors=True)
            self._own_etcd_dir = self.etcd_data_dir = None
        if self._own_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        elif self._workdir is not None:
            with contextlib.suppress(FileNotFoundError):
                (self._workdir / "pids.json").unlink()

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd and its data stay)."""
        if self._apiserver is None:
            raise ControlPlaneError("control plane not started")
        self._apiserver.stop()

    def stop_etcd(self) -> None:
        """Stop etcd only (its data stays; kube-apiserver keeps running and fails its requests)."""
        if self._etcd is None:
            raise ControlPlaneError("control plane not started")
        self._etcd.stop()

    def start_etcd(self) -> None:
        """(Re)start etcd on the same ports and data; wait until healthy."""
        if self._etcd is None:
            raise ControlPlaneError("control plane not started")
        if self._etcd.running():
            raise ControlPlaneError("etcd is already running")
        # With its data directory in place, etcd ignores the --initial-cluster* flags.
        self._etcd.start()
        self._wait_etcd()
        self._write_state()

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port, certs and etcd; wait until ready."""
        if self._apiserver is None or self._etcd is None:
            raise ControlPlaneError("control plane not started")
        if self._apiserver.running():
            raise ControlPlaneError("kube-apiserver is already running")
        if not self._etcd.running():
            raise ControlPlaneError(f"etcd is not running:\n{_tail(self.etcd_log)}")
        self._apiserver.start()
        try:
            self._wait_ready()
        except BaseException:
            self._apiserver.stop()
            raise
        self._write_state()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort; stop() is the API
        if not self.detached and (self._etcd is not None or self._apiserver is not None):
            with contextlib.suppress(Exception):
                self.stop()

    # ----------------------------------------------------------- clients

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (admin, unless ``kubeconfig`` is given)."""
        kubectl_bin = self._kubectl_bin or find_binary("kubectl")
        argv = [str(kubectl_bin), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def wait_default_service_cidr(self, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the apiserver's default ServiceCIDR ``kubernetes`` exists and is Ready (its
        own controller creates it a moment after the apiserver answers, later on a busy machine).
        A kube-proxy started before reads no ServiceCIDR and applies one only at its hourly full
        sync: it then rejects what it should drop (a CI run of the conformance suite, 2026-12-03)."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.kubectl("get", "servicecidr", "kubernetes", "-o", "json", check=False)
            if r.returncode == 0:
                obj: dict[str, Any] = json.loads(r.stdout)
                conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
                if conds.get("Ready") == "True":
                    return obj
            if time.monotonic() > deadline:
                raise TimeoutError(f"the default ServiceCIDR is not Ready after {timeout:.0f} s: {r.stdout}{r.stderr}")
            time.sleep(0.2)

    def client_kubeconfig(self, path: str | os.PathLike[str], common_name: str, organization: str = "") -> Path:
        """Write a kubeconfig at PATH with a new client certificate (CN, O) signed by the CA."""
        name = "client-" + "".join(c if c.isalnum() else "-" for c in common_name)
        subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
        _signed_cert(
            self.cert_dir,
            name,
            subject,
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        )
        user = {
            "client-certificate-data": _b64(self.cert_dir / f"{name}.crt"),
            "client-key-data": _b64(self.cert_dir / f"{name}.key"),
        }
        return _write_kubeconfig(Path(path), self.server, self.ca_file, user, name)

    def token_kubeconfig(self, token: str, path: str | os.PathLike[str]) -> Path:
        """Write a kubeconfig at PATH that authenticates with a bearer token; return its path."""
        return _write_kubeconfig(Path(path), self.server, self.ca_file, {"token": token}, "token")

    def ssl_context(self) -> ssl.SSLContext:
        """TLS context that trusts the apiserver and presents the admin client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(self.cert_dir / "admin.crt", self.cert_dir / "admin.key")
        return ctx

    # ----------------------------------------------------------- internals

    def _etcd_argv(self, etcd_bin: Path) -> list[str]:
        peer = f"http://{_LOOPBACK}:{self.etcd_peer_port}"
        return [
            str(etcd_bin),
            "--name=default",
            f"--data-dir={self.etcd_data_dir or self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-outputs=stderr",
            "--log-level=warn",
        ]

    def _apiserver_argv(self, apiserver_bin: Path) -> list[str]:
        certs = self.cert_dir
        return [
            str(apiserver_bin),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={_LOOPBACK}",
            f"--advertise-address={self.advertise_address or _LOOPBACK}",
            f"--secure-port={self.secure_port}",
            f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--client-ca-file={certs / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={certs / 'sa.pub'}",
            f"--service-account-signing-key-file={certs / 'sa.key'}",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            # Without a controller-manager nothing creates the `default` ServiceAccount, so the
            # admission plugin would reject every Pod (as envtest does, turn it off).
            *([] if self.service_accounts else ["--disable-admission-plugins=ServiceAccount"]),
            # 127.0.0.1 is not a valid endpoint address: don't publish one for `kubernetes`.
            f"--endpoint-reconciler-type={'lease' if self.advertise_address else 'none'}",
            "--allow-privileged=true",
            "--profiling=false",
            *(self._audit_args() if self.audit else []),
            *self.extra_apiserver_args,
        ]

    def _audit_args(self) -> list[str]:
        policy = self.workdir / "audit-policy.yaml"
        # JSON is YAML. Every request at Metadata level; RequestReceived is left out (each request's
        # later stages, ResponseStarted/ResponseComplete/Panic, carry the same and the answer's code).
        spec = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"]}
        policy.write_text(json.dumps({**spec, "rules": [{"level": "Metadata"}]}) + "\n")
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written before the answer: a test reads all it did
        ]

    def _wait_etcd(self) -> None:
        assert self._etcd is not None
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if not self._etcd.running():
                raise ControlPlaneError(f"etcd exited during startup:\n{_tail(self.etcd_log)}")
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:  # noqa: S310
                    body = json.loads(resp.read())
                if body.get("health") in ("true", True):
                    return
                last = str(body)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.1)
        raise ControlPlaneError(f"etcd not healthy after {self.start_timeout:.0f}s ({last}):\n{_tail(self.etcd_log)}")

    def _wait_ready(self) -> None:
        assert self._apiserver is not None
        ctx = self.ssl_context()
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if not self._apiserver.running():
                raise ControlPlaneError(
                    f"kube-apiserver exited during startup; log tail "
                    f"({self.apiserver_log}):\n{_tail(self.apiserver_log)}"
                )
            try:
                with urllib.request.urlopen(  # noqa: S310 - https to our own loopback server
                    f"{self.server}/readyz", timeout=2, context=ctx
                ) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read(2000).decode(errors='replace').strip()}"
            except OSError as e:
                last = str(e)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {self.start_timeout:.0f}s (last /readyz: {last}); "
            f"log tail ({self.apiserver_log}):\n{_tail(self.apiserver_log)}"
        )

    def _write_state(self) -> None:
        state: dict[str, Any] = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "etcd": self.etcd_url,
            "pids": self.pids,
            "binaries": {p.name: p.argv[0] for p in (self._etcd, self._apiserver) if p},
        }
        path = self.workdir / STATE_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(path)
        (self.workdir / "pids.json").write_text(json.dumps(self.pids) + "\n")


# --------------------------------------------------------------------------- CLI


def _read_state(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((d / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _our_pids(d: Path, state: dict[str, Any]) -> dict[str, int]:
    """PIDs from the state file that still run our binary with our work dir (no PID-reuse kills)."""
    out: dict[str, int] = {}
    for name, pid in (state.get("pids") or {}).items():
        argv = cmdline(int(pid))
        if argv and Path(argv[0]).name == name and any(str(d) in a for a in argv):
            out[name] = int(pid)
    return {n: p for n, p in out.items() if pid_alive(p)}


def _kill_detached(pids: dict[str, int], timeout: float = 15.0) -> None:
    for name in ("kube-apiserver", "etcd"):  # apiserver first, like stop()
        pid = pids.get(name)
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)


def _cmd_up(d: Path, timeout: float) -> int:
    state = _read_state(d)
    if state is not None:
        live = _our_pids(d, state)
        if len(live) == 2:
            print(f"control plane already up: {state['server']}, kubeconfig {d / 'kubeconfig'}")
            return 0
        _kill_detached(live)  # half-dead leftovers of an earlier run: start afresh
        for sub in ("etcd", "certs", "logs"):
            shutil.rmtree(d / sub, ignore_errors=True)
    cp = ControlPlane(d, detached=True, start_timeout=timeout)
    cp.start()  # on failure start() stops what it started and raises with the log tail
    print(f"control plane up: {cp.server}")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    # Leave the children running: forget them without stopping.
    cp._etcd = cp._apiserver = None
    return 0


def _cmd_down(d: Path) -> int:
    state = _read_state(d)
    if state is None:
        if d.exists():
            print(f"{d} holds no control plane ({STATE_FILE} missing); left alone", file=sys.stderr)
            return 1
        print("control plane already down")
        return 0
    _kill_detached(_our_pids(d, state))
    shutil.rmtree(d, ignore_errors=True)
    print(f"control plane down; removed {d}")
    return 0


def _cmd_status(d: Path) -> int:
    state = _read_state(d)
    live = _our_pids(d, state) if state else {}
    if state is None or len(live) != 2:
        print(f"down (running: {', '.join(live) or 'nothing'})")
        return 1
    print(f"up: {state['server']} kubeconfig {state['kubeconfig']} pids {live}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.k8s.controlplane",
        description="Run etcd + kube-apiserver on 127.0.0.1 (detached) for the demo.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, text in (
        ("up", "start detached; return once ready (writes DIR/kubeconfig)"),
        ("down", "stop and remove DIR"),
        ("status", "exit 0 if up"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--dir", required=True, type=Path, help="work directory")
        if name == "up":
            p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    args = parser.parse_args(argv)
    d: Path = args.dir.resolve()
    try:
        if args.cmd == "up":
            return _cmd_up(d, args.timeout)
        if args.cmd == "down":
            return _cmd_down(d)
        return _cmd_status(d)
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
