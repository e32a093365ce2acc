"""What the commands that use an engine share: the database option, opening the engine, loading
tool modules, and formatting runs.

Database: ``--db PATH``, else ``$DCC_FLOW_DB``, else ``.dcc-flow/flow.db`` in the working
directory (its folder is created); ``--db :memory:`` is an in-memory engine (nothing is kept);
``--db postgresql://…`` (or ``postgres://``) is a PostgreSQL database (docs/operations/cluster.md).

Engine settings: ``--config FILE`` (run, resume, unpause, serve, worker --db) is a JSON file of the engine
config (``Engine(config=…)``'s keys: ``tracing``, ``openlineage``, ``env_allow``, ``defaults``,
``remotes``…), under the command's own options; and when the standard ``OTEL_*`` variables ask for
the OTLP export of traces and the config has no ``tracing`` section, those commands trace
(``engine_config``; docs/guide/tracing.md).

Tools: ``--tools MODULE`` imports a module (a dotted name, or a path to a ``.py`` file). If it
defines ``register(engine)``, that is called; otherwise every public function defined in the
module is registered as a main-lane tool under its name (a worker-lane one with ``run
--worker-threads N``; ``run --workers N`` runs them in worker processes: ``_workers.py``).
"""

import argparse
import difflib
import json
import os
import re
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .._engine import Engine
from .._errors import DatabaseLockedError, InvalidRequestError
from .._results import RunResult
from .._tool_modules import ToolModuleError, import_tool_module, is_workflow, register_module_tools
from ._base import CliError, UsageError, load_config_section
from ._resources import resource_options_hint, resources_config

__all__ = ["add_db_argument", "add_lease_argument", "add_remotes_argument", "add_config_argument", "load_remotes",
           "load_config", "engine_config", "open_engine",
           "load_tools", "resolve_run",
           "RUN_HELP", "DEFAULT_DB", "DB_ENV",
           "parse_inputs", "exit_code", "format_duration", "elapsed", "format_progress", "format_waiting", "format_log"]

DEFAULT_DB = os.path.join(".dcc-flow", "flow.db")
DB_ENV = "DCC_FLOW_DB"

RUN_HELP = "a run id (see dcc-flow runs), or 'last' for the newest run"

#: Exit codes of commands that report a run: 0 completed, 1 failed, 3 cancelled or interrupted.
EXIT_RUN_STOPPED = 3


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH", default=None,
                        help="the run database: a SQLite file, or a postgresql:// URL (default: $%s, else %s; "
                             "':memory:' keeps nothing)" % (DB_ENV, DEFAULT_DB))


def add_lease_argument(parser: argparse.ArgumentParser) -> None:
    """``--lease-secs``, for the commands that run tools on a shared database (run, resume, serve);
    ``open_engine`` passes it to the engine."""
    parser.add_argument("--lease-secs", type=float, default=None, metavar="SECS",
                        help="with --db postgresql://...: the engine's lease (default 15); another engine "
                             "takes its runs over this long after it dies")


def add_remotes_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--remotes", metavar="FILE",
                        help="a JSON file of the remote MCP servers and worker pools that tool_remote steps "
                             "name (the engine config's remotes object; docs/guide/pools.md)")


def add_config_argument(parser: argparse.ArgumentParser, extra: str = "") -> None:
    """``--config FILE``, for the commands whose engine runs tools (run, resume, unpause, serve,
    worker --db); ``engine_config`` reads it (``open_engine`` calls it)."""
    parser.add_argument("--config", metavar="FILE",
                        help="%sa JSON file of engine settings: the engine config's keys (tracing, openlineage, "
                             "env_allow, defaults, remotes, ...); options given here win over it" % extra)


#: Engine config keys --config does not take: the command line gives them.
_NOT_IN_CONFIG_FILE = {"db": "--db PATH (or $%s)" % DB_ENV, "read_only": "the command (runs, status and show read)"}


