"""``dcc-flow run FILE``: run a workflow with its tools, showing progress."""

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

from .._dryrun import plan_lines, summary_line, warning_lines
from .._errors import DccFlowError
from .._spec import WorkflowSpec
from .._suggest import file_hint
from ._approvals import (
    approvals_reachable,
    cancel_unreachable_approval,
    refuse_unreachable_approvals,
    run_tree_events,
)
from ._base import CliError, Command, Context, UsageError, plain
from ._engine import (
    _import,
    add_config_argument,
    add_db_argument,
    add_lease_argument,
    add_remotes_argument,
    add_tools_argument,
    error_with_fix,
    exit_code,
    format_duration,
    format_log,
    format_progress,
    format_waiting,
    load_tools,
    load_workflow,
    open_engine,
    parse_inputs,
)
from ._resources import add_resource_argument
from ._specfile import format_problem, is_spec_file, load_spec, plural
from ._workers import add_workers_arguments, plain_thread, serial_warnings, workers_config

__all__ = ["COMMAND", "RunCommand", "Progress", "follow", "add_follow_arguments"]


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -1000 <= value <= 1000:
        raise argparse.ArgumentTypeError("%r: give a whole number from -1000 to 1000 (higher is served first)" % text)
    return value


class Progress:
    """Renders engine events: one line redrawn in place on a terminal, JSON lines otherwise."""

    def __init__(self, ctx: Context, run_id: str, name: str, tty: bool, auto_approve: bool = False) -> None:
        self.ctx, self.run_id, self.name, self.tty = ctx, run_id, name, tty
        self.auto_approve = auto_approve
        self.started = time.monotonic()
        self.completed = self.total = 0
        self.current = ""
        self.retries = 0
        self.waiting = ""
        self.paused = False
        self.lock = threading.Lock()
        self.width = 0
        # foreach id -> [iteration step instances running, done]; keys look like "per_file[3].export"
        self.loops: Dict[str, List[int]] = {}

    def line(self) -> str:
        parts = ["%s %s" % (self.name or "run", self.run_id[:12]), "%d/%d steps" % (self.completed, self.total)]
        for loop, (running, done) in self.loops.items():
            if running or not self.waiting:
                parts.append("%s: %d done, %d running" % (loop, done, running))
        if self.paused:
            parts.append("paused (dcc-flow unpause %s)" % self.run_id)
        elif self.waiting:
            parts.append("waiting for approval of %s" % self.waiting)
        elif self.current:
            parts.append(self.current)
        if self.retries:
            parts.append("%d retr%s" % (self.retries, "y" if self.retries == 1 else "ies"))
        parts.append(format_duration(time.monotonic() - self.started))
        return " · ".join(parts)

    def event(self, ev: Dict[str, Any]) -> None:
        if ev.get("run_id") != self.run_id:  # a sub-workflow's run: only its approvals show
            if ev.get("type") == "approve_requested" and self.tty and not self.auto_approve:
                with self.lock:
                    self._note("%s (sub-workflow run %s) waits for approval: dcc-flow approve %s %s"
                               % (ev.get("step_key"), ev.get("run_id"), ev.get("run_id"), ev.get("step_key")))
                    self._draw()
            return
        with self.lock:
            progress = ev.get("progress") or {}
            self.completed = int(progress.get("completed", self.completed))
            self.total = int(progress.get("total", self.total))
            kind, key = ev.get("type"), ev.get("step_key") or ""
            loop = key.partition("[")[0] if "[" in key else ""
            if loop and kind in ("step_enter", "step_exit") and ev.get("attempt", 1) in (None, 1):
                counts = self.loops.setdefault(loop, [0, 0])
                if kind == "step_enter":
                    counts[0] += 1
                else:
                    counts[0], counts[1] = max(0, counts[0] - 1), counts[1] + 1
            if kind == "step_enter":
                attempt = int(ev.get("attempt") or 1)
                self.current = key + (" (attempt %d)" % attempt if attempt > 1 else "")
            elif kind == "step_progress":  # a long tool says how far it is: "export 37/120 caching frames…"
                detail = ev.get("detail") or {}
                if ev.get("status") == "waiting_resources" and detail.get("waiting"):  # "cook waiting for gpu ×2"
                    self.current = "%s %s" % (key, format_waiting(detail["waiting"]))
                else:
                    self.current = ("%s %s" % (key, format_progress(detail))).strip()
            elif kind == "step_log" and self.tty:
                detail = ev.get("detail") or {}
                for entry in detail.get("lines") or ():
                    self._note("%s| %s" % (key, format_log(entry)))
                if detail.get("dropped"):
                    self._note("%s| … %d more lines not shown here (logged too fast; dcc-flow show %s has them)"
                               % (key, detail["dropped"], self.run_id))
            elif kind == "step_retry":
                self.retries += 1
            elif kind == "approve_requested":
                self.waiting = key
                if self.tty and not self.auto_approve:
                    self._note("%s waits for approval: dcc-flow approve %s %s   (or --deny --reason TEXT)"
                               % (key, self.run_id, key))
            elif kind == "approve_resolved":
                self.waiting = ""
            elif kind in ("run_paused", "run_unpaused"):
                self.paused = kind == "run_paused"
                if self.tty:
                    self._note(pause_line(ev))
            if not self.tty:
                self.ctx.print(json.dumps(ev, sort_keys=True))
                return
            self._draw()

    def tick(self) -> None:
        """Redraw (on a terminal) so the elapsed time moves while a long step runs."""
        if self.tty:
            with self.lock:
                self._draw()

    def _note(self, text: str) -> None:
        """Print a line that stays, above the progress line (which the next draw puts back)."""
        self.ctx.write("\r" + " " * self.width + "\r")
        self.width = 0
        self.ctx.print(plain(text))

    def _draw(self) -> None:
        text = plain(self.line())
        pad = max(0, self.width - len(text))
        self.width = len(text)
        self.ctx.write("\r" + text + " " * pad)

    def finish(self) -> None:
        if self.tty:
            with self.lock:
                self.ctx.write("\r" + " " * self.width + "\r")


