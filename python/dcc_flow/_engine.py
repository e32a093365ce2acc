"""``dcc_flow.Engine``: run workflows whose tools are Python functions.

The Go engine never calls into Python. Tool calls are *pulled*: the thread that drives a run
(``Engine.run``, ``Run.wait``, ``Engine.pump`` or a ``serve_tools`` worker) asks the library for
pending calls, runs them, and answers each with its result; answering and asking for the next call
is one crossing of the C ABI. Main-lane tools run on the thread that drives the run (Maya's main
thread); worker-lane tools run on the ``serve_tools`` pool when one is running, else on the driving
thread too. While a DCC adapter's idle pump is installed, main-lane tools run on the main thread only.

Every call a thread takes is run and answered exactly once, or handed back to the engine for the
next thread (docs/reference/python/tools.md, "Lanes: which thread runs a tool").
"""

import datetime
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generator,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
    cast,
    overload,
)

from . import _ffi
from ._errors import DccFlowError, EngineClosedError, NotFoundError
from ._interrupt import WATCHDOG, ToolInterrupted
from ._schema import SchemaOption
from ._schema import tool_schema as _tool_schema
from ._spec import StepStatus, WorkflowSpec, WorkflowStatus
from ._suggest import file_hint
from ._tools import LANES, ToolEntry, describe, execute
from ._tools import error_members as _tools_error

if False:  # typing only
    from ._schedule import ScheduleSpec  # noqa: F401
if TYPE_CHECKING:
    from typing import Literal

    from ._dryrun import DryRunResult

__all__ = ["Engine", "Run", "RunResult", "StepRecord", "AttemptRecord", "RunFailedError"]

log = logging.getLogger("dcc_flow")

#: How long one blocking crossing waits at most: Ctrl-C and close() are noticed this fast.
POLL_MS = 100

# Event streams (``on_event``, ``Engine.events``) retry a crossing that fails with one of these codes:
# the database is unreachable for a while (a PostgreSQL restart, a network blip). The first wait is
# EVENT_RETRY_FIRST seconds, doubling to EVENT_RETRY_MAX; one warning per outage, one line when it ends.
EVENT_RETRY_CODES = ("storage", "timeout")
EVENT_RETRY_FIRST = 0.1
EVENT_RETRY_MAX = 5.0

#: A string that is a catalog name rather than spec text or a path.
_CATALOG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")

SpecLike = Union[WorkflowSpec, str, "os.PathLike[str]", Mapping[str, Any], Any]


class RunFailedError(DccFlowError):
    """``RunResult.raise_for_status()``: the run did not complete."""


class AttemptRecord:
    """One attempt of a ``tool`` or ``tool_remote`` step instance: a call it made
    (``StepRecord.attempts``, docs/reference/python/running.md "Attempts")."""

    __slots__ = ("attempt", "tool", "status", "args", "worker", "host", "pid", "error", "exit", "started_at",
                 "finished_at")

    def __init__(self, d: Mapping[str, Any]) -> None:
        #: 1, 2, ... counted across the run's resumes: a resumed step's attempts follow those made
        #: before. The ``attempt`` of the step's ``logs`` lines and ``progress`` is this number.
        self.attempt: int = int(d.get("attempt") or 0)
        #: The tool called (``"DCC/TOOL"`` for a ``tool_remote`` step).
        self.tool: str = d.get("tool") or ""
        #: ``running`` while in flight, then ``completed``, ``failed``, ``cancelled`` or
        #: ``interrupted``.
        self.status = StepStatus(d.get("status", "running"))
        #: The rendered arguments of the call: secrets redacted (``"[redacted]"``: names the tool's
        #: schema marks ``writeOnly``/``x-secret``/``format: password``, and any name containing
        #: token, password, passwd, secret, api_key or apikey), at most 64 KiB of JSON; larger,
        #: ``{"_truncated": True, "bytes": N, "preview": "..."}``. None when not recorded.
        self.args: Optional[Dict[str, Any]] = d.get("args")
        #: The pool worker (``"POOL/PID"``) or the engine of a queued call; ``""`` in-process.
        self.worker: str = d.get("worker") or ""
        #: The host and pid of the process that ran the call where known (the engine's own for an
        #: in-process tool); ``""`` and 0 otherwise.
        self.host: str = d.get("host") or ""
        self.pid: int = int(d.get("pid") or 0)
        #: The failure (``kind``, ``message``, ``trace``?), None when the attempt did not fail.
        self.error: Optional[Dict[str, Any]] = d.get("error")
        #: For a lost worker (``error["kind"] == "worker_lost"``): how its process ended,
        #: ``"exit status 139"``, ``"signal: killed"``; ``""`` otherwise.
        self.exit: str = d.get("exit") or ""
        #: RFC 3339 UTC times; ``finished_at`` is None while the attempt runs.
        self.started_at: Optional[str] = d.get("started_at")
        self.finished_at: Optional[str] = d.get("finished_at")

    def __repr__(self) -> str:
        return "AttemptRecord(attempt=%d, status=%s%s)" % (
            self.attempt, self.status.value, ", error=%r" % self.error.get("kind") if self.error else "")


class StepRecord:
    """One step instance of a run (a foreach iteration's step is its own instance)."""

    __slots__ = ("key", "step_id", "kind", "status", "attempt", "cached", "output", "file_refs", "error",
                 "worker", "logs", "logs_dropped", "progress", "child_run_id", "started_at", "finished_at",
                 "args", "attempts", "attempts_dropped")

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.key: str = d.get("key", "")
        self.step_id: str = d.get("step_id", "")
        self.kind: str = d.get("kind", "")
        self.status = StepStatus(d.get("status", "pending"))
        #: The attempts made (the record's ``attempts``): the number of the last one, 0 when none ran
        #: (a cached step, an approval, a container).
        self.attempt: int = int(d.get("attempts") or 0)
        self.cached: bool = bool(d.get("cached"))
        self.output: Any = d.get("output")
        self.file_refs: Any = d.get("file_refs")
        self.error: Optional[Dict[str, Any]] = d.get("error")
        #: The pool worker that ran the last attempt, ``"POOL/PID"`` (docs/guide/pools.md), or the id of
        #: the engine that ran it from the tool-call queue (docs/operations/cluster.md); ``""`` when neither.
        self.worker: str = d.get("worker") or ""
        #: The output lines of the step's attempts, oldest first: dicts with ``stream``
        #: (``"stdout"`` or ``"stderr"`` for what a pool worker's tool printed, docs/guide/pools.md
        #: "Output"; ``"log"`` for ``current_call().log()``, with its ``fields``), ``text`` and
        #: ``attempt``; later kinds of entries may add fields. ``logs_dropped`` counts older lines
        #: not kept (at most 1,000 lines and 256 KiB are kept per step: docs/reference/limits.md).
        self.logs: List[Dict[str, Any]] = list(d.get("logs") or [])
        self.logs_dropped: int = int(d.get("logs_dropped") or 0)
        #: The latest progress the tool of the current (or last) attempt reported with
        #: ``current_call().progress()``: ``{"done", "total"?, "message"?, "attempt"}``, or None.
        self.progress: Optional[Dict[str, Any]] = d.get("progress")
        #: The newest child run of a ``workflow`` step (docs/reference/spec.md, "workflow"); ``""`` for
        #: other kinds.
        self.child_run_id: str = d.get("child_run_id") or ""
        self.started_at: Optional[str] = d.get("started_at")
        self.finished_at: Optional[str] = d.get("finished_at")
        #: The rendered arguments of the latest attempt (``AttemptRecord.args``: secrets redacted,
        #: bounded); None when none was recorded (not a tool step, or an engine without a record).
        self.args: Optional[Dict[str, Any]] = d.get("args")
        #: Every attempt of a ``tool``/``tool_remote`` step, oldest first, across resumes: the first
        #: 10 and the last 100 are kept, ``attempts_dropped`` counts those between (docs/reference/limits.md).
        self.attempts: Tuple[AttemptRecord, ...] = tuple(AttemptRecord(a) for a in d.get("attempt_history") or ())
        self.attempts_dropped: int = int(d.get("attempts_dropped") or 0)

    def __repr__(self) -> str:
        return "StepRecord(key=%r, status=%s, attempt=%d%s)" % (
            self.key,
            self.status.value,
            self.attempt,
            ", cached=True" if self.cached else "",
        )


class RunPage(List["RunResult"]):
    """A page of ``Engine.runs``: a list of RunResult, newest first, and ``next_cursor``, the
    ``cursor`` that lists the runs after it (None when there are none)."""

    def __init__(self, runs: Iterable["RunResult"] = (), next_cursor: Optional[str] = None) -> None:
        super().__init__(runs)
        self.next_cursor = next_cursor


def _search_text(value: Any) -> str:
    """The text an input value is searched by: a string as is, a bool as true/false, an
    integer in decimal; anything else is refused (only those are indexed)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    raise TypeError("runs(inputs=...): a value must be a str, int or bool, not %s" % type(value).__name__)


def _time_bound(value: Any) -> str:
    """A since/until bound as the library takes it: an RFC 3339 text (a naive datetime is local
    time) or the text given (an age such as "2h")."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.astimezone()
        return str(value.isoformat())
    if isinstance(value, str):
        return value
    raise TypeError("runs(since/until=...): give a datetime or a str (RFC 3339 or an age such as '2h'), not %s"
                    % type(value).__name__)


