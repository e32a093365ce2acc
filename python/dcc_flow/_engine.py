"""``dcc_flow.Engine``: run workflows whose tools are Python functions.

The Go engine never calls into Python: the threads that drive a run pull its tool calls, run them
and answer them. That pull driver lives in ``_driver`` (one ``Driver`` per engine); the engine and
``Run`` hand it the threads of ``Engine.run``, ``Run.wait``, ``Run.events``, ``Engine.pump``,
``Engine.drive_forever`` and ``Engine.serve_tools``. Every call a thread takes is run and answered
exactly once, or handed back to the engine for the next thread (docs/reference/python/tools.md, "Lanes: which
thread runs a tool"). The records of a run (``RunResult`` and its parts) live in ``_results``.
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
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
    overload,
)

from . import _ffi
from ._driver import POLL_MS, Driver, Outage, is_closed_error
from ._errors import DccFlowError, EngineClosedError, NotFoundError
from ._results import AttemptRecord, RunFailedError, RunPage, RunResult, StepRecord
from ._schema import SchemaOption
from ._schema import tool_schema as _tool_schema
from ._spec import WorkflowSpec, WorkflowStatus
from ._suggest import file_hint
from ._tools import LANES, ToolEntry, _abspath, check_environment, describe, file_args

if TYPE_CHECKING:
    from typing import Literal

    from ._dryrun import DryRunResult
    from ._schedule import ScheduleSpec

__all__ = ["Engine", "Run", "RunResult", "StepRecord", "AttemptRecord", "RunFailedError"]

log = logging.getLogger("dcc_flow")

#: A string that is a catalog name rather than spec text or a path.
_CATALOG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")

SpecLike = Union[WorkflowSpec, str, "os.PathLike[str]", Mapping[str, Any], Any]


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


def _same_files(entry: ToolEntry, task: Any) -> bool:
    """Whether the tool ``entry`` reports the file arguments a @task names (its ``reads``, ``writes``)."""
    names = [(n, "read") for n in getattr(task, "reads", None) or ()]
    names += [(n, "write") for n in getattr(task, "writes", None) or ()]
    return [(n, r) for n, r, _ in entry.files] == names


def _count_arg(name: str, value: Any, least: int, note: str) -> int:
    """``value`` as an int of at least ``least``, else ValueError naming ``name`` (``note`` says
    what its edge means): a bool, a fraction or a string is no count."""
    whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not whole:
        raise ValueError("%s must be a whole number >= %d (%s); got %r" % (name, least, note, value))
    if value < least:
        raise ValueError("%s must be >= %d (%s); got %r" % (name, least, note, value))
    return int(value)


# -- the arguments of the asset methods (lineage, stale, cache_entries, purge_cache) -------------

#: An age: one or more numbers with a unit, ``30d``, ``12h``, ``2w``, ``90m``, ``45s``, ``36h30m``.
_AGE_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", re.I)
_AGE_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: An RFC 3339 time (``2026-11-01T00:00:00Z``, any offset; no offset: UTC; seconds optional) or a
#: date (midnight UTC): date, hours and minutes, seconds and fraction, offset.
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\d)(?:[T ](\d\d:\d\d)(:\d\d(?:\.\d+)?)?(Z|[+-]\d\d:\d\d)?)?$", re.I)


#: The bounds of a ``before`` sent: the store compares times as int64 nanoseconds since 1970,
#: which end in 2262. Earlier than the first is no entry; the last year or later, every entry.
_EARLIEST = "1970-01-01T00:00:00Z"
_LAST_YEAR = 2261


def _age_seconds(text: str) -> Optional[float]:
    """The seconds of an age such as ``30d`` or ``36h30m``; None when ``text`` is not one."""
    text = text.strip()
    if not text or _AGE_PART.sub("", text) != "":
        return None
    return sum(float(n) * _AGE_UNITS[u.lower()] for n, u in _AGE_PART.findall(text))


def _before_bound(value: Any, what: str) -> Optional[str]:
    """A ``before`` bound as the library takes it (RFC 3339 with an offset; None: no bound, past
    the store's range) from a datetime (a naive one is local time), an RFC 3339 text or a date
    (no offset: UTC), an age (``"30d"``) or seconds (both counted back from now)."""
    text = _before_text(value, what)
    year = int(text[:4]) if text[:4].isdigit() else 1970
    if year < 1970:
        return _EARLIEST
    return None if year > _LAST_YEAR else text


def _before_text(value: Any, what: str) -> str:
    utc = datetime.timezone.utc
    if isinstance(value, datetime.datetime):
        try:
            return value.astimezone(utc).isoformat()  # a naive one: local time
        except (OverflowError, ValueError):  # datetime.min or .max in a local time
            return _EARLIEST if value.year < 2 else datetime.datetime.max.replace(tzinfo=utc).isoformat()
    secs: Optional[float] = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
    elif isinstance(value, str):
        m = _RFC3339.match(value.strip())
        if m:
            day, clock, seconds, offset = m.groups()
            return "%sT%s%s%s" % (day, clock or "00:00", seconds or ":00", (offset or "Z").upper())
        secs = _age_seconds(value)
    if secs is None or not math.isfinite(secs) or secs < 0:
        raise ValueError('%s must be a datetime, an RFC 3339 time ("2026-11-01T00:00:00Z"), a date, an age such '
                         'as "30d", "12h" or "2w", or seconds >= 0; got %r' % (what, value))
    try:
        return (datetime.datetime.now(utc) - datetime.timedelta(seconds=secs)).isoformat()
    except OverflowError:  # an age before year 1: every entry is younger
        return _EARLIEST


def _asset_path(path: Any, what: str) -> str:
    """A path of the asset methods, made absolute against the working directory (as a tool's
    reports are: ``_tools._abspath``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("%s: a path must be a str or an os.PathLike, not %s" % (what, type(path).__name__))
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError("%s: a path must be text; decode bytes with os.fsdecode" % what)
    if not text or "\x00" in text:
        raise ValueError("%s: a path must be non-empty and hold no NUL; got %r" % (what, text))
    return str(_abspath(text))


def _cache_filter(tool: Optional[str], workflow: Optional[str], run_id: Optional[str], key: Optional[str],
                  before: Any) -> Dict[str, Any]:
    """The ``dccflow_cache_list``/``dccflow_cache_purge`` filter of the cache methods' arguments."""
    req: Dict[str, Any] = {}
    for name, value in (("tool", tool), ("workflow", workflow), ("run_id", run_id), ("key", key)):
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise TypeError("%s must be a str, not %s" % (name, type(value).__name__))
        req[name] = value
    if before is not None and before != "":
        bound = _before_bound(before, "before")
        if bound is not None:
            req["before"] = bound
    return req


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

    ``environment`` (a mapping of JSON values, e.g. ``{"dcc": "maya", "version": "2025.3"}``) goes
    with the result of every tool call this engine runs in this process, updating the process's
    ``dcc_flow.set_environment`` (its keys win): the environment the engine records with each
    attempt (docs/reference/python/tool-calls.md "Files and environment"). A pool worker's calls
    carry the worker's own (its ``--init``). It is also the engine's config ``env`` (unless
    ``config`` sets one): part of every cache key, so that a new DCC or plugin version runs the
    steps with ``cache`` again (docs/guide/assets.md).
    """

    def __init__(self, db: Optional[Union[str, "os.PathLike[str]"]] = None, config: Optional[Mapping[str, Any]] = None,
                 read_only: bool = False, lease_secs: Optional[float] = None, *, tools: Sequence[str] = (),
                 workers: int = 0, worker_threads: int = 0, environment: Optional[Mapping[str, Any]] = None):
        env = check_environment(environment, "Engine(environment=...)")  # before anything is opened
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
        if environment is not None and "env" not in cfg:
            # The engine's own (config "env"): recorded with the attempts of pools and other
            # tools whose side reports none, and part of every cache key (docs/guide/assets.md).
            cfg["env"] = dict(environment)
        self._handle: int = int(_ffi.call("dccflow_engine_open", 0, {"config": cfg})["handle"])
        self._lock = threading.RLock()
        self._tools: Dict[str, ToolEntry] = {}
        # Pulls and runs the tool calls. Its ``closed`` is this engine's; its ``handle_closed`` is
        # set once dccflow_engine_close returned: until then the host side (answers, hand-backs,
        # reports, cancel checks) still crosses, so a closing engine gets the answers of the
        # calls its tools are running (docs/operations/cluster.md, "Closing an engine").
        self._driver = Driver(self._handle, self._tools)
        self._driver.environment = env
        self._callbacks: List[Callable[[Dict[str, Any]], None]] = []
        self._events_thread: Optional[threading.Thread] = None
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
        return self._driver.closed

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
            if self._driver.closed:
                return
            self._driver.closed = True
        self._driver.workers_stop.set()  # the pool takes no new call; a tool it is running is answered
        try:
            if self._finalizer.detach() is not None:
                _ffi.call("dccflow_engine_close", self._handle, {})
        finally:
            self._driver.handle_closed = True
            self._driver.join_workers(timeout=5)
            current = threading.current_thread()
            if self._events_thread is not None and self._events_thread is not current:
                self._events_thread.join(timeout=5)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._driver.closed:
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
        reads: Union[None, str, Sequence[str]] = None,
        writes: Union[None, str, Sequence[str]] = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register the function as host tool ``name`` (default: the function's name).

        ``thread="main"`` runs it on the thread that drives the run (Maya's main thread);
        ``"worker"`` on the ``serve_tools`` pool. ``max_concurrent`` bounds simultaneous calls.
        ``schema`` / ``output_schema`` / ``reads`` / ``writes`` as for ``register_tool``.
        """
        if callable(name):  # used bare: @engine.tool
            fn = name
            self.register_tool(fn)
            return fn

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register_tool(fn, name=name, thread=thread, max_concurrent=max_concurrent, schema=schema,
                               output_schema=output_schema, reads=reads, writes=writes)
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
        reads: Union[None, str, Sequence[str]] = None,
        writes: Union[None, str, Sequence[str]] = None,
    ) -> None:
        """Register ``fn`` as a host tool (see ``tool``). Registering a name again replaces it.

        ``reads`` and ``writes`` name ``fn``'s arguments that are paths of files it reads and
        writes (one name, or a list): every call reports their values (a str, an ``os.PathLike``
        or a list of them; ``None`` for none; a missing argument's default) as
        ``current_call().reads``/``.writes`` would, before ``fn`` runs (docs/reference/python/tool-calls.md
        "Files and environment"). A name that is not an argument of ``fn`` raises ``ValueError``.

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
        files = file_args(fn, reads, writes, "tool %r" % tool_name)
        args_sch = _tool_schema(fn, schema, "schema", tool_name)
        entry = ToolEntry(tool_name, fn, thread, max_concurrent, describe(fn), args_sch, files)
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

    def submit(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, *,
               priority: Optional[int] = None) -> "Run":
        """Start a run and return at once. Its main-lane tools run when some thread drives it:
        ``Run.wait()``, ``Engine.pump()`` (a DCC idle callback) or ``Engine.run``. ``priority``
        (-1000 to 1000, higher first) is the run's when its steps wait for scarce resources, over
        the spec's ``priority`` (docs/guide/resources.md); None: the spec's."""
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TypeError("priority must be an int from -1000 to 1000 or None; got %r" % (priority,))
        self._register_flow_tools(spec)
        req = _spec_request(spec)
        req["inputs"] = dict(inputs or {})
        if priority is not None:
            req["priority"] = priority
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
            *, dry_run: "Literal[False]" = False, priority: Optional[int] = None) -> RunResult: ...

    @overload
    def run(self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
            *, dry_run: "Literal[True]", fixtures: Optional[Mapping[str, Any]] = None,
            approvals: Optional[Mapping[str, bool]] = None) -> "DryRunResult": ...

    def run(
        self, spec: SpecLike, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
        *, dry_run: bool = False, fixtures: Optional[Mapping[str, Any]] = None,
        approvals: Optional[Mapping[str, bool]] = None, priority: Optional[int] = None,
    ) -> Union[RunResult, "DryRunResult"]:
        """Start a run and drive it to the end on this thread; return its result.

        ``timeout`` (seconds) cancels the run when exceeded. Ctrl-C cancels the run and raises
        ``KeyboardInterrupt``.

        ``dry_run=True`` calls no tool and records nothing: it returns ``dry_run(spec, inputs,
        fixtures, approvals)``, the steps in the order they would run with the arguments each
        would receive.

        ``priority`` is the run's when its steps wait for scarce resources (``submit``).
        """
        if dry_run:
            return self.dry_run(spec, inputs, fixtures=fixtures, approvals=approvals)
        if fixtures is not None or approvals is not None:
            raise TypeError("fixtures and approvals are for a dry run: pass dry_run=True")
        run = self.submit(spec, inputs, priority=priority)
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
            if known is None or known.fn is not fn or not _same_files(known, task):
                self.register_tool(fn, name=name, thread=lane, max_concurrent=max_concurrent,
                                   schema=getattr(task, "tool_schema", lambda: None)(),
                                   reads=getattr(task, "reads", None), writes=getattr(task, "writes", None))

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
        finds the integer 7 and the string "7"), ``tool`` (an attempt called it), ``step_status`` (a step in one of
        them), ``error_kind``, ``worker`` ("POOL/PID", or "POOL" for any of its workers),
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

    # -- assets: lineage, staleness, the content cache (docs/guide/assets.md) -------------------

    def lineage(self, path: Union[str, "os.PathLike[str]"], depth: int = 0) -> Dict[str, Any]:
        """How the file at ``path`` came to be (docs/guide/assets.md, "Lineage"): a dict with
        ``path``, ``hash`` (``"blake3:…"`` as recorded; absent when it was not hashed), ``now``
        (what the file is now against that record: ``unchanged``, ``changed``, ``missing`` or
        ``unreadable``) and ``made``: the newest recorded attempt that wrote it — ``run_id``,
        ``workflow``, ``step_key``, ``attempt``, ``tool``, ``status``, ``args``, ``env``, ``at``
        (when the file was recorded), ``hash`` (what the attempt wrote) and ``inputs``, the files
        it read, each a dict of the same form. ``made`` is absent for a file no recorded attempt
        wrote (a source: a vendor drop, an artist's scene); an input has ``cut: True`` where
        ``depth`` stopped the walk (its writer is not looked for) and ``repeat: True`` where its
        making is already in the graph (an input shared by several steps).

        ``depth`` is how many levels of writers are followed: 0 (the default) is the engine's
        default, 10; a negative one or one that is not a whole number raises ``ValueError``. A
        relative ``path`` is taken from the working directory. A file no recorded attempt read
        or wrote raises ``NotFoundError``."""
        depth = _count_arg("depth", depth, 0, "0 = the default, 10")
        req: Dict[str, Any] = {"path": _asset_path(path, "lineage(path=...)"), "depth": depth}
        return dict(self._call("dccflow_file_lineage", req)["lineage"])

    def resources(self) -> List[Dict[str, Any]]:
        """The scarce resources (docs/guide/resources.md): those the engine's config declares
        (``Engine(config={"resources": {"houdini": {"limit": 4}}})``) and any other the database
        has holders of, by name. Each is a dict with ``name``, ``limit`` (0: not declared by this
        engine), ``in_use`` (the units held now: on a PostgreSQL database by every engine),
        ``holders`` (dicts with ``run_id``, ``step_key``, ``amount``, ``since`` and, on PostgreSQL,
        ``engine``) and ``queue`` (this engine's step attempts waiting, in the order they will be
        served: ``label`` ``RUN/STEP_KEY``, ``amount``, ``position``, ``priority``,
        ``effective_priority`` and ``since``). An empty list when there is none."""
        return list(self._call("dccflow_resources", {}).get("resources") or [])

    def stale(self, paths: Optional[Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]] = None
              ) -> List[Dict[str, Any]]:
        """The recorded outputs that are stale (docs/guide/assets.md, "Staleness"), by path: of
        the newest recorded write of every file under ``paths`` (a file or directory, or a list
        of them; None or empty: every recorded output), those modified or deleted since they were
        made, or made from an input whose content changed since, directly or through other
        recorded outputs. Each is a dict with ``path``, ``reason`` (``"modified since it was
        made"``, ``"deleted since it was made"``, ``"input changed: PATH"``, ``"input deleted:
        PATH"``, ``"made from stale PATH"``, ``"input added: PATH"``: a file a glob of the step's
        declared ``reads`` matches now and did not then) and the attempt that made it: ``run_id``,
        ``step_key``, ``attempt``. An empty list when nothing is stale (or nothing is recorded
        there). Relative paths are taken from the working directory."""
        if paths is None:
            given: List[Any] = []
        elif isinstance(paths, (str, os.PathLike)):
            given = [paths]
        else:
            given = list(paths)
        req = {"paths": [_asset_path(p, "stale(paths=...)") for p in given]}
        return list(self._call("dccflow_files_stale", req).get("stale") or [])

    def cache_entries(self, tool: Optional[str] = None, workflow: Optional[str] = None,
                      run_id: Optional[str] = None, key: Optional[str] = None, limit: int = 0,
                      before: Any = None) -> List[Dict[str, Any]]:
        """The entries of the content cache (docs/guide/assets.md, "Caching") matching every
        filter given, newest first, at most ``limit`` (0: all): dicts with ``key`` (64 hex
        digits), ``tool``, ``step_id``, ``workflow``, ``run_id``, ``step_key`` and ``attempt``
        (the completed attempt the entry stands for), ``parts`` (what the key is made of:
        ``tool``, ``version``, ``args``, ``env``, ``key``, ``reads``, each when set),
        ``created_at`` and ``expires_at`` (RFC 3339; absent: never). Expired entries are listed
        too (their ``expires_at`` says so); they are never used. ``before`` keeps the entries
        created before it: a datetime (a naive one is local time), an RFC 3339 string, or an age
        ("30d", "12h", "2w", "90m", "45s", or seconds). ``run_id`` is the run whose attempt made
        the entry."""
        req = _cache_filter(tool, workflow, run_id, key, before)
        limit = _count_arg("limit", limit, 0, "0 = all")
        if limit:
            req["limit"] = limit
        return list(self._call("dccflow_cache_list", req).get("entries") or [])

    def purge_cache(self, tool: Optional[str] = None, workflow: Optional[str] = None,
                    run_id: Optional[str] = None, key: Optional[str] = None, before: Any = None) -> int:
        """Delete the entries of the content cache matching every filter given (those of
        ``cache_entries``; none given: every entry) and return how many: the steps they stood in
        for run again next time. Nothing else is deleted — runs, attempts and file records stay.
        A read-only engine raises ``ReadOnlyError`` (purge from the engine that owns the
        database)."""
        req = _cache_filter(tool, workflow, run_id, key, before)
        return int(self._call("dccflow_cache_purge", req)["purged"])

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
        self._driver.drive(None, None, stop=stop)

    # -- driving: the pull driver (_driver) runs the tool calls on the threads handed to it --------

    def _bind_main_thread(self, owner: object) -> None:
        """A DCC adapter's idle pump was installed (dcc_flow.dcc): main-lane calls now run on the
        main thread only, until every owner unbinds."""
        self._driver.bind_main_thread(owner)

    def _unbind_main_thread(self, owner: object) -> None:
        self._driver.unbind_main_thread(owner)

    def pump(self, budget: float = 0.01) -> int:
        """Run the pending main-lane calls of every run for at most ``budget`` seconds, without
        blocking; return how many calls ran. DCC adapters call this from an idle callback, on
        the main thread: while an adapter is installed, calling it from another thread raises
        ``RuntimeError``."""
        if not self._driver.may_run_main():
            raise RuntimeError(
                "Engine.pump() runs main-lane tools, which run on the main thread while a DCC adapter's "
                "idle pump is installed; this is thread %r. Call pump() from the main thread, or let the "
                "installed pump run them" % threading.current_thread().name)
        counter = [0]
        self._driver.drive(None, None, lanes=["main"], budget=budget, counter=counter)
        return counter[0]

    def serve_tools(self, workers: int = 4) -> None:
        """Start ``workers`` daemon threads that run worker-lane tools until ``close()``."""
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._check_open()
        self._driver.serve_tools(workers)

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
        outage = Outage("Engine.events")
        while not self._driver.closed:
            req: Dict[str, Any] = {"after_seq": seq, "max": 256,
                                   "timeout_ms": POLL_MS if timeout is None else int(min(timeout, 60) * 1000)}
            if run_id:
                req["run_id"] = run_id
            try:
                out = self._call("dccflow_events_next", req)
            except DccFlowError as exc:
                if not outage.failed(exc) or self._driver.closed:
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
            run = self.engine._driver.drive(self.run_id, deadline)
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
                self.engine._driver.drive(self.run_id, time.monotonic() + 5)
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
        lanes = self.engine._driver.lanes()
        if not lanes:
            return self.engine.events(run_id=self.run_id, timeout=timeout, until_terminal=True)
        return self._driven_events(lanes, timeout)

    def _driven_events(self, lanes: List[str], timeout: Optional[float]) -> Iterator[Dict[str, Any]]:
        for batch in self.engine._driver.pull_loop(self.run_id, None, lanes, events_after=0, idle=timeout):
            yield from batch


# The on_event thread holds its engine only while it runs callbacks, never while it waits: the wait
# is a crossing on the handle alone, and the engine is looked up through a weak reference when there
# are events. So an engine its user no longer references is garbage-collected as docs/reference/python/README.md
# promises (its handle closed, its database unlocked), and the thread then ends on its own (its
# next crossing reports it closed). The serve_tools threads do the same with the driver (_driver).


def _event_loop(ref: "weakref.ref[Engine]", after_seq: int) -> None:
    """The ``on_event`` thread: pass each event after ``after_seq`` to the callbacks until the
    engine closes or is collected. A failing callback is logged; the others still run."""
    seq = after_seq
    outage = Outage("on_event")
    while True:
        engine = ref()
        if engine is None or engine._driver.closed:
            return
        handle = engine._handle
        del engine
        try:
            out = _ffi.call("dccflow_events_next", handle, {"after_seq": seq, "max": 256, "timeout_ms": POLL_MS})
        except DccFlowError as exc:
            if is_closed_error(exc):
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