class RunCommand(Command):
    name = "run"
    summary = "run a workflow and its tools, with live progress"
    description = (
        "Run the workflow in FILE (YAML or JSON), or the catalog workflow NAME found in --workflows,\n"
        "with the tools of --tools. On a terminal a progress line shows steps done, the running step\n"
        "(with the progress its tool reports: 'export 37/120 caching frames…'), retries and elapsed\n"
        "time, and the lines tools log are printed above it; otherwise every event is printed as one\n"
        "JSON line (step_progress and step_log included). The run is kept\n"
        "in the database (--db), so status, show and resume work on it afterwards."
    )
    examples = (
        ("run a spec with tools from a module file",
         "dcc-flow run examples/vendor_intake.yaml --tools examples/vendor_intake_tools.py --input date=2026-11-22"),
        ("inputs from a JSON file, approvals granted automatically (CI, demos)",
         "dcc-flow run flow.yaml --inputs-json inputs.json --approve-all"),
        ("a workflow by name from a folder of specs, in memory",
         "dcc-flow run vendor_intake --workflows examples/ --db :memory: --approve-all"),
        ("a spec written by another tool, read from standard input",
         "generate_flow.py | dcc-flow run - --tools tools.py"),
        ("a foreach's plain-function tools 4 calls at a time, each in its own worker process",
         "dcc-flow run batch.yaml --tools tools.py --input folder=scenes --workers 4"),
        ("the steps it would run and their arguments, calling no tool (CI); outputs from fixtures",
         "dcc-flow run examples/vendor_intake.yaml --input date=2026-11-24 --dry-run --fixtures fixtures.json"),
    )
    exit_codes = (
        "0 completed, 1 failed (or a bad spec, input or tool module), 2 usage error, "
        "3 cancelled or interrupted, 130 Ctrl-C; with --dry-run: 0 the dry run completed, 1 it failed "
        "(a denied approval, a foreach over a non-list) or the spec or an input is bad"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", metavar="FILE|NAME|FILE.py:FLOW",
                            help="a spec file, a workflow name found in --workflows, or a @workflow "
                                 "(flows.py:intake or package.module:intake)")
        parser.add_argument("-i", "--input", action="append", default=[], metavar="KEY=VALUE",
                            help="an input (repeatable); JSON values are parsed (3, true, [1,2]), others are strings")
        parser.add_argument("--inputs-json", metavar="FILE", help="inputs from a JSON object file (--input wins)")
        add_tools_argument(parser)
        add_remotes_argument(parser)
        add_config_argument(parser)
        parser.add_argument("--workflows", metavar="DIR", help="a folder of spec files, registered by name")
        add_workers_arguments(parser)
        add_follow_arguments(parser)
        parser.add_argument("--dry-run", action="store_true",
                            help="call no tool and record nothing: print the steps in the order they would run, "
                                 "with the arguments each would receive (tools need not be registered)")
        parser.add_argument("--fixtures", metavar="FILE.json",
                            help="--dry-run: the outputs of tool steps, a JSON object keyed by step key "
                                 "(per_file[1].export), step id or tool name, most specific first")
        parser.add_argument("--deny", action="append", default=[], metavar="STEP",
                            help="--dry-run: deny this approval (step key or id; repeatable); the others are "
                                 "approved automatically")
        add_db_argument(parser)
        add_lease_argument(parser)
        add_resource_argument(parser)
        parser.add_argument("--priority", metavar="N", type=_priority,
                            help="the run's priority when its steps wait for scarce resources, -1000 to 1000, higher "
                                 "first (default: the spec's priority; docs/guide/resources.md)")

    def owns_stdout(self, args: argparse.Namespace) -> bool:  # it runs tools (Context.own_stdout)
        return True

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        inputs = parse_inputs(args.input, args.inputs_json)
        if not args.dry_run and (args.fixtures or args.deny):
            raise UsageError("--fixtures and --deny need --dry-run", prog="dcc-flow run")
        fixtures = read_fixtures(args.fixtures) if args.dry_run else None
        # A dry run records nothing: it only looks at the database (read-only, beside an owner;
        # in memory when there is no file yet), so it creates no file and works while serve runs.
        config = workers_config(args, _import)  # --workers N: a pool of worker processes
        with open_engine(args, config=config, read_only=args.dry_run) as engine:
            plain: Set[str] = set()
            load_tools(engine, args.tools, plain_thread(args), plain)
            register_dir(engine, args.workflows, ctx)
            target = args.target
            flow = None if is_spec_file(target) else load_workflow(target)
            if flow is not None:
                spec: Any = flow
            elif is_spec_file(target):
                spec = read_valid_spec(target, ctx)
            elif args.workflows:
                spec = target
            else:
                raise CliError("%s: no such file%s (give a spec file, or a workflow name with --workflows DIR)"
                               % (target, file_hint(target)))
            if args.dry_run:
                return dry_run(engine, spec, inputs, fixtures, args, ctx)
            refuse_unreachable_approvals(args, spec, target)
            if args.worker_threads > 0:
                engine.serve_tools(workers=args.worker_threads)
            # The routes the engine has: --workers' and those of --config's tool_pools.
            routes = {"tool_pools": engine._tool_pools}
            for line in serial_warnings(engine, spec, routes, args.worker_threads, plain):
                ctx.warning(line)
            after = engine.last_event_seq()
            try:
                run = engine.submit(spec, inputs, priority=args.priority)
            except DccFlowError as exc:
                fixed = error_with_fix(exc, args)
                if fixed is not None:
                    raise fixed from None
                raise
            return follow(engine, run, after, args, ctx)


