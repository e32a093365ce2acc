"""Host tools: how a Python function becomes a tool, and how one pulled call is run.

A tool call arrives as a JSON document (``{"call_id", "tool", "args", ...}``, docs/c-abi.md). The
function receives ``args`` as keyword arguments; its return value (JSON-serialisable, or ``None``)
is the step output; an exception becomes a step error with an error *kind* that steers retries:

==================================  ===============
exception                           kind
==================================  ===============
``dcc_flow.Transient``              ``transient``
``dcc_flow.Fatal``                  ``fatal``
any exception with a ``kind`` str   that kind
``TimeoutError``                    ``timeout``
``ConnectionError``                 ``transient``
``PermissionError``                 ``permission``
``FileNotFoundError``               ``not_found``
``ValueError``, ``TypeError``       ``invalid_input``
``SystemExit`` (``sys.exit()``)     ``fatal``
anything else                       ``error``
==================================  ===============

A return value that cannot be encoded (not JSON-serialisable, nested too deep, ``NaN``) fails the
step with kind ``invalid_output``; text that is not Unicode and an output over the request limit
are caught where the answer is encoded (``Engine._complete``: ``invalid_output``, ``too_large``).
"""

import json
import threading
from typing import Any, Callable, Dict, Mapping, Optional

__all__ = ["ToolError", "Transient", "Fatal", "CallContext", "current_call", "ToolEntry", "error_kind", "execute",
           "error_members"]

LANES = ("main", "worker")


class ToolError(Exception):
    """Raise from a tool to fail the step with an explicit error ``kind`` (any string)."""

    kind = "error"

    def __init__(self, message: str = "", kind: Optional[str] = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class Transient(ToolError):
    """A failure worth retrying (a flaky network share, a busy license server): kind ``transient``."""

    kind = "transient"


class Fatal(ToolError):
    """A failure that no retry can fix: kind ``fatal``."""

    kind = "fatal"


def error_kind(exc: BaseException) -> str:
    """The error kind of an exception raised by a tool (see the module docstring)."""
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    if isinstance(exc, SystemExit):
        return "fatal"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "transient"
    if isinstance(exc, PermissionError):
        return "permission"
    if isinstance(exc, FileNotFoundError):
        return "not_found"
    if isinstance(exc, (ValueError, TypeError)):
        return "invalid_input"
    return "error"


class CallContext:
    """What a running tool can know about its call: ``dcc_flow.current_call()``."""

    __slots__ = ("call_id", "tool", "run_id", "step_key", "attempt", "lane", "deadline_ms", "_cancelled")

    def __init__(self, call: Mapping[str, Any], cancelled: Callable[[int], bool]) -> None:
        self.call_id = int(call.get("call_id") or 0)
        self.tool = str(call.get("tool", ""))
        self.run_id = str(call.get("run_id", ""))
        self.step_key = str(call.get("step_key", ""))
        self.attempt = int(call.get("attempt") or 1)
        #: The lane the call was queued on: ``"main"`` or ``"worker"`` (the tool's ``thread``).
        self.lane = str(call.get("lane") or "main")
        deadline = call.get("deadline_ms")
        self.deadline_ms = int(deadline) if deadline else None
        self._cancelled = cancelled

    @property
    def cancelled(self) -> bool:
        """True once the step was cancelled or timed out: stop early, the result will be dropped."""
        return self._cancelled(self.call_id)

    def __repr__(self) -> str:
        return "CallContext(tool=%r, run_id=%r, step_key=%r, attempt=%d)" % (
            self.tool,
            self.run_id,
            self.step_key,
            self.attempt,
        )


_local = threading.local()


def current_call() -> Optional[CallContext]:
    """The call the current thread is running as a dcc-flow tool, or ``None`` outside a tool."""
    return getattr(_local, "call", None)


class ToolEntry:
    """A registered host tool."""

    __slots__ = ("name", "fn", "lane", "max_concurrent", "description", "schema")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        lane: str,
        max_concurrent: Optional[int],
        description: str,
        schema: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.lane = lane
        self.max_concurrent = max_concurrent
        self.description = description
        #: The JSON Schema of its arguments the engine enforces (docs/python.md "Tool schemas"),
        #: or None; a worker publishes it as the tool's MCP inputSchema.
        self.schema = schema


def describe(fn: Callable[..., Any]) -> str:
    """The first line of fn's docstring, for tool listings."""
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def _error(call_id: Any, kind: str, message: str, trace: Optional[str] = None) -> str:
    err: Dict[str, Any] = {"kind": kind, "message": message}
    if trace:
        err["trace"] = trace
    return json.dumps({"call_id": call_id, "error": err}, ensure_ascii=False)


def error_members(call: Mapping[str, Any], kind: str, message: str) -> str:
    """The ``calls_complete`` members (see ``execute``) answering ``call`` with a step error."""
    return _error(call.get("call_id"), kind, message)[:-1]


def execute(entry: Optional[ToolEntry], call: Mapping[str, Any], cancelled: Callable[[int], bool]) -> str:
    """Run one pulled call; return the JSON members of its ``calls_complete`` request.

    The result is the text of a JSON object (``{"call_id", "output"}`` or ``{"call_id",
    "error"}``) with its closing brace removed, so the caller can append ``,"next":{...}}``
    without decoding and encoding the output twice.
    """
    call_id = call.get("call_id")
    if entry is None:
        return _error(call_id, "not_found", "tool %r is not registered in this Python process" % call.get("tool"))[:-1]
    args = call.get("args") or {}
    if not isinstance(args, dict):
        args = {"value": args}
    previous = getattr(_local, "call", None)
    _local.call = CallContext(call, cancelled)
    try:
        result = entry.fn(**args)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every tool failure becomes a step error
        import traceback  # only on failure: keeps `import dcc_flow` light

        message = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
        # Start the traceback at the tool's own frame: the TD reading it at 3 a.m. needs their code,
        # not this dispatcher (kept only when the call itself failed, e.g. a wrong argument name).
        tb = exc.__traceback__
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        trace = "".join(traceback.format_exception(type(exc), exc, tb))
        return _error(call_id, error_kind(exc), message, trace)[:-1]
    finally:
        _local.call = previous
    try:
        output = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except Exception as exc:  # noqa: BLE001 - TypeError, ValueError, RecursionError (too deep)
        message = "tool %r returned a value that is not JSON-serialisable (%s): %s" % (
            entry.name,
            type(result).__name__,
            exc,
        )
        return _error(call_id, "invalid_output", message)[:-1]
    return '{"call_id":%s,"output":%s' % (json.dumps(call_id), output)
