"""What a node needs for nftproxy, checked by ``nftproxy run`` before its first sync: one clear
line and a non-zero exit when it is missing, as kube-proxy's nftables mode refuses to start.

* A kernel of 5.13 or later: kube-proxy's own floor (pkg/proxy/nftables/supported.go,
  ``NFTablesKubeProxyKernelVersion``), read and compared as kube-proxy does (the release's leading
  numbers: ``5.15.0-91-generic`` is 5.15.0), skipped when ``KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK``
  is set, as kube-proxy skips it. Every nftables feature nftproxy's table uses (verdict maps on
  concatenations, interval sets of concatenations, ``numgen`` maps for DNAT, ``fib``, ``ct``
  expressions, ``masquerade fully-random``, comments on tables, sets and elements) is in 5.13.
* nf_tables usable here (``KernelBackend.probe``): libnftables loads, and the kernel's nf_tables
  answers in the node's network namespace to a process allowed to ask (CAP_NET_ADMIN).

A kernel built without one of the expression modules is not found here: a dry run that would find
it costs the kernel's abort of a transaction (an RCU grace period, ~10 ms), more than the whole
check may; the first sync then fails with nft's error, in the log and in ProxyStatus.

The decision (``refusal``) is pure; ``check`` reads the kernel release and runs the probe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

MIN_KERNEL = (5, 13)
SKIP_KERNEL_CHECK = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"  # kube-proxy's variable

# k8s.io/apimachinery's ParseGeneric (what kube-proxy reads the release with): leading numbers,
# at least two, the first without a leading zero, anything after them ignored.
_RELEASE = re.compile(r"^\s*v?((?:0|[1-9][0-9]*)(?:\.[0-9]+)+)")


class Unsupported(Exception):
    """This node lacks what nftproxy needs; the message is the one line that says what."""


def kernel_version(release: str) -> tuple[int, ...]:
    """``6.18.44-fc`` -> (6, 18, 44); ValueError when the release does not start with numbers."""
    m = _RELEASE.match(release)
    if m is None:
        raise ValueError(f"not a kernel release: {release!r}")
    return tuple(int(n) for n in m.group(1).split("."))


def refusal(release: str, nf_tables_error: str | None, skip_kernel_check: bool = False) -> str | None:
    """None when nftproxy can run on this node, else the one line that says why not (printed after
    "nftproxy: ").

    ``release``: the kernel's release (``uname -r``); ``nf_tables_error``: what the nf_tables probe
    said when it failed, None when it answered; ``skip_kernel_check``: the kernel version is not
    judged (kube-proxy's escape hatch, for kernels that carry the features under an older number)."""
    if not skip_kernel_check:
        needs = f"needs Linux {'.'.join(map(str, MIN_KERNEL))} or later"
        hint = f"; {SKIP_KERNEL_CHECK}=1 skips this check"
        try:
            version = kernel_version(release)
        except ValueError:
            return f"cannot read the kernel version from {release.strip()!r} ({needs}){hint}"
        if version < MIN_KERNEL:
            return f"{needs} (as kube-proxy's nftables mode), this node runs {release.strip()}{hint}"
    if nf_tables_error is not None:
        reason = next((line for line in nf_tables_error.splitlines() if line.strip()), "no answer").strip()
        reason = reason.removeprefix("Error: ")
        return (
            f"nf_tables is not usable here: {reason} (needs the kernel's nf_tables, libnftables and "
            "CAP_NET_ADMIN in the node's network namespace)"
        )
    return None


def check(probe: Callable[[], object], release: str | None = None, environ: Mapping[str, str] = os.environ) -> None:
    """Raise Unsupported with the one line when this node cannot run nftproxy. ``probe``: the
    nf_tables probe (raises when nf_tables does not answer); ``release``: default this kernel's."""
    try:
        probe()
        error = None
    except OSError as e:  # the kernel's refusal: its errno's words
        error = e.strerror or str(e)
    except Exception as e:  # e.g. libnftables or its Python module missing
        error = str(e) or type(e).__name__
    line = refusal(release if release is not None else os.uname().release, error, bool(environ.get(SKIP_KERNEL_CHECK)))
    if line is not None:
        raise Unsupported(line)