def load_config(path: str) -> Dict[str, Any]:
    """The engine config object of the JSON file ``path`` (``--config``): a ``CliError`` naming
    the file when it cannot be read, is not JSON or not an object, or holds ``db`` or
    ``read_only``. Its keys are the engine's to check (an unknown one is refused when it opens,
    named)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise CliError("--config %s: %s" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise CliError("--config %s: not JSON: %s" % (path, exc)) from None
    if not isinstance(doc, dict):
        raise CliError("--config %s: expected a JSON object of engine settings, e.g. "
                       '{"tracing": {"enabled": true, "endpoint": "http://otel-collector:4318"}}' % path)
    for key, instead in sorted(_NOT_IN_CONFIG_FILE.items()):
        if key in doc:
            raise CliError("--config %s: %r is not taken from the file; give it with %s" % (path, key, instead))
    return doc


def engine_config(args: argparse.Namespace, added: Optional[Mapping[str, Any]] = None, env_tracing: bool = True,
                  environ: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, Any], bool]:
    """The engine config of a command whose engine runs tools: the object of ``--config FILE``
    (none: {}); ``--remotes FILE`` replaces its ``remotes``; ``added`` (``run --workers N``'s pool
    and routes) joins them — a remote of the same name is an error naming the file, and a
    ``tool_pools`` pattern of the file keeps the tools it routes. Then, when the config has no
    ``tracing`` section and the environment asks for the OTLP export of traces
    (``_otel.export_asked``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``…_TRACES_ENDPOINT`` set,
    ``OTEL_TRACES_EXPORTER`` unset or naming ``otlp``, ``OTEL_SDK_DISABLED`` not ``true``),
    ``{"tracing": {"enabled": true}}``: the engine reads the endpoint and the rest from the same
    variables; the second value says whether it did. Not with ``env_tracing`` false (a dry run:
    nothing runs). A ``remotes`` or ``tool_pools`` of the file that is not an object is left as it
    is, for the engine to refuse, naming it."""
    import fnmatch

    from .._otel import export_asked

    path = getattr(args, "config", None)
    cfg = load_config(path) if path else {}
    source = "--config %s" % path
    if getattr(args, "remotes", None):
        cfg["remotes"] = load_remotes(args.remotes)
        source = "--remotes %s" % args.remotes
    added = dict(added or {})
    extra_remotes = added.pop("remotes", None) or {}
    if extra_remotes and isinstance(cfg.get("remotes", {}), dict):
        remotes = dict(cfg.get("remotes") or {})
        for name, entry in extra_remotes.items():
            if name in remotes:
                raise CliError("%s: remote %r clashes with the pool of worker processes --workers adds under "
                               "that name; rename it in the file" % (source, name))
            remotes[name] = entry
        cfg["remotes"] = remotes
    extra_routes = added.pop("tool_pools", None) or {}
    if extra_routes and isinstance(cfg.get("tool_pools", {}), dict):
        routes = dict(cfg.get("tool_pools") or {})
        patterns = list(routes)
        for tool, pool in extra_routes.items():
            if not any(fnmatch.fnmatchcase(tool, p) for p in patterns):
                routes[tool] = pool
        cfg["tool_pools"] = routes
    cfg.update(added)
    if env_tracing and "tracing" not in cfg and export_asked(environ)[0]:
        cfg["tracing"] = {"enabled": True}
        return cfg, True
    return cfg, False


def load_remotes(path: str) -> Dict[str, Any]:
    """The ``remotes`` object of a JSON file: the object itself, or the ``remotes`` member of a
    whole engine config."""
    return load_config_section("--remotes", path, "remotes",
                               '{"maya": {"command": ["mayapy", "-m", "dcc_flow", "worker", "--tools", "tools.py"], '
                               '"workers": 4}}')


def add_tools_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--tools", action="append", default=[], metavar="MODULE",
                        help="a module (dotted name or .py path) whose register(engine) or public "
                             "functions are the tools (repeatable)")


def db_path(args: argparse.Namespace) -> str:
    path = getattr(args, "db", None) or os.environ.get(DB_ENV) or DEFAULT_DB
    return str(path)


def missing_db(args: argparse.Namespace) -> str:
    """For a command that only looks (runs, show, status, …) and so opened nothing: "" when its
    database exists (or is in memory, or PostgreSQL), else what to say of it — "the database X does
    not exist (…)" — so that "no runs" is not taken for an empty database."""
    if not hasattr(args, "db"):
        return ""
    path = db_path(args)
    if path == ":memory:" or is_db_url(path) or is_keyword_string(path) or os.path.exists(path):
        return ""
    return ("the database %s does not exist (give --db the file that dcc-flow run or serve writes, or set %s)"
            % (path, DB_ENV))


def is_db_url(path: str) -> bool:
    """Whether ``path`` names a PostgreSQL database (a postgres:// or postgresql:// URL)."""
    return path.lower().startswith(("postgres://", "postgresql://"))


# The start of a libpq keyword/value connection string ("host=db dbname=flow password=…"), which
# --db does not take (the engine refuses it too: engine/internal/store/postgres IsKeywordString).
# Any word and "=" is taken as one: libpq has dozens of keywords (sslpassword, gssencmode, …).
_KEYWORD_STRING = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")


