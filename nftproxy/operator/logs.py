"""The operator's log output: ``--logging-format text`` (one line per message) or ``json`` (one JSON
object per line, as kube-proxy's ``--logging-format json``: ``ts`` in seconds since the epoch, then
``level``, ``logger``, ``msg``, and ``err`` with an exception's traceback). The standard library's
logging, with a Formatter of its own: the object has four keys, no package is needed for it."""

from __future__ import annotations

import json
import logging
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def setup(level: str, fmt: str = "text") -> None:
    """The root logger at ``level`` (debug, info, warning, error), writing to stderr in ``fmt``
    (as ``logging.basicConfig``: nothing changes when the root logger has handlers already)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
