"""``dcc-flow serve``: scheduler, webhooks, MCP and metrics in one process, running the tools."""

import argparse
import os
import re
import signal
import threading
import time
from typing import Any, Dict, Optional, Set

from .._errors import DccFlowError, EngineClosedError
from ._approvals import approvals_reachable
from ._base import CliError, Command, Context, plain
from ._engine import (
    _parse_time,
    add_config_argument,
    add_db_argument,
    add_lease_argument,
    add_remotes_argument,
    add_tools_argument,
    load_tools,
    open_engine,
)
from ._resources import add_resource_argument
from .prune import parse_age
from .run import pause_line, register_dir
from .schedules import serve_schedules

__all__ = ["COMMAND"]


class ServeCommand(Command):
    name = "serve"
    summary = "serve schedules, webhooks and MCP until SIGINT/SIGTERM"
    description = (
        "Register the workflows of --workflows, load the *.schedules.yaml of --schedules, start the\n"
        "scheduler, the webhook server (--webhooks ADDR), an MCP server (--mcp stdio|http://HOST:PORT) and\n"
        "Prometheus metrics (--metrics ADDR), the web dashboard (--ui HOST:PORT, docs/guide/ui.md), and run the\n"
        "tools of --tools on this process until SIGINT or SIGTERM (with --mcp stdio, also until the MCP client\n"
        "closes standard input), then stop gracefully."
    )
    examples = (
        ("nightly schedules and webhooks",
         "dcc-flow serve --workflows examples/ --schedules examples/schedules --webhooks 127.0.0.1:8787 "
         "--tools tools.py"),
        ("an MCP server for agents",
         "dcc-flow serve --workflows examples/ --mcp http://127.0.0.1:8765 --tools tools.py"),
        ("the web dashboard for the studio network",
         "dcc-flow serve --workflows examples/ --ui 0.0.0.0:8780 --token-file /etc/dcc-flow/ui.token"),
    )
    exit_codes = "0 stopped by a signal or the end of MCP stdin, 1 failure, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workflows", metavar="DIR", help="a folder of spec files to register by name")
        parser.add_argument("--schedules", metavar="DIR", help="a folder of *.schedules.yaml files")
        parser.add_argument("--webhooks", metavar="ADDR", help="serve webhook schedules on ADDR, e.g. 127.0.0.1:8787")
        parser.add_argument("--mcp", metavar="WHERE", help="serve MCP: stdio, or http://HOST:PORT")
        parser.add_argument("--ui", metavar="ADDR",
                            help="serve the web dashboard on ADDR, e.g. 127.0.0.1:8780 (port 0 picks one)")
        token = parser.add_mutually_exclusive_group()
        token.add_argument("--token", help="bearer token for MCP over HTTP, --metrics and the dashboard "
                                           "(required off loopback; every local account sees it in the process "
                                           "list: prefer --token-file or DCCFLOW_TOKEN)")
        token.add_argument("--token-file", metavar="PATH",
                           help="read --token from this file (its first line), so it stays out of the process list; "
                                "without --token or --token-file, the DCCFLOW_TOKEN environment variable is used")
        parser.add_argument("--ui-session-idle", metavar="AGE", type=parse_secs,
                            help="end a dashboard sign-in unused this long (default 12h)")
        parser.add_argument("--ui-session-max", metavar="AGE", type=parse_secs,
                            help="end a dashboard sign-in this long after it, used or not (default 7d)")
        parser.add_argument("--mcp-max-body-bytes", type=int, metavar="N",
                            help="cap MCP HTTP request bodies at N bytes (default 8 MiB; larger ones get 413)")
        parser.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                            help="a browser origin (https://host[:port], or *) allowed to call MCP over HTTP; repeat "
                                 "for several (other Origins get 403)")
        parser.add_argument("--mcp-max-sessions", type=int, metavar="N",
                            help="cap the MCP HTTP sessions open at once (default 1000)")
        parser.add_argument("--mcp-session-idle-secs", type=float, metavar="SECS",
                            help="end MCP HTTP sessions idle this long (default 1800)")
        parser.add_argument("--allow-unsigned-webhooks", action="store_true",
                            help="serve webhook schedules without secret_env on a non-loopback --webhooks address")
        parser.add_argument("--metrics", metavar="ADDR",
                            help="serve Prometheus metrics on http://ADDR/metrics, e.g. 127.0.0.1:9464")
        parser.add_argument("--retention", metavar="AGE", type=parse_retention,
                            help="prune runs that ended more than AGE ago, at start and hourly (default 30d; "
                                 "forever keeps them); expired idempotency entries are purged too")
        add_tools_argument(parser)
        add_remotes_argument(parser)
        add_config_argument(parser)
        parser.add_argument("--worker-threads", type=int, default=4,
                            metavar="N", help="threads for worker-lane tools (default 4)")
        add_lease_argument(parser)
        parser.add_argument("--close-grace-secs", type=float, default=None, metavar="SECS",
                            help="with --db postgresql://...: on SIGTERM, wait this long (default 10) for the tools "
                                 "running here before handing their runs to the other engines")
        add_db_argument(parser)
        add_resource_argument(parser)

    def owns_stdout(self, args: argparse.Namespace) -> bool:  # runs tools here (Context.own_stdout)
        return bool(args.mcp != "stdio")  # MCP over stdio writes its protocol to fd 1

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        stop = threading.Event()
        token = args_token(args, ctx)
        started = time.time()  # fires from here on are this server's (catch-up fires included)
        with open_engine(args) as engine:
            load_tools(engine, args.tools)
            names = register_dir(engine, args.workflows, ctx)
            if args.worker_threads > 0:
                engine.serve_tools(workers=args.worker_threads)
            info: Any = serve_schedules(engine, ctx, args.schedules, webhooks=args.webhooks, mcp=args.mcp,
                                        ui=args.ui, token=token,
                                        ui_session_idle_secs=args.ui_session_idle,
                                        ui_session_max_secs=args.ui_session_max,
                                        mcp_max_body_bytes=args.mcp_max_body_bytes,
                                        allowed_origins=args.allowed_origin,
                                        allow_unsigned_webhooks=args.allow_unsigned_webhooks,
                                        mcp_max_sessions=args.mcp_max_sessions,
                                        mcp_session_idle_secs=args.mcp_session_idle_secs,
                                        retention=args.retention, metrics=args.metrics)
            out = ctx.err if args.mcp == "stdio" else ctx.out  # stdout belongs to MCP over stdio
            # Before the ready line: a supervisor may stop the server as soon as it reads it.
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            out.write("serving %d workflow(s), %d schedule(s)" % (len(names), info.get("schedules", 0)))
            if info.get("retention") is not None:
                out.write("; %s" % describe_retention(info["retention"]))
            if info.get("webhooks_addr"):
                out.write("; webhooks on http://%s" % info["webhooks_addr"])
            if info.get("mcp_url"):
                out.write("; MCP on %s" % info["mcp_url"])
            if info.get("metrics_addr"):
                out.write("; metrics on http://%s/metrics" % info["metrics_addr"])
            if info.get("ui_url"):
                out.write("; dashboard on %s" % info["ui_url"])
            out.write("\n")
            out.flush()
            if info.get("ui_url"):  # a line of its own, for scripts and tests to read
                ctx.err.write("ui: %s\n" % info["ui_url"])
                ctx.err.flush()
            reachable = approvals_reachable(args)
            engine.on_event(lambda ev: log_run_event(engine, ev, out, reachable))
            if info.get("schedules", 0):
                threading.Thread(target=log_failed_fires, args=(engine, stop, out, started, reachable), daemon=True,
                                 name="dcc-flow-failed-fires").start()
            if args.mcp == "stdio":
                threading.Thread(target=stop_when_stdio_ends, args=(engine, stop, out), daemon=True,
                                 name="dcc-flow-mcp-stdio").start()
            engine.drive_forever(stop)
            engine.stop_serving()
        return 0


