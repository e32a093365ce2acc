"""``dcc-flow runs``: the run history as a table."""

import argparse
import json

from .._spec import WorkflowStatus
from ._base import Command, Context
from ._engine import add_db_argument, elapsed, format_duration, open_engine

__all__ = ["COMMAND"]


class RunsCommand(Command):
    name = "runs"
    summary = "list runs, newest first"
    description = "List the runs of the database, newest first, as a table (or JSON)."
    examples = (("the last 20 runs", "dcc-flow runs --limit 20"),
                ("failed runs of one workflow", "dcc-flow runs --status failed --name vendor_intake"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--status", action="append", default=[], choices=[s.value for s in WorkflowStatus],
                            metavar="STATUS", help="only runs with this status (repeatable): %s"
                            % ", ".join(s.value for s in WorkflowStatus))
        parser.add_argument("--name", metavar="NAME", help="only runs of this workflow")
        parser.add_argument("--limit", type=int, default=50, metavar="N",
                            help="at most this many (default 50, 0 = all)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            runs = engine.runs(status=args.status or None, name=args.name, limit=args.limit or None)
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
            ctx.print("(no runs)")
        return 0


COMMAND = RunsCommand()
