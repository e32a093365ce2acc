"""``dcc-flow status RUN``: the state of one run."""

import argparse
import json

from ._base import Command, Context, one_line, plain
from ._engine import RUN_HELP, add_db_argument, exit_code, format_progress, format_waiting, open_engine, resolve_run

__all__ = ["COMMAND"]

#: Characters of each output's JSON that status prints (--json prints them whole).
OUTPUT_WIDTH = 200


class StatusCommand(Command):
    name = "status"
    summary = "show a run's status, progress, error and outputs"
    description = (
        "Show the status of run RUN from the database: status, progress, the error if it failed,\n"
        "and the outputs of its top-level steps so far (each cut at 200 characters; --json has them whole)."
    )
    examples = (("the status of a run", "dcc-flow status r01a2059aa058768e2436c40aa9aa"),
                ("as JSON", "dcc-flow status r01a2059aa058768e2436c40aa9aa --json"))
    exit_codes = "0 completed (or still running), 1 failed or unknown run, 3 cancelled or interrupted, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        parser.add_argument("--json", action="store_true", help="print the run as JSON")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            result = engine.get_status(run_id)
        if args.json:
            ctx.print(json.dumps(result.raw, indent=2, sort_keys=True))
        else:
            ctx.print("run %s (%s): %s, %d/%d steps" % (result.run_id, plain(result.name or "unnamed"),
                                                        result.status.value, result.progress[0], result.progress[1]))
            if result.error:
                where = " at %s" % result.error["step_key"] if result.error.get("step_key") else ""
                ctx.print("error%s: %s" % (where, plain(one_line(result.error.get("message", "")))))
            if result.parent_run_id:
                ctx.print("child of run %s, step %s" % (result.parent_run_id, result.parent_step_key))
            for child in result.children:  # sub-workflows: dcc-flow show nests their steps
                name = plain(child.get("name") or "unnamed")
                ctx.print("child run %s (%s) of step %s: %s" % (child.get("run_id"), name, child.get("step_key"),
                                                              child.get("status")))
            for step in result.steps:  # what a long tool says it is doing: "export 37/120 caching frames…"
                if step.waiting:  # waiting_resources: "waiting for houdini ×1: 2nd of 3 in this engine's queue"
                    ctx.print("%s %s: %s" % (step.status.value, step.key, plain(format_waiting(step.waiting))))
                elif step.progress and not step.status.is_terminal:
                    ctx.print("%s %s: %s" % (step.status.value, step.key, plain(format_progress(step.progress))))
            for key, value in sorted(result.outputs.items()):
                text = json.dumps(value)
                if len(text) > OUTPUT_WIDTH:  # a cut value is not JSON any more: say so
                    text = text[:OUTPUT_WIDTH - 1] + "…"
                ctx.print("output %s: %s" % (key, text))
        return 0 if not result.terminal else exit_code(result)


COMMAND = StatusCommand()
