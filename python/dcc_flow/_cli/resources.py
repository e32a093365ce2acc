"""``dcc-flow resources``: the scarce resources, who holds their units and who waits."""

import argparse
import json
from typing import Any

from ._base import Command, Context, plain
from ._engine import add_db_argument, open_engine
from ._resources import add_resource_argument

__all__ = ["COMMAND"]


def _ago(since: Any) -> str:
    return plain(since) if since else "?"


def probe_line(probe: Any) -> str:
    """The line of a resource's probe (its live count): its state, what it read and the limit it
    applies, e.g. ``probe  ok: 3 free, effective limit 3 (every 30 s, checked 2026-…)``."""
    state = plain(probe.get("state"))
    if state == "ok":
        text = "ok: %s free, effective limit %s" % (probe.get("free"), probe.get("effective_limit"))
    elif state == "failed":
        text = "failed, using the declared limit %s: %s" % (probe.get("effective_limit"), plain(probe.get("error")))
    else:
        text = "%s (no run finished yet), using the declared limit %s" % (state, probe.get("effective_limit"))
    checked = ", checked %s" % plain(probe["checked_at"]) if probe.get("checked_at") else ""
    return "  probe  %s (every %s s%s)" % (text, probe.get("every_secs"), checked)


class ResourcesCommand(Command):
    name = "resources"
    summary = "list the scarce resources, their holders and the queue"
    description = (
        "List the scarce resources (docs/guide/resources.md) — those declared with --resource NAME=LIMIT or\n"
        "--resources FILE (whose probes, run once when the engine opens, read the licence server's free count), and\n"
        "any other the database has holders of — with their limit, the units in use, the step attempts\n"
        "holding them and the step attempts waiting for them, in the order they will be served: on\n"
        "PostgreSQL the one queue of every engine of the database, each waiter with its engine; else this\n"
        "process's. Beside a process that owns a SQLite file (a serve), the holders are that process's; its\n"
        "queue is in its own memory and is not listed here (its waiting steps show as waiting_resources in\n"
        "status and show)."
    )
    examples = (("who holds the Houdini licences?", "dcc-flow resources --resource houdini=4"),
                ("as JSON", "dcc-flow resources --json"))
    exit_codes = "0 success, 1 failure, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_resource_argument(parser)
        parser.add_argument("--json", action="store_true", help="print the JSON list of resources")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:  # --resource: open_engine declares them
            resources = engine.resources()
        if args.json:
            ctx.print(json.dumps(resources, indent=2, ensure_ascii=False))
            return 0
        if not resources:
            ctx.print("no resources: declare them with --resource NAME=LIMIT (and in the engine config of the runs)")
            return 0
        for r in resources:
            limit = r.get("limit") or 0
            ctx.print("%s: %d of %s in use, %d waiting"
                      % (plain(r.get("name")), r.get("in_use") or 0, limit if limit else "? (not declared here)",
                         len(r.get("queue") or [])))
            if r.get("probe"):
                ctx.print(probe_line(r["probe"]))
            if r.get("warning"):
                ctx.warning(plain(r["warning"]))
            for h in r.get("holders") or []:
                engine_text = " on engine %s" % plain(h.get("engine")) if h.get("engine") else ""
                ctx.print("  holds  ×%d  %s %s%s (limit %s) since %s"
                          % (h.get("amount") or 0, plain(h.get("run_id")), plain(h.get("step_key")), engine_text,
                             h.get("limit"), _ago(h.get("since"))))
            for q in r.get("queue") or []:
                engine_text = " on engine %s" % plain(q.get("engine")) if q.get("engine") else ""
                ctx.print("  waits  ×%d  #%d %s%s priority %s (%s with waiting) since %s"
                          % (q.get("amount") or 0, q.get("position") or 0, plain(q.get("label")), engine_text,
                             q.get("priority"), q.get("effective_priority"), _ago(q.get("since"))))
        return 0


COMMAND = ResourcesCommand()
