"""What the control plane raises."""

from __future__ import annotations

import subprocess


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or a binary is missing."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; str() includes its stderr."""

    def __str__(self) -> str:
        stderr = (self.stderr or "").strip()
        return f"{super().__str__()}\nstderr: {stderr}" if stderr else super().__str__()
