"""``dcc-flow validate FILE...``: parse and validate specs, report every problem."""

import argparse
import contextlib
import json
from typing import Iterator, Optional, Sequence, Set, Tuple

from .._engine import Engine
from ._base import EXIT_FAILURE, EXIT_OK, Command, Context
from ._engine import add_tools_argument, load_tools
from ._specfile import SpecFile, format_problem, load_spec, plural
from ._workers import serial_warnings

__all__ = ["COMMAND", "ValidateCommand"]


class ValidateCommand(Command):
    name = "validate"
    summary = "check workflow specs (YAML or JSON) and report every problem"
    description = (
        "Parse and validate each FILE (YAML or JSON; '-' reads standard input) and report every\n"
        "problem, one per line, as FILE:LINE:COLUMN: CODE: message (warnings as\n"
        "FILE:LINE:COLUMN: warning: CODE: message). A valid file prints\n"
        "FILE: ok (N steps, hash XXXXXXXXXXXX), the hash being the first 12 hex digits of the\n"
        "spec hash. All files are checked, even after one fails. With --tools, each step that asks for\n"
        "concurrency (a foreach with concurrency > 1, a parallel, a depends_on fan-out) while its tools\n"
        "would run in one process on one thread gets a warning on stderr naming the fix\n"
        "(dcc-flow run --workers N or --worker-threads N)."
    )
    examples = (
        ("check one spec", "dcc-flow validate flows/vendor_intake.yaml"),
        ("check every spec of a folder in CI (exit code 1 if any has a problem)", "dcc-flow validate flows/*.yaml"),
        ("machine-readable result, one object per file", "dcc-flow validate --json flows/*.yaml"),
        ("check a spec written by another tool", "generate_flow.py | dcc-flow validate -"),
        ("also warn about steps whose tools would run one at a time (foreach concurrency, parallel)",
         "dcc-flow validate flow.yaml --tools tools.py"),
    )
    exit_codes = "0 every file is valid (warnings allowed), 1 a file has errors or cannot be read, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE", help="a spec file (.yaml, .yml, .json); '-' = stdin")
        parser.add_argument(
            "--json",
            action="store_true",
            help="print a JSON list, one object per file: "
            "{file, ok, name, step_count, spec_hash, problems: [{code, severity, message, line, column, ...}]}",
        )
        add_tools_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        results = []
        with _tools_engine(args.tools) as (engine, plain):
            for path in args.files:
                result = load_spec(path)
                results.append(result)
                if result.read_error is not None:
                    ctx.error(result.read_error)
                elif not args.json:
                    _report(result, ctx)
                if engine is not None and result.spec is not None:
                    for line in serial_warnings(engine, result.spec, None, 0, plain):
                        ctx.warning("%s: %s" % (result.label, line))
        if args.json:
            ctx.print(json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False))
        return EXIT_OK if all(r.ok for r in results) else EXIT_FAILURE


@contextlib.contextmanager
def _tools_engine(modules: Sequence[str]) -> Iterator[Tuple[Optional[Engine], Set[str]]]:
    """With ``--tools``: an in-memory engine with the modules' tools registered as ``dcc-flow run``
    registers them (without --workers or --worker-threads), to tell which steps would run their
    tools one at a time; else None."""
    plain: Set[str] = set()
    if not modules:
        yield None, plain
        return
    with Engine() as engine:
        load_tools(engine, modules, plain=plain)
        yield engine, plain


def _report(result: SpecFile, ctx: Context) -> None:
    for problem in result.problems:
        ctx.print(format_problem(result.label, problem))
    spec = result.spec
    if result.ok and spec is not None:
        ctx.print("%s: ok (%s, hash %s)" % (result.label, plural(spec.step_count, "step"), spec.spec_hash[:12]))
    else:
        counts = [plural(len(result.errors), "error")]
        if result.warnings:
            counts.append(plural(len(result.warnings), "warning"))
        ctx.print("%s: invalid (%s)" % (result.label, ", ".join(counts)))


COMMAND = ValidateCommand()
