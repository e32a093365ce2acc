"""``dcc-flow resume RUN``: finish a failed, interrupted or cancelled run."""

import argparse
from typing import Any

from .._errors import DccFlowError
from ._base import CliError, Command, Context
from ._engine import (
    RUN_HELP,
    add_config_argument,
    add_db_argument,
    add_lease_argument,
    add_remotes_argument,
    add_tools_argument,
    error_with_fix,
    load_tools,
    open_engine,
    resolve_run,
)
from ._resources import add_resource_argument
from .run import add_follow_arguments, follow

__all__ = ["COMMAND"]


class ResumeCommand(Command):
    name = "resume"
    summary = "finish a failed or interrupted run, reusing completed steps"
    description = (
        "Run RUN again under the same id with the tools of --tools: completed step instances are\n"
        "reused, the others run. --force re-runs completed steps too."
    )
    examples = (("resume after a crash",
                 "dcc-flow resume r01a2059aa058768e2436c40aa9aa --tools examples/vendor_intake_tools.py"),
                ("re-export one file",
                 "dcc-flow resume r01a2059aa058768e2436c40aa9aa --force 'per_file[3].export' --tools tools.py"))
    exit_codes = "0 completed, 1 failed or not resumable, 2 usage error, 3 cancelled or interrupted, 130 Ctrl-C"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        add_tools_argument(parser)
        add_remotes_argument(parser)
        add_config_argument(parser)
        add_resource_argument(parser)  # the run's steps may ask for resources: declared as for run
        parser.add_argument("--force", action="append", default=[],
                            metavar="STEP", help="a step id or instance key to run again")
        add_follow_arguments(parser)
        add_db_argument(parser)
        add_lease_argument(parser)

    def owns_stdout(self, args: argparse.Namespace) -> bool:  # it runs tools (Context.own_stdout)
        return True

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args) as engine:
            run_id = resolve_run(engine, args.run_id, args)
            load_tools(engine, args.tools)
            after = engine.last_event_seq()
            try:
                run: Any = engine.resume(run_id, force_steps=args.force)
            except DccFlowError as exc:
                if exc.code == "not_resumable" and exc.details.get("status") == "completed":
                    # the engine's message names the Python argument (force_steps); here it is an option
                    raise CliError("run %s completed; name the steps to run again with --force STEP"
                                   % run_id) from None
                fixed = error_with_fix(exc, args)
                if fixed is not None:
                    raise fixed from None
                raise
            return follow(engine, run, after, args, ctx)


COMMAND = ResumeCommand()
