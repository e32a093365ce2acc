"""``dcc-flow unpause RUN``: let a paused run go on."""

import argparse

from .._engine import Engine, Run
from .._errors import DatabaseLockedError
from ._base import Command, Context
from ._engine import (
    add_config_argument,
    add_db_argument,
    add_remotes_argument,
    add_tools_argument,
    db_path,
    engine_config,
    load_tools,
    resolve_run,
)
from ._resources import add_resource_argument
from .pause import add_pause_arguments
from .run import add_follow_arguments, follow

__all__ = ["COMMAND"]


class UnpauseCommand(Command):
    name = "unpause"
    summary = "let a paused run go on"
    description = (
        "Unpause run RUN: the steps it held start. When a process runs it (dcc-flow serve, or\n"
        "dcc-flow run in another terminal), that process carries the unpause out and this command\n"
        "prints the run's status. When none does (it was paused when its engine stopped), this\n"
        "command resumes it with the tools of --tools, reusing its completed steps, and follows it\n"
        "to the end as resume does. Unpausing a run that is not paused does nothing."
    )
    examples = (("unpause a run that dcc-flow serve runs", "dcc-flow unpause r01a2059aa058768e2436c40aa9aa"),
                ("unpause a run paused before a restart, here",
                 "dcc-flow unpause r01a2059aa058768e2436c40aa9aa --tools examples/vendor_intake_tools.py"))
    exit_codes = ("0 unpaused (or completed, when this command ran it), 1 failed, 2 usage error, "
                  "3 cancelled or interrupted, 130 Ctrl-C")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_pause_arguments(parser, "run_unpaused")
        add_tools_argument(parser)
        add_remotes_argument(parser)
        add_config_argument(parser)
        add_resource_argument(parser)  # when this command runs the run: its steps' resources
        add_follow_arguments(parser)
        add_db_argument(parser)

    def owns_stdout(self, args: argparse.Namespace) -> bool:  # it runs tools (Context.own_stdout)
        return True

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        # --config FILE, --remotes FILE, and tracing by the OTEL_* variables when it runs the run.
        config, _ = engine_config(args)
        path = db_path(args)
        try:
            engine = Engine(db=None if path == ":memory:" else path, config=config)
            owner = True
        except DatabaseLockedError:  # a process runs its runs: it applies the unpause
            engine = Engine(db=path, config=engine_config(args, env_tracing=False)[0], read_only=True)
            owner = False
        with engine:
            run_id = resolve_run(engine, args.run_id, args)
            if not owner:
                engine.unpause(run_id, args.reason, by=args.by)
                ctx.print("run %s: %s" % (run_id, engine.get_status(run_id).status.value))
                return 0
            # No process runs it: it runs here, from where it stopped.
            load_tools(engine, args.tools)
            after = engine.last_event_seq()
            engine.unpause(run_id, args.reason, by=args.by)
            return follow(engine, Run(engine, run_id), after, args, ctx)


COMMAND = UnpauseCommand()
