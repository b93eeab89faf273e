"""The proxy's way to the apiserver: a counting TCP forwarder and a kubeconfig pointing at it."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import yaml


class CountingForwarder:
    """A TCP forwarder on 127.0.0.1:PORT (this namespace) to the apiserver, counting the bytes
    each way: ``down`` (apiserver -> proxy) and ``up``."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.down = 0
        self.up = 0
        self.connections = 0
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.port = port
        self._stop = False
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                out = socket.create_connection(self.target, timeout=10)
            except OSError:
                conn.close()
                continue
            out.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open += [conn, out]
            threading.Thread(target=self._pump, args=(out, conn, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, out, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                with self._lock:
                    if down:
                        self.down += len(data)
                    else:
                        self.up += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.down, self.up

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept: until it returns the port stays bound
        self.sock.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


def kubeconfig_via(source: Path, port: int, dest: Path) -> Path:
    """``source`` (server on 127.0.0.1) with its server moved to 127.0.0.1:PORT (TLS stays end to
    end: the apiserver's certificate names 127.0.0.1)."""
    data = yaml.safe_load(source.read_text())
    for c in data.get("clusters", []):
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest
