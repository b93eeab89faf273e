"""The machine's own state the tests must leave as they found it."""

from __future__ import annotations

from pathlib import Path

# kubelet sets these machine-wide unless kept in its mount namespace (testkit.realcluster does).
MACHINE_SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward")


def machine_sysctls() -> dict[str, str]:
    return {k: Path(f"/proc/sys/{k}").read_text().strip() for k in MACHINE_SYSCTLS}
