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

The files a call read and wrote (``current_call().reads``/``.writes``, a tool's ``reads=``/``writes=``
arguments) and the process's environment (``set_environment``) go with its result, in the same
answer: ``"files": [{"path", "role"}, ...]`` and ``"env": {...}`` (docs/reference/python/tool-calls.md
"Files and environment").
"""

import inspect
import json
import math
import os
import re
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _capture, _otel
from ._interrupt import WATCHDOG, ToolInterrupted

__all__ = ["ToolError", "Transient", "Fatal", "ToolInterrupted", "CallContext", "current_call", "ToolEntry",
           "error_kind", "execute", "error_members", "set_environment", "environment", "file_args"]

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


#: A call keeps at most this many file reports (reads and writes together, a path reported twice
#: counting twice) and at most MAX_FILES_BYTES of their paths (UTF-8). Past either, the reports are
#: counted, not kept, and the call fails with kind ``limit_exceeded`` when it returns (the files it
#: kept go with the error): a call recorded with only part of its files would make lineage and the
#: cache wrong. The engine applies its own limit on files per step after this one.
MAX_FILES_PER_CALL = 100000
MAX_FILES_BYTES = 16 << 20
#: A path longer than this many characters is refused (``ValueError``): no file system takes one
#: (Windows' longest is 32,767).
MAX_PATH_CHARS = 32767
#: The environment (``set_environment``) is at most this many bytes of JSON.
MAX_ENVIRONMENT_BYTES = 64 << 10

_files_lock = threading.Lock()  # a call's files, when threads of the tool share its context


def _path(value: Any, what: str) -> str:
    """``value`` (a str or an ``os.PathLike`` of str) as an absolute path (``os.path.abspath``:
    against the working directory now, ``.`` and ``..`` resolved); ``what`` names it in errors."""
    if isinstance(value, str):
        path = value
    elif isinstance(value, os.PathLike):
        path = os.fspath(value)
        if not isinstance(path, str):
            raise TypeError("%s must be a str or an os.PathLike of str, not an os.PathLike of %s (%r); decode it "
                            "with os.fsdecode" % (what, type(path).__name__, value))
    elif isinstance(value, (bytes, bytearray)):
        raise TypeError("%s must be a str or an os.PathLike, not %s (%r); decode it with os.fsdecode"
                        % (what, type(value).__name__, value))
    else:
        raise TypeError("%s must be a str or an os.PathLike, not %s" % (what, type(value).__name__))
    if not path:
        raise ValueError("%s is an empty path" % what)
    if "\x00" in path:
        raise ValueError("%s holds a NUL character: %r" % (what, path[:200]))
    if len(path) > MAX_PATH_CHARS:
        raise ValueError("%s is %d characters long; a path is at most %d" % (what, len(path), MAX_PATH_CHARS))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("%s is not valid Unicode (%r: a file name that is not UTF-8, as os.listdir returns "
                         "it); dcc-flow records paths as UTF-8 text" % (what, path[:200])) from None
    return _abspath(path)


#: How a reported path is made absolute: this platform's ``os.path.abspath`` (``ntpath``'s on
#: Windows, which keeps a drive letter and a UNC share (``\\server\share\...``) as they are).
_abspath = os.path.abspath


class _Files:
    """The files one call reported, bounded (MAX_FILES_PER_CALL, MAX_FILES_BYTES): ``kept`` as
    ``(path, role)`` in order, ``over`` the reports past a bound."""

    __slots__ = ("kept", "size", "over")

    def __init__(self) -> None:
        self.kept: List[Tuple[str, str]] = []
        self.size = 0
        self.over = 0

    def add(self, files: Sequence[Tuple[str, str]]) -> None:
        """Keep ``(absolute path, role)`` pairs, in order, within the bounds."""
        with _files_lock:
            for path, role in files:
                size = len(path.encode("utf-8"))
                if self.over or len(self.kept) >= MAX_FILES_PER_CALL or self.size + size > MAX_FILES_BYTES:
                    self.over += 1
                    continue
                self.kept.append((path, role))
                self.size += size

    def members(self) -> str:
        """``,"files":[...]`` for the answer, or "" when there are none."""
        with _files_lock:
            kept = list(self.kept)
        if not kept:
            return ""
        return ',"files":' + json.dumps([{"path": p, "role": r} for p, r in kept], ensure_ascii=False,
                                        separators=(",", ":"))

    def limit_message(self, tool: str) -> str:
        return ("tool %r reported %d files (reads and writes), over what one call reports: at most %d files and "
                "%d MiB of paths; the first %d were kept and the call fails, as a step recorded with part of its "
                "files would make its lineage and its cache key wrong. Split the work over more steps (a "
                "foreach), or report the folder a tool writes into" % (
                    tool, len(self.kept) + self.over, MAX_FILES_PER_CALL, MAX_FILES_BYTES >> 20, len(self.kept)))


# The process's environment: (the dict, its JSON text), or None (set_environment).
_environment: Optional[Tuple[Dict[str, Any], str]] = None


def set_environment(dcc: Optional[str] = None, version: Optional[str] = None,
                    plugins: Optional[Mapping[str, Any]] = None, **extra: Any) -> None:
    """Say what this process is, for every tool call it runs from now on: the DCC's name and
    version, plugin versions, anything else (``**extra``), e.g.
    ``set_environment(dcc="maya", version=cmds.about(version=True), plugins={"mtoa": "5.4.1"},
    ocio="aces_1.2")``. The engine records it with each attempt (docs/reference/python/tool-calls.md
    "Files and environment"), and a cache key includes it.

    Process-wide (every thread, every ``Engine`` of the process, a ``dcc-flow worker``'s calls:
    call it in its ``--init``), and each call replaces the whole environment; with no arguments it
    clears it. ``dcc`` and ``version`` are strings, ``plugins`` a mapping of names (str) to JSON
    values, ``extra`` JSON values; the whole must encode as JSON of at most 64 KiB. Raises
    ``TypeError`` or ``ValueError`` naming the argument, and then changes nothing."""
    global _environment
    env: Dict[str, Any] = {}
    for name, value in (("dcc", dcc), ("version", version)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError("set_environment(): %s must be a str, not %s" % (name, type(value).__name__))
        env[name] = value
    if plugins is not None:
        if not isinstance(plugins, Mapping):
            raise TypeError("set_environment(): plugins must be a mapping of plugin names to versions, not %s"
                            % type(plugins).__name__)
        for key in plugins:
            if not isinstance(key, str):
                raise TypeError("set_environment(): plugins has a key that is not a str: %r" % (key,))
        env["plugins"] = dict(plugins)
    env.update(extra)
    if not env:
        _environment = None
        return
    for name, value in env.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError("set_environment(): %s is not a JSON value (%s)" % (name, exc)) from None
    text = json.dumps(env, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError("set_environment(): the environment holds text that is not valid Unicode (%s)" % exc) from None
    if size > MAX_ENVIRONMENT_BYTES:
        raise ValueError("set_environment(): the environment is %d bytes of JSON; at most %d (64 KiB)"
                         % (size, MAX_ENVIRONMENT_BYTES))
    _environment = (json.loads(text), text)


def environment() -> Optional[Dict[str, Any]]:
    """The process's environment (``set_environment``), a new dict, or ``None`` when none is set."""
    current = _environment
    return None if current is None else json.loads(current[1])