def read_fixtures(path: Optional[str]) -> Dict[str, Any]:
    """The --fixtures file: a JSON object (``{}`` without the option)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise CliError("--fixtures %s: %s" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise CliError("--fixtures %s: not JSON: %s" % (path, exc)) from None
    if not isinstance(data, dict):
        raise CliError("--fixtures %s: want a JSON object of step key, step id or tool name to output; got %s"
                       % (path, type(data).__name__))
    return data


def dry_run(engine: Any, spec: Any, inputs: Dict[str, Any], fixtures: Optional[Dict[str, Any]],
            args: argparse.Namespace, ctx: Context) -> int:
    """``run --dry-run``: the plan on stdout (one JSON document with --json), warnings on stderr."""
    result = engine.run(spec, inputs, dry_run=True, fixtures=fixtures or {},
                        approvals=dict.fromkeys(args.deny, False))
    if args.json:
        ctx.print(json.dumps(result.raw, ensure_ascii=False, sort_keys=True, indent=2))
    else:
        for line in plan_lines(result):
            ctx.print(line)
    for warning in warning_lines(result):
        ctx.warning(warning)
    if not args.json:
        ctx.print(summary_line(result))
    return 0 if result.ok else 1


def pause_line(ev: Dict[str, Any]) -> str:
    """"run R paused by ana: farm full (dcc-flow unpause R)", "run R unpaused by ana"."""
    detail, run_id = ev.get("detail") or {}, ev.get("run_id", "")
    paused = ev.get("type") == "run_paused"
    line = "run %s %s" % (run_id, "paused" if paused else "unpaused")
    if detail.get("by"):
        line += " by %s" % detail["by"]
    if detail.get("reason"):
        line += ": %s" % detail["reason"]
    return line + (" (dcc-flow unpause %s)" % run_id if paused else "")


def add_follow_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of commands that start a run and watch it to the end (run, resume)."""
    parser.add_argument("--approve-all", action="store_true", help="grant every approval at once")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="cancel the run after this long")
    parser.add_argument("--json", action="store_true", help="JSON lines even on a terminal")