def is_keyword_string(path: str) -> bool:
    """Whether ``path`` looks like a libpq keyword/value connection string rather than a file."""
    return _KEYWORD_STRING.match(path) is not None


def db_label(path: str) -> str:
    """``path`` for messages: a URL's password is replaced by ``xxxxx``; a keyword/value string
    (which may hold one) is not repeated."""
    if is_keyword_string(path):
        return "(a keyword/value connection string)"
    if not is_db_url(path):
        return path
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(path)
        if parts.password is None:
            return path
        netloc = "%s:xxxxx@%s" % (parts.username or "", parts.netloc.rsplit("@", 1)[1])
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "postgresql://(an unparsable URL)"


def open_engine(args: argparse.Namespace, config: Optional[Dict[str, Any]] = None,
                beside_owner: bool = False, read_only: bool = False, in_use_fix: Optional[str] = None) -> Engine:
    """The engine on the command's database. One process at a time owns a database: when
    another one does (a ``dcc-flow serve``, a long ``dcc-flow run``), ``beside_owner`` commands
    (runs, status, show, approve, cancel, pause) open it read-only and act through that process, and
    open no file that does not exist (in memory: no runs); the
    others (run, resume, serve) stop with one line naming the owner. ``read_only`` commands
    (schedules, workflows) only look: they always open it read-only (in memory when the file
    does not exist yet), so the workflows they register for a check stay out of the catalog.
    ``--lease-secs`` (``add_lease_argument``) and ``serve``'s ``--close-grace-secs`` need a PostgreSQL
    database: a ``UsageError`` else. ``in_use_fix`` replaces the owner line's advice (which speaks
    of starting runs) for a command that does something else (prune)."""
    path = db_path(args)
    if is_keyword_string(path):
        raise UsageError("--db: a PostgreSQL keyword/value connection string (host=… dbname=…) is not taken; write "
                         "it as a URL: postgresql://user@host:5432/dbname (the password in PGPASSWORD or ~/.pgpass); "
                         "a SQLite file of such a name is written ./NAME")
    lease_secs = getattr(args, "lease_secs", None)
    if lease_secs is not None:
        if not is_db_url(path):
            raise UsageError("--lease-secs needs --db postgresql://...: a lease is what engines sharing a database "
                             "hold their runs under")
        if not read_only:
            config = dict(config or {}, lease_secs=lease_secs)
    close_grace = getattr(args, "close_grace_secs", None)
    if close_grace is not None:
        if not is_db_url(path):
            raise UsageError("--close-grace-secs needs --db postgresql://...: it is how long a closing engine waits "
                             "for its tools before handing their runs to the other engines")
        if not read_only:
            config = dict(config or {}, close_grace_secs=close_grace)
    by_env = False  # tracing turned on by the OTEL_* variables
    if hasattr(args, "config"):  # run, resume, serve, worker --db: --config FILE, --remotes FILE, OTEL_*
        config, by_env = engine_config(args, config, env_tracing=not read_only and not beside_owner)
    # --resources FILE replaces a --config file's resources; --resource NAME=LIMIT sets one limit.
    declared = resources_config(args, (config or {}).get("resources"))
    if declared:
        config = dict(config or {}, resources=declared)
    if by_env:
        from .._otel import setup_export

        setup_export()  # the in-process tools' own spans, where opentelemetry-sdk is installed
    try:
        return _open(path, config, beside_owner, read_only, in_use_fix)
    except InvalidRequestError as exc:
        if not by_env or "tracing" not in str(exc):
            raise
        raise CliError("%s (dcc-flow traces because %s is set; OTEL_TRACES_EXPORTER=none turns its tracing off)"
                       % (exc, _endpoint_variable())) from None


def _endpoint_variable() -> str:
    """The OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT variable that is set, for messages."""
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    return "OTEL_EXPORTER_OTLP_ENDPOINT"


def _open(path: str, config: Optional[Dict[str, Any]], beside_owner: bool, read_only: bool,
          in_use_fix: Optional[str] = None) -> Engine:
    """Open the engine of ``open_engine``."""
    if path == ":memory:" or (read_only or beside_owner) and not is_db_url(path) and not os.path.exists(path):
        # Nothing to read there yet: creating the file would make this command its owner for a
        # moment, and a `dcc-flow run` starting on it then would find it in use.
        return Engine(config=config)
    if read_only:
        return Engine(db=path, config=config, read_only=True)
    try:
        return Engine(db=path, config=config)
    except DatabaseLockedError as exc:
        if beside_owner:
            return Engine(db=path, config=config, read_only=True)
        holder = exc.details.get("holder") or "another process"
        fix = in_use_fix or "to start runs here use --db ANOTHER.db or stop that process"
        raise CliError("database %s is in use by %s; runs, status, show, approve, cancel, pause, unpause and "
                       "schedules work beside it, but %s" % (db_label(path), holder, fix)) from None


