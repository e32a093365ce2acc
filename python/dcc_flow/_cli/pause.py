"""``dcc-flow pause RUN``: no step of the run starts until ``dcc-flow unpause``."""

import argparse

from ._base import Command, Context
from ._engine import RUN_HELP, add_db_argument, open_engine, resolve_run

__all__ = ["COMMAND", "add_pause_arguments"]


def add_pause_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """RUN, --reason and --by of pause and unpause."""
    parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    parser.add_argument("--reason", default="", metavar="TEXT", help="why (kept in the run's %s event)" % what)
    parser.add_argument("--by", metavar="NAME", help="who asks (default: $DCC_FLOW_USER, else your login name)")


class PauseCommand(Command):
    name = "pause"
    summary = "pause a run: no new step starts until unpause"
    description = (
        "Pause run RUN: no step starts (foreach items and retries included) until dcc-flow unpause;\n"
        "the steps already running finish and record their results, and an open approval can still\n"
        "be answered. The process running it (dcc-flow serve, or dcc-flow run in another terminal)\n"
        "carries the pause out. Pausing a paused run does nothing; a finished run is an error."
    )
    examples = (("pause a run for the night", "dcc-flow pause r01a2059aa058768e2436c40aa9aa --reason 'farm full'"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_pause_arguments(parser, "run_paused")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            engine.pause(run_id, args.reason, by=args.by)
            ctx.print("run %s: %s" % (run_id, engine.get_status(run_id).status.value))
        return 0


COMMAND = PauseCommand()