def follow(engine: Any, run: Any, after_seq: int, args: argparse.Namespace, ctx: Context) -> int:
    """Run ``run``'s tools on this thread until it ends, showing its events after ``after_seq``
    (taken before the run started, so none is missed); print the result and return the exit code.
    With ``--approve-all`` every approval is granted as it opens; without it the progress line (or
    a JSON event) says which step waits, for ``dcc-flow approve``; on an in-memory engine, which
    ``dcc-flow approve`` cannot reach, the run is cancelled instead (``_approvals``)."""
    status = engine.get_status(run.run_id)
    reachable = approvals_reachable(args)
    progress = Progress(ctx, run.run_id, status.name, ctx.out_is_tty and not args.json,
                        args.approve_all or not reachable)  # no approve hint that cannot work

    def watch() -> None:
        for ev in run_tree_events(engine, run.run_id, after_seq):  # sub-workflow runs' approvals too
            progress.event(ev)
            if args.approve_all and ev.get("type") == "approve_requested":
                try:
                    engine.approve(ev["run_id"], ev["step_key"], True, reason="--approve-all", by="dcc-flow")
                except DccFlowError as exc:  # answered meanwhile (a timeout, another client)
                    ctx.error("--approve-all: %s" % exc)
            elif not reachable and ev.get("type") == "approve_requested":
                cancel_unreachable_approval(engine, run.run_id, ev.get("step_key") or "?", ctx)

    returned = threading.Event()  # run.wait() returned on this thread
    reported = threading.Lock()  # the result is reported once: by this thread, or by leave_stuck_tool
    # time.monotonic() when the run was seen to end: its events ended, or run.wait() returned.
    # The summary's time ends there, not after leave_stuck_tool's wait for a tool stuck in C.
    seen_end: List[float] = []

    def report(result: Any) -> int:
        return _report(engine, result, progress, ctx, reachable, min(seen_end) if seen_end else None)

    def watch_then_guard() -> None:
        watch()
        seen_end.append(time.monotonic())
        leave_stuck_tool(engine, run.run_id, returned, reported, report, ctx)

    watcher = threading.Thread(target=watch_then_guard, name="dcc-flow-progress", daemon=True)
    watcher.start()
    ended = threading.Event()

    def ticker() -> None:
        while not ended.wait(0.5):
            progress.tick()

    if progress.tty:
        threading.Thread(target=ticker, name="dcc-flow-ticker", daemon=True).start()
    try:
        result = run.wait(timeout=args.timeout, cancel_on_timeout=True)
        seen_end.append(time.monotonic())
        returned.set()
        watcher.join(timeout=5)  # it prints the events up to workflow_terminal
    finally:
        returned.set()
        ended.set()
    with reported:
        return report(result)