def args_token(args: argparse.Namespace, ctx: Context) -> Optional[str]:
    """The token of ``--token-file``, ``--token`` or else the ``DCCFLOW_TOKEN`` environment variable
    (stripped; empty = none). ``--token`` works, with a note on stderr: every local account reads
    a command line (``ps``)."""
    if args.token_file:
        return read_token(args.token_file)
    if args.token is not None:
        ctx.eprint("note: --token is visible to every account of this machine in the process list; "
                   "prefer --token-file PATH or the DCCFLOW_TOKEN environment variable")
        return str(args.token)
    return os.environ.get("DCCFLOW_TOKEN", "").strip() or None


_SECS = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([smhdw]))+\s*$", re.I)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_secs(text: str) -> float:
    """An age (``12h``, ``7d``, ``90m``, ``1h30m``) or plain seconds, as seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    if not _SECS.match(text):
        raise argparse.ArgumentTypeError("%r is not an age; write a number and a unit, e.g. 12h, 7d, 90m" % text)
    return float(sum(float(n) * _UNIT[u.lower()] for n, u in re.findall(r"(\d+(?:\.\d+)?)\s*([smhdw])", text, re.I)))


def read_token(path: str) -> str:
    """The token of ``--token-file``: the file's first line, stripped; an empty or unreadable file
    is a ``CliError`` naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.readline().strip()
    except OSError as exc:
        raise CliError("--token-file %s: %s" % (path, exc.strerror or exc)) from None
    if not text:
        raise CliError("--token-file %s is empty; write the token on its first line" % path)
    return text


def parse_retention(text: str) -> str:
    """``--retention``'s value: an age (``30d``, ``12h``, ``2w``) or ``forever``/``off``/``0``."""
    if text.strip().lower() in ("forever", "off", "never", "none", "0"):
        return text.strip().lower()
    return parse_age(text)


