"""``dcc-flow approve RUN STEP [--deny]``."""

import argparse

from ._base import Command, Context
from ._engine import RUN_HELP, add_db_argument, open_engine, resolve_run

__all__ = ["COMMAND"]


class ApproveCommand(Command):
    name = "approve"
    summary = "grant (or deny) the open approval of a run's step"
    description = (
        "Answer the open approval of STEP in RUN. The run waits in the process that owns the\n"
        "database (dcc-flow serve, or dcc-flow run in another terminal): this command asks that\n"
        "process and reports its answer."
    )
    examples = (("approve", "dcc-flow approve r01a2059aa058768e2436c40aa9aa human_gate"),
                ("deny with a reason",
                 "dcc-flow approve r01a2059aa058768e2436c40aa9aa human_gate --deny --reason 'bad UVs'"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        parser.add_argument("step", metavar="STEP", help="the approve step's instance key")
        parser.add_argument("--deny", action="store_true", help="deny instead of granting")
        parser.add_argument("--reason", default="", metavar="TEXT", help="why (kept in the run record)")
        parser.add_argument("--by", metavar="NAME", help="who answers (default: $DCC_FLOW_USER, else your login name)")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            engine.approve(run_id, args.step, not args.deny, reason=args.reason, by=args.by)
        ctx.print("%s %s of run %s" % ("denied" if args.deny else "approved", args.step, run_id))
        return 0


COMMAND = ApproveCommand()