def _report(engine: Any, result: Any, progress: Progress, ctx: Context, reachable: bool,
            ended_at: Optional[float] = None) -> int:
    """Print a finished run's result: the summary on a terminal or the JSON result line, and the
    error line when it did not complete; return the exit code. The summary's time runs from when
    the command began following the run to ``ended_at`` (``time.monotonic()`` when the run was
    seen to end; None = now)."""
    took = (time.monotonic() if ended_at is None else ended_at) - progress.started
    progress.finish()
    instances = engine.get_status(result.run_id, all_steps=True)  # foreach iterations included
    summary = "run %s %s in %s: %s" % (result.run_id, result.status.value,
                                       format_duration(took), step_counts(instances))
    if progress.tty:
        ctx.print(summary)
    else:
        ctx.print(json.dumps({"type": "result", "run_id": result.run_id, "status": result.status.value,
                              "outputs": result.outputs, "error": result.error}, sort_keys=True))
    if not result.ok:
        err = result.error or {}
        where = "step %s: " % err["step_key"] if err.get("step_key") else ""
        reason = "%s%s" % (where, err.get("message") or result.status.value)
        # One line. On a terminal the summary is already on screen; elsewhere stderr gets all of it.
        head = "" if progress.tty else summary + "; "
        show = " (the steps: dcc-flow show %s)" % result.run_id if reachable else ""  # in memory: gone
        ctx.error("%s%s%s" % (head, reason, show))
    return exit_code(result)


#: How long ``dcc-flow run`` waits, once its run is terminal, while the main thread is inside one
#: of its tools that was told to stop and has not seen the exception (blocked in C: ``time.sleep``,
#: a DCC command), before it reports the result and exits without it. A tool that saw it (cleaning
#: up after ToolInterrupted) is waited for (docs/reference/python/tools.md, "Timeouts and cancel").
STUCK_TOOL_SECS = 3.0


def leave_stuck_tool(engine: Any, run_id: str, returned: threading.Event, reported: Any,
                     report: Callable[[Any], int], ctx: Context) -> None:
    """Once run ``run_id`` is terminal (its events ended): if the main thread stays blocked in one
    of its tools (interrupted, the exception not delivered) for STUCK_TOOL_SECS, report the
    result, say so, and end the process with the run's exit code; the tool cannot be stopped, and
    its late result would be dropped anyway. The run's record is already complete."""
    from .._interrupt import WATCHDOG

    main = threading.main_thread().ident
    if main is None:
        return
    since: Optional[float] = None
    while not returned.wait(0.1):
        if not WATCHDOG.blocked(main):
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= STUCK_TOOL_SECS:
            break
    else:
        return
    try:
        result = engine.get_status(run_id)
    except DccFlowError:
        return
    if not result.terminal or not reported.acquire(blocking=False):
        return
    if returned.is_set():  # it left the tool after all: the main thread reports
        reported.release()
        return
    code = report(result)
    ctx.error("a tool of run %s is still running on the main thread, blocked outside Python code where it cannot "
              "be interrupted; exiting without waiting for it (what it returns would be dropped)" % run_id)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


