"""What every part of the code-first compiler shares (the package's ``__init__`` is the public
face): the error it raises, the user's call site that error names, and the name rules of the spec.

This module imports nothing else of the compiler, so the others (references, tracer, tasks, blocks,
workflow) can all import it without cycles.
"""

import inspect
import os
import re
import sys
from typing import Any, Callable, Mapping, NoReturn, Optional, Tuple

from .._errors import WorkflowTraceError as WorkflowTraceError  # defined with the package's other errors

# The name rules of engine/spec/validate.go (checked against testdata/golden/shared_rules.json).
# \Z, not $: Python's $ also matches before a final newline, Go's does not.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")
_PATH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")
_JSONPATH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY_FIELD = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
_RESERVED = frozenset(["inputs", "steps", "item", "env", "trigger", "run"])
#: The dcc_flow package's folder (this module's grandparent): frames under it are not the user's.
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MAP_KEYWORDS = ("step_id", "after", "concurrency", "on_any_fail", "as_", "timeout_seconds")
_INPUT_FIELDS = frozenset(["type", "format", "enum", "description", "default", "required"])

Site = Tuple[str, int]
ToolInfo = Tuple[str, Callable[..., Any], str, Optional[int]]


def _is_own_frame(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PKG_DIR)


def _user_site() -> Site:
    """The ``(file, line)`` of the innermost frame outside the dcc_flow package."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_own_frame(filename):
            return filename, int(frame.f_lineno)
        frame = frame.f_back
    return "<unknown>", 0


def _fail(message: str, site: Optional[Site] = None, step_id: Optional[str] = None) -> NoReturn:
    where = site if site is not None else _user_site()
    raise WorkflowTraceError("%s:%d: %s" % (where[0], where[1], message), step_id, where[0], where[1])


def _where(site: Site) -> str:
    return "%s:%d" % site


def _sanitize_id(name: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_-]", "_", name) or "step"
    if not re.match(r"[A-Za-z_]", text[0]):
        text = "_" + text
    return text[:64]


def _check_keywords(kwargs: Mapping[str, Any], sig: inspect.Signature, what: str, site: Site,
                    noun: str = "parameters") -> None:
    """Refuse a keyword the signature does not take, with a "did you mean" hint."""
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY]
    for key in kwargs:
        if key not in names:
            import difflib

            close = difflib.get_close_matches(key, names, n=1)
            hint = "; did you mean '%s'?" % close[0] if close else ""
            _fail("%s: unexpected argument '%s'%s Its %s are (%s)"
                  % (what, key, hint or ".", noun, ", ".join(params)), site)


def _describe_fn(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if code is not None:
        return "%s at %s:%d" % (name, code.co_filename, code.co_firstlineno)
    return str(name)
