"""``dcc-flow runs``: the run history as a table."""

import argparse
import json
import re

from .._errors import InvalidInputError, InvalidRequestError
from .._spec import StepStatus, WorkflowStatus
from ._base import Command, Context, UsageError
from ._engine import add_db_argument, elapsed, format_duration, missing_db, open_engine

__all__ = ["COMMAND"]

#: The error kinds ``--error-kind`` takes: the engine's (docs/reference/spec.md "Retry").
ERROR_KINDS = ("timeout", "transient", "error", "invalid_input", "not_found", "permission", "fatal", "cancelled",
               "invalid_output", "too_large", "storage", "worker_lost", "limit_exceeded", "denied", "interrupted",
               "internal")

_AGE = re.compile(r"^(\d+[dw]|(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+)$")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def time_bound(text: str) -> str:
    """``--since``/``--until``: an RFC 3339 time or an age, by its form (the engine checks the
    values: a month 13, a zero age)."""
    if _AGE.match(text.strip()) or _RFC3339.match(text.strip()):
        return text
    raise argparse.ArgumentTypeError("%r is not a time: give an RFC 3339 time (2026-03-08T00:00:00Z) or an age "
                                     "such as 30m, 2h or 7d" % text[:60])


class RunsCommand(Command):
    name = "runs"
    summary = "list runs, newest first"
    description = ("List the runs of the database, newest first, as a table (or JSON); search them by input "
                   "value, tool, step status, error kind, worker, time and error text (every option given must "
                   "hold). With --limit, a next page is printed as a --cursor to continue with.")
    examples = (("the last 20 runs", "dcc-flow runs --limit 20"),
                ("failed runs of one workflow", "dcc-flow runs --status failed --name vendor_intake"),
                ("which run touched shot sh010", "dcc-flow runs --input shot=sh010"),
                ("runs a worker crash hit this week", "dcc-flow runs --error-kind worker_lost --since 7d"),
                ("runs whose errors mention a text", "dcc-flow runs --error-text 'exit status 139'"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--status", action="append", default=[], choices=[s.value for s in WorkflowStatus],
                            metavar="STATUS", help="only runs with this status (repeatable): %s"
                            % ", ".join(s.value for s in WorkflowStatus))
        parser.add_argument("--name", metavar="NAME", help="only runs of this workflow")
        parser.add_argument("--input", action="append", default=[], metavar="KEY=VALUE",
                            help="only runs whose input KEY is VALUE: a string equal to it, an integer or "
                            "true/false written so (repeatable: all must hold)")
        parser.add_argument("--tool", metavar="TOOL", help="only runs with an attempt that called this tool")
        parser.add_argument("--step-status", action="append", default=[], metavar="STATUS",
                            choices=[s.value for s in StepStatus],
                            help="only runs with a step in this status (repeatable: any of them): %s"
                            % ", ".join(s.value for s in StepStatus))
        parser.add_argument("--error-kind", metavar="KIND", choices=ERROR_KINDS,
                            help="only runs with a step or an attempt that failed with this kind: %s"
                            % ", ".join(ERROR_KINDS))
        parser.add_argument("--worker", metavar="WORKER",
                            help="only runs with an attempt on this pool worker (POOL/PID) or pool (POOL)")
        parser.add_argument("--error-text", metavar="TEXT",
                            help="only runs with an error message containing TEXT (ignoring case; no wildcards)")
        parser.add_argument("--since", metavar="WHEN", type=time_bound,
                            help="only runs created at or after WHEN: an RFC 3339 time or an age (30m, 2h, 7d)")
        parser.add_argument("--until", metavar="WHEN", type=time_bound,
                            help="only runs created before WHEN (as --since)")
        parser.add_argument("--limit", type=int, default=50, metavar="N",
                            help="at most this many (default 50, 0 = all)")
        parser.add_argument("--cursor", metavar="CURSOR",
                            help="continue after the previous page (the cursor it printed)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        if args.limit < 0:
            raise UsageError("--limit %d: give 0 (all) or more" % args.limit)
        inputs = {}
        for pair in args.input:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise UsageError("--input %r: use --input KEY=VALUE, e.g. --input shot=sh010" % pair)
            if key in inputs:
                raise UsageError("--input %s is given twice: a run has one value per input" % key)
            inputs[key] = value
        with open_engine(args, beside_owner=True) as engine:
            try:
                runs = engine.runs(status=args.status or None, name=args.name, limit=args.limit or None,
                                   inputs=inputs, tool=args.tool, step_status=args.step_status or None,
                                   error_kind=args.error_kind, worker=args.worker, error_text=args.error_text,
                                   since=args.since, until=args.until, cursor=args.cursor)
            except (InvalidInputError, InvalidRequestError) as exc:
                problems = getattr(exc, "problems", None)
                raise UsageError(problems[0].message if problems else exc.message or str(exc)) from None
        if args.json:
            ctx.print(json.dumps([r.raw for r in runs], indent=2, sort_keys=True))
            return 0
        rows = [("RUN", "WORKFLOW", "STATUS", "STEPS", "STARTED", "DURATION")]
        for r in runs:
            rows.append((r.run_id, r.name or "-", r.status.value, "%d/%d" % r.progress,
                         str(r.raw.get("created_at", ""))[:19].replace("T", " "),
                         format_duration(elapsed(r.raw.get("created_at"), r.raw.get("finished_at")))))
        ctx.table(rows)
        if not runs:
            missing = missing_db(args)
            ctx.print("(no runs: %s)" % missing if missing else "(no runs)")
        if runs.next_cursor:
            ctx.print("(more: --cursor %s)" % runs.next_cursor)
        return 0


COMMAND = RunsCommand()
