"""``dcc-flow cancel RUN``."""

import argparse

from ._base import Command, Context
from ._engine import add_db_argument, open_engine

__all__ = ["COMMAND"]


class CancelCommand(Command):
    name = "cancel"
    summary = "cancel a run"
    description = (
        "Cancel run RUN: it must be running in this process's engine, or it is already finished\n"
        "(cancelling a finished run does nothing)."
    )
    examples = (("cancel a run", "dcc-flow cancel r01a2059aa058768e2436c40aa9aa --reason 'wrong drop'"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN")
        parser.add_argument("--reason", default="cancelled from the command line")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args) as engine:
            engine.cancel(args.run_id, args.reason)
            ctx.print("run %s: %s" % (args.run_id, engine.get_status(args.run_id).status.value))
        return 0


COMMAND = CancelCommand()
