"""``dcc-flow worker``: serve the tools of --tools as an MCP server over stdio (``_worker.py``),
or, with ``--db postgresql://…``, to every engine on that database through its tool-call queue
(docs/operations/cluster.md)."""

import argparse
import signal
import threading
from typing import Dict

from .._engine import Engine
from .._otel import setup_export
from .._tools import ToolEntry
from .._worker import Worker, run_init
from ._base import EXIT_OK, CliError, Command, Context, UsageError
from ._engine import (
    _import,
    add_config_argument,
    add_tools_argument,
    is_db_url,
    is_keyword_string,
    load_config,
    load_remotes,
    load_tools,
    open_engine,
)

__all__ = ["COMMAND"]


class WorkerCommand(Command):
    name = "worker"
    summary = "serve --tools over MCP stdio, or to the engines on --db"
    description = (
        "Register the tools of --tools (as dcc-flow run does), run --init once, then serve them as an MCP\n"
        "server over standard input and output until standard input closes. Every call runs on this\n"
        "process's main thread, one at a time, so inside mayapy or hython the tools may use maya.cmds or\n"
        "hou. What the tools or the DCC print is captured from the process's stdout and stderr and sent\n"
        "back with each call's result, never into the protocol. An engine starts workers from its\n"
        "remotes config and calls them with tool_remote steps (docs/reference/mcp.md).\n"
        "\n"
        "With --db postgresql://... the worker is an engine attached to that database instead: it\n"
        "registers the tools there, claims the calls of them that engines which do not host them put on\n"
        "the database's tool-call queue, and runs them until SIGINT or SIGTERM (docs/operations/cluster.md). With\n"
        "--remotes FILE it also has those worker pools and MCP servers: it advertises them there and runs\n"
        "the calls of them (pool: steps, tool_remote steps) that engines without them queue."
    )
    examples = (
        ("what an engine's remotes config starts for a Maya remote",
         "mayapy -m dcc_flow worker --tools studio.maya_tools --init studio.maya_tools:load_plugins"),
        ("try a tools file by hand (type JSON-RPC lines; Ctrl-D ends it)",
         "dcc-flow worker --tools tools.py --no-capture"),
        ("a farm node serving the Maya tools of every engine on the studio database",
         "mayapy -m dcc_flow worker --db postgresql://flow@db.studio/flow --tools studio.maya_tools"),
        ("a farm node running its Maya pool for the engines on the studio database",
         "dcc-flow worker --db postgresql://flow@db.studio/flow --remotes farm_pools.json"),
    )
    exit_codes = ("0 standard input closed (with --db: stopped by SIGINT or SIGTERM), 1 a tools module or --init "
                  "failed, 2 usage error, 3 standard input "
                  "closed during a call that did not return within --exit-grace")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_tools_argument(parser)
        parser.add_argument("--init", metavar="MODULE:FUNCTION",
                            help="a function to run once before serving (load plugins, open a template scene)")
        parser.add_argument("--no-capture", action="store_true",
                            help="leave stdout and stderr alone (a tool's print then corrupts the protocol: for "
                                 "trying a worker by hand only)")
        parser.add_argument("--exit-grace", type=float, default=5.0, metavar="SECS",
                            help="when standard input closes during a call, the call is cancelled and the "
                                 "worker exits (status 3) if it has not returned after SECS (default 5)")
        parser.add_argument("--db", metavar="URL", default=None,
                            help="a postgresql:// URL: serve the tools to the engines on that database through "
                                 "its tool-call queue, until SIGINT or SIGTERM, instead of over stdio")
        parser.add_argument("--worker-threads", type=int, default=4, metavar="N",
                            help="with --db: threads for worker-lane tools (default 4)")
        parser.add_argument("--remotes", metavar="FILE",
                            help="with --db: a JSON file of worker pools and MCP servers (the engine config's "
                                 "remotes object; docs/guide/pools.md) whose calls the engines on the database that "
                                 "lack them queue for this worker")
        parser.add_argument("--lease-secs", type=float, default=None, metavar="SECS",
                            help="with --db: the engine's lease (default 15); a call it claimed is retried "
                                 "elsewhere this long after it dies")
        add_config_argument(parser, extra="with --db: ")

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        if args.remotes and args.db is None:
            raise UsageError("--remotes needs --db postgresql://...: over stdio the worker serves its --tools only")
        if args.config and args.db is None:
            raise UsageError("--config needs --db postgresql://...: over stdio the worker is no engine (the engine "
                             "that starts it has the settings)")
        if not args.tools and not args.remotes and not args.config:
            raise UsageError("give the tools to serve with --tools MODULE (repeatable), or with --db the pools to "
                             "run with --remotes FILE")
        from .. import __version__

        # Capture stdout and stderr before importing the tools: a DCC's or a module's banner
        # printed at import or in --init must not reach the protocol either.
        if not args.exit_grace >= 0:
            raise UsageError("--exit-grace must be a number of seconds >= 0; got %s" % args.exit_grace)
        setup_export()  # the OpenTelemetry SDK's export, when installed and asked for (docs/guide/tracing.md)
        if args.db is not None:
            return _serve_db(args, ctx)
        worker = Worker.over_stdio({}, version=__version__, capture=not args.no_capture)
        worker.exit_grace = args.exit_grace
        try:
            worker.tools = _load(args)
        except BaseException:
            worker.restore_stdio()  # the error is reported on the real stderr
            raise
        worker.serve()
        worker.restore_stdio()
        return EXIT_OK


