"""kube-proxy's feature gates that change what nftproxy does: their defaults follow the cluster's
Kubernetes version (read from the apiserver's ``/version``), as kube-proxy's follow its own
release, and ``--feature-gates`` overrides them, as kube-proxy's flag does. Pure.

Where kube-proxy fixed a bug between releases, nftproxy has the fix on every cluster: only a gate
(a behaviour its users switch on or off, with a default that moves) follows the version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

LOCALHOST_NODEPORTS = "KubeProxyNFTablesLocalhostNodePorts"

# gate -> (first Kubernetes minor, default from there on), oldest first (pkg/features of each
# release: alpha, off, in 1.37; beta, on, in 1.38). Before the first minor: off.
DEFAULTS: Mapping[str, tuple[tuple[int, bool], ...]] = {
    LOCALHOST_NODEPORTS: ((37, False), (38, True)),
}

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$")


class FeatureGateError(ValueError):
    """A --feature-gates value nftproxy cannot use (unknown gate, not a boolean)."""


def parse_version(text: str) -> tuple[int, int]:
    """``v1.38.0-beta.0``, ``v1.35.4-gke.1``, ``1.37`` -> (major, minor) (ValueError otherwise)."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ValueError(f"not a Kubernetes version: {text!r}")
    return int(m.group(1)), int(m.group(2))


def server_version(info: Mapping[str, object]) -> str:
    """The version text of an apiserver's ``/version`` answer: its gitVersion, else major.minor
    (providers write minors such as ``28+``)."""
    git = info.get("gitVersion")
    if isinstance(git, str) and _VERSION.match(git.strip()):
        return git.strip()
    major, minor = (str(info.get(k, "")).rstrip("+") for k in ("major", "minor"))
    text = f"v{major}.{minor}"
    parse_version(text)
    return text


def parse_gates(text: str) -> dict[str, bool]:
    """``A=true,B=false`` (kube-proxy's --feature-gates syntax) -> {gate: enabled}. Only the
    gates in DEFAULTS: nftproxy has no other, and a typo must not pass silently."""
    out: dict[str, bool] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if name not in DEFAULTS:
            known = ", ".join(sorted(DEFAULTS))
            raise FeatureGateError(f"unrecognized feature gate {name!r} (nftproxy knows: {known})")
        if not sep or value not in ("true", "false"):
            raise FeatureGateError(f"invalid value of {name}: {value!r} (want true or false)")
        out[name] = value == "true"
    return out


def default(gate: str, version: tuple[int, int] | None) -> bool:
    """The gate's default at that Kubernetes version (None, no cluster to ask: off)."""
    if version is None:
        return False
    on = False
    for minor, value in DEFAULTS[gate]:
        if version >= (1, minor):
            on = value
    return on


def enabled(version: tuple[int, int] | None, overrides: Mapping[str, bool]) -> frozenset[str]:
    """The gates on: each one's default at ``version``, unless ``overrides`` (--feature-gates)
    names it."""
    return frozenset(g for g in DEFAULTS if overrides.get(g, default(g, version)))


def describe(version: tuple[int, int] | None, overrides: Mapping[str, bool]) -> str:
    """``KubeProxyNFTablesLocalhostNodePorts=true (default at 1.38)``, for the log."""
    on = enabled(version, overrides)
    parts = []
    at = f"default at {version[0]}.{version[1]}" if version else "default"
    for g in sorted(DEFAULTS):
        why = "--feature-gates" if g in overrides else at
        parts.append(f"{g}={'true' if g in on else 'false'} ({why})")
    return ", ".join(parts)