class RunResult:
    """The state of a run: status, error, per-step records and the outputs of top-level steps."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        outputs = d.get("outputs") or {}
        for s in d.get("steps") or ():  # the library sends a top-level step's output once, in outputs
            if "output" not in s and s.get("key") == s.get("step_id") and s.get("step_id") in outputs:
                s["output"] = outputs[s["step_id"]]
        self.raw: Dict[str, Any] = dict(d)
        self.run_id: str = d.get("run_id", "")
        self.name: str = d.get("name", "")
        self.status = WorkflowStatus(d.get("status", "pending"))
        self.error: Optional[Dict[str, Any]] = d.get("error")
        progress = d.get("progress") or {}
        self.progress: Tuple[int, int] = (int(progress.get("completed", 0)), int(progress.get("total", 0)))
        self.outputs: Dict[str, Any] = dict(d.get("outputs") or {})
        self.steps: Tuple[StepRecord, ...] = tuple(StepRecord(s) for s in d.get("steps") or ())
        self.spec_hash: str = d.get("spec_hash", "")
        #: The catalog version of the spec the run used (``engine.workflows()``); 0 when that spec
        #: was never registered.
        self.workflow_version: int = int(d.get("workflow_version") or 0)
        #: For a child run (started by a ``kind: workflow`` step): the parent run's id and the
        #: step instance that started it; ``""`` for a run started on its own.
        self.parent_run_id: str = d.get("parent_run_id") or ""
        self.parent_step_key: str = d.get("parent_step_key") or ""
        #: The child runs this run's ``workflow`` steps started, oldest first (every attempt of a
        #: retried step): dicts with ``run_id``, ``step_key``, ``name`` and ``status``.
        self.children: List[Dict[str, Any]] = list(d.get("children") or [])
        #: The run's resumes, oldest first: dicts with ``at`` (RFC 3339), ``by`` (who: a login
        #: name, ``"mcp"``, ``"engine ID (takeover)"``; absent when not recorded), ``forced`` (the
        #: steps forced to run again) and ``on_failure_only``. Empty for a run never resumed.
        self.resumes: List[Dict[str, Any]] = list(d.get("resumes") or [])
        self.timed_out: bool = bool(d.get("timed_out"))

    @property
    def ok(self) -> bool:
        """True when the run completed and its end is recorded. A run whose steps all completed
        but whose end could not be written to the database (``error["kind"] == "storage"``: a full
        disk) is not ``ok``: its outputs are here, but the database does not show it finished."""
        return self.status is WorkflowStatus.COMPLETED and not (self.error and self.error.get("kind") == "storage")

    @property
    def terminal(self) -> bool:
        return self.status.is_terminal

    def step(self, key: str) -> StepRecord:
        """The step instance with this key (``"export"``, ``"per_file[3].export"``)."""
        for s in self.steps:
            if s.key == key:
                return s
        raise KeyError("run %s has no step instance %r" % (self.run_id, key))

    def raise_for_status(self) -> "RunResult":
        """Return self when the run completed, else raise ``RunFailedError`` with its error."""
        if not self.ok:
            err = self.error or {}
            where = " at step %r" % err["step_key"] if err.get("step_key") else ""
            raise RunFailedError(
                "run %s %s%s: %s" % (self.run_id, self.status.value, where, err.get("message", "")),
                code=str(err.get("kind") or self.status.value),
                details=self.raw,
                step_id=err.get("step_key"),
            )
        return self

    def __repr__(self) -> str:
        return "RunResult(run_id=%r, status=%s, progress=%d/%d)" % (
            self.run_id,
            self.status.value,
            self.progress[0],
            self.progress[1],
        )


def _missing_file_hint(name: Optional[str]) -> str:
    """For a workflow name that reads like a spec file (``exprot.yaml``) and is not one: say so,
    and name the closest file of that folder (``; no file 'exprot.yaml' either; did you mean
    'export.yaml'?``). "" for other names."""
    if not name or os.path.splitext(name)[1].lower() not in (".yaml", ".yml", ".json"):
        return ""
    return "; no file %r either" % name + file_hint(name)


def _subflow_names(spec: Any) -> Set[str]:
    """The names of a code-first workflow's sub-workflows (``.subflows``), at any depth."""
    names: Set[str] = set()
    todo = list(getattr(spec, "subflows", ()) or ())
    while todo:
        sub = todo.pop()
        name = getattr(sub, "name", "")
        if name and name not in names:
            names.add(name)
            todo.extend(getattr(sub, "subflows", ()) or ())
    return names


def _spec_request(spec: SpecLike) -> Dict[str, Any]:
    """The part of a submit request that names the workflow."""
    inner = getattr(spec, "spec", None)
    if isinstance(inner, WorkflowSpec):  # a code-first @workflow
        spec = inner
    if isinstance(spec, WorkflowSpec):
        return {"spec": spec.to_json(), "format": "json", "source": spec.name or None}
    if isinstance(spec, Mapping):
        return {"spec": json.dumps(spec, ensure_ascii=False), "format": "json"}
    if isinstance(spec, os.PathLike):
        path = os.fspath(spec)
        with open(path, "rb") as f:
            return {"spec": f.read().decode("utf-8"), "source": path}
    if isinstance(spec, str):
        if _CATALOG_NAME.match(spec) and not os.path.isfile(spec):
            return {"workflow": spec}
        if "\n" not in spec and os.path.isfile(spec):
            with open(spec, "rb") as f:
                return {"spec": f.read().decode("utf-8"), "source": spec}
        if "\n" not in spec and _missing_file_hint(spec):  # a path such as "shots/exprot.yaml"
            raise NotFoundError("no file %r%s" % (spec, file_hint(spec)))
        return {"spec": spec}
    raise TypeError(
        "expected a WorkflowSpec, a @workflow, spec text, a path or a catalog name; got %s" % type(spec).__name__
    )


def _age_text(value: Any, what: str) -> str:
    """An age for the engine: ``"30d"``-style text as is, seconds as ``"<n>s"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and math.isfinite(value):
        return "%rs" % float(value)
    raise ValueError("%s must be an age such as \"30d\" or \"12h\", seconds >= 0, or \"forever\"; got %r"
                     % (what, value))


def _prune_request(older_than: Any, statuses: Optional[Union[str, Sequence[str]]],
                   limit: Optional[int]) -> Dict[str, Any]:
    """The ``dccflow_runs_prune`` request of ``Engine.prune``'s arguments."""
    import datetime

    req: Dict[str, Any] = {}
    if isinstance(older_than, datetime.datetime):
        try:
            req["finished_before"] = older_than.astimezone(datetime.timezone.utc).isoformat()
        except (OverflowError, ValueError):  # datetime.min or .max in a local time: past year 1 or 9999 in UTC
            edge = datetime.datetime.min if older_than.year < 2 else datetime.datetime.max
            req["finished_before"] = edge.replace(tzinfo=datetime.timezone.utc).isoformat()
    elif isinstance(older_than, str):
        req["older_than"] = older_than
    elif (isinstance(older_than, (int, float)) and not isinstance(older_than, bool) and older_than >= 0
          and math.isfinite(older_than)):
        req["older_than_secs"] = float(older_than)
    else:
        raise ValueError("older_than must be a finite number of seconds >= 0, an age such as \"30d\", or a "
                         "datetime; got %r" % (older_than,))
    if statuses:
        req["statuses"] = [statuses] if isinstance(statuses, str) else list(statuses)
    if limit is not None:
        req["limit"] = _count_arg("limit", limit, 0, "0 = no limit")
    return req


def _count_arg(name: str, value: Any, least: int, note: str) -> int:
    """``value`` as an int of at least ``least``, else ValueError naming ``name`` (``note`` says
    what its edge means): a bool, a fraction or a string is no count."""
    whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not whole:
        raise ValueError("%s must be a whole number >= %d (%s); got %r" % (name, least, note, value))
    if value < least:
        raise ValueError("%s must be >= %d (%s); got %r" % (name, least, note, value))
    return int(value)