def load_tools(engine: Engine, modules: Sequence[str], plain_thread: str = "main",
               plain: Optional[Set[str]] = None) -> List[str]:
    """Import each module and register its tools; return the tool names registered.

    A module with ``register(engine)`` registers what it wants; otherwise each public function
    defined in it is a tool named after the function (on the main lane, or on ``plain_thread``:
    ``"worker"`` with ``--worker-threads``; its name is added to ``plain``), a ``@task`` is
    registered under its tool name (``@task(name="maya__export")``) with its thread and limits,
    and a ``@workflow`` is not a tool."""
    try:
        return register_module_tools(engine, modules, plain_thread=plain_thread, plain=plain, importer=_import)
    except ToolModuleError as exc:  # a register(engine) that raised
        raise CliError(str(exc)) from None


def error_with_fix(exc: Any, args: argparse.Namespace) -> Optional[CliError]:
    """The CLI's error for an engine error that an option of this command fixes, naming the
    option: a workflow whose tools no ``--tools`` module registered (``unknown_tool``), steps asking
    for resources the engine does not declare or for more than its limit (``--resource
    NAME=LIMIT``); None for any other error."""
    if getattr(exc, "code", None) == "unknown_tool":
        hint = "add --tools MODULE" if not getattr(args, "tools", None) else "define them in a --tools module"
        return CliError("%s (%s)" % (exc.message, hint))
    options = resource_options_hint(getattr(exc, "problems", None) or [])
    if options:
        return CliError("%s (%s)" % (exc.message, options))
    return None


def load_workflow(target: str) -> Optional[Any]:
    """The ``@workflow`` a ``FILE.py:NAME`` or ``package.module:NAME`` target names (its tasks are
    registered when it runs), or None when ``target`` is not of that form (a spec file or a
    catalog name). The module is imported as for ``--tools``."""
    source, sep, attr = target.rpartition(":")
    if not sep or not attr.isidentifier() or not source or (len(source) == 1 and source.isalpha()):
        return None  # no colon, or a Windows drive letter ("C:flows.yaml")
    if not (source.endswith(".py") or _MODULE_NAME.match(source)):
        return None
    module = _import(source, what="run")
    flow = getattr(module, attr, None)
    if flow is None:
        public = sorted(n for n in dir(module)
                        if not n.startswith("_") and _is_workflow(getattr(module, n)))
        close = difflib.get_close_matches(attr, public, n=1)
        hint = "did you mean %r?" % close[0] if close else (
            "its workflows: %s" % ", ".join(public) if public else "it defines no @workflow")
        raise CliError("%s: %s has no %r; %s" % (target, source, attr, hint))
    if not _is_workflow(flow):
        raise CliError("%s: %r is a %s, not a @workflow" % (target, attr, type(flow).__name__))
    return flow


def _is_workflow(obj: Any) -> bool:
    """Whether obj is a code-first ``@workflow`` (it carries its compiled spec)."""
    return is_workflow(obj)


_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _import(spec: str, what: str = "--tools") -> Any:
    """Import a module file (its folder goes first on sys.path, so it can import its siblings,
    as ``python FILE`` would) or a module name (the working folder is on sys.path, as with
    ``python -m dcc_flow``, also from the ``dcc-flow`` console script); a failure is a one-line
    ``CliError``."""
    try:
        return import_tool_module(spec, what)
    except ToolModuleError as exc:
        raise CliError(str(exc)) from None


def resolve_run(engine: Engine, run_id: str, args: Optional[argparse.Namespace] = None) -> str:
    """``run_id``, or for ``last`` the id of the newest run of the database (when that is a
    sub-workflow's child run, the run at the top of its chain, which shows it)."""
    if run_id != "last":
        return run_id
    newest = engine.runs(limit=1)
    if not newest:
        missing = missing_db(args) if args is not None else ""
        raise CliError("'last' names the newest run, and " + (missing or "the database has no runs"))
    found = newest[0]
    for _ in range(64):  # the engine's max_depth ceiling
        if not found.parent_run_id:
            break
        found = engine.get_status(found.parent_run_id)
    return found.run_id


