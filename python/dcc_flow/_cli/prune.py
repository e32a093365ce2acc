"""``dcc-flow prune``: delete the runs that ended long ago, and the expired idempotency entries."""

import argparse
import json
import re
from typing import Any, Dict, List

from ._base import Command, Context, UsageError, plain
from ._engine import add_db_argument, open_engine

__all__ = ["COMMAND", "parse_age"]

FINISHED = ("completed", "failed", "cancelled", "interrupted")

#: An age: a number and a unit (s, m, h, d, w), or a Go duration such as 36h30m.
_AGE = re.compile(r"^\s*(\d+(\.\d+)?[smhdw]|(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+|0)\s*$", re.I)


def parse_age(text: str) -> str:
    """``--older-than``'s value, checked: ``30d``, ``12h``, ``2w``, ``90m``, ``45s``, ``36h30m``, ``0``."""
    if not _AGE.match(text):
        raise argparse.ArgumentTypeError("%r is not an age; write a number and a unit, e.g. 30d, 12h, 2w, 90m" % text)
    return text.strip()


def describe_age(age: str) -> str:
    """``more than 30d ago``, or ``before now`` for an age of zero."""
    if re.match(r"^0+(\.0*)?[a-zµ]*$", age.strip(), re.I):
        return "before now"
    return "more than %s ago" % age


class PruneCommand(Command):
    name = "prune"
    summary = "delete runs that ended long ago (--dry-run shows what would go)"
    description = (
        "Delete the runs that finished (completed, failed, cancelled, interrupted) more than --older-than\n"
        "ago, with their steps, events and workflow-scoped idempotency entries, the earliest first; then\n"
        "purge the idempotency entries whose TTL ran out. A run still going (running, waiting for an\n"
        "approval) is never deleted. --dry-run lists what would go and deletes nothing."
    )
    examples = (("what a 30-day retention would delete", "dcc-flow prune --older-than 30d --dry-run"),
                ("delete failed runs older than a week", "dcc-flow prune --older-than 7d --status failed"))
    exit_codes = "0 success (also when nothing was old enough), 1 failure, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--older-than", required=True, type=parse_age, metavar="AGE",
                            help="how long ago the runs finished: 30d, 12h, 2w, 90m, 36h30m, 0 (every finished run)")
        parser.add_argument("--status", action="append", default=[], choices=FINISHED, metavar="STATUS",
                            help="only runs with this status (repeatable): %s" % ", ".join(FINISHED))
        parser.add_argument("--dry-run", action="store_true", help="list the runs that would go; delete nothing")
        parser.add_argument("--limit", type=int, default=0, metavar="N",
                            help="delete at most N runs, the earliest finished first (default 0 = all)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        if args.limit < 0:
            raise UsageError("--limit must be >= 0 (0 = all); got %d" % args.limit)
        statuses = args.status or None
        age = args.older_than
        # A dry run reads only: it works beside a serve that owns the database.
        with open_engine(args, beside_owner=args.dry_run,
                         in_use_fix="to prune, stop that process (a serve prunes by its own --retention) "
                                    "or look first with --dry-run, which works beside it") as engine:
            if args.dry_run:
                runs = engine.prunable_runs(age, statuses=statuses, limit=args.limit or None)
                return self.report_dry_run(ctx, args, runs)
            bar = _ProgressLine(ctx, enabled=ctx.out_is_tty and not args.json)
            pruned = engine.prune(age, statuses=statuses, limit=args.limit or None, progress=bar.update)
            bar.finish()
            purged = engine.purge_expired()
        if args.json:
            ctx.print(json.dumps({"pruned": pruned, "purged": purged}, sort_keys=True))
            return 0
        what = " ".join(statuses) if statuses else "finished"
        ctx.print("pruned %s %s run%s that ended %s; purged %d expired idempotency entr%s"
                  % (format(pruned, ","), what, "" if pruned == 1 else "s", describe_age(age), purged,
                     "y" if purged == 1 else "ies"))
        return 0

    @staticmethod
    def report_dry_run(ctx: Context, args: argparse.Namespace, runs: List[Dict[str, Any]]) -> int:
        if args.json:
            ctx.print(json.dumps({"dry_run": True, "pruned": len(runs), "runs": runs}, indent=2, sort_keys=True))
            return 0
        rows = [("RUN", "WORKFLOW", "STATUS", "FINISHED (UTC)")]
        for r in runs:
            rows.append((r.get("run_id", ""), plain(r.get("name") or "-"), r.get("status", ""),
                         str(r.get("finished_at", ""))[:19].replace("T", " ")))
        if runs:
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            for row in rows:
                ctx.print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        ctx.print("dry run: %s run%s would be pruned (ended %s); nothing was deleted"
                  % (format(len(runs), ","), "" if len(runs) == 1 else "s", describe_age(args.older_than)))
        return 0


class _ProgressLine:
    """``pruning 1,200/5,000 runs (24%)`` redrawn in place on a terminal; nothing otherwise."""

    def __init__(self, ctx: Context, enabled: bool) -> None:
        self.ctx, self.enabled, self.width = ctx, enabled, 0

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        text = "pruning %s/%s runs (%d%%)" % (format(done, ","), format(total, ","), 100 * done // total)
        self.ctx.write("\r" + text + " " * max(0, self.width - len(text)))
        self.width = max(self.width, len(text))

    def finish(self) -> None:
        if self.enabled and self.width:
            self.ctx.write("\r" + " " * self.width + "\r")


COMMAND = PruneCommand()
