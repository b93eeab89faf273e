"""Echo server for the network lab: tells every client which pod answered and who it saw.

    python -m testkit.lab.echo --name POD --tcp 8080 --tcp 9090 --udp 5353

Listens on every given TCP and UDP port on 0.0.0.0 and :: (separate IPv6-only sockets, so peers
are reported without ``::ffff:`` mapping) and answers every TCP connection and every UDP datagram
with one JSON line ``{"pod": NAME, "peer": CLIENT_ADDRESS, "port": LOCAL_PORT}``; a TCP connection
is then closed. UDP replies leave from the address the datagram was sent to (IP_PKTINFO), so
conntrack can un-DNAT them even when the server runs in a namespace with several addresses.

Once every socket is bound (and TCP sockets listen) it prints ``READY`` on stdout, then detaches
stdout. Standard library only: the lab starts it with ``python -I -S`` for a fast start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import struct
import sys
import threading
import time

IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux value; the constant appears in Python 3.12
_CMSG_SPACE = socket.CMSG_SPACE(64)


def _reply(name: str, peer: str, port: int) -> bytes:
    peer = peer.split("%", 1)[0]  # drop an IPv6 scope id
    return (json.dumps({"pod": name, "peer": peer, "port": port}) + "\n").encode()


def _bind(family: socket.AddressFamily, kind: socket.SocketKind, port: int) -> socket.socket:
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(("::", port))
    else:
        sock.bind(("0.0.0.0", port))
    if kind == socket.SOCK_STREAM:
        sock.listen(1024)
    elif family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    return sock


def serve_tcp(sock: socket.socket, name: str) -> None:
    port = sock.getsockname()[1]
    while True:
        try:
            conn, addr = sock.accept()
        except OSError:
            continue
        try:
            conn.settimeout(2.0)
            conn.sendall(_reply(name, addr[0], port))
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            conn.close()


def serve_udp(sock: socket.socket, name: str) -> None:
    port = sock.getsockname()[1]
    v6 = sock.family == socket.AF_INET6
    while True:
        try:
            _data, ancdata, _flags, addr = sock.recvmsg(65535, _CMSG_SPACE)
        except OSError:
            continue
        cmsgs: list[tuple[int, int, bytes]] = []
        for level, ctype, cdata in ancdata:
            if v6 and level == socket.IPPROTO_IPV6 and ctype == socket.IPV6_PKTINFO:
                # struct in6_pktinfo {in6_addr addr; int ifindex}: reply from the same address.
                cmsgs.append((level, ctype, cdata[:16] + struct.pack("=i", 0)))
            elif not v6 and level == socket.IPPROTO_IP and ctype == IP_PKTINFO:
                # struct in_pktinfo {int ifindex; in_addr spec_dst; in_addr addr}
                cmsgs.append((level, ctype, struct.pack("=i", 0) + cdata[8:12] + bytes(4)))
        with contextlib.suppress(OSError):
            sock.sendmsg([_reply(name, addr[0], port)], cmsgs, 0, addr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--name", required=True, help="name reported in every answer")
    parser.add_argument("--tcp", type=int, action="append", default=[], metavar="PORT")
    parser.add_argument("--udp", type=int, action="append", default=[], metavar="PORT")
    parser.add_argument("--no-ipv6", action="store_true", help="listen on IPv4 only")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the lab) is gone")
    args = parser.parse_args(argv)

    families = [socket.AF_INET] if args.no_ipv6 else [socket.AF_INET, socket.AF_INET6]
    threads: list[threading.Thread] = []
    for family in families:
        for port in args.tcp:
            sock = _bind(family, socket.SOCK_STREAM, port)
            threads.append(threading.Thread(target=serve_tcp, args=(sock, args.name), daemon=True))
        for port in args.udp:
            sock = _bind(family, socket.SOCK_DGRAM, port)
            threads.append(threading.Thread(target=serve_udp, args=(sock, args.name), daemon=True))
    for t in threads:
        t.start()

    sys.stdout.write("READY\n")
    sys.stdout.flush()
    # Nobody reads stdout after READY: point it at /dev/null so a late write cannot hit EPIPE.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)

    if not threads:
        return 0
    try:
        while args.parent_pid is None or os.getppid() == args.parent_pid:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
