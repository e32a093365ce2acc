"""``dcc-flow cancel RUN``."""

import argparse
import time

from ._base import Command, Context
from ._engine import RUN_HELP, add_db_argument, open_engine, resolve_run

__all__ = ["COMMAND"]


class CancelCommand(Command):
    name = "cancel"
    summary = "cancel a run"
    description = (
        "Cancel run RUN. The process running it (the one that owns the database: dcc-flow serve,\n"
        "or dcc-flow run in another terminal) carries the cancel out; cancelling a finished run does\n"
        "nothing."
    )
    examples = (("cancel a run", "dcc-flow cancel r01a2059aa058768e2436c40aa9aa --reason 'wrong drop'"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        parser.add_argument("--reason", default="cancelled from the command line", metavar="TEXT",
                            help="why (kept in the run's error; default: 'cancelled from the command line')")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            engine.cancel(run_id, args.reason)
            status = engine.get_status(run_id)
            deadline = time.monotonic() + 10
            while not status.terminal and time.monotonic() < deadline:  # the owner stops its steps
                time.sleep(0.1)
                status = engine.get_status(run_id)
            ctx.print("run %s: %s" % (run_id, status.status.value))
        return 0


COMMAND = CancelCommand()
