"""``dcc-flow stale [PATH|DIR ...]``: the recorded outputs that are stale, and why; exit 1 when
any is, so CI can gate on it."""

import argparse
import json
import os

from ._base import Command, Context, plain
from ._engine import add_db_argument, open_engine

__all__ = ["COMMAND"]


class StaleCommand(Command):
    name = "stale"
    summary = "list the recorded outputs that are stale (exit 1 if any)"
    description = (
        "List every recorded output under the PATHs (files or folders; none: every recorded output) that is\n"
        "stale (docs/guide/assets.md, \"Staleness\"): modified or deleted since the step that wrote it, or made\n"
        "from an input whose content changed since, directly or through other recorded outputs. Each line is\n"
        "the file, the reason and the run, step and attempt that made it. The exit status is 1 when anything\n"
        "is stale and 0 when nothing is, so a CI job or a farm wrapper can gate on it."
    )
    examples = (("is anything of shot sh010 out of date?", "dcc-flow stale /show/sh010"),
                ("every stale output, as JSON", "dcc-flow stale --json"))
    exit_codes = "0 nothing stale, 1 something is stale (or another failure), 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", metavar="PATH", nargs="*",
                            help="a file or a folder of recorded outputs (repeatable; none: every recorded output)")
        parser.add_argument("--json", action="store_true",
                            help="print a JSON list of {path, reason, run_id, step_key, attempt}")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            stale = engine.stale(args.paths)
        if args.json:
            ctx.print(json.dumps(stale, indent=2, ensure_ascii=False))
            return 1 if stale else 0
        for s in stale:
            ctx.print("%s: %s; made by run %s, step %s, attempt %s"
                      % (plain(s.get("path")), plain(s.get("reason")), plain(s.get("run_id")),
                         plain(s.get("step_key")), s.get("attempt")))
        where = " under " + ", ".join(plain(p) for p in args.paths) if args.paths else ""
        if stale:
            ctx.print("%d stale output%s%s" % (len(stale), "" if len(stale) == 1 else "s", where))
            return 1
        ctx.print("nothing stale%s" % (where or " among the recorded outputs"))
        for p in args.paths:  # a typo must not pass for "all good"
            if not os.path.exists(p):
                ctx.warning("%s does not exist, and no recorded output under it is stale: is the path right?"
                            % plain(p))
        return 0


COMMAND = StaleCommand()