# The last environment_json(extra) merge: (the process's environment, extra, the JSON text).
_merged: Tuple[Any, Any, str] = (None, None, "")


def environment_json(extra: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The environment a call's answer carries, as JSON text: the process's (``set_environment``)
    updated with ``extra`` (an ``Engine``'s ``environment=``, checked by check_environment: its
    keys win), or None for none. The last merge is kept: an engine's calls do not encode it again.
    Raises ValueError when the merge is over MAX_ENVIRONMENT_BYTES."""
    global _merged
    current = _environment
    if not extra:
        return None if current is None else current[1]
    cached = _merged
    if cached[0] is current and cached[1] is extra:
        return cached[2]
    merged = dict(current[0]) if current is not None else {}
    merged.update(extra)
    text = json.dumps(merged, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    if size > MAX_ENVIRONMENT_BYTES:
        raise ValueError("the environment (set_environment's, updated with the Engine's environment=) is %d bytes "
                         "of JSON; at most %d (64 KiB) together" % (size, MAX_ENVIRONMENT_BYTES))
    _merged = (current, extra, text)
    return text


def check_environment(env: Any, what: str) -> Optional[Dict[str, Any]]:
    """``env`` (an ``Engine``'s ``environment=``) checked as ``set_environment`` checks its
    arguments: a mapping with str keys of JSON values, at most 64 KiB of JSON; a copy, or None."""
    if env is None:
        return None
    if not isinstance(env, Mapping):
        raise TypeError("%s must be a mapping (e.g. {\"dcc\": \"maya\", \"version\": \"2025\"}), not %s"
                        % (what, type(env).__name__))
    for key in env:
        if not isinstance(key, str):
            raise TypeError("%s has a key that is not a str: %r" % (what, key))
    try:
        text = json.dumps(dict(env), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError("%s is not JSON-serialisable (%s)" % (what, exc)) from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError("%s holds text that is not valid Unicode (%s)" % (what, exc)) from None
    if size > MAX_ENVIRONMENT_BYTES:
        raise ValueError("%s is %d bytes of JSON; at most %d (64 KiB)" % (what, size, MAX_ENVIRONMENT_BYTES))
    return json.loads(text) if text != "{}" else None


def _number(name: str, value: Any) -> Union[int, float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("progress %s must be a number, not %s" % (name, type(value).__name__))
    if not math.isfinite(value) or value < 0:
        raise ValueError("progress %s must be a finite number >= 0, not %r" % (name, value))
    return value


class CallContext:
    """What a running tool can know about its call: ``dcc_flow.current_call()``."""

    __slots__ = ("call_id", "tool", "run_id", "step_key", "attempt", "lane", "deadline_ms", "traceparent", "_cancelled",
                 "_report", "_throttle", "_out", "_files")

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
        #: The W3C ``traceparent`` of the call's span when the engine traces (docs/guide/tracing.md),
        #: e.g. ``"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"``: the parent of
        #: the tool's own OpenTelemetry spans. ``None`` when the engine does not trace.
        traceparent = call.get("traceparent")
        self.traceparent: Optional[str] = traceparent if isinstance(traceparent, str) and traceparent else None
        self._cancelled = cancelled
        self._report = report
        self._throttle: Optional[ReportThrottle] = None  # made by the first report
        #: What the call printed and logged (_capture): None until it writes, False when not captured.
        self._out: Any = None
        self._files: Optional[_Files] = None  # made by the first file report

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

    def reads(self, *paths: Union[str, "os.PathLike[str]"]) -> None:
        """Say that this call read ``paths`` (each a ``str`` or an ``os.PathLike``): the engine
        records them with the attempt, with their size, time and content hash, when the call ends
        (docs/reference/python/tool-calls.md "Files and environment").

        A relative path is made absolute now, against the process's working directory
        (``os.path.abspath``, which also resolves ``.`` and ``..``). The reports go with the
        call's result, in one answer, a failed call's too. Raises ``TypeError`` for a path that is
        not a ``str`` or an ``os.PathLike`` of str (``bytes``: decode it with ``os.fsdecode``) and
        ``ValueError`` for an empty one, one with a NUL, one over 32,767 characters or one that is
        not valid Unicode, naming the argument; then none of ``paths`` is kept. A call keeps at
        most 100,000 reports (and 16 MiB of paths): past that it fails with kind
        ``limit_exceeded`` when it returns."""
        self._add_files(paths, "read", "reads")

    def writes(self, *paths: Union[str, "os.PathLike[str]"]) -> None:
        """Say that this call wrote ``paths``: as ``reads``, for the files it made or changed."""
        self._add_files(paths, "write", "writes")

    def _add_files(self, paths: Iterable[Any], role: str, method: str) -> None:
        checked = []
        for i, value in enumerate(paths):
            what = "current_call().%s() argument %d" % (method, i + 1)
            if isinstance(value, (list, tuple, set, frozenset)):
                raise TypeError("%s must be a str or an os.PathLike, not %s; pass several paths as separate "
                                "arguments: %s(*paths)" % (what, type(value).__name__, method))
            checked.append((_path(value, what), role))
        if not checked:
            return
        files = self._files
        if files is None:
            with _files_lock:
                files = self._files
                if files is None:
                    files = self._files = _Files()
        files.add(checked)

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


#: A tool's file arguments (``file_args``): ``(argument name, role, default)``, the default the
#: function's (``_NO_DEFAULT`` when it has none).
FileArgs = Tuple[Tuple[str, str, Any], ...]
_NO_DEFAULT = inspect.Parameter.empty


def _names(value: Any, option: str, label: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError("%s: %s= must name arguments of the function: a str or a list of str, not %r"
                    % (label, option, value))


#: A resource's name: written as a step id.
_RESOURCE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")

#: The largest amount of one resource a step, a task or a tool asks for (the spec's limit).
_MAX_RESOURCE_AMOUNT = 1_000_000


def resources_option(resources: Optional[Mapping[str, int]], label: str) -> Optional[Dict[str, int]]:
    """``resources=`` of ``@task`` and ``register_tool``: a mapping of resource name to a whole
    number of units, 1 to 1,000,000 (docs/guide/resources.md); None or empty for none."""
    if resources is None:
        return None
    if not isinstance(resources, Mapping):
        raise TypeError("%s: resources must be a mapping of resource name to units, e.g. {'houdini': 1}; got %r"
                        % (label, resources))
    out: Dict[str, int] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
            raise ValueError("%s: resources: %r is not a resource name (^[A-Za-z_][A-Za-z0-9_-]{0,63}$, e.g. houdini)"
                             % (label, name))
        if isinstance(amount, bool) or not isinstance(amount, int) or not 1 <= amount <= _MAX_RESOURCE_AMOUNT:
            raise ValueError("%s: resources[%r] must be a whole number of units from 1 to 1,000,000; got %r"
                             % (label, name, amount))
        out[name] = amount
    return out or None


def file_args(fn: Callable[..., Any], reads: Any, writes: Any, label: str) -> FileArgs:
    """The file arguments of tool ``fn`` from its ``reads=`` and ``writes=`` options (each an
    argument name or a list of them), checked against its signature: a name that is not one of
    its keyword-passable parameters raises ``ValueError`` (unless it takes ``**kwargs``), an
    option of another type ``TypeError``; ``label`` names the tool in the messages."""
    names = [(name, "read") for name in _names(reads, "reads", label)]
    names += [(name, "write") for name in _names(writes, "writes", label)]
    if not names:
        return ()
    try:
        params: Optional[Mapping[str, inspect.Parameter]] = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = None  # a builtin or a callable without a signature: names are not checked
    out = []
    for name, role in names:
        default = _NO_DEFAULT
        if params is not None:
            param = params.get(name)
            usable = param is not None and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY)
            if not usable and not (param is None and any(p.kind is inspect.Parameter.VAR_KEYWORD
                                                         for p in params.values())):
                raise ValueError("%s: %ss=[%r] names no argument of %s (its arguments: %s)" % (
                    label, role, name, getattr(fn, "__name__", "the function"),
                    ", ".join(p.name for p in params.values()
                              if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            inspect.Parameter.KEYWORD_ONLY)) or "none"))
            if param is not None:
                default = param.default
        out.append((name, role, default))
    return tuple(out)


def _arg_files(entry: "ToolEntry", args: Mapping[str, Any], files: List[Tuple[str, str]]) -> None:
    """Append the files of ``entry``'s file arguments in ``args`` (or their defaults) to ``files``:
    a str or os.PathLike, or a list or tuple of them; None (an optional path not given) is none."""
    for name, role, default in entry.files:
        value = args.get(name, default)
        if value is None or value is _NO_DEFAULT:
            continue
        what = "argument %r (named in %ss=)" % (name, role)
        values = value if isinstance(value, (list, tuple)) else (value,)
        for i, one in enumerate(values):
            try:
                files.append((_path(one, what), role))
            except TypeError:
                raise TypeError("tool %r: %s must be a path (a str or an os.PathLike) or a list of them; got %s%s"
                                % (entry.name, what, type(one).__name__,
                                   "" if values is not value else " at [%d]" % i)) from None
            except ValueError as exc:
                raise ValueError("tool %r: %s" % (entry.name, exc)) from None


class ToolEntry:
    """A registered host tool."""

    __slots__ = ("name", "fn", "lane", "max_concurrent", "description", "schema", "files")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        lane: str,
        max_concurrent: Optional[int],
        description: str,
        schema: Optional[Dict[str, Any]] = None,
        files: FileArgs = (),
    ) -> None:
        self.name = name
        self.fn = fn
        self.lane = lane
        self.max_concurrent = max_concurrent
        self.description = description
        #: The JSON Schema of its arguments the engine enforces (docs/reference/python/tools.md "Tool schemas"),
        #: or None; a worker publishes it as the tool's MCP inputSchema.
        self.schema = schema
        #: Its file arguments (``file_args``: ``reads=``, ``writes=``), reported with every call.
        self.files = files


def describe(fn: Callable[..., Any]) -> str:
    """The first line of fn's docstring, for tool listings."""
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


# One encoder for every call's output (json.dumps with these options builds a new one per call).
_OUTPUT_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_LITERALS = {type(None): lambda _: "null", bool: lambda v: "true" if v else "false", int: int.__repr__}


def encode_output(result: Any) -> str:
    """``result`` as compact JSON (non-ASCII kept, NaN refused), as ``json.dumps`` writes it; the
    common small results (None, a bool, an int) without the encoder. Raises what ``json.dumps``
    raises (TypeError, ValueError, RecursionError)."""
    literal = _LITERALS.get(type(result))  # exact types: an IntEnum goes through the encoder
    if literal is not None:
        return literal(result)
    return _OUTPUT_ENCODER.encode(result)


def _error(call_id: Any, kind: str, message: str, trace: Optional[str] = None) -> str:
    err: Dict[str, Any] = {"kind": kind, "message": message}
    if trace:
        err["trace"] = trace
    return json.dumps({"call_id": call_id, "error": err}, ensure_ascii=False)


def error_members(call: Mapping[str, Any], kind: str, message: str) -> str:
    """The ``calls_complete`` members (see ``execute``) answering ``call`` with a step error."""
    return _error(call.get("call_id"), kind, message)[:-1]


def execute(entry: Optional[ToolEntry], call: Mapping[str, Any], cancelled: Callable[[int], bool],
            report: Optional[Reporter] = None, handle: Optional[int] = None, capture: bool = True,
            env: Optional[Mapping[str, Any]] = None) -> str:
    """Run one pulled call; return the JSON members of its ``calls_complete`` request.

    With ``capture`` (and a ``report``), what the tool's thread prints and logs is sent as the
    step's output lines before the result (``_capture``); a pool worker captures its file
    descriptors instead.

    The result is the text of a JSON object (``{"call_id", "output"}`` or ``{"call_id",
    "error"}``, then ``"files"`` when the call reported files and ``"env"`` when there is an
    environment: the process's, ``set_environment``, updated with ``env``, an ``Engine``'s
    ``environment=``) with its closing brace removed, so the caller can append
    ``,"next":{...}}`` without decoding and encoding the output twice. A failed call's answer
    carries its files too; a call over MAX_FILES_PER_CALL fails with kind ``limit_exceeded``
    unless it failed otherwise.

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
    head: Optional[str] = None  # the error members, once the call failed
    started = False  # whether the tool was called (no traceback for a bad file argument)
    try:
        if entry.files:  # before the tool runs: relative paths against the directory it starts in
            declared: List[Tuple[str, str]] = []
            _arg_files(entry, args, declared)
            if declared:
                context._files = _Files()
                context._files.add(declared)
        try:
            if watch is not None:
                WATCHDOG.enter(watch)
            started = True
            span = _otel.enter(context.traceparent)  # the call's span is the tool's OpenTelemetry context
            try:
                result = entry.fn(**args)
            finally:
                _otel.leave(span)
        finally:
            if watch is not None:
                WATCHDOG.leave(watch)  # no interruption from here on
    except ToolInterrupted:
        if watch is not None:
            WATCHDOG.leave(watch)  # delivered inside the first leave: finish it
        head = _error(call_id, "cancelled", "tool %r was interrupted: the engine gave up on the call (its attempt "
                      "timed out or its run was cancelled)" % entry.name)[:-1]
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every tool failure becomes a step error
        import traceback  # only on failure: keeps `import dcc_flow` light

        message = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
        # Start the traceback at the tool's own frame: the TD reading it at 3 a.m. needs their code,
        # not this dispatcher (kept only when the call itself failed, e.g. a wrong argument name).
        tb = exc.__traceback__
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        trace = "".join(traceback.format_exception(type(exc), exc, tb)) if started else None
        head = _error(call_id, error_kind(exc), message, trace)[:-1]
    finally:
        try:
            if context._out:
                context._out.close(context)  # its last line without a newline, before the result
        finally:
            _local.call = previous
            context._finish()
    files = context._files
    if head is None:
        try:
            output = encode_output(result)
        except Exception as exc:  # noqa: BLE001 - TypeError, ValueError, RecursionError (too deep)
            message = "tool %r returned a value that is not JSON-serialisable (%s): %s" % (
                entry.name,
                type(result).__name__,
                exc,
            )
            head = _error(call_id, "invalid_output", message)[:-1]
        else:
            if files is not None and files.over:
                head = _error(call_id, "limit_exceeded", files.limit_message(entry.name))[:-1]
            else:
                head = '{"call_id":%s,"output":%s' % (int.__repr__(call_id) if type(call_id) is int
                                                       else json.dumps(call_id), output)
    try:
        env_text = environment_json(env)
    except ValueError as exc:  # the two together are too large: every call of this engine says so
        env_text = None
        head = _error(call_id, "invalid_output", str(exc))[:-1]
    if files is not None:
        head += files.members()
    if env_text is not None:
        head += ',"env":' + env_text
    return head
