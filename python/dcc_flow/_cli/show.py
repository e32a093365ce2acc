"""``dcc-flow show RUN``: a run's step timeline, with errors and their tracebacks."""

import argparse

from ._base import Command, Context
from ._engine import RUN_HELP, add_db_argument, elapsed, format_duration, open_engine, resolve_run

__all__ = ["COMMAND"]


class ShowCommand(Command):
    name = "show"
    summary = "show a run's step timeline, durations, errors and tracebacks"
    description = (
        "Show every step instance of run RUN (foreach iterations included) in the order they started,\n"
        "with status, attempts, duration and the pool worker (POOL/PID) that ran the last attempt, and the\n"
        "error and traceback of each failed step."
    )
    examples = (("the timeline of a run", "dcc-flow show r01a2059aa058768e2436c40aa9aa"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", metavar="RUN", help=RUN_HELP)
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            run_id = resolve_run(engine, args.run_id)
            result = engine.get_status(run_id, all_steps=True)
        ctx.print("run %s (%s): %s, %d/%d steps" % (result.run_id, result.name or "unnamed", result.status.value,
                                                    result.progress[0], result.progress[1]))
        width = max([len(s.key) for s in result.steps] + [4])
        # A step a crashed process left behind has no end time; it ended, at the latest, with its run.
        run_end = result.raw.get("finished_at") if result.terminal else None
        for s in result.steps:
            flags = (" cached" if s.cached else "") + (" on worker " + s.worker if s.worker else "")
            attempt = "attempt %d" % s.attempt if s.attempt else ""  # foreach, parallel, approve: no attempts
            took = elapsed(s.started_at, s.finished_at or run_end)
            ctx.print("  %s  %-16s %-10s  %8s%s" % (s.key.ljust(width), s.status.value, attempt,
                                                   format_duration(took), flags))
            if s.error:
                kind, message = s.error.get("kind") or "error", s.error.get("message") or ""
                ctx.print("      " + (message if message.startswith(kind + ":") else "%s: %s" % (kind, message)))
                for line in (s.error.get("trace") or "").rstrip().splitlines():
                    ctx.print("      | " + line)
        if result.error:
            ctx.print("error: %s" % result.error.get("message", ""))
        return 0


COMMAND = ShowCommand()
