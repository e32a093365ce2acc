"""``dcc-flow workflows``: the workflow catalog of a database, and the versions of each."""

import argparse
import json
from typing import Any, Dict, List, Sequence

from ._base import CliError, Command, Context
from ._engine import add_db_argument, open_engine

__all__ = ["COMMAND"]


class WorkflowsCommand(Command):
    name = "workflows"
    summary = "list the workflow catalog and its versions"
    description = (
        "List the workflows registered in the database (by register_workflow, serve --workflows, run\n"
        "--workflows or MCP): name, current version, how many versions, steps, when the current\n"
        "version was registered and the description. QUERY keeps the workflows whose name or\n"
        "description has every word of it. With --versions NAME, every version of that workflow\n"
        "(a version is one spec hash, numbered from 1); runs say which version they used."
    )
    exit_codes = "0 success, 1 failure (a NAME never registered), 2 usage error"
    examples = (("the catalog", "dcc-flow workflows"),
                ("the versions of one workflow", "dcc-flow workflows --versions vendor_intake"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("query", nargs="?", default="", metavar="QUERY",
                            help="only workflows whose name or description has every word of QUERY")
        parser.add_argument("--versions", metavar="NAME", help="list every version of the workflow NAME")
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, read_only=True) as engine:
            if args.versions is not None:
                versions = engine.workflow_versions(args.versions)
                if not versions and args.versions:
                    known = sorted({v["name"] for v in engine.workflow_versions()})
                    raise CliError("no workflow named %r was ever registered in this database%s" % (
                        args.versions, _did_you_mean(args.versions, known)))
                return _print_versions(ctx, versions, args.json)
            workflows = engine.workflows(args.query)
            current = {v["name"]: v for v in engine.workflow_versions() if v["current"]}
            counts: Dict[str, int] = {}
            for v in engine.workflow_versions():
                counts[v["name"]] = counts.get(v["name"], 0) + 1
        if args.json:
            ctx.print(json.dumps(workflows, indent=2, sort_keys=True))
            return 0
        rows: List[Sequence[str]] = [("WORKFLOW", "VERSION", "VERSIONS", "STEPS", "REGISTERED", "DESCRIPTION")]
        for w in workflows:
            registered = str(current.get(w["name"], {}).get("registered_at", ""))[:19].replace("T", " ")
            rows.append((w["name"], str(w["version"]), str(counts.get(w["name"], 1)), str(w["steps"]),
                         registered or "-", _first_line(w.get("description", ""))))
        ctx.table(rows)
        if not workflows:
            ctx.print("(no workflows%s)" % (" matching %r" % args.query if args.query else ""))
        return 0


def _print_versions(ctx: Context, versions: List[Dict[str, Any]], as_json: bool) -> int:
    if as_json:
        ctx.print(json.dumps(versions, indent=2, sort_keys=True))
        return 0
    rows: List[Sequence[str]] = [("WORKFLOW", "VERSION", "CURRENT", "SPEC HASH", "REGISTERED", "DESCRIPTION")]
    for v in versions:
        rows.append((v["name"], str(v["version"]), "*" if v["current"] else "", v["spec_hash"][:12],
                     str(v.get("registered_at", ""))[:19].replace("T", " "), _first_line(v.get("description", ""))))
    ctx.table(rows)
    if not versions:
        ctx.print("(no workflows)")
    return 0


def _first_line(text: str, width: int = 60) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _did_you_mean(name: str, known: List[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    return "; did you mean %r?" % close[0] if close else ""


COMMAND = WorkflowsCommand()
