"""Host tools: how a Python function becomes a tool, and how one pulled call is run.

A tool call arrives as a JSON document (``{"call_id", "tool", "args", ...}``, docs/reference/c-abi/README.md). The
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
import math
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from . import _capture
from ._interrupt import WATCHDOG, ToolInterrupted

__all__ = ["ToolError", "Transient", "Fatal", "ToolInterrupted", "CallContext", "current_call", "ToolEntry",
           "error_kind", "execute", "error_members"]

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


#: Sends a running call's reports: ``send(call_id, progress, logs, dropped)`` with ``progress``
#: the latest ``{"done", "total"?, "message"?}`` dict or None, ``logs`` a list of ``{"message",
#: "fields"?}`` dicts and ``dropped`` the lines logged past MAX_LOG_LINES_PER_INTERVAL. Called at
#: most once per REPORT_INTERVAL per call (``ReportThrottle``), on the tool's thread or a timer's.
Reporter = Callable[[int, Optional[Dict[str, Any]], List[Dict[str, Any]], int], None]

#: A call's reports are sent at most once per this many seconds (the engine writes them at most
#: as often: docs/reference/limits.md "Progress and logs").
REPORT_INTERVAL = 0.1
#: At most this many logged or printed lines of a call are sent per send, the newest; the others
#: are counted as dropped. As many as a step record keeps (docs/reference/limits.md "Step output"): a burst
#: of prints is kept whole on the record, while the engine's live step_log events carry at most
#: 100 lines each.
MAX_LOG_LINES_PER_INTERVAL = 1000


class ReportThrottle:
    """Coalesces what one running call reports, so that ``progress()`` in a tight loop costs a lock
    and a few assignments rather than a crossing into the engine: the first report is sent at
    once, later ones at most once per REPORT_INTERVAL (the latest progress wins, lines are batched,
    at most MAX_LOG_LINES_PER_INTERVAL a batch, the newest: the older ones are counted, so the
    lines a tool printed just before it failed are among those kept), by a timer when the tool
    reports nothing more, and ``close()`` (when the call returns, before its result) sends what is
    pending: the last value is never lost, and never sent after the result."""

    def __init__(self, call_id: int, send: Reporter) -> None:
        self._call_id, self._send = call_id, send
        #: Lines per send: ``send.max_lines`` when it has one (a pool worker's MCP notifications,
        #: one per line, keep to 100), else MAX_LOG_LINES_PER_INTERVAL.
        self._max_lines = int(getattr(send, "max_lines", MAX_LOG_LINES_PER_INTERVAL))
        # Reentrant: sending runs on the tool's thread, and what it prints or logs meanwhile (a
        # field's __repr__) is reported again (_capture), into the next send.
        self._lock = threading.RLock()
        self._last = -REPORT_INTERVAL  # time.monotonic() of the last send
        self._progress: Optional[Dict[str, Any]] = None
        self._lines: List[Dict[str, Any]] = []
        self._dropped = 0
        self._timer: Optional[threading.Timer] = None
        self._closed = False

    def report(self, progress: Optional[Dict[str, Any]], entry: Optional[Dict[str, Any]]) -> None:
        with self._lock:
            if self._closed:
                return
            if progress is not None:
                self._progress = progress
            if entry is not None:
                lines = self._lines
                if len(lines) >= self._max_lines:
                    del lines[0]
                    self._dropped += 1
                lines.append(entry)
            if self._timer is not None:
                return  # a send is due: it takes this report along
            now = time.monotonic()
            wait = self._last + REPORT_INTERVAL - now
            if wait <= 0:
                self._send_locked(now)
            else:
                self._timer = threading.Timer(wait, self._tick)
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._send_locked(time.monotonic())

    def _tick(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._send_locked(time.monotonic())

    def _send_locked(self, now: float) -> None:
        progress, lines, dropped = self._progress, self._lines, self._dropped
        if progress is None and not lines and not dropped:
            return
        self._progress, self._lines, self._dropped, self._last = None, [], 0, now
        try:
            self._send(self._call_id, progress, lines, dropped)
        except Exception:  # noqa: BLE001 - a report never fails the tool (the engine went away)
            pass


def _number(name: str, value: Any) -> Union[int, float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("progress %s must be a number, not %s" % (name, type(value).__name__))
    if not math.isfinite(value) or value < 0:
        raise ValueError("progress %s must be a finite number >= 0, not %r" % (name, value))
    return value


class CallContext:
    """What a running tool can know about its call: ``dcc_flow.current_call()``."""

    __slots__ = ("call_id", "tool", "run_id", "step_key", "attempt", "lane", "deadline_ms", "_cancelled", "_report",
                 "_throttle", "_out")

    def __init__(self, call: Mapping[str, Any], cancelled: Callable[[int], bool],
                 report: Optional[Reporter] = None) -> None:
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
        self._report = report
        self._throttle: Optional[ReportThrottle] = None  # made by the first report
        #: What the call printed and logged (_capture): None until it writes, False when not captured.
        self._out: Any = None

    def progress(self, done: Union[int, float], total: Optional[Union[int, float]] = None, message: str = "") -> None:
        """Report how far the tool is: ``done`` of ``total`` (any unit: frames, files, bytes;
        ``total`` may be unknown), with an optional ``message``.

        Cheap enough for a loop: the engine keeps the latest value and writes it at most 10
        times a second (a ``step_progress`` event, the step record's ``progress``, the CLI's
        progress line, MCP progress notifications); the last value is never lost. Raises
        ``TypeError``/``ValueError`` for a ``done`` or ``total`` that is not a finite number
        >= 0; never fails because of the engine (a report after the step gave up is dropped).
        """
        doc: Dict[str, Any] = {"done": _number("done", done)}
        if total is not None:
            doc["total"] = _number("total", total)
        if message:
            doc["message"] = str(message)
        self._reported(doc, None)

    def log(self, message: Any, **fields: Any) -> None:
        """Log a line for this step: ``current_call().log("cached frame", frame=37)``.

        The line goes to a ``step_log`` event and to the step record's ``logs`` (stream
        ``"log"``, with its ``fields``), batched at most 10 times a second: the record keeps the
        newest 1,000 lines, a ``step_log`` event carries at most 100 (docs/reference/limits.md). Fields
        that are not JSON values are written as their ``repr``. Never fails because of the engine.
        """
        entry: Dict[str, Any] = {"message": str(message)}
        if fields:
            entry["fields"] = fields
        self._reported(None, entry)

    def _reported(self, progress: Optional[Dict[str, Any]], entry: Optional[Dict[str, Any]]) -> None:
        if self._report is None:
            return
        throttle = self._throttle
        if throttle is None:
            throttle = self._throttle = ReportThrottle(self.call_id, self._report)
        throttle.report(progress, entry)

    def _finish(self) -> None:
        """The call returned: send what is pending (before its result), take no more reports."""
        if self._throttle is not None:
            self._throttle.close()

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


_local = _capture.calls  # the call each thread runs: read by the output capture too


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
        #: The JSON Schema of its arguments the engine enforces (docs/reference/python/tools.md "Tool schemas"),
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


def execute(entry: Optional[ToolEntry], call: Mapping[str, Any], cancelled: Callable[[int], bool],
            report: Optional[Reporter] = None, handle: Optional[int] = None, capture: bool = True) -> str:
    """Run one pulled call; return the JSON members of its ``calls_complete`` request.

    With ``capture`` (and a ``report``), what the tool's thread prints and logs is sent as the
    step's output lines before the result (``_capture``); a pool worker captures its file
    descriptors instead.

    The result is the text of a JSON object (``{"call_id", "output"}`` or ``{"call_id",
    "error"}``) with its closing brace removed, so the caller can append ``,"next":{...}}``
    without decoding and encoding the output twice.

    With ``handle`` (the engine's), the process's watchdog interrupts the tool when the engine
    gives up on the call (``_interrupt``): the tool sees ``ToolInterrupted``, and the call is
    answered with a ``cancelled`` error the engine drops.
    """
    call_id = call.get("call_id")
    if entry is None:
        return _error(call_id, "not_found", "tool %r is not registered in this Python process" % call.get("tool"))[:-1]
    args = call.get("args") or {}
    if not isinstance(args, dict):
        args = {"value": args}
    previous = getattr(_local, "call", None)
    context = _local.call = CallContext(call, cancelled, report)
    watch = None if handle is None else WATCHDOG.watch(handle, int(call_id or 0))
    if capture and report is not None:
        _capture.ensure()
    else:
        context._out = False
    try:
        try:
            if watch is not None:
                WATCHDOG.enter(watch)
            result = entry.fn(**args)
        finally:
            if watch is not None:
                WATCHDOG.leave(watch)  # no interruption from here on
    except ToolInterrupted:
        if watch is not None:
            WATCHDOG.leave(watch)  # delivered inside the first leave: finish it
        return _error(call_id, "cancelled", "tool %r was interrupted: the engine gave up on the call (its attempt "
                      "timed out or its run was cancelled)" % entry.name)[:-1]
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
        try:
            if context._out:
                context._out.close(context)  # its last line without a newline, before the result
        finally:
            _local.call = previous
            context._finish()
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