def parse_inputs(pairs: Sequence[str], json_file: Optional[str]) -> Dict[str, Any]:
    """``--inputs-json FILE`` then each ``--input key=value`` (a value that parses as JSON is
    taken as JSON: numbers, booleans, lists; anything else is a string)."""
    import json

    inputs: Dict[str, Any] = {}
    if json_file:
        try:
            with open(json_file, encoding="utf-8") as fh:
                loaded = json.load(fh)
        except OSError as exc:
            raise CliError("--inputs-json %s: %s" % (json_file, exc.strerror or exc)) from None
        except ValueError as exc:
            raise CliError("--inputs-json %s: not valid JSON: %s" % (json_file, exc)) from None
        if not isinstance(loaded, dict):
            raise CliError("--inputs-json %s: must hold a JSON object" % json_file)
        inputs.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError("--input %r: use --input key=value" % pair)
        try:
            inputs[key.strip()] = json.loads(value)
        except ValueError:
            inputs[key.strip()] = value
    return inputs


def exit_code(result: RunResult) -> int:
    if result.ok:
        return 0
    if result.status.value in ("cancelled", "interrupted"):
        return EXIT_RUN_STOPPED
    return 1


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else "%.4g" % value


def format_progress(progress: Optional[Dict[str, Any]]) -> str:
    """A step's reported progress (``current_call().progress``): ``37/120 caching frames…``,
    ``37`` without a total, ``""`` without progress."""
    if not progress:
        return ""
    text = _num(progress.get("done", 0))
    if progress.get("total") is not None:
        text += "/" + _num(progress["total"])
    if progress.get("message"):
        text += " " + str(progress["message"])
    return text


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, … ``11th``, ``21st``."""
    suffix = "th"
    if not 11 <= n % 100 <= 13:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "%d%s" % (n, suffix)


def format_waiting(waiting: Optional[Mapping[str, Any]]) -> str:
    """What a ``waiting_resources`` step waits for (``StepRecord.waiting``): ``waiting for gpu ×2,
    houdini ×1: 2nd of 3 in this engine's queue``, or, first there while other engines hold the
    units, ``…: first in this engine's queue; other engines hold the units``, or, in the one
    queue of a PostgreSQL database's engines, ``…: 3rd in the database's queue (all engines)``;
    ``""`` without."""
    if not waiting:
        return ""
    amounts = waiting.get("resources") or {}
    what = ", ".join("%s ×%s" % (name, amounts[name]) for name in sorted(amounts))
    if waiting.get("all_engines"):
        place = ordinal(int(waiting.get("place") or 0))
        return "waiting for %s: %s in the database's queue (all engines)" % (what, place)
    if waiting.get("other_engines"):
        return "waiting for %s: first in this engine's queue; other engines hold the units" % what
    return "waiting for %s: %s of %s in this engine's queue" % (what, ordinal(int(waiting.get("place") or 0)),
                                                                waiting.get("of", "?"))


def format_log(entry: Mapping[str, Any]) -> str:
    """A logged line (``current_call().log``) with its fields: ``cached frame frame=37``."""
    fields = entry.get("fields") or {}
    tail = " ".join("%s=%s" % (k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
                    for k, v in sorted(fields.items()))
    return str(entry.get("text", "")) + (" " + tail if tail else "")


def format_duration(seconds: Optional[float]) -> str:
    """``-``, ``7ms``, ``2.6s``, ``1m05s``, ``4h21m`` or ``2d03h`` (two units at most)."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return "%dms" % round(seconds * 1000)
    if seconds < 60:
        return "%.1fs" % seconds
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return "%dm%02ds" % (minutes, secs)
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return "%dh%02dm" % (hours, minutes)
    days, hours = divmod(hours, 24)
    return "%dd%02dh" % (days, hours)


def _parse_time(text: Optional[str]) -> Optional[float]:
    if not text:
        return None
    import datetime

    text = text.replace("Z", "+00:00")
    if "." in text:  # Python 3.7-3.10 accept at most 6 fraction digits
        head, _, rest = text.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        tz = rest[len(digits):]
        text = "%s.%s%s" % (head, digits[:6].ljust(6, "0"), tz)
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def elapsed(start: Optional[str], end: Optional[str]) -> Optional[float]:
    """Seconds between two RFC 3339 times (end None = now)."""
    s = _parse_time(start)
    if s is None:
        return None
    e = _parse_time(end) if end else time.time()
    return None if e is None else max(0.0, e - s)
