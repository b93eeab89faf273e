"""nft's error output, read once: its first error, the errno that error names, and the statement it
refused (from our own script, at the line and columns nft gives).

This is the one place nft's text is read (as knftables' wrapError): everything else asks the
NftError's errno (``backend.is_not_found``, ``backend.is_exists``)."""

from __future__ import annotations

import errno as errnos
import os
import re
from collections.abc import Callable

from nftproxy.nft.backend import NftError

# The kernel's refusals reach nft's message as strerror() text (nft does not call setlocale(),
# so it is the C locale's, as this process's os.strerror): "Error: Could not process rule: File
# exists", "Error: No such file or directory; did you mean table 'x' in family ip?".
_ERRNOS = {os.strerror(code): code for code in sorted(errnos.errorcode, reverse=True)}
_LOCATION = re.compile(r":(\d+):(\d+)-(\d+): Error:")


def errno_of(message: str) -> int:
    """The errno an nft error line names (its last ``: ``-part, up to a ``;``), else EINVAL.
    Only nft's own words are read, never the statement quoted after them (element comments
    carry the names of users' objects)."""
    head = message.split(";", 1)[0].rstrip()
    return _ERRNOS.get(head.rsplit(": ", 1)[-1].strip(), errnos.EINVAL)


def error(output: str, script: str | None = None) -> NftError:
    """The NftError of nft's (or libnftables') error output: its first error with the statement
    it refused, and the errno that error names."""
    lines = [ln for ln in str(output).splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if "Error:" in ln:
            msg = ln[ln.index("Error:") :]
            code = errno_of(msg)
            m = _LOCATION.search(ln)
            if m and script:
                number, first, last = (int(g) for g in m.groups())
                source = script.split("\n", number)[number - 1] if number >= 1 else ""
                if source:
                    return NftError(f"{msg} [{statement_at(source, first, last)}]", code)
            where = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return NftError(f"{msg} [{where[:160]}]" if where else msg, code)
    return NftError(lines[0] if lines else "nft failed")


def located(script: str, output: str, dry_run: Callable[[str], object]) -> NftError:
    """The error of a script that libnftables refused, naming the statement it refused.

    libnftables 1.0.6 quotes the FIRST line of a buffer in its error (an `add table` line, so the
    message pointed at the wrong place) and gives no line number; ``dry_run`` (`nft -c -f -`: no
    kernel state changes) gives ``/dev/stdin:LINE:COLUMNS``, read back against our own script."""
    try:
        dry_run(script)
    except NftError as e:
        return e
    return error(output)  # the dry run passed (the kernel's state changed meanwhile?)


def statement_at(line: str, first: int, last: int) -> str:
    """The refused part of one script line (nft's columns are 1-based): of an ``add element``
    line of thousands of elements, the statement with just the element at those columns."""
    if " element " in line[:40] and "{ " in line:
        head = line.index("{ ") + 2
        at = max(head, min(first - 1, len(line)))
        start = line.rfind(", ", head, at)
        start = head if start < 0 else start + 2
        end = line.find(", ", max(at, last - 1))
        end = line.rfind(" }") if end < 0 else end
        if start < end:
            return f"{line[:head]}{line[start:end]} }}"
    return line if len(line) <= 200 else line[:200] + " …"


def of_errno(code: int, what: str) -> NftError:
    """An error as nft words the kernel's ``code`` (the fake's: "Error: File exists (set s)")."""
    return NftError(f"Error: {os.strerror(code)} ({what})", code)