#: The order in which step_counts lists statuses: the good news first.
STATUS_ORDER = ("completed", "cached", "skipped", "failed", "cancelled", "interrupted", "waiting_approval",
                "waiting_resources", "retrying", "running", "pending")


def step_counts(result: Any) -> str:
    """"6 steps completed", or "4 completed, 1 failed, 1 skipped", for the step instances of a run."""
    counts: Dict[str, int] = {}
    for step in result.steps:
        counts[step.status.value] = counts.get(step.status.value, 0) + 1
    if not counts:
        return "%d/%d steps" % result.progress
    if len(counts) == 1:
        (status, n), = counts.items()
        return "%d step%s %s" % (n, "" if n == 1 else "s", status)
    order = {status: i for i, status in enumerate(STATUS_ORDER)}
    return ", ".join("%d %s" % (counts[s], s) for s in sorted(counts, key=lambda s: order.get(s, len(order))))


def read_valid_spec(path: str, ctx: Context) -> WorkflowSpec:
    """The spec in ``path``; when it is invalid, every problem as ``FILE:LINE:COLUMN: CODE: message``
    on stderr (as ``dcc-flow validate`` prints them) and a ``CliError``: nothing runs."""
    loaded = load_spec(path)
    if loaded.read_error is not None:
        raise CliError(loaded.read_error)
    if not loaded.ok or loaded.spec is None:
        for problem in loaded.errors:
            ctx.eprint(format_problem(loaded.label, problem))
        raise CliError("%s: invalid spec (%s); nothing was run" % (loaded.label, plural(len(loaded.errors), "error")))
    return loaded.spec


def register_dir(engine: Any, folder: Optional[str], ctx: Optional[Context] = None) -> List[str]:
    """Register every workflow spec file (.yaml, .yml, .json, not *.schedules.*) of folder.

    A file that is not a workflow spec at all (not a mapping, or a mapping with none of a spec's
    fields, such as a schedules.yaml or a remotes.json beside the specs) is skipped with a line on
    ``ctx``'s stderr; a spec with problems stops the command as before."""
    if not folder:
        return []
    if not os.path.isdir(folder):
        raise CliError("--workflows %s: no such folder" % folder)
    names = []
    for entry in sorted(os.listdir(folder)):
        if entry.endswith((".yaml", ".yml", ".json")) and ".schedules." not in entry:
            path = os.path.join(folder, entry)
            try:
                names.append(engine.register_workflow(path))
            except DccFlowError as exc:
                reason = _not_a_spec(exc)
                if reason is None:
                    raise
                if ctx is not None:
                    ctx.eprint("--workflows: skipping %s (%s)" % (path, reason))
    return names


def _not_a_spec(exc: DccFlowError) -> Optional[str]:
    """Why the file ``exc`` was raised for is not a workflow spec at all, or None when it is one
    with problems: its top level is not a mapping, or has no `steps` and only fields a spec does
    not have, none of them a likely typo of a spec field."""
    if exc.code == "not_a_mapping":
        return "not a mapping"
    problems = getattr(exc, "problems", None) or []
    codes = [p.code for p in problems]
    top_unknown = [p.path for p in problems if p.code == "unknown_field" and p.path and "." not in p.path
                   and "[" not in p.path]
    typo = any("did you mean" in (p.message or "") for p in problems)  # `stpes:` is a spec with a typo
    if "no_steps" in codes and top_unknown and len(top_unknown) == len(codes) - 1 and not typo:
        return "not a workflow spec: no `steps`, and %s %s" % (
            "fields" if len(top_unknown) > 1 else "field", ", ".join("`%s`" % f for f in sorted(top_unknown)))
    return None


COMMAND = RunCommand()