def _serve_db(args: argparse.Namespace, ctx: Context) -> int:
    """``--db URL``: an engine attached to the database that hosts the tools and the remotes of
    --remotes and claims their queued calls; main-lane tools run on this thread, worker-lane ones
    on --worker-threads, remote calls on the engine's pools."""
    if not is_db_url(args.db):
        # Not echoed when it may hold a password: a keyword string, a mistyped URL with user:password@.
        shown = "%r" % args.db if "@" not in args.db and not is_keyword_string(args.db) else \
            "a value not repeated here (it may hold a password)"
        raise UsageError("--db must be a postgresql:// URL (the database the engines share); got %s" % shown)
    if args.worker_threads < 1:
        raise UsageError("--worker-threads must be >= 1; got %s" % args.worker_threads)
    stop = threading.Event()
    remotes = sorted(load_remotes(args.remotes)) if args.remotes else []
    if args.remotes and not remotes:
        raise CliError("--remotes %s names no remote" % args.remotes)
    if args.config and not args.remotes:
        found = load_config(args.config).get("remotes")
        remotes = sorted(found) if isinstance(found, dict) else []
    if not args.tools and not remotes:
        raise CliError("--config %s names no remote: give the tools to serve with --tools MODULE, or the pools "
                       "to run in the file's remotes or with --remotes FILE" % args.config)
    with open_engine(args) as engine:  # it passes --lease-secs on
        names = load_tools(engine, args.tools) if args.tools else []
        if args.tools and not names:
            raise CliError("--tools %s registered no tools" % " ".join(args.tools))
        if args.init:
            try:
                run_init(args.init, _import)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - a failing --init is one clear line
                raise CliError("--init %s failed: %s: %s" % (args.init, type(exc).__name__, exc)) from None
        engine.serve_tools(workers=args.worker_threads)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        if remotes:
            ctx.out.write("worker serving %d tool(s) and %d remote(s) to the engines on the database: %s\n"
                          % (len(names), len(remotes),
                             "; ".join(p for p in ("tools " + ", ".join(sorted(names)) if names else "",
                                                   "remotes " + ", ".join(remotes)) if p)))
        else:
            ctx.out.write("worker serving %d tool(s) to the engines on the database: %s\n"
                          % (len(names), ", ".join(sorted(names))))
        ctx.out.flush()
        engine.drive_forever(stop)
    return EXIT_OK


def _load(args: argparse.Namespace) -> Dict[str, ToolEntry]:
    """Register the tools of --tools, then run --init. An in-memory engine collects the
    registrations (register(engine), @engine.tool, plain functions: the conventions of dcc-flow
    run --tools); it runs nothing itself."""
    with Engine() as registry:
        names = load_tools(registry, args.tools)
        if not names:
            raise CliError("--tools %s registered no tools" % " ".join(args.tools))
        tools = {name: registry._tools[name] for name in names}
    if args.init:
        try:
            run_init(args.init, _import)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except CliError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing --init is one clear line
            raise CliError("--init %s failed: %s: %s" % (args.init, type(exc).__name__, exc)) from None
    return tools


COMMAND = WorkerCommand()