class Engine:
    """A dcc-flow engine: an in-memory one by default, or one persisted to the SQLite file ``db``,
    or to the PostgreSQL database ``db`` names as a ``postgresql://`` (or ``postgres://``) URL
    (docs/operations/cluster.md).

    An in-memory engine keeps every run it ran, steps and events included, until ``prune()``
    deletes them or the engine closes; with ``db`` the history is in the file and the process
    keeps only what live runs need.

    Use it as a context manager, or call ``close()`` (idempotent). ``config`` holds the engine
    settings of docs/reference/c-abi/README.md (``env_allow``, ``seed``, ``stall_after_secs``, ``remotes``).

    One process at a time owns a SQLite file: opening one another process owns raises
    ``DatabaseLockedError``. ``read_only=True`` opens it beside that process instead: runs, steps and
    events are read as it commits them, and ``approve``/``cancel`` are carried out by it; starting or
    resuming runs raises ``ReadOnlyError``. Any number of engines open one PostgreSQL database
    read-write (docs/operations/cluster.md): each runs its runs under a lease of ``lease_secs`` seconds
    (default 15), and another engine takes a run over once its engine stopped renewing it.

    ``tools`` are tool modules (``.py`` paths or dotted names) registered as ``dcc-flow run
    --tools`` does; ``workers=N`` runs their tools in N ``dcc-flow worker`` processes (a pool named
    ``tools``, docs/guide/pools.md), ``worker_threads=N`` their plain functions on N threads of this
    process (docs/reference/python/tools.md, "Worker processes").
    """

    def __init__(self, db: Optional[Union[str, "os.PathLike[str]"]] = None, config: Optional[Mapping[str, Any]] = None,
                 read_only: bool = False, lease_secs: Optional[float] = None, *, tools: Sequence[str] = (),
                 workers: int = 0, worker_threads: int = 0):
        cfg = dict(config or {})
        if tools or workers or worker_threads:
            from ._tool_modules import engine_config

            cfg = engine_config(cfg, tools, workers, worker_threads)
        if db is not None:
            cfg["db"] = os.fspath(db)
        if read_only:
            cfg["read_only"] = True
        if lease_secs is not None:
            cfg["lease_secs"] = float(lease_secs)
        self._handle: int = int(_ffi.call("dccflow_engine_open", 0, {"config": cfg})["handle"])
        self._lock = threading.RLock()
        self._closed = False
        # Set once dccflow_engine_close returned: until then the host side (answers, hand-backs,
        # reports, cancel checks) still crosses, so a closing engine gets the answers of the
        # calls its tools are running (docs/operations/cluster.md, "Closing an engine").
        self._handle_closed = False
        self._tools: Dict[str, ToolEntry] = {}
        self._workers: List[threading.Thread] = []
        self._workers_stop = threading.Event()
        self._callbacks: List[Callable[[Dict[str, Any]], None]] = []
        self._events_thread: Optional[threading.Thread] = None
        self._pullers = threading.local()  # .holder: this thread's _PullerHolder
        self._dead_pullers: List[int] = []  # pullers of ended threads, to close
        self._main_thread: Optional[threading.Thread] = None  # set while a DCC adapter's pump runs
        self._main_owners: List[object] = []
        self._finalizer = weakref.finalize(self, _close_handle, self._handle)
        self._tool_pools: Dict[str, str] = dict(cfg.get("tool_pools") or {})  # for the serial-step warning
        self._plain_tools: Set[str] = set()  # tools registered from plain functions of ``tools``
        if tools or worker_threads:
            from ._tool_modules import load_engine_tools

            load_engine_tools(self, tools, workers, worker_threads)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def handle(self) -> int:
        self._check_open()
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop the worker pool and the event thread, and close the engine. Safe to call twice.

        Runs still going become ``interrupted``; on a PostgreSQL database those that another
        live engine can run are handed over to it and go on there (docs/operations/cluster.md, "Closing
        an engine"): the close first waits up to the engine's ``close_grace_secs`` (default 10)
        for the tools its ``serve_tools`` threads are running, whose answers are kept. New work
        (``submit``, ``run``, ``resume``) is refused at once with ``EngineClosedError``.

        An error of the close itself (the database could not take the last writes: a full disk)
        is raised, by the first call only; the engine is closed all the same. Only an engine that
        is garbage-collected without ``close()`` closes silently."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._workers_stop.set()  # the pool takes no new call; a tool it is running is answered
        try:
            if self._finalizer.detach() is not None:
                _ffi.call("dccflow_engine_close", self._handle, {})
        finally:
            self._handle_closed = True
            current = threading.current_thread()
            for t in self._workers:
                if t is not current:
                    t.join(timeout=5)
            if self._events_thread is not None and self._events_thread is not current:
                self._events_thread.join(timeout=5)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("this dcc_flow.Engine is closed; open a new one")

    def _call(
        self, name: str, payload: Optional[Mapping[str, Any]] = None, source: Optional[str] = None
    ) -> Dict[str, Any]:
        self._check_open()
        return _ffi.call(name, self._handle, payload, source)

    # -- tools -----------------------------------------------------------------------------------

    def tool(
        self,
        name: Optional[str] = None,
        thread: str = "main",
        max_concurrent: Optional[int] = None,
        schema: SchemaOption = None,
        output_schema: SchemaOption = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register the function as host tool ``name`` (default: the function's name).

        ``thread="main"`` runs it on the thread that drives the run (Maya's main thread);
        ``"worker"`` on the ``serve_tools`` pool. ``max_concurrent`` bounds simultaneous calls.
        ``schema`` / ``output_schema`` as for ``register_tool``.
        """
        if callable(name):  # used bare: @engine.tool
            fn = name
            self.register_tool(fn)
            return fn

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register_tool(fn, name=name, thread=thread, max_concurrent=max_concurrent, schema=schema,
                               output_schema=output_schema)
            return fn

        return decorate

    def register_tool(
        self,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        thread: str = "main",
        max_concurrent: Optional[int] = None,
        schema: SchemaOption = None,
        output_schema: SchemaOption = None,
    ) -> None:
        """Register ``fn`` as a host tool (see ``tool``). Registering a name again replaces it.

        ``schema`` is the JSON Schema of its arguments, checked by the engine before every call
        (a call that does not conform fails with kind ``invalid_input`` and ``fn`` is not
        called): a mapping, ``True`` for one made from ``fn``'s type hints, ``False`` or ``None``
        for none; ``None`` on a ``@task`` means its hints' schema. ``output_schema`` is the
        JSON Schema of its return value, checked after the call (kind ``invalid_output``): a
        mapping, ``True`` for one made from the return hint, or ``None``. docs/reference/python/tools.md "Tool
        schemas"."""
        if not callable(fn):
            raise TypeError("register_tool needs a callable; got %s" % type(fn).__name__)
        tool_name: str = name or str(getattr(fn, "__name__", ""))
        if thread not in LANES:
            raise ValueError("thread must be 'main' or 'worker'; got %r" % (thread,))
        if max_concurrent is not None and (not isinstance(max_concurrent, int) or max_concurrent < 1):
            raise ValueError("max_concurrent must be None or an int >= 1; got %r" % (max_concurrent,))
        args_sch = _tool_schema(fn, schema, "schema", tool_name)
        entry = ToolEntry(tool_name, fn, thread, max_concurrent, describe(fn), args_sch)
        req: Dict[str, Any] = {"name": tool_name, "lane": thread, "description": entry.description}
        if max_concurrent is not None:
            req["max_concurrent"] = max_concurrent
        if args_sch is not None:
            req["schema"] = args_sch
        out_sch = _tool_schema(fn, output_schema, "output_schema", tool_name)
        if out_sch is not None:
            req["output_schema"] = out_sch
        self._call("dccflow_tool_register", req)
        with self._lock:
            self._tools[tool_name] = entry

    @property
    def tools(self) -> Dict[str, Callable[..., Any]]:
        """The registered host tools by name."""
        with self._lock:
            return {name: e.fn for name, e in self._tools.items()}

    def _warn_serial(self, spec: SpecLike) -> None:
        """Log (WARNING, ``dcc_flow`` logger) each step of ``spec`` that asks for concurrency while
        its tools run one at a time on this thread (docs/reference/python/tools.md, "Worker processes")."""
        from ._tool_modules import log_serial_steps

        log_serial_steps(self, spec, log)

    def register_workflow(self, spec: SpecLike) -> str:
        """Add a workflow to the engine's catalog so runs and schedules can name it; returns its name.

        A code-first ``@workflow`` also registers its ``@task`` tools, as ``submit`` does."""
        req = _spec_request(spec)
        if "workflow" in req:
            raise ValueError("register_workflow needs a spec, not the catalog name %r" % req["workflow"])
        self._register_flow_tools(spec)  # a @workflow's tasks, so a run by name finds them
        out = self._call("dccflow_workflow_register", {"text": req["spec"], "format": req.get("format", "auto"),
                                                       "source": req.get("source") or ""}, req.get("source"))
        return str(out["name"])

    def workflows(self, query: str = "") -> List[Dict[str, Any]]:
        """The workflows of the catalog, best match of ``query``'s words first ("" = all, by
        name): each ``{"name", "description"?, "spec_hash", "version", "steps", "inputs"?}``.
        The catalog is kept in the engine's database, so it outlives the process."""
        return list(self._call("dccflow_workflows_list", {"query": query}).get("workflows") or [])

    def workflow_versions(self, name: str = "") -> List[Dict[str, Any]]:
        """Every version of the workflow ``name`` ("" = of every workflow), by name then newest
        first, unregistered workflows included: each ``{"name", "version", "spec_hash",
        "description"?, "registered_at", "current"}``. A version is one spec hash; re-registering
        a spec makes its version current again."""
        out = self._call("dccflow_workflows_list", {"versions": True, "name": name})
        return list(out.get("versions") or [])

    # -- runs ------------------------------------------------------------------------------------

    def submit(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None) -> "Run":
        """Start a run and return at once. Its main-lane tools run when some thread drives it:
        ``Run.wait()``, ``Engine.pump()`` (a DCC idle callback) or ``Engine.run``."""
        self._register_flow_tools(spec)
        req = _spec_request(spec)
        req["inputs"] = dict(inputs or {})
        try:
            out = self._call("dccflow_run_submit", req, req.get("source"))
        except NotFoundError as e:
            hint = _missing_file_hint(req.get("workflow"))
            if not hint:
                raise
            raise NotFoundError(e.message + hint, code=e.code, details=e.details) from None
        return Run(self, str(out["run_id"]))

    @overload
    def run(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
            *, dry_run: "Literal[False]" = False) -> RunResult: ...

    @overload
    def run(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
            *, dry_run: "Literal[True]", fixtures: Optional[Mapping[str, Any]] = None,
            approvals: Optional[Mapping[str, bool]] = None) -> "DryRunResult": ...

    def run(
        self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
        *, dry_run: bool = False, fixtures: Optional[Mapping[str, Any]] = None,
        approvals: Optional[Mapping[str, bool]] = None,
    ) -> Union[RunResult, "DryRunResult"]:
        """Start a run and drive it to the end on this thread; return its result.

        ``timeout`` (seconds) cancels the run when exceeded. Ctrl-C cancels the run and raises
        ``KeyboardInterrupt``.

        ``dry_run=True`` calls no tool and records nothing: it returns ``dry_run(spec, inputs,
        fixtures, approvals)``, the steps in the order they would run with the arguments each
        would receive.
        """
        if dry_run:
            return self.dry_run(spec, inputs, fixtures=fixtures, approvals=approvals)
        if fixtures is not None or approvals is not None:
            raise TypeError("fixtures and approvals are for a dry run: pass dry_run=True")
        run = self.submit(spec, inputs)
        self._warn_serial(spec)
        return run.wait(timeout=timeout, cancel_on_timeout=True)

    def dry_run(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None,
                fixtures: Optional[Mapping[str, Any]] = None,
                approvals: Optional[Mapping[str, bool]] = None) -> "DryRunResult":
        """Walk the run ``run(spec, inputs)`` would make, calling no tool and recording nothing.

        The spec and inputs are checked as for a run; unknown tools are not an error (they are
        listed in ``unknown_tools``). Each tool step's output is ``fixtures[instance key]``
        (``"per_file[1].export"``), else ``fixtures[step id]``, else ``fixtures[tool name]``
        (``"dcc/tool"`` then ``"tool"`` for ``tool_remote``), else None (``flow__echo``: its
        args). Approvals are granted, except those ``approvals`` maps to False (by step key or
        id). Foreach steps iterate what their items resolve to, branches follow their conditions.
        The idempotency cache is not read: a real run may reuse outputs the dry run does not
        show. See docs/reference/spec.md, "Dry runs"."""
        from ._dryrun import DryRunResult

        if fixtures is not None and not isinstance(fixtures, Mapping):
            raise TypeError("fixtures must be a mapping of step key, step id or tool name to output; got %s"
                            % type(fixtures).__name__)
        if approvals is not None and (not isinstance(approvals, Mapping)
                                      or not all(isinstance(v, bool) for v in approvals.values())):
            raise TypeError("approvals must map step keys or ids to True or False; got %r" % (approvals,))
        # A @workflow's tasks, so they are not reported unknown; not its sub-workflows: a dry run
        # registers nothing in the catalog (its workflow steps are answered from the fixtures).
        self._register_flow_tools(spec, subflows=False)
        req = _spec_request(spec)
        req["inputs"] = dict(inputs or {})
        req["fixtures"] = dict(fixtures or {})
        req["approvals"] = dict(approvals or {})
        try:
            out = self._call("dccflow_run_dry", req, req.get("source"))
        except NotFoundError as e:
            hint = _missing_file_hint(req.get("workflow"))
            if not hint:
                raise
            raise NotFoundError(e.message + hint, code=e.code, details=e.details) from None
        names = _subflow_names(spec)
        if names:  # the code-first sub-workflows a real run registers first: no warning for them
            out = dict(out)
            out["warnings"] = [w for w in out.get("warnings") or ()
                               if not any(' runs workflow "%s", which is not registered' % n in w for n in names)]
        return DryRunResult(out)

    def _register_flow_tools(self, spec: Any, _seen: Optional[Set[int]] = None, subflows: bool = True) -> None:
        """Register the tasks of a code-first workflow (any object with ``.tasks``), and, with
        ``subflows``, register its sub-workflows (``.subflows``, the workflows its ``kind:
        workflow`` steps run) in the catalog, with their tasks, deepest first."""
        seen = set() if _seen is None else _seen
        seen.add(id(spec))
        for sub in (getattr(spec, "subflows", ()) or ()) if subflows else ():
            if id(sub) in seen:
                continue
            self._register_flow_tools(sub, seen)
            req = _spec_request(sub)
            self._call("dccflow_workflow_register", {"text": req["spec"], "format": req.get("format", "auto"),
                                                     "source": req.get("source") or ""}, req.get("source"))
        for task in getattr(spec, "tasks", ()) or ():
            info = task.tool_info() if hasattr(task, "tool_info") else None
            if info is None:
                continue
            name, fn, lane, max_concurrent = info
            with self._lock:
                known = self._tools.get(name)
            if known is None or known.fn is not fn:
                self.register_tool(fn, name=name, thread=lane, max_concurrent=max_concurrent,
                                   schema=getattr(task, "tool_schema", lambda: None)())

    def get_status(self, run_id: str, all_steps: bool = False) -> RunResult:
        """The current state of a run; ``all_steps`` includes every foreach iteration's steps."""
        req: Dict[str, Any] = {"run_id": run_id}
        if all_steps:
            req["all_steps"] = True
        return RunResult(self._call("dccflow_run_status", req))

    def cancel(self, run_id: str, reason: Optional[str] = None) -> None:
        """Cancel a run (a terminal run is left as it is)."""
        self._call("dccflow_run_cancel", {"run_id": run_id, "reason": reason or "cancelled from Python"})

    def approve(self, run_id: str, step: str, approved: bool = True, reason: Optional[str] = None,
                by: Optional[str] = None) -> None:
        """Resolve the open approval of step instance ``step``."""
        self._call("dccflow_run_approve", {"run_id": run_id, "step": step, "approved": bool(approved),
                                           "reason": reason or "", "by": by or _user()})

    def pause(self, run_id: str, reason: Optional[str] = None, by: Optional[str] = None) -> None:
        """Pause a run: no step starts (foreach items and retries included) until ``unpause``;
        the steps in flight finish and record their results, and an open approval can still be
        answered. Its status is ``paused``. Pausing a paused run does nothing; a finished run
        raises ``InvalidStateError``. ``by`` defaults to $DCC_FLOW_USER or the login name. A
        paused run stays paused when its engine closes."""
        self._call("dccflow_run_pause", {"run_id": run_id, "reason": reason or "", "by": by or _user()})

    def unpause(self, run_id: str, reason: Optional[str] = None, by: Optional[str] = None) -> None:
        """Let a paused run go on (``running`` again). A run paused when its engine closed is
        resumed: its completed steps are reused, so register its tools first. Unpausing a run that
        is not paused does nothing; a finished run raises ``InvalidStateError``."""
        self._call("dccflow_run_unpause", {"run_id": run_id, "reason": reason or "", "by": by or _user()})

    def resume(self, run_id: str, force_steps: Sequence[str] = (), expected_spec_hash: Optional[str] = None,
               by: Optional[str] = None) -> "Run":
        """Re-run a failed, interrupted or cancelled run, reusing its completed step instances.
        ``by`` names who resumes it in the run's resume history (``RunResult.resumes``; default
        $DCC_FLOW_USER, else the login name)."""
        req: Dict[str, Any] = {"run_id": run_id, "force_steps": list(force_steps), "by": by or _user()}
        if expected_spec_hash:
            req["expected_spec_hash"] = expected_spec_hash
        out = self._call("dccflow_run_resume", req)
        return Run(self, str(out.get("run_id", run_id)))

    def prune(self, older_than: Any, statuses: Optional[Union[str, Sequence[str]]] = None,
              dry_run: bool = False, limit: Optional[int] = None,
              progress: Optional[Callable[[int, int], None]] = None, batch: int = 1000) -> int:
        """Delete the finished runs that ended more than ``older_than`` ago, with their steps,
        events and workflow-scoped idempotency entries; return how many. ``older_than`` is
        seconds, an age such as ``"30d"``, ``"12h"`` or ``"2w"``, or a ``datetime`` (the cutoff;
        a naive one is local time). ``statuses`` keeps it to some of ``completed``, ``failed``,
        ``cancelled``, ``interrupted`` (default: all four). A run still going (running, waiting
        for an approval) is never deleted. ``dry_run`` deletes nothing and returns how many would
        go (``prunable_runs`` lists them); ``limit`` deletes at most that many, the earliest
        finished first. With ``progress``, runs are deleted ``batch`` at a time and
        ``progress(done, total)`` is called after each batch."""
        req = _prune_request(older_than, statuses, limit)
        batch = _count_arg("batch", batch, 1, "runs deleted between progress calls")
        if dry_run:
            req["dry_run"] = True
            return int(self._call("dccflow_runs_prune", req)["pruned"])
        if progress is None:
            return int(self._call("dccflow_runs_prune", req)["pruned"])
        total = int(self._call("dccflow_runs_prune", dict(req, dry_run=True))["pruned"])
        done = 0
        progress(0, total)
        while done < total:
            step = dict(req, limit=min(int(batch), total - done))
            n = int(self._call("dccflow_runs_prune", step)["pruned"])
            done += n
            progress(done, total)
            if n == 0:  # the rest was resumed or pruned by someone else meanwhile
                break
        return done

    def prunable_runs(self, older_than: Any, statuses: Optional[Union[str, Sequence[str]]] = None,
                      limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The runs ``prune`` with the same arguments would delete, earliest finished first, as
        dicts with ``run_id``, ``name``, ``status``, ``origin``, ``created_at`` and
        ``finished_at``; nothing is deleted (a read-only engine can list them too)."""
        req = _prune_request(older_than, statuses, limit)
        req["dry_run"] = True
        return list(self._call("dccflow_runs_prune", req).get("runs") or [])

    def purge_expired(self) -> int:
        """Delete the idempotency entries whose TTL (``idempotency_ttl_secs``) has run out and
        return how many. Expired entries are never used; purging gives their space back.
        ``serve`` purges them every hour on its own."""
        return int(self._call("dccflow_idempotency_purge", {})["purged"])

    def retention_status(self) -> Optional[Dict[str, Any]]:
        """The retention ``serve`` applies (docs/operations/running.md, "Retention"), or None when it
        applies none: ``keep_secs`` (0 = runs kept forever), ``every_secs``, ``last_pass`` and
        ``next_pass`` (RFC 3339), ``pruned`` and ``purged`` (the last pass), ``pruned_total``,
        ``purged_total`` and ``error`` when the last pass failed."""
        out = self._call("dccflow_retention_status", {}).get("retention")
        return dict(out) if out else None

    def runs(self, status: Optional[Union[str, Sequence[str]]] = None, name: Optional[str] = None,
             limit: Optional[int] = None, *, inputs: Optional[Mapping[str, Any]] = None,
             tool: Optional[str] = None, step_status: Optional[Union[str, Sequence[str]]] = None,
             error_kind: Optional[str] = None, worker: Optional[str] = None,
             error_text: Optional[str] = None, since: Any = None, until: Any = None,
             cursor: Optional[str] = None) -> "RunPage":
        """Runs, newest first, optionally filtered by status(es) and workflow name, and searched
        (every filter given must hold, docs/reference/python/submitted-runs.md "Engine.runs"):
        ``inputs`` ({key: value}: a top-level input equal to it; a value is matched as text, so 7
        finds the integer 7 and the string "7"), ``tool`` (an attempt called it), ``step_status``
        (a step in one of them), ``error_kind``, ``worker`` ("POOL/PID", or "POOL" for any of its workers),
        ``error_text`` (a substring of an error message, ignoring case), ``since`` and ``until``
        (a datetime, an RFC 3339 string or an age such as "2h" or "7d"). A bad value raises
        InvalidInputError naming it and the valid ones. Returns a list of RunResult; with a
        ``limit`` and more runs after it, its ``next_cursor`` is the ``cursor`` of the next page
        (else None)."""
        req: Dict[str, Any] = {}
        if status:
            req["status"] = [status] if isinstance(status, str) else list(status)
        if name:
            req["name"] = name
        if limit:
            req["limit"] = int(limit)
        if inputs:
            req["inputs"] = {str(k): _search_text(v) for k, v in inputs.items()}
        if step_status:
            req["step_status"] = [step_status] if isinstance(step_status, str) else list(step_status)
        for key, value in (("tool", tool), ("error_kind", error_kind), ("worker", worker),
                           ("error_text", error_text), ("cursor", cursor)):
            if value:
                req[key] = value
        for key, value in (("since", since), ("until", until)):
            if value is not None and value != "":
                req[key] = _time_bound(value)
        res = self._call("dccflow_runs_list", req)
        return RunPage((RunResult(r) for r in res.get("runs") or []), res.get("next_cursor"))

    def pools(self, warm: bool = False) -> List[Dict[str, Any]]:
        """The worker pools of the ``remotes`` config (docs/guide/pools.md), by name: each a dict with
        ``name``, ``command`` (None for a pool of servers, which has ``urls`` instead), ``workers``
        (the most at once), ``started`` and ``lost`` (workers ever started, and lost during a call
        or killed) and ``running``: the live workers, each with ``id``, ``pid`` (None for a
        server's, which has ``url``), ``state`` (``starting``, ``idle``, ``busy``, ``draining``), ``calls``,
        ``rss_mb`` (-1 when unknown: not Linux) and ``uptime_secs``. With ``warm``, every worker
        of every pool is started first (a check of the command lines and licences); a worker that
        cannot start raises WorkerStartError (code ``worker_start``), naming its command and the end
        of its stderr."""
        req: Dict[str, Any] = {"warm": True} if warm else {}
        return list(self._call("dccflow_pools_list", req).get("pools", []))

    # -- schedules and servers -----------------------------------------------------------------

    def schedule(self, workflow: SpecLike, cron: Optional[str] = None, every: Optional[str] = None,
                 webhook: Optional[str] = None, inputs: Optional[Mapping[str, Any]] = None, id: Optional[str] = None,
                 timezone: str = "UTC", jitter_secs: int = 0, secret_env: Optional[str] = None,
                 max_concurrent: int = 1, catchup: bool = False, enabled: bool = True,
                 signature: Optional[str] = None, tolerance_secs: int = 0) -> "ScheduleSpec":
        """Fire ``workflow`` on a ``cron`` expression (6 fields, seconds first), ``every`` interval
        (``"15m"``) or ``webhook`` path; a spec (not a name) is registered in the catalog first.
        A webhook with ``secret_env`` checks GitHub's signature, or with
        ``signature="timestamped"`` a signed timestamp within ``tolerance_secs`` (default 300),
        which resists replay (docs/guide/scheduler.md, "Webhooks").
        The schedule fires once ``serve()`` (or ``start_scheduler()``) runs. Returns the schedule."""
        from ._schedule import ScheduleSpec, TriggerSpec

        given = [t for t in (cron, every, webhook) if t is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of cron=, every= or webhook=")
        name = workflow if isinstance(workflow, str) and _CATALOG_NAME.match(workflow) else None
        if name is None:
            self._register_flow_tools(workflow)
            name = self.register_workflow(workflow)
        if cron is not None:
            trigger = TriggerSpec.cron(cron, timezone=timezone, jitter_secs=jitter_secs)
        elif every is not None:
            trigger = TriggerSpec.interval(every)
        else:
            trigger = TriggerSpec.webhook(str(webhook), secret_env=secret_env, signature=signature,
                                          tolerance_secs=tolerance_secs)
        spec = ScheduleSpec(id=id or name, workflow=name, trigger=trigger, inputs=dict(inputs or {}),
                            enabled=enabled, max_concurrent=max_concurrent, catchup=catchup)
        self._call("dccflow_schedule_add", spec.to_dict())
        return spec

    def unschedule(self, schedule_id: str) -> None:
        """Remove a schedule."""
        self._call("dccflow_schedule_remove", {"id": schedule_id})

    def schedules(self) -> List[Dict[str, Any]]:
        """The schedules with ``next_fire`` (RFC 3339 or None) and the ``last_fire`` record."""
        return list(self._call("dccflow_schedules_list", {}).get("schedules") or [])

    def schedule_fires(self, schedule_id: Optional[str] = None, limit: int = 20) -> List[Dict[str, Any]]:
        """The fire history of ``schedule_id`` (None: every schedule), newest first, at most
        ``limit`` (0: every fire kept): dicts with ``schedule_id``, ``kind`` (``fired``,
        ``skipped``, ``failed``), ``reason``, ``message``, ``run_id``, ``origin``,
        ``scheduled_at``, ``fired_at`` and ``delivery_id`` (the optional ones when set). A
        database keeps the history across restarts."""
        if int(limit) < 0:
            raise ValueError("limit must be >= 0 (0 = every fire kept); got %r" % (limit,))
        req: Dict[str, Any] = {"limit": int(limit)}
        if schedule_id:
            req["id"] = schedule_id
        return list(self._call("dccflow_schedule_fires", req).get("fires") or [])

    def start_scheduler(self) -> None:
        """Start firing cron and interval schedules (webhooks need ``serve(webhooks=...)``)."""
        self._call("dccflow_serve_start", {"scheduler": True})

    def serve(self, webhooks: Optional[str] = None, schedules_dir: Optional[str] = None,
              scheduler: bool = True, mcp: Optional[str] = None, token: Optional[str] = None,
              mcp_max_body_bytes: Optional[int] = None, allowed_origins: Optional[List[str]] = None,
              allow_unsigned_webhooks: bool = False, mcp_max_sessions: Optional[int] = None,
              mcp_session_idle_secs: Optional[float] = None,
              retention: Optional[Union[str, int, float]] = None,
              metrics: Optional[str] = None, ui: Optional[str] = None,
              ui_session_idle_secs: Optional[float] = None,
              ui_session_max_secs: Optional[float] = None) -> Dict[str, Any]:
        """Start the scheduler (loading ``*.schedules.yaml`` from ``schedules_dir``), with
        ``webhooks="127.0.0.1:8787"`` the webhook HTTP server, and with ``mcp="stdio"`` or
        ``mcp="http://127.0.0.1:8765"`` an MCP server (a non-loopback address needs ``token``).
        ``mcp_max_body_bytes`` caps MCP HTTP request bodies (default 8 MiB, 1 KiB to 1 GiB; larger
        ones get 413); ``allowed_origins`` lists browser origins besides the server's own that may
        call MCP over HTTP (another ``Origin`` gets 403); ``allow_unsigned_webhooks=True`` serves
        webhook schedules without ``secret_env`` on a non-loopback address (refused otherwise).
        ``mcp_max_sessions`` (default 1000) caps the MCP HTTP sessions open at once and
        ``mcp_session_idle_secs`` (default 1800) ends idle ones (docs/reference/mcp.md, "Limits").
        ``retention`` is how long ended runs are kept (``"30d"``, ``"12h"``, seconds, or
        ``"forever"``; default 30 days): a pass now and every hour prunes older ones and purges
        expired idempotency entries (docs/operations/running.md, "Retention"); a later ``serve`` without
        ``retention`` keeps the running one.
        ``metrics="127.0.0.1:9464"`` serves the engine's Prometheus metrics on ``GET /metrics``
        (docs/operations/metrics.md); a non-loopback address needs ``token``, which scrapers send as
        ``Authorization: Bearer TOKEN``.
        ``ui="127.0.0.1:8780"`` (port 0 picks one) serves the web dashboard (docs/guide/ui.md), with the
        metrics also on its ``GET /metrics``; off loopback it needs ``token`` (the same one MCP
        uses) of at least 16 characters, else ``InvalidInputError``. A browser signs in by posting
        the token to ``/login``; its session ends after ``ui_session_idle_secs`` unused (default
        12 h), ``ui_session_max_secs`` after the sign-in (default 7 days; both 60 s to a year), on
        sign-out, or when the engine closes (docs/guide/ui.md, "Security").
        Returns ``{"webhooks_addr"?, "mcp_url"?, "metrics_addr"?, "ui_url"?, "retention"?, ...}``.
        Runs started this way need their host tools served: keep a thread in ``serve_tools``
        (worker lane) and/or ``pump()``/``drive_forever()`` (main lane)."""
        req: Dict[str, Any] = {"scheduler": bool(scheduler)}
        if retention is not None:
            req["retention"] = _age_text(retention, "retention")
        if webhooks is not None:
            req["webhooks"] = webhooks
            if allow_unsigned_webhooks:
                req["allow_unsigned_webhooks"] = True
        if schedules_dir is not None:
            req["schedules_dir"] = os.fspath(schedules_dir)
        if metrics is not None:
            req["metrics"] = metrics
        if ui is not None:
            req["ui"] = ui
            if ui_session_idle_secs is not None:
                req["ui_session_idle_secs"] = float(ui_session_idle_secs)
            if ui_session_max_secs is not None:
                req["ui_session_max_secs"] = float(ui_session_max_secs)
        if token and (mcp is not None or metrics is not None or ui is not None):
            req["token"] = token
        if mcp is not None:
            req["mcp"] = mcp
            if mcp_max_body_bytes is not None:
                req["mcp_max_body_bytes"] = int(mcp_max_body_bytes)
            if allowed_origins:
                req["allowed_origins"] = [str(o) for o in allowed_origins]
            if mcp_max_sessions is not None:
                req["mcp_max_sessions"] = int(mcp_max_sessions)
            if mcp_session_idle_secs is not None:
                req["mcp_session_idle_secs"] = float(mcp_session_idle_secs)
        return self._call("dccflow_serve_start", req)

    def stop_serving(self) -> None:
        """Stop the servers and the scheduler started by ``serve`` (the engine stays open)."""
        self._call("dccflow_serve_stop", {})

    def serve_status(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The servers ``serve`` started: ``{"webhooks_addr"?, "mcp_url"?, "metrics_addr"?, "ui_url"?,
        "mcp_stdio"?}``.
        ``mcp_stdio`` is ``"serving"``, or ``"ended"`` once the MCP client closed standard input
        (the host stopped this process; ``mcp_stdio_error`` says why when the stream failed).
        With ``timeout`` (seconds, at most 60) it waits that long for the stdio stream to end."""
        req: Dict[str, Any] = {}
        if timeout:
            req["timeout_ms"] = max(0, int(timeout * 1000))
        return self._call("dccflow_serve_status", req)

    def drive_forever(self, stop: Optional[threading.Event] = None) -> None:
        """Run main-lane (and, without a pool, worker-lane) calls of every run on this thread until
        ``stop`` is set or the engine closes: the loop of a headless server process."""
        self._drive(None, None, stop=stop)

    # -- driving: pulling and running tool calls ------------------------------------------------
    #
    # The hand-back rule (docs/reference/python/tools.md, "Lanes"): every call this package pulls is either run
    # and answered exactly once, or handed back to the engine, which gives it to the next puller.
    # Each thread pulls as its own *puller*: a call it holds goes back when the loop that pulled it
    # stops (deadline, budget, stop event), when that loop raises, and when the thread ends.

    def _lanes(self) -> List[str]:
        """The lanes the calling thread serves: main when it may run main-lane tools (see
        ``_may_run_main``), and worker when no ``serve_tools`` pool is running."""
        lanes = ["main"] if self._may_run_main() else []
        if not (self._workers and not self._workers_stop.is_set()):
            lanes.append("worker")
        return lanes

    def _may_run_main(self) -> bool:
        """False on a thread other than the DCC's main thread while a DCC adapter's idle pump is
        installed: main-lane tools (``maya.cmds``, ``hou``) then run only in that pump."""
        return self._main_thread is None or self._main_thread is threading.current_thread()

    def _bind_main_thread(self, owner: object) -> None:
        """A DCC adapter's idle pump was installed: main-lane calls now run on the main thread only."""
        with self._lock:
            self._main_owners.append(owner)
            self._main_thread = threading.main_thread()

    def _unbind_main_thread(self, owner: object) -> None:
        with self._lock:
            self._main_owners = [o for o in self._main_owners if o is not owner]
            if not self._main_owners:
                self._main_thread = None

    def _puller(self) -> int:
        """This thread's puller id, opened on first use; handed to ``_dead_pullers`` when the
        thread ends (its thread-local holder is freed), so the calls it held go back."""
        if self._dead_pullers:
            self._close_dead_pullers()
        holder = getattr(self._pullers, "holder", None)
        if holder is None:
            puller = int(self._call("dccflow_puller_open", {"name": threading.current_thread().name})["puller"])
            holder = _PullerHolder(puller, self._dead_pullers)
            self._pullers.holder = holder
        return holder.id

    def _close_dead_pullers(self) -> None:
        """Close the pullers of threads that ended (and of loops that raised): their calls go back."""
        while self._dead_pullers and not self._handle_closed:
            try:
                puller = self._dead_pullers.pop()
            except IndexError:  # another thread took the last one
                return
            try:
                self._host_call("dccflow_puller_close", {"puller": puller})
            except DccFlowError as exc:
                if _is_closed_error(exc):
                    return  # the engine closed: nothing is handed out any more
                raise

    def _drop_puller(self) -> None:
        """Close this thread's puller now (after an exception in a pull loop): whatever it still
        holds, including a call whose reply the exception cut off, goes back to the engine."""
        holder = getattr(self._pullers, "holder", None)
        if holder is not None:
            del self._pullers.holder
            holder.release()
            self._close_dead_pullers()

    def _host_call(self, name: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
        """A crossing of the host side (hand back, close a puller): allowed while ``close()``
        runs, until the handle is closed."""
        if self._handle_closed:
            raise EngineClosedError("this dcc_flow.Engine is closed; open a new one")
        return _ffi.call(name, self._handle, payload)

    def _cancelled(self, call_id: int) -> bool:
        if self._handle_closed:
            return True
        return bool(_ffi.call("dccflow_call_cancelled", self._handle, {"call_id": call_id}).get("cancelled"))

    def _report(self, call_id: int, progress: Optional[Dict[str, Any]], logs: List[Dict[str, Any]],
                dropped: int) -> None:
        """Send what a running tool reported (``current_call().progress``/``.log``, coalesced by
        ``_tools.ReportThrottle``) to the engine, which writes it; a report the engine cannot take
        is dropped, never raised into the tool."""
        if self._handle_closed:
            return
        doc: Dict[str, Any] = {"call_id": call_id}
        if progress is not None:
            doc["progress"] = progress
        if logs:
            doc["logs"] = logs
        if dropped:
            doc["dropped"] = dropped
        try:
            data = json.dumps(doc, ensure_ascii=False, allow_nan=False, default=repr, separators=(",", ":"))
        except (ValueError, TypeError, RecursionError):  # NaN, a cycle, nesting too deep in fields
            for entry in logs:
                if "fields" in entry:
                    entry["fields"] = {"repr": repr(entry["fields"])}
            data = json.dumps(doc, ensure_ascii=False, default=repr, separators=(",", ":"))
        try:
            _ffi.call_encoded("dccflow_call_report", self._handle, data.encode("utf-8", "replace"))
        except DccFlowError as exc:
            log.debug("report of call %s dropped: %s", call_id, exc)

    def _complete(self, call: Mapping[str, Any], members: str, next_json: Optional[str]) -> Dict[str, Any]:
        """Answer a call that ran (``members``: see ``_tools.execute``), asking for the next calls
        when ``next_json`` is given. An answer the library cannot take fails the step instead:
        text that is not Unicode with kind ``invalid_output``, a request over the size limit
        with kind ``too_large`` (checked on the text before encoding it when that already tells).
        A call that ran is answered exactly once, never handed back."""
        tail = "}" if next_json is None else ',"next":' + next_json + "}"
        # A str of n code points encodes to at least n bytes: an oversized answer is refused
        # without building its bytes (500 MB of output must not cost another 500 MB here).
        data = None if len(members) > _ffi.MAX_REQUEST_BYTES else _encode_answer(members + tail)
        if isinstance(data, UnicodeEncodeError):
            data = (_tools_error(call, "invalid_output", "tool %r returned text that is not valid Unicode (%s); "
                                 "return file names as str that are UTF-8, e.g. os.fsdecode of bytes "
                                 "paths re-encoded with errors='replace'" % (call.get("tool"), data)) + tail
                    ).encode("utf-8")
        elif data is None or len(data) > _ffi.MAX_REQUEST_BYTES:
            size = len(members) if data is None else len(data)
            data = (_tools_error(call, "too_large", "tool %r returned %s%d bytes of JSON; the limit is %d (64 MiB): "
                                 "write large data to a file and return its path (file_refs)"
                                 % (call.get("tool"), "at least " if data is None else "", size,
                                    _ffi.MAX_REQUEST_BYTES)) + tail).encode("utf-8")
        if self._handle_closed:  # answered until the close is over: a closing engine waits for it
            raise EngineClosedError("this dcc_flow.Engine is closed; open a new one")
        try:
            out = _ffi.call_encoded("dccflow_calls_complete", self._handle, data)
        except DccFlowError as exc:
            if exc.code not in ("too_large", "invalid_json"):
                raise
            kind = "too_large" if exc.code == "too_large" else "invalid_output"
            data = (_tools_error(call, kind, "the result of tool %r could not be delivered: %s"
                                 % (call.get("tool"), exc.message)) + tail).encode("utf-8")
            out = _ffi.call_encoded("dccflow_calls_complete", self._handle, data)
        if not out.get("accepted", True):
            log.info("late result of %s (%s) was dropped: the call had timed out or been cancelled",
                     call.get("step_key"), call.get("tool"))
        return out

    def _serve(self, calls: List[Dict[str, Any]], next_json: Optional[str]) -> Optional[Dict[str, Any]]:
        """Run pulled calls and answer each; the last answer also asks for more (``next_json``,
        an encoded calls_next request) and its reply is returned (None without ``next_json``).

        A tool interrupted by ``KeyboardInterrupt`` (or another ``BaseException`` that is not
        ``SystemExit``) has its call answered with a ``cancelled`` step error before the exception
        goes on; the calls after it are still held and go back with the puller.
        """
        reply: Optional[Dict[str, Any]] = None
        tools = self._tools
        for i, call in enumerate(calls):
            last = i == len(calls) - 1
            try:
                members = execute(tools.get(call.get("tool")), call, self._cancelled,  # type: ignore[arg-type]
                                  self._report, self._handle)
            except ToolInterrupted:
                # Raised past execute's own handlers (CPython 3.13: python/cpython#139622): the
                # engine gave up on the call; answer it and go on, as execute would have.
                WATCHDOG.leave_call(int(call.get("call_id") or 0))
                members = _tools_error(call, "cancelled", "tool %r was interrupted: the engine gave up on the call"
                                       % call.get("tool"))
            except BaseException as exc:
                if not self._handle_closed:
                    self._complete(call, _tools_error(call, "cancelled", "the tool was interrupted by %s"
                                                      % type(exc).__name__), None)
                raise
            out = self._complete(call, members, next_json if last else None)
            if last and next_json is not None:
                reply = out
        return reply

    def _pull_loop(self, run_id: Optional[str], deadline: Optional[float], lanes: List[str],
                   budget: Optional[float] = None, stop: Optional[threading.Event] = None,
                   events_after: Optional[int] = None, counter: Optional[List[int]] = None,
                   idle: Optional[float] = None, first: Optional[Dict[str, Any]] = None,
                   ) -> Generator[List[Dict[str, Any]], None, Optional[Dict[str, Any]]]:
        """Pull and run calls on ``lanes`` (of ``run_id`` only when given) until the run is
        terminal, ``deadline`` (monotonic) passes, ``budget`` seconds are spent (then it does not
        wait for calls), ``stop`` is set or the engine closes; return the last run summary
        (``{"status", "terminal"}``) or None.

        With ``events_after`` (a sequence number) it yields each non-empty batch of the run's
        events as they arrive, and stops only after the ``workflow_terminal`` event; ``idle``
        (seconds) then moves the deadline to that long after the last batch. ``counter[0]``
        counts the calls it ran. The calls it holds when it stops, or raises, go back.
        ``first`` is a calls_next reply this thread's puller already got (its calls are served
        first).
        """
        if idle is not None:
            deadline = time.monotonic() + idle
        puller = self._puller()
        started = time.monotonic()
        reply: Optional[Dict[str, Any]] = first  # its "calls" are pulled and not started yet
        run: Optional[Dict[str, Any]] = None
        cached_key: Any = None
        req_json = ""
        ok = False
        outage = _Outage("run %s" % run_id if run_id else "tool calls")
        try:
            while True:
                if self._dead_pullers:
                    self._close_dead_pullers()
                now = time.monotonic()
                if (self._closed or (stop is not None and stop.is_set())
                        or (deadline is not None and now >= deadline)
                        or (budget is not None and now - started >= budget)):
                    ok = True
                    return run
                wait_ms = 0 if budget is not None else POLL_MS
                if deadline is not None:
                    wait_ms = max(0, min(wait_ms, int((deadline - now) * 1000)))
                key = (wait_ms, events_after)
                if key != cached_key:
                    req: Dict[str, Any] = {"puller": puller, "lanes": lanes, "max": 1, "timeout_ms": wait_ms}
                    if run_id is not None:
                        req["run_id"] = run_id
                    if events_after is not None:
                        req["events_after"] = events_after
                    cached_key, req_json = key, json.dumps(req)
                calls = reply.get("calls") if reply else None
                if calls:
                    reply = None  # _serve owns them now: it answers each, even when it raises
                    reply = self._serve(calls, req_json)
                    if counter is not None:
                        counter[0] += len(calls)
                else:
                    try:
                        reply = self._call_encoded("dccflow_calls_next", req_json)
                    except DccFlowError as exc:  # it holds no call here: waiting out an outage is safe
                        if self._closed or not outage.failed(exc):
                            raise
                        continue
                    outage.ok()
                assert reply is not None
                run = cast(Optional[Dict[str, Any]], reply.get("run"))
                if events_after is not None:
                    events = reply.get("events") or []
                    if events:
                        events_after = max(events_after, max(int(ev.get("seq", 0)) for ev in events))
                        yield events
                        if idle is not None:
                            deadline = time.monotonic() + idle
                        if any(ev.get("type") == "workflow_terminal" for ev in events):
                            ok = True
                            return run
                        if reply.get("calls") and self._cancelled(int(reply["calls"][0]["call_id"])):
                            # Cancelled or timed out while the consumer held the events: not
                            # started. Hand it back, so the engine lets go of it now.
                            self._call("dccflow_calls_release",
                                       {"puller": puller, "call_ids": [c["call_id"] for c in reply["calls"]]})
                            reply = None
                    elif run is not None and run.get("terminal") and not reply.get("calls"):
                        ok = True
                        return run  # terminal, and its events were all read (or pruned)
                    continue
                has_calls = bool(reply.get("calls"))
                if run is not None and run.get("terminal") and not has_calls:
                    ok = True
                    return run
                if not has_calls and budget is not None:
                    ok = True
                    return run
        finally:
            if not ok:
                self._drop_puller()  # raised (or abandoned): hand back all it holds
            elif reply and reply.get("calls") and not self._handle_closed:
                try:
                    self._host_call("dccflow_calls_release",
                                    {"puller": puller, "call_ids": [c["call_id"] for c in reply["calls"]]})
                except DccFlowError as exc:
                    if not _is_closed_error(exc):
                        raise

    def _call_encoded(self, name: str, req_json: str) -> Dict[str, Any]:
        self._check_open()
        return _ffi.call_encoded(name, self._handle, req_json.encode("utf-8"))

    def _drive(self, run_id: Optional[str], deadline: Optional[float], lanes: Optional[List[str]] = None,
               budget: Optional[float] = None, stop: Optional[threading.Event] = None,
               counter: Optional[List[int]] = None, first: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
        """Serve calls until the run is terminal, the deadline passes, the budget is spent or
        ``stop`` is set (see ``_pull_loop``); return the last run summary seen or None.

        On a thread that may serve no lane (a background thread while a DCC adapter's pump runs
        main-lane calls and a pool runs worker-lane ones) it only waits."""
        lanes = self._lanes() if lanes is None else lanes
        if not lanes:
            return self._wait_only(run_id, deadline, stop)
        watch_logs = run_id is not None and log.isEnabledFor(logging.INFO)
        loop = self._pull_loop(run_id, deadline, lanes, budget, stop, 0 if watch_logs else None, counter, first=first)
        while True:
            try:
                events = next(loop)
            except StopIteration as end:
                result: Optional[Dict[str, Any]] = end.value
                return result
            for ev in events:
                _log_event(ev)

    def _wait_only(self, run_id: Optional[str], deadline: Optional[float],
                   stop: Optional[threading.Event]) -> Optional[Dict[str, Any]]:
        """Wait, without pulling calls, until the run is terminal, ``deadline`` passes, ``stop``
        is set or the engine closes."""
        while not self._closed and not (stop is not None and stop.is_set()):
            wait = POLL_MS / 1000.0
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return None
            if run_id is None:
                (stop or threading.Event()).wait(wait)
                continue
            status = self._call("dccflow_run_wait", {"run_id": run_id, "timeout_ms": max(1, int(wait * 1000))})
            if WorkflowStatus(status.get("status", "pending")).is_terminal:
                return {"status": status.get("status"), "terminal": True}
        return None

    def pump(self, budget: float = 0.01) -> int:
        """Run the pending main-lane calls of every run for at most ``budget`` seconds, without
        blocking; return how many calls ran. DCC adapters call this from an idle callback, on
        the main thread: while an adapter is installed, calling it from another thread raises
        ``RuntimeError``."""
        if not self._may_run_main():
            raise RuntimeError(
                "Engine.pump() runs main-lane tools, which run on the main thread while a DCC adapter's "
                "idle pump is installed; this is thread %r. Call pump() from the main thread, or let the "
                "installed pump run them" % threading.current_thread().name)
        counter = [0]
        self._drive(None, None, lanes=["main"], budget=budget, counter=counter)
        return counter[0]

    def serve_tools(self, workers: int = 4) -> None:
        """Start ``workers`` daemon threads that run worker-lane tools until ``close()``."""
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._check_open()
        ref = weakref.ref(self)
        for i in range(workers):
            t = threading.Thread(target=_worker_loop, args=(ref, self._workers_stop), name="dcc_flow-worker-%d" % i,
                                 daemon=True)
            self._workers.append(t)
            t.start()

    # -- events ----------------------------------------------------------------------------------

    def events(self, after_seq: int = 0, run_id: Optional[str] = None, timeout: Optional[float] = None,
               until_terminal: bool = False) -> Iterator[Dict[str, Any]]:
        """Iterate over engine events with ``seq > after_seq`` (of one run when ``run_id``).

        Stops after ``timeout`` seconds without a new event, or (``until_terminal``) after the
        run's ``workflow_terminal`` event. With neither, it iterates until the engine closes.
        On an engine that is already closed it raises ``RuntimeError`` at once, like every method.
        """
        self._check_open()
        return self._events(after_seq, run_id, timeout, until_terminal)

    def _events(self, after_seq: int, run_id: Optional[str], timeout: Optional[float],
                until_terminal: bool) -> Iterator[Dict[str, Any]]:
        seq = after_seq
        outage = _Outage("Engine.events")
        while not self._closed:
            req: Dict[str, Any] = {"after_seq": seq, "max": 256,
                                   "timeout_ms": POLL_MS if timeout is None else int(min(timeout, 60) * 1000)}
            if run_id:
                req["run_id"] = run_id
            try:
                out = self._call("dccflow_events_next", req)
            except DccFlowError as exc:
                if not outage.failed(exc) or self._closed:
                    raise
                continue
            outage.ok()
            evs = out.get("events") or []
            if not evs and timeout is not None:
                return
            for ev in evs:
                seq = max(seq, int(ev["seq"]))
                yield ev
                if until_terminal and ev.get("type") == "workflow_terminal":
                    return

    def last_event_seq(self) -> int:
        """The sequence number of the newest event (0 when there is none yet): pass it as
        ``events(after_seq=...)`` to see only what happens from now on, from the first event."""
        return int(self._call("dccflow_events_next", {"after_seq": 0, "max": 0, "timeout_ms": 0}).get("last_seq", 0))

    def on_event(self, callback: Callable[[Dict[str, Any]], None]) -> None:
        """Call ``callback(event)`` for every event from now on, on a thread of this package
        (never a Go thread). Exceptions in callbacks are logged."""
        with self._lock:
            self._callbacks.append(callback)
            if self._events_thread is None:
                self._events_thread = threading.Thread(target=_event_loop,
                                                       args=(weakref.ref(self), self.last_event_seq()),
                                                       name="dcc_flow-events", daemon=True)
                self._events_thread.start()


class Run:
    """A submitted run. ``wait()`` drives its main-lane tools on the calling thread."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self.engine = engine
        self.run_id = run_id

    def __repr__(self) -> str:
        return "Run(%r)" % self.run_id

    @property
    def status(self) -> WorkflowStatus:
        return self.engine.get_status(self.run_id).status

    @property
    def steps(self) -> Tuple[StepRecord, ...]:
        return self.engine.get_status(self.run_id).steps

    def result(self) -> RunResult:
        """The current state (not waiting)."""
        return self.engine.get_status(self.run_id)

    def wait(self, timeout: Optional[float] = None, cancel_on_timeout: bool = False) -> RunResult:
        """Drive the run on this thread until it is terminal, or ``timeout`` seconds pass.

        On timeout the result has ``timed_out`` set (and the run is cancelled when
        ``cancel_on_timeout``). Ctrl-C cancels the run and raises ``KeyboardInterrupt``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        # With cancel_on_timeout a timer cancels the run on time, so the process's watchdog
        # interrupts a tool running on this thread (the pull loop checks the deadline only
        # between calls).
        fired: List[bool] = []
        timer = None
        if cancel_on_timeout and timeout is not None:
            timer = threading.Timer(max(0.0, timeout), self._expire, args=(timeout, fired))
            timer.daemon = True
            timer.start()
        try:
            run = self.engine._drive(self.run_id, deadline)
        except KeyboardInterrupt:
            try:
                self.engine.cancel(self.run_id, "KeyboardInterrupt")
            finally:
                raise
        finally:
            if timer is not None:
                timer.cancel()
        result = self.engine.get_status(self.run_id)
        if fired and result.status is WorkflowStatus.CANCELLED:
            result.timed_out = True
        if not (run and run.get("terminal")) and not result.terminal:
            if cancel_on_timeout:
                self.engine.cancel(self.run_id, "timed out after %gs" % (timeout or 0))
                self.engine._drive(self.run_id, time.monotonic() + 5)
                result = self.engine.get_status(self.run_id)
            result.timed_out = True
        return result

    def cancel(self, reason: Optional[str] = None) -> None:
        self.engine.cancel(self.run_id, reason)

    def _expire(self, timeout: float, fired: List[bool]) -> None:
        """wait()'s timer: cancel the run (a finished run is left as it is)."""
        fired.append(True)
        try:
            self.engine.cancel(self.run_id, "timed out after %gs" % timeout)
        except DccFlowError as exc:  # closed meanwhile: wait() reports what it finds
            log.debug("cancelling run %s on timeout: %s", self.run_id, exc)

    def approve(self, step: str, approved: bool = True, reason: Optional[str] = None, by: Optional[str] = None) -> None:
        self.engine.approve(self.run_id, step, approved, reason, by)

    def pause(self, reason: Optional[str] = None, by: Optional[str] = None) -> None:
        """``Engine.pause`` of this run."""
        self.engine.pause(self.run_id, reason, by)

    def unpause(self, reason: Optional[str] = None, by: Optional[str] = None) -> None:
        """``Engine.unpause`` of this run."""
        self.engine.unpause(self.run_id, reason, by)

    def events(self, timeout: Optional[float] = None) -> Iterator[Dict[str, Any]]:
        """This run's events from its start until its ``workflow_terminal`` event, or until
        ``timeout`` seconds pass without one.

        Like ``wait()``, iterating drives the run: the tool calls it needs run on this thread
        (main-lane ones only where this thread may run them, see docs/reference/python/tools.md "Lanes"), so
        ``for ev in run.events()`` never waits for a call nobody runs. Stopping the iteration
        early hands the calls it pulled back to the engine."""
        lanes = self.engine._lanes()
        if not lanes:
            return self.engine.events(run_id=self.run_id, timeout=timeout, until_terminal=True)
        return self._driven_events(lanes, timeout)

    def _driven_events(self, lanes: List[str], timeout: Optional[float]) -> Iterator[Dict[str, Any]]:
        for batch in self.engine._pull_loop(self.run_id, None, lanes, events_after=0, idle=timeout):
            yield from batch


class _PullerHolder:
    """Holds a thread's puller id in the engine's ``threading.local``. When the thread ends the
    holder is freed and its id goes to ``dead`` (only a list append: the thread is being torn
    down), to be closed by the next pull loop of any thread."""

    __slots__ = ("id", "release", "__weakref__")

    def __init__(self, puller: int, dead: List[int]) -> None:
        self.id = puller
        self.release = weakref.finalize(self, dead.append, puller)


# The threads of serve_tools() and on_event() hold their engine only while they run calls or
# callbacks, never while they wait: the wait is a crossing on the handle alone, and the engine is
# looked up through a weak reference when there is work. So an engine its user no longer
# references is garbage-collected as docs/reference/python/README.md promises (its handle closed, its database
# unlocked), and the threads then end on their own (their next crossing reports it closed).


def _is_closed_error(exc: BaseException) -> bool:
    """The engine is closed (or its handle is stale): the one failure that ends a loop quietly."""
    return isinstance(exc, EngineClosedError) or getattr(exc, "code", None) in ("closed", "stale_handle")


def _worker_loop(ref: "weakref.ref[Engine]", stop: threading.Event) -> None:
    """A ``serve_tools`` thread: serve worker-lane calls until ``stop``, the engine closes, or it
    is collected. Only the engine's closing ends it; any other failure is logged and it goes on
    (no call is run twice: the pull loop answers every call it ran, and hands back the rest)."""
    outage = _Outage("worker %s" % threading.current_thread().name)
    while not stop.is_set():
        engine = ref()
        if engine is None or engine._closed:
            return
        try:
            handle = engine._handle
            request = json.dumps({"puller": engine._puller(), "lanes": ["worker"], "max": 1, "timeout_ms": POLL_MS})
            del engine
            reply = _ffi.call_encoded("dccflow_calls_next", handle, request.encode("utf-8"))  # waits without it
            outage.ok()
            if not reply.get("calls"):
                continue
            engine = ref()
            if engine is None:
                return  # collected while we waited: its handle is closed, the call went with it
            # Run the call, then the next ones while there are some (complete-and-next), then wait again.
            engine._drive(None, None, lanes=["worker"], budget=math.inf, stop=stop, first=reply)
        except Exception as exc:  # noqa: BLE001 - the pool must outlive a failing crossing
            engine = ref()
            if engine is None or engine._closed or _is_closed_error(exc):
                return
            engine = None
            if isinstance(exc, DccFlowError) and outage.failed(exc):
                continue  # the database is unreachable for a while: one warning, then backoff
            log.exception("dcc_flow worker %s", threading.current_thread().name)
            time.sleep(0.05)
        engine = None


class _Outage:
    """Backoff for a stream (events, a worker's pulls) whose crossing fails while the database is
    unreachable: ``failed`` waits and says whether to retry (a code of EVENT_RETRY_CODES), logging
    one warning per outage; ``ok`` ends the outage (an info line with its length), resets the backoff."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.delay = 0.0
        self.since = 0.0
        self.errors = 0

    def failed(self, exc: DccFlowError) -> bool:
        if exc.code not in EVENT_RETRY_CODES:
            return False
        if self.errors == 0:
            self.since = time.monotonic()
            log.warning("dcc_flow %s: events unavailable, retrying with backoff (up to %gs apart): %s",
                        self.what, EVENT_RETRY_MAX, exc.message)
        self.errors += 1
        self.delay = min(EVENT_RETRY_MAX, self.delay * 2 if self.delay else EVENT_RETRY_FIRST)
        time.sleep(self.delay)
        return True

    def ok(self) -> None:
        if self.errors:
            log.info("dcc_flow %s: events back after %.1fs (%d failed tries)", self.what,
                     time.monotonic() - self.since, self.errors)
            self.errors, self.delay = 0, 0.0


def _event_loop(ref: "weakref.ref[Engine]", after_seq: int) -> None:
    """The ``on_event`` thread: pass each event after ``after_seq`` to the callbacks until the
    engine closes or is collected. A failing callback is logged; the others still run."""
    seq = after_seq
    outage = _Outage("on_event")
    while True:
        engine = ref()
        if engine is None or engine._closed:
            return
        handle = engine._handle
        del engine
        try:
            out = _ffi.call("dccflow_events_next", handle, {"after_seq": seq, "max": 256, "timeout_ms": POLL_MS})
        except DccFlowError as exc:
            if _is_closed_error(exc):
                return
            if not outage.failed(exc):
                log.exception("dcc_flow on_event: the event stream ended")
                return
            continue
        outage.ok()
        events = out.get("events") or []
        if not events:
            continue
        engine = ref()
        if engine is None:
            return
        with engine._lock:
            callbacks = list(engine._callbacks)
        del engine
        for ev in events:
            seq = max(seq, int(ev["seq"]))
            for cb in callbacks:
                try:
                    cb(ev)
                except Exception:  # noqa: BLE001 - a broken callback must not stop the others
                    log.exception("dcc_flow event callback %r failed", cb)


def _encode_answer(text: str) -> Union[bytes, UnicodeEncodeError]:
    """``text`` as UTF-8, or the error when it holds a lone surrogate (a non-UTF-8 file name)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc


def _close_handle(handle: int) -> None:
    try:
        _ffi.call("dccflow_engine_close", handle, {})
    except Exception:  # noqa: BLE001 - best effort at interpreter exit / garbage collection
        pass


def _user() -> str:
    """Who answers an approval when the caller does not say: $DCC_FLOW_USER, else the login name."""
    if os.environ.get("DCC_FLOW_USER"):
        return os.environ["DCC_FLOW_USER"]
    import getpass

    try:
        return getpass.getuser()  # $LOGNAME, $USER, $LNAME, $USERNAME, then the password database
    except Exception:  # noqa: BLE001 - no name anywhere (a container with an unnamed uid)
        return "python"


def _log_event(ev: Mapping[str, Any]) -> None:
    kind = ev.get("type", "")
    key = ev.get("step_key") or ""
    detail = ev.get("detail") or {}
    if kind == "step_progress":  # what a tool reported: "export 37/120 caching frames"
        total = detail.get("total")
        log.info("run %s %s %s %s%s%s", ev.get("run_id", ""), kind, key, detail.get("done"),
                 "" if total is None else "/%s" % total, " " + detail["message"] if detail.get("message") else "")
        return
    if kind == "step_log":  # the lines a tool logged, one record each
        for line in detail.get("lines") or ():
            log.info("run %s %s: %s%s", ev.get("run_id", ""), key, line.get("text", ""),
                     " %s" % json.dumps(line["fields"], sort_keys=True) if line.get("fields") else "")
        if detail.get("dropped"):
            log.info("run %s %s: %d more lines not shown here (logged too fast; the step record has them)",
                     ev.get("run_id", ""), key, detail["dropped"])
        return
    progress = ev.get("progress") or {}
    log.info("run %s %s%s %s (%s/%s)", ev.get("run_id", ""), kind, " " + key if key else "",
             ev.get("status", ""), progress.get("completed", "?"), progress.get("total", "?"))
