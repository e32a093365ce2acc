"""What ``lineage``, ``stale``, ``cache`` and ``show`` print of files, hashes and environments."""

import json
from typing import Any, Dict, List, Mapping, Optional

from ._base import plain

__all__ = ["short_hash", "env_text", "when", "file_line", "STATE_WORDS"]

#: The hex digits of a BLAKE3 hash printed (``--json`` has them whole).
HASH_DIGITS = 12

#: The characters of an environment summary.
ENV_WIDTH = 100


def short_hash(value: Optional[str]) -> str:
    """``0077edc4d38b`` of ``blake3:0077edc4d38b…``; ``-`` for none."""
    if not value:
        return "-"
    return plain(value.split(":", 1)[-1][:HASH_DIGITS])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), sort_keys=True)


def env_text(env: Any, width: Optional[int] = ENV_WIDTH) -> str:
    """An attempt's environment in short: ``maya 2025.3, mtoa 5.3.1, ocio=aces_1.2`` (the DCC and
    its version, each plug-in and its version, then the other keys); ``-`` for none."""
    if not env:
        return "-"
    if not isinstance(env, Mapping):
        return plain(_json(env))
    parts: List[str] = []
    head = " ".join(str(env[k]) for k in ("dcc", "version") if env.get(k) not in (None, ""))
    if head:
        parts.append(head)
    plugins = env.get("plugins")
    if isinstance(plugins, Mapping):
        parts.extend(("%s %s" % (k, v)).strip() for k, v in sorted(plugins.items()))
    elif plugins is not None:
        parts.append("plugins=" + _json(plugins))
    for k, v in sorted(env.items()):
        if k not in ("dcc", "version", "plugins"):
            parts.append("%s=%s" % (k, v if isinstance(v, str) else _json(v)))
    text = plain(", ".join(parts))
    if width is not None and len(text) > width:
        text = text[:width - 1] + "…"
    return text


def when(rfc3339: Optional[str]) -> str:
    """``2026-11-29 07:31:32`` (UTC, to the second) of an RFC 3339 time; ``-`` for None."""
    if not rfc3339:
        return "-"
    day, _, rest = str(rfc3339).partition("T")
    return plain((day + " " + rest[:8]).strip())


#: What a recorded file is now, as ``lineage`` and ``show`` say it (the engine's ``now``).
STATE_WORDS = {"unchanged": "unchanged", "changed": "CHANGED", "missing": "MISSING", "unreadable": "unreadable"}


def file_line(f: Mapping[str, Any]) -> str:
    """One file of an attempt: ``write ok  0077edc4d38b  /show/sh010.exr`` (``show``)."""
    state = str(f.get("state") or "?")
    text = "%-5s %-10s %-12s  %s" % (f.get("role") or "?", state, short_hash(f.get("hash")), plain(f.get("path") or ""))
    if f.get("error"):
        text += "  (%s)" % plain(f["error"])
    return text


def cache_source(detail: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``cache`` member of a step event's detail, ``{}`` when there is none."""
    cache = detail.get("cache") if isinstance(detail, Mapping) else None
    return dict(cache) if isinstance(cache, Mapping) else {}