def describe_retention(info: Dict[str, Any]) -> str:
    """``ended runs kept 30d`` / ``ended runs kept forever``, from serve's retention report."""
    secs = float(info.get("keep_secs") or 0)
    if secs <= 0:
        return "ended runs kept forever"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size and secs % size == 0:
            return "ended runs kept %d%s" % (secs // size, unit)
    return "ended runs kept %gs" % secs


def stop_when_stdio_ends(engine: Any, stop: threading.Event, out: Any) -> None:
    """Set ``stop`` once the MCP client closes our standard input: the host that started this
    process stopped it, and it ends as on SIGTERM (runs in flight become interrupted)."""
    while not stop.is_set():
        try:
            status = engine.serve_status(timeout=1.0)
        except Exception:  # the engine closed: the process is stopping anyway
            return
        if status.get("mcp_stdio") == "ended":
            stop.set()
            why = status.get("mcp_stdio_error") or "the client closed standard input"
            try:
                out.write("%s MCP stdio stream ended (%s): stopping\n" % (time.strftime("%H:%M:%S"), why))
                out.flush()
            except (OSError, ValueError):  # the host may have closed our stderr too
                pass
            return


#: How often ``serve`` looks for schedule fires that failed to start a run (seconds).
FAILED_FIRES_EVERY = 2.0


def log_failed_fires(engine: Any, stop: threading.Event, out: Any, since: float, reachable: bool = True,
                     every: float = FAILED_FIRES_EVERY) -> None:
    """Until ``stop``: one line per schedule fire that failed to start its run (a bad input, a
    workflow gone) fired at ``since`` (a ``time.time()``) or later — such a fire starts no run, so
    no run event tells of it; its record is in the fire history (``dcc-flow schedules
    --history``). The history's newest 200 fires are read every ``every`` seconds and a failed
    one not printed yet is printed, whatever order the fires were recorded in (a fire's time is
    taken before its slow part). On a shared PostgreSQL database the history is every engine's:
    each ``serve`` prints the failed fires of all. A read that fails (the database away) is tried
    again at the next interval; the engine closing ends the thread. Fires that fail in the last
    interval before ``stop`` may go unprinted (they are in the history)."""
    printed: Set[Any] = set()  # the identities of the failed fires of the last read (all printed)
    hint = "; see dcc-flow schedules --history" if reachable else ""
    while not stop.wait(every):
        try:
            fires = engine.schedule_fires(limit=200)
        except EngineClosedError:
            return
        except DccFlowError:
            continue  # a store error: the next read may work
        lines = []
        seen = set()
        for fire in reversed(fires):  # oldest first
            if fire.get("kind") != "failed":
                continue
            key = (fire.get("schedule_id"), fire.get("fired_at"), fire.get("scheduled_at"), fire.get("delivery_id"))
            seen.add(key)
            at = _parse_time(fire.get("fired_at"))
            if at is None or at < since or key in printed:
                continue
            lines.append("%s schedule %s: fire failed, no run started (%s): %s%s" % (
                time.strftime("%H:%M:%S", time.localtime(at)), fire.get("schedule_id"),
                fire.get("reason") or "failed", fire.get("message") or "", hint))
        printed = seen  # a fire that left the newest 200 is never read again
        if len(lines) > 20:
            more = "%s %d more schedule fires failed%s" % (time.strftime("%H:%M:%S"), len(lines) - 20, hint)
            lines = lines[:20] + [more]
        try:
            for line in lines:
                out.write(plain(line) + "\n")
            if lines:
                out.flush()
        except (OSError, ValueError):  # the host closed our stream (MCP over stdio): nowhere to write
            return


def log_run_event(engine: Any, ev: Dict[str, Any], out: Any, reachable: bool = True) -> None:
    """One line per run start, approval request, pause, unpause, stall and end: what a TD tails at 3 a.m.
    ``reachable`` False (an in-memory engine): ``dcc-flow approve`` cannot reach the run, so the
    approval line points to this process's own doors (the dashboard, MCP) instead."""
    kind, run_id = ev.get("type"), ev.get("run_id", "")
    progress = ev.get("progress") or {}
    done = "%s/%s steps" % (progress.get("completed", 0), progress.get("total", 0))
    if kind == "workflow_started":
        status = engine.get_status(run_id)
        line = "run %s started: %s" % (run_id, status.name or "(unnamed)")
    elif kind == "approve_requested":
        if reachable:
            how = "dcc-flow approve %s %s" % (run_id, ev.get("step_key"))
        else:
            how = ("answer it in this process's dashboard (--ui) or over its MCP (--mcp): dcc-flow approve "
                   "cannot reach an in-memory engine")
        line = "run %s waits for approval of %s (%s)" % (run_id, ev.get("step_key"), how)
    elif kind in ("run_paused", "run_unpaused"):
        line = pause_line(ev)
    elif kind == "stall_detected":
        line = "run %s stalled: no progress for a while (%s)" % (run_id, done)
    elif kind == "workflow_terminal":
        line = "run %s %s (%s)" % (run_id, ev.get("status"), done)
    else:
        return
    out.write("%s %s\n" % (time.strftime("%H:%M:%S"), plain(line)))
    out.flush()


COMMAND = ServeCommand()
