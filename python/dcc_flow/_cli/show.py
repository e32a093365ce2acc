"""``dcc-flow show RUN``: a run's step timeline, with errors and their tracebacks."""

import argparse
import json
from typing import Any, Dict, List, Optional, Set

from ._assets import cache_source, env_text, file_line
from ._base import CliError, Command, Context, one_line, plain
from ._engine import (
    RUN_HELP,
    add_db_argument,
    elapsed,
    format_duration,
    format_log,
    format_progress,
    format_waiting,
    open_engine,
    resolve_run,
)

__all__ = ["COMMAND"]

#: Output lines ``show`` prints per step by default (the last ones).
SHOW_LINES = 20


class ShowCommand(Command):
    name = "show"
    summary = "show a run's step timeline, durations, errors and tracebacks"
    description = (
        "Show every step instance of run RUN (foreach iterations included) in the order they started,\n"
        "with status, attempts, duration and the pool worker (POOL/PID) that ran the last attempt, the\n"
        "progress its tool reported last, the last lines its tool printed or logged ('out|' stdout,\n"
        "'err|' stderr, 'log|' current_call().log(), 'log LEVEL LOGGER|' a logging record), and the\n"
        "error and traceback of each failed step. A workflow step's child run is shown under it, its\n"
        "steps indented (sub-workflows, docs/reference/spec.md \"workflow\"). The run's resumes (when, by whom,\n"
        "the steps forced) are listed under its first line.\n"
        "\n"
        "With STEP (an instance key: 'export', 'per_shot[2].render'), only that step is shown, with\n"
        "its rendered arguments and every attempt it made (start, duration, worker, outcome, error), with\n"
        "the environment it ran in and the files it read and wrote (role, state, short hash, path);\n"
        "--attempts lists the attempts under every step. A step served from the content cache (cache:)\n"
        "says from which run, step and attempt."
    )
    examples = (("the timeline of a run", "dcc-flow show r01a2059aa058768e2436c40aa9aa"),
                ("every output line kept", "dcc-flow show --lines 0 r01a2059aa058768e2436c40aa9aa"),
                ("what item 7 got, and each attempt",
                 "dcc-flow show r01a2059aa058768e2436c40aa9aa 'per_item[7].render'"),
                ("every step's attempts", "dcc-flow show --attempts r01a2059aa058768e2436c40aa9aa"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        parser.add_argument("step", metavar="STEP", nargs="?",
                            help="show only this step instance, with its arguments and attempts")
        parser.add_argument("--attempts", action="store_true",
                            help="list the attempts (start, duration, worker, outcome, error, args) under every step")
        parser.add_argument("--lines", type=int, default=SHOW_LINES, metavar="N",
                            help="output lines shown per step, the last ones (default %d; 0 = every line kept)"
                                 % SHOW_LINES)
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            result = engine.get_status(run_id, all_steps=True)
            if args.step is not None and not any(s.key == args.step for s in result.steps):
                raise CliError("run %s has no step instance %s; the keys are listed by: dcc-flow show %s"
                               % (result.run_id, plain(args.step), result.run_id))
            ctx.print("run %s (%s): %s, %d/%d steps" % (result.run_id, plain(result.name or "unnamed"),
                                                        result.status.value, result.progress[0], result.progress[1]))
            if result.parent_run_id:
                ctx.print("  child of run %s, step %s" % (result.parent_run_id, result.parent_step_key))
            for r in result.resumes:
                ctx.print("  " + format_resume(r))
            if args.step is not None:
                result.steps = (result.step(args.step),)
                _print_steps(engine, ctx, result, args.lines, "  ", set(), attempts=True, full_args=True)
                return 0
            _print_steps(engine, ctx, result, args.lines, "  ", set(), attempts=args.attempts)
        if result.error:
            ctx.print("error: %s" % plain(one_line(result.error.get("message", ""))))
        return 0


#: How deep ``show`` nests child runs (the engine's max_depth ceiling).
MAX_NESTING = 64


def format_resume(r: Dict[str, Any]) -> str:
    """One line of a run's resume history: ``resumed AT by WHO, forced: a, b``."""
    text = "resumed %s" % _when(r.get("at"))
    if r.get("by"):
        text += " by %s" % plain(r["by"])
    if r.get("forced"):
        text += ", forced: %s" % plain(", ".join(str(f) for f in r["forced"]))
    if r.get("on_failure_only"):
        text += ", on_failure steps only"
    return text


#: The characters of an args summary in ``show --attempts``.
ARGS_SUMMARY = 100


def args_text(args: Any, limit: Optional[int]) -> str:
    """An attempt's rendered args as one line of compact JSON, cut to ``limit`` characters (None:
    whole) with ``…``."""
    text = plain(json.dumps(args, ensure_ascii=False, separators=(", ", ": "), sort_keys=True))
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


def _print_attempts(ctx: Context, s: Any, pad: str, full_args: bool) -> None:
    """The attempts of a step, one line each (number, start, duration, worker, outcome, error's
    first line), then its args (a summary, or whole for one step)."""
    if not s.attempts:
        return
    if s.args is not None:
        ctx.print("%sargs %s" % (pad, args_text(s.args, None if full_args else ARGS_SUMMARY)))
    dropped = s.attempts_dropped
    previous_args = s.args
    previous_env: Any = None
    for i, a in enumerate(s.attempts):
        if dropped and i > 0 and a.attempt - s.attempts[i - 1].attempt > 1:
            ctx.print("%s… %d attempt%s not kept" % (pad, dropped, "" if dropped == 1 else "s"))
        where = a.worker or ""
        if a.pid:
            where = (where + " " if where else "") + "pid %d%s" % (a.pid, "@" + a.host if a.host else "")
        line = "%s#%-3d %-23s %8s  %-11s %s" % (pad, a.attempt, _when(a.started_at),
                                                 format_duration(elapsed(a.started_at, a.finished_at)),
                                                 a.status.value, plain(where))
        if a.error:
            kind, message = a.error.get("kind") or "error", plain(one_line(a.error.get("message") or ""))
            first = message if message.startswith(kind + ":") else "%s: %s" % (kind, message)
            line = line.rstrip() + "  " + (first if len(first) <= 160 else first[:159] + "…")
        if a.exit:
            line += " (%s)" % plain(a.exit)
        ctx.print(line.rstrip())
        if full_args and a.error:
            for tline in (a.error.get("trace") or "").rstrip().splitlines():
                ctx.print("%s     | %s" % (pad, plain(tline)))
        if a.args is not None and a.args != previous_args:
            ctx.print("%s     args %s" % (pad, args_text(a.args, None if full_args else ARGS_SUMMARY)))
        if a.env and a.env != previous_env:
            ctx.print("%s     env  %s" % (pad, env_text(a.env)))
        previous_env = a.env or previous_env
        _print_files(ctx, a.files, pad + "     ")


#: The files ``show`` prints under an attempt (``dcc-flow lineage`` and ``Engine.get_status`` have all).
FILES_SHOWN = 20


def _print_files(ctx: Context, files: List[Dict[str, Any]], pad: str) -> None:
    """The files an attempt read and wrote, one line each (role, state, short hash, path), the
    first ``FILES_SHOWN`` then a line counting the others."""
    for f in files[:FILES_SHOWN]:
        ctx.print(pad + file_line(f))
    if len(files) > FILES_SHOWN:
        more = len(files) - FILES_SHOWN
        ctx.print("%s… %d more file%s" % (pad, more, "" if more == 1 else "s"))


def _when(rfc3339: Optional[str]) -> str:
    """``2026-11-29 01:19:59.459`` (UTC, milliseconds) of an RFC 3339 time; ``-`` for None."""
    if not rfc3339:
        return "-"
    day, _, rest = rfc3339.partition("T")
    clock = rest.rstrip("Z")
    if "." in clock:
        whole, _, frac = clock.partition(".")
        clock = whole + "." + (frac + "000")[:3]
    return plain(day + " " + clock)


def _print_steps(engine: Any, ctx: Context, result: Any, lines: int, pad: str, shown: Set[str],
                 attempts: bool = False, full_args: bool = False) -> None:
    """The step lines of a run, each workflow step followed by its child run, indented; with
    ``attempts``, each step's attempts under it."""
    shown.add(result.run_id)
    width = max([len(s.key) for s in result.steps] + [4])
    # A step a crashed process left behind has no end time; it ended, at the latest, with its run.
    run_end = result.raw.get("finished_at") if result.terminal else None
    inner = pad + "    "
    cache_from: Dict[str, Dict[str, Any]] = {}
    for s in result.steps:
        flags = (" cached" if s.cached else "") + (" on worker " + plain(s.worker) if s.worker else "")
        # The attempt log numbers attempts across resumes; the step record counts this execution's.
        number = s.attempts[-1].attempt if s.attempts else s.attempt
        attempt = "attempt %d" % number if number else ""  # foreach, parallel, approve: no attempts
        took = elapsed(s.started_at, s.finished_at or run_end)
        ctx.print("%s%s  %-16s %-10s  %8s%s" % (pad, s.key.ljust(width), s.status.value, attempt,
                                               format_duration(took), flags))
        if s.cached and s.attempt == 0:
            source = _cache_sources(engine, result.run_id, cache_from).get(s.key)
            if source:
                ctx.print("%sfrom the cache: run %s, step %s, attempt %s" % (
                    inner, plain(source.get("run_id")), plain(source.get("step_key")), source.get("attempt")))
        if attempts:
            _print_attempts(ctx, s, inner, full_args)
        if s.waiting:  # waiting_resources: what for, its place in the queue, since when
            ctx.print("%s%s, since %s" % (inner, plain(format_waiting(s.waiting)), _when(s.waiting.get("since"))))
        elif s.progress:
            ctx.print("%sprogress %s" % (inner, plain(format_progress(s.progress))))
        _print_logs(ctx, s.logs, s.logs_dropped, lines, inner)
        if s.error:
            kind, message = s.error.get("kind") or "error", plain(one_line(s.error.get("message") or ""))
            ctx.print(inner + (message if message.startswith(kind + ":") else "%s: %s" % (kind, message)))
            for line in (s.error.get("trace") or "").rstrip().splitlines():
                ctx.print(inner + "| " + line)
        if s.child_run_id and s.child_run_id not in shown and len(pad) < 4 * MAX_NESTING:
            try:
                child = engine.get_status(s.child_run_id, all_steps=True)
            except Exception as exc:  # noqa: BLE001 - pruned or unreadable: say so and go on
                ctx.print("%schild run %s: %s" % (inner, s.child_run_id, plain(one_line(str(exc)))))
                continue
            done, total = child.progress
            ctx.print("%schild run %s (%s): %s, %d/%d steps"
                      % (inner, child.run_id, plain(child.name or "unnamed"), child.status.value, done, total))
            _print_steps(engine, ctx, child, lines, inner, shown, attempts=attempts)


def _cache_sources(engine: Any, run_id: str, found: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The content-cache source of each step instance of run ``run_id`` a cache hit completed
    (``run_id``, ``step_key``, ``attempt``: its ``step_exit`` detail), read from the run's
    events once into ``found``."""
    if not found:
        found[""] = {}  # read: an empty run reads once too
        for ev in engine.events(run_id=run_id, timeout=0):
            detail = ev.get("detail")
            if ev.get("type") == "step_exit" and isinstance(detail, dict) and detail.get("cached"):
                source = cache_source(detail)
                if source:
                    found[str(ev.get("step_key"))] = source
    return found


def _print_logs(ctx: Context, logs: List[Dict[str, Any]], dropped: int, limit: int, pad: str = "      ") -> None:
    """A step's output lines, indented under it: the last ``limit`` (all when 0), after a line
    counting the others; an ``attempt N:`` line where the attempt changes, when several wrote."""
    shown = logs[-limit:] if limit > 0 else logs
    hidden = len(logs) - len(shown) + dropped
    if hidden:
        ctx.print("%s… %d more line%s" % (pad, hidden, "" if hidden == 1 else "s"))
    several = len({e.get("attempt") for e in logs}) > 1
    last = None
    for e in shown:
        if several and e.get("attempt") != last:
            last = e.get("attempt")
            ctx.print("%sattempt %s:" % (pad, last))
        prefix, text = log_prefix(e), format_log(e) if e.get("stream") == "log" else str(e.get("text", ""))
        for line in text.split("\n") if "\n" in text else (text,):  # a logged traceback: each line prefixed
            ctx.print("%s%s| %s" % (pad, plain(prefix), plain(line)))


def log_prefix(entry: Dict[str, Any]) -> str:
    """What ``show`` puts before an output line's ``|``: ``out`` (stdout), ``err`` (stderr),
    ``log`` (``current_call().log()``) or ``log LEVEL LOGGER`` (a ``logging`` record of an
    in-process tool: ``log WARNING studio.export``)."""
    stream = entry.get("stream")
    if stream != "log":
        return "err" if stream == "stderr" else "out"
    level, logger = entry.get("level"), entry.get("logger")
    return " ".join(["log"] + [str(v) for v in (level, logger) if v])


COMMAND = ShowCommand()
