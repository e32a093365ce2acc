"""``dcc-flow schedules DIR``: the schedules of a folder, their next fire times and last fires."""

import argparse
import json
import os
import time
from typing import Any, Dict, List, Optional

from .._errors import Problem, ValidationError
from ._base import CliError, Command, Context, UsageError, plain
from ._engine import add_db_argument, elapsed, format_duration, open_engine
from ._specfile import format_problem, plural
from .run import register_dir

__all__ = ["COMMAND", "serve_schedules"]


class SchedulesCommand(Command):
    name = "schedules"
    summary = "list schedules with their next and last fires"
    description = (
        "Validate every *.schedules.yaml of DIR and list each schedule: workflow, trigger, next fire\n"
        "time and, from the database, its last fire. With --workflows, unknown workflow names are errors.\n"
        "With --history, each schedule's recent fires follow (without DIR: every schedule the database\n"
        "has fires of)."
    )
    examples = (("the nightly schedules", "dcc-flow schedules examples/schedules --workflows examples/"),
                ("the last 5 fires of each webhook", "dcc-flow schedules examples/webhooks --history --limit 5"),
                ("every fire the database keeps", "dcc-flow schedules --history --limit 0"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dir", metavar="DIR", nargs="?",
                            help="a folder of *.schedules.yaml files (optional with --history)")
        parser.add_argument("--workflows", metavar="DIR", help="a folder of spec files (checks workflow names)")
        parser.add_argument("--history", action="store_true",
                            help="also show each schedule's fires, newest first, from the database")
        parser.add_argument("--limit", type=int, default=10, metavar="N",
                            help="with --history: at most N fires per schedule (default 10, 0 = all kept)")
        parser.add_argument("--json", action="store_true", help="print the schedules as JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        if args.limit < 0:
            raise UsageError("--limit must be >= 0 (0 = every fire kept); got %d" % args.limit)
        if args.dir is None:
            if not args.history:
                raise UsageError("give DIR (a folder of *.schedules.yaml files), or --history for the fires "
                                 "the database keeps")
            return self.history_only(args, ctx)
        if not os.path.isdir(args.dir):
            raise CliError("%s: no such folder" % args.dir)
        with open_engine(args, read_only=True) as engine:
            register_dir(engine, args.workflows, ctx)
            if not args.workflows:
                # Without a catalog every workflow name is accepted: register placeholders.
                from .._schedule import parse_schedules_yaml

                for entry in sorted(os.listdir(args.dir)):
                    if entry.endswith((".schedules.yaml", ".schedules.yml")):
                        with open(os.path.join(args.dir, entry), encoding="utf-8") as fh:
                            for sch in parse_schedules_yaml(fh.read(), path_hint=entry):
                                engine.register_workflow({"name": sch.workflow, "steps": [
                                    {"id": "placeholder", "tool": "flow__echo"}]})
            serve_schedules(engine, ctx, args.dir, scheduler=False)
            items: Any = engine.schedules()
            if args.history:
                for s in items:
                    s["fires"] = engine.schedule_fires(s["id"], limit=args.limit)
        if args.json:
            ctx.print(json.dumps(items, indent=2, sort_keys=True))
            return 0
        rows: List[List[str]] = [["SCHEDULE", "WORKFLOW", "TRIGGER", "NEXT FIRE (UTC)", "LAST FIRE"]]
        for s in items:  # each cell plain: ids from the files, the last fire's reason
            rows.append([plain(s["id"]), plain(s["workflow"]), plain(describe_trigger(s)), next_fire(s), last_fire(s)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            ctx.print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
        if args.history:
            for s in items:
                print_history(ctx, s["id"], s["fires"])
        return 0

    def history_only(self, args: argparse.Namespace, ctx: Context) -> int:
        """``--history`` without DIR: the fires the database keeps, grouped by schedule."""
        with open_engine(args, beside_owner=True) as engine:
            fires = engine.schedule_fires(None, limit=0)
        by_schedule: Dict[str, List[Dict[str, Any]]] = {}
        for f in fires:  # newest first
            kept = by_schedule.setdefault(str(f.get("schedule_id", "")), [])
            if not args.limit or len(kept) < args.limit:
                kept.append(f)
        if args.json:
            ctx.print(json.dumps([{"id": k, "fires": v} for k, v in sorted(by_schedule.items())],
                                 indent=2, sort_keys=True))
            return 0
        if not by_schedule:
            ctx.print("(no fires recorded)")
        for i, schedule_id in enumerate(sorted(by_schedule)):
            print_history(ctx, schedule_id, by_schedule[schedule_id], blank_before=i > 0)
        return 0


def print_history(ctx: Context, schedule_id: str, fires: List[Dict[str, Any]], blank_before: bool = True) -> None:
    """A schedule's fires, newest first: ``  2026-11-23 10:55:16  fired  r01a…  (webhook)``."""
    if blank_before:
        ctx.print("")
    ctx.print("%s: %s" % (plain(schedule_id), plural(len(fires), "fire") if fires else "no fires recorded"))
    for f in fires:
        line = "  %s  %-7s" % (str(f.get("fired_at", ""))[:19].replace("T", " "), f.get("kind", ""))
        if f.get("run_id"):
            line += "  " + f["run_id"]
        notes = [str(f.get("origin", ""))]
        if f.get("reason"):
            notes.append(str(f["reason"]))
        if f.get("message"):
            notes.append(str(f["message"]))
        line += "  (%s)" % ", ".join(n for n in notes if n)
        ctx.print(plain(line.rstrip()))  # a fire's message can quote what a webhook caller sent


def serve_schedules(engine: Any, ctx: Context, schedules_dir: Optional[str], **serve_args: Any) -> Any:
    """``engine.serve(schedules_dir=..., **serve_args)``; when the schedules have problems, each one
    as ``FILE:LINE:COLUMN: CODE: message`` on stderr (the engine's own message does not name the
    file, and a studio keeps many in one folder) and a ``CliError``."""
    try:
        return engine.serve(schedules_dir=schedules_dir, **serve_args)
    except ValidationError as exc:
        raw = [p for p in (exc.details.get("problems") or []) if isinstance(p, dict)]
        if not raw:
            raise
        errors = 0
        for item in raw:
            problem = Problem.from_dict(item)
            errors += problem.is_error
            ctx.eprint(format_problem(str(item.get("file") or schedules_dir), problem))
        raise CliError("%s: invalid schedules (%s); nothing was loaded"
                       % (schedules_dir, plural(errors or len(raw), "error"))) from None


def describe_trigger(s: Any) -> str:
    trig = s["trigger"]
    if trig["kind"] == "cron":
        text = "cron %s %s" % (trig["expression"], trig.get("timezone") or "UTC")
        if trig.get("jitter_secs"):
            text += " +%ds jitter" % trig["jitter_secs"]
    elif trig["kind"] == "interval":
        text = "every %s" % trig["every"]
    else:
        text = "webhook POST %s" % trig.get("path", "")
    return text if s.get("enabled", True) else text + " (disabled)"


def next_fire(s: Any) -> str:
    """``2026-11-23 08:01:55 (in 9h12m)``, or ``-`` for webhooks and disabled schedules."""
    text = s.get("next_fire")
    if not text:
        return "-"
    secs = elapsed(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), text)
    return "%s (in %s)" % (text[:19].replace("T", " "), format_duration(secs))


def last_fire(s: Any) -> str:
    last = s.get("last_fire")
    if not last:
        return "never"
    text = "%s %s" % (last.get("fired_at", "")[:19].replace("T", " "), last.get("kind", ""))
    if last.get("run_id"):
        text += " " + last["run_id"]
    if last.get("reason"):
        text += " (%s)" % last["reason"]
    return plain(text)


COMMAND = SchedulesCommand()
