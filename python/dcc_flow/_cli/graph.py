"""``dcc-flow graph FILE``: draw a workflow as Mermaid or Graphviz DOT (``dcc_flow.graph``)."""

import argparse
from typing import Optional

from .._graph import FORMATS, graph
from ._base import EXIT_OK, CliError, Command, Context
from ._specfile import format_problem, load_spec, plural

__all__ = ["COMMAND", "GraphCommand"]

# -o/--output suffixes that choose DOT when --format is not given.
_DOT_SUFFIXES = (".dot", ".gv")


class GraphCommand(Command):
    name = "graph"
    summary = "draw a workflow as a Mermaid flowchart or Graphviz DOT"
    description = (
        "Draw the steps of FILE (YAML or JSON; '-' reads standard input) and the order they run in:\n"
        "one node per step labelled with its id and tool (or kind), an edge per dependency,\n"
        "foreach and parallel steps as boxes holding their body, branch steps as diamonds with\n"
        "'then'/'else' edges, approve steps as hexagons. The spec must be valid (see validate)."
    )
    examples = (
        ("print a Mermaid flowchart (paste it into Markdown inside a ```mermaid block)", "dcc-flow graph flow.yaml"),
        ("render an SVG with Graphviz", "dcc-flow graph flow.yaml --format dot | dot -Tsvg -o flow.svg"),
        ("write a DOT file (the format follows the .dot/.gv suffix)", "dcc-flow graph flow.yaml -o flow.dot"),
    )
    exit_codes = "0 drawn, 1 the spec is invalid or a file cannot be read or written, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", metavar="FILE", help="a spec file (.yaml, .yml, .json); '-' = stdin")
        parser.add_argument(
            "-f",
            "--format",
            choices=FORMATS,
            default=None,
            help="diagram language (default: mermaid, or dot when --output ends in .dot/.gv)",
        )
        parser.add_argument("-o", "--output", metavar="PATH", help="write the diagram to PATH instead of stdout")

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        output: Optional[str] = args.output
        fmt: str = args.format or ("dot" if output and output.lower().endswith(_DOT_SUFFIXES) else "mermaid")
        loaded = load_spec(args.file)
        if loaded.read_error is not None:
            raise CliError(loaded.read_error)
        for problem in loaded.problems:
            ctx.eprint(format_problem(loaded.label, problem))
        if not loaded.ok or loaded.spec is None:
            raise CliError(
                "%s is not a valid workflow (%s); nothing drawn" % (loaded.label, plural(len(loaded.errors), "error"))
            )
        text = graph(loaded.spec, format=fmt)
        if output is None:
            ctx.write(text)
            return EXIT_OK
        try:
            with open(output, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        except OSError as exc:
            raise CliError("cannot write %s: %s" % (output, exc.strerror or exc)) from None
        return EXIT_OK


COMMAND = GraphCommand()
