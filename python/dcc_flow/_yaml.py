"""A small block-style YAML emitter for canonical specs (standard library only).

It only writes YAML; parsing is done by the Go library. The output is meant to be read by people
and re-parsed exactly: every string is a double-quoted scalar (so ``"yes"``, ``"3"``, ``"null"`` or
``"{{x}}"`` keep their type), numbers use Go's JSON form, and empty collections are ``{}`` / ``[]``.
Structural keys are ordered for reading (``name``, ``description``, ``inputs``, ``steps``; a step's
``id`` and ``kind`` first); data (``args``, literal ``items``, defaults) is sorted.
"""

import re
from typing import Any, Dict, List, Mapping, Sequence

from ._json import go_float

__all__ = ["dump_spec", "yaml_scalar"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: Python's $ also matches before a final newline
# Words that some YAML readers resolve to booleans or null when unquoted.
_YAML_WORDS = frozenset(["y", "n", "yes", "no", "on", "off", "true", "false", "null"])
_SAFE_ASCII = re.compile(r'^[ !#-\[\]-~]*\Z')  # printable ASCII without '"' and '\'

_SPEC_ORDER = ("name", "description", "inputs", "defaults", "steps", "on_failure")
_DEFAULTS_ORDER = ("timeout_secs", "retry")
_INPUT_ORDER = ("type", "required", "default", "format", "enum", "description")
_STEP_ORDER = (
    "id", "kind", "description", "depends_on", "tool", "dcc", "pool", "args", "workflow", "inputs", "items", "as",
    "concurrency", "on_any_fail", "on", "prompt", "timeout_secs", "retry", "idempotency_key",
    "idempotency_scope", "idempotency_ttl_secs", "steps", "then", "else",
)
_RETRY_ORDER = ("max_attempts", "backoff", "multiplier", "initial_delay_ms", "max_delay_ms", "jitter", "retry_on")
_STEP_LISTS = ("steps", "then", "else")


def _quote(s: str) -> str:
    if _SAFE_ASCII.match(s):
        return '"' + s + '"'
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        elif (0xA0 <= o <= 0xD7FF and o not in (0x2028, 0x2029)) or (
            0xE000 <= o <= 0xFFFD and o != 0xFEFF
        ) or o >= 0x10000:
            out.append(ch)  # printable in YAML: kept as is, so non-English text stays readable
        elif o <= 0xFFFF:
            out.append("\\u%04x" % o)  # C1 controls, line/paragraph separators, BOM, …
        else:  # pragma: no cover - o >= 0x10000 is handled above
            out.append("\\U%08x" % o)
    out.append('"')
    return "".join(out)


def yaml_scalar(value: Any) -> str:
    """A value on one line: quoted string, number, ``true``/``false``/``null``, ``{}`` or ``[]``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, Mapping) and not value:
        return "{}"
    if isinstance(value, (list, tuple)) and not value:
        return "[]"
    raise TypeError("cannot write %s as a YAML scalar" % type(value).__name__)


def _key(k: str) -> str:
    if _PLAIN_KEY.match(k) and k.lower() not in _YAML_WORDS:
        return k
    return _quote(k)


def _is_block(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple)) and len(value) > 0


def _ordered(mapping: Mapping[str, Any], order: Sequence[str]) -> List[str]:
    rank: Dict[str, int] = {k: i for i, k in enumerate(order)}
    return sorted(mapping, key=lambda k: (rank.get(k, len(rank)), k))


def _mapping(value: Mapping[str, Any], indent: int, role: str, lines: List[str]) -> None:
    pad = " " * indent
    order: Sequence[str] = {"spec": _SPEC_ORDER, "step": _STEP_ORDER, "input": _INPUT_ORDER,
                            "retry": _RETRY_ORDER, "defaults": _DEFAULTS_ORDER}.get(role, ())
    for k in _ordered(value, order):
        v = value[k]
        child = "data"
        if role in ("spec", "step") and k in _STEP_LISTS or role == "spec" and k == "on_failure":
            child = "steps"
        elif role == "spec" and k == "inputs":
            child = "inputs"
        elif role == "spec" and k == "defaults":
            child = "defaults"
        elif role == "inputs":
            child = "input"
        elif role in ("step", "defaults") and k == "retry":
            child = "retry"
        if _is_block(v):
            lines.append("%s%s:" % (pad, _key(k)))
            _node(v, indent + 2, child, lines)
        else:
            lines.append("%s%s: %s" % (pad, _key(k), yaml_scalar(v)))


def _sequence(value: Sequence[Any], indent: int, role: str, lines: List[str]) -> None:
    pad = " " * indent
    item_role = "step" if role == "steps" else "data"
    for item in value:
        if _is_block(item):
            sub: List[str] = []
            _node(item, indent + 2, item_role, sub)
            sub[0] = pad + "- " + sub[0][indent + 2:]
            lines.extend(sub)
        else:
            lines.append("%s- %s" % (pad, yaml_scalar(item)))


def _node(value: Any, indent: int, role: str, lines: List[str]) -> None:
    if isinstance(value, Mapping) and value:
        _mapping(value, indent, role, lines)
    elif isinstance(value, (list, tuple)) and value:
        _sequence(value, indent, role, lines)
    else:
        lines.append(" " * indent + yaml_scalar(value))


def dump_spec(spec: Mapping[str, Any]) -> str:
    """Block-style YAML for a canonical spec object, ending with a newline."""
    lines: List[str] = []
    _node(spec, 0, "spec", lines)
    return "\n".join(lines) + "\n"
