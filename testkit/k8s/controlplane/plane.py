"""ControlPlane: etcd + kube-apiserver on 127.0.0.1, started, waited for, stopped."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from testkit.k8s.controlplane.binaries import find_binary
from testkit.k8s.controlplane.child import Child, log_tail
from testkit.k8s.controlplane.constants import (
    ADMIN_USER,
    LOOPBACK,
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_CLUSTER_IP_RANGE,
    STATE_FILE,
)
from testkit.k8s.controlplane.errors import ControlPlaneError, KubectlError
from testkit.k8s.controlplane.pki import file_b64, generate_pki, signed_cert, write_kubeconfig


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


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
        self._etcd: Child | None = None
        self._apiserver: Child | None = None
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
        return f"https://{LOOPBACK}:{self.secure_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self.etcd_port}"

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
            generate_pki(self.cert_dir, [self.advertise_address] if self.advertise_address else [])
            self.etcd_port, self.etcd_peer_port, self.secure_port = (
                free_port(),
                free_port(),
                free_port(),
            )
            self._etcd = Child("etcd", self._etcd_argv(etcd_bin), self.etcd_log, detached=self.detached)
            self._etcd.start()
            self._wait_etcd()
            self._apiserver = Child(
                "kube-apiserver",
                self._apiserver_argv(apiserver_bin),
                self.apiserver_log,
                detached=self.detached,
            )
            self._apiserver.start()
            self._wait_ready()
            write_kubeconfig(
                self.kubeconfig,
                self.server,
                self.ca_file,
                {
                    "client-certificate-data": file_b64(self.cert_dir / "admin.crt"),
                    "client-key-data": file_b64(self.cert_dir / "admin.key"),
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
            raise ControlPlaneError(f"etcd is not running:\n{log_tail(self.etcd_log)}")
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
        sync: it then rejects what it should drop."""
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
        signed_cert(
            self.cert_dir,
            name,
            subject,
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        )
        user = {
            "client-certificate-data": file_b64(self.cert_dir / f"{name}.crt"),
            "client-key-data": file_b64(self.cert_dir / f"{name}.key"),
        }
        return write_kubeconfig(Path(path), self.server, self.ca_file, user, name)

    def token_kubeconfig(self, token: str, path: str | os.PathLike[str]) -> Path:
        """Write a kubeconfig at PATH that authenticates with a bearer token; return its path."""
        return write_kubeconfig(Path(path), self.server, self.ca_file, {"token": token}, "token")

    def ssl_context(self) -> ssl.SSLContext:
        """TLS context that trusts the apiserver and presents the admin client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(self.cert_dir / "admin.crt", self.cert_dir / "admin.key")
        return ctx

    # ----------------------------------------------------------- internals

    def _etcd_argv(self, etcd_bin: Path) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.etcd_peer_port}"
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
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={self.advertise_address or LOOPBACK}",
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
                raise ControlPlaneError(f"etcd exited during startup:\n{log_tail(self.etcd_log)}")
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:  # noqa: S310
                    body = json.loads(resp.read())
                if body.get("health") in ("true", True):
                    return
                last = str(body)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.1)
        raise ControlPlaneError(
            f"etcd not healthy after {self.start_timeout:.0f}s ({last}):\n{log_tail(self.etcd_log)}"
        )

    def _wait_ready(self) -> None:
        assert self._apiserver is not None
        ctx = self.ssl_context()
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if not self._apiserver.running():
                raise ControlPlaneError(
                    f"kube-apiserver exited during startup; log tail "
                    f"({self.apiserver_log}):\n{log_tail(self.apiserver_log)}"
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
            f"log tail ({self.apiserver_log}):\n{log_tail(self.apiserver_log)}"
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
