"""JSON helpers that reproduce the bytes of Go's ``encoding/json`` for canonical specs.

The library's canonical spec JSON (docs/reference/c-abi/README.md, engine/spec/canonical.go) is Go's
``json.Encoder`` with ``SetEscapeHTML(false)`` over sorted maps: no whitespace, ``<``, ``>`` and
``&`` kept as is, U+2028 and U+2029 escaped (Go always does), and floats in Go's shortest form
(``1e+21``, ``1e-7``, ``0.000001``). ``go_json`` produces the same bytes from the
decoded value, so ``sha256(go_json(spec)) == spec_hash``.
"""

import json
import re
from types import MappingProxyType
from typing import Any, Dict, List, Mapping

__all__ = ["go_json", "go_float", "loads_go", "freeze", "thaw"]

# Go's encoder escapes the JavaScript line terminators unconditionally. HTML escaping (<, >, &) is
# off in the canonical encoder; set GO_ESCAPE_HTML if that ever changes.
GO_ESCAPE_HTML = False
_GO_EXTRA_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_EXTRA_RE = re.compile("[<>&\u2028\u2029]" if GO_ESCAPE_HTML else "[\u2028\u2029]")


def _go_string(s: str) -> str:
    # json.dumps(ensure_ascii=False) already matches Go for quotes, backslashes and control
    # characters (\b \f \n \r \t short forms, \u00XX with lowercase hex for the rest).
    out = json.dumps(s, ensure_ascii=False)
    if _GO_EXTRA_RE.search(out):
        out = _GO_EXTRA_RE.sub(lambda m: _GO_EXTRA_ESCAPES[m.group(0)], out)
    return out


def go_float(x: float) -> str:
    """Format a float like Go's ``json.Marshal`` (``strconv`` shortest, 'f' or 'e' form)."""
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("JSON cannot represent %r" % x)
    if x == 0:
        return "-0" if str(x).startswith("-") else "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))  # shortest digits that round-trip, like strconv with precision -1
    mantissa, _, exp_text = r.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    exp10 = (int(exp_text) if exp_text else 0) - len(frac_part)  # value = int(digits) * 10**exp10
    stripped = digits.rstrip("0")
    exp10 += len(digits) - len(stripped)
    digits = stripped
    a = abs(x)
    if 1e-6 <= a < 1e21:
        if exp10 >= 0:
            return sign + digits + "0" * exp10
        point = len(digits) + exp10
        if point > 0:
            return sign + digits[:point] + "." + digits[point:]
        return sign + "0." + "0" * (-point) + digits
    e = exp10 + len(digits) - 1
    body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    if e < 0:
        return "%s%se-%d" % (sign, body, -e)  # Go trims e-07 to e-7
    return "%s%se+%02d" % (sign, body, e)


def _encode(value: Any, out: List[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_go_string(value))
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key in sorted(value):
            if not first:
                out.append(",")
            first = False
            out.append(_go_string(str(key)))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError("cannot encode %s as JSON" % type(value).__name__)


def go_json(value: Any) -> str:
    """Compact JSON with sorted keys, byte-identical to Go's ``json.Marshal`` of the same value."""
    out: List[str] = []
    _encode(value, out)
    return "".join(out)


# Where a -0 value may be: "-0" followed by the end of a value in compact JSON (Go writes no
# whitespace). A literal prefix keeps the search ~20x cheaper than decoding; a match inside a
# string only costs the slower decode below.
_NEGATIVE_ZERO = re.compile(r"-0[,\]}]")


def _go_int(text: str) -> Any:
    return -0.0 if text == "-0" else int(text)


def loads_go(text: str) -> Any:
    """Decode JSON written by the library. Go writes the float -0 as ``-0``, which ``json.loads``
    reads as the integer 0; here it stays ``-0.0``, so ``go_json`` gives Go's bytes back. Output
    without such a token (almost all) takes the plain decoder."""
    if text == "-0" or _NEGATIVE_ZERO.search(text):
        return json.loads(text, parse_int=_go_int)
    return json.loads(text)


def freeze(value: Any) -> Any:
    """A deep read-only copy: dicts become ``MappingProxyType`` views, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A deep mutable copy: mappings become dicts, tuples and lists become lists."""
    if isinstance(value, Mapping):
        out: Dict[str, Any] = {k: thaw(v) for k, v in value.items()}
        return out
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value
