"""``dcc-flow lineage PATH``: how a file came to be — the run, step and attempt that wrote it,
its tool, arguments and environment, and the files it read, recursively."""

import argparse
import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._graph import _mermaid_label
from ._assets import STATE_WORDS, env_text, short_hash, when
from ._base import Command, Context, plain
from ._engine import add_db_argument, open_engine
from .show import ARGS_SUMMARY, args_text

__all__ = ["COMMAND", "format_text", "format_mermaid"]

FORMATS = ("text", "json", "mermaid")


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError("%r is not a depth; give a whole number >= 0 (0 = the default, 10)" % text)
    return value


class LineageCommand(Command):
    name = "lineage"
    summary = "how a file came to be: the step that wrote it, and its inputs"
    description = (
        "Show the lineage of the file PATH from the run database (docs/guide/assets.md, \"Lineage\"): what it\n"
        "is now against its record (unchanged, CHANGED, MISSING), the newest recorded attempt that wrote it —\n"
        "its run, step, attempt, tool, arguments and environment — and the files that attempt read, each\n"
        "with its own making, indented, down to --depth levels of writers. 'STALE: reason' marks a file a\n"
        "step made that is stale (dcc-flow stale); a file no recorded step wrote is a source; '(repeated\n"
        "above)' marks an input whose making is drawn already, '(--depth cut: ...)' one whose writer the\n"
        "depth left out. --format mermaid draws files and attempts as a flowchart that GitHub renders;\n"
        "--format json prints the engine's document."
    )
    examples = (("where a render came from", "dcc-flow lineage /show/sh010/render/beauty.0001.exr"),
                ("two levels, as a Mermaid flowchart", "dcc-flow lineage sh010.usda --depth 2 --format mermaid"),
                ("the whole record as JSON", "dcc-flow lineage sh010.usda --format json"))
    exit_codes = "0 success, 1 the file was never recorded (or another failure), 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", metavar="PATH", help="the file (a relative path is taken from the working folder)")
        parser.add_argument("--depth", type=_depth, default=0, metavar="N",
                            help="levels of writers followed (default 0 = the engine's default, 10)")
        parser.add_argument("--format", choices=FORMATS, default="text",
                            help="text (a tree, the default), json (the engine's document) or mermaid (a flowchart)")
        add_db_argument(parser)

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        with open_engine(args, beside_owner=True) as engine:
            node = engine.lineage(args.path, depth=args.depth)
            stale = {} if args.format == "json" else stale_outputs(engine, node)
        if args.format == "json":
            ctx.print(json.dumps(node, indent=2, ensure_ascii=False))
        elif args.format == "mermaid":
            ctx.print(format_mermaid(node, stale))
        else:
            for line in format_text(node, args.depth, stale):
                ctx.print(line)
        return 0


def _made_paths(root: Mapping[str, Any]) -> List[str]:
    """The paths of the graph's files whose making it shows, in order, once each."""
    out: List[str] = []
    todo = [root]
    while todo:
        n = todo.pop()
        made = n.get("made")
        if made and not n.get("repeat"):
            if n.get("path") not in out:
                out.append(str(n.get("path")))
            todo.extend(reversed(made.get("inputs") or []))
    return out


def stale_outputs(engine: Any, root: Mapping[str, Any]) -> Dict[str, str]:
    """Why each file of the graph that a recorded step made is stale (``Engine.stale`` of their
    paths), by path; a file modified or deleted itself is left out: its state says so."""
    paths = _made_paths(root)
    if not paths:
        return {}
    out: Dict[str, str] = {}
    for s in engine.stale(paths):
        reason = str(s.get("reason") or "")
        if s.get("path") in paths and not reason.startswith(("modified since", "deleted since")):
            out[str(s["path"])] = reason
    return out


def _headline(n: Mapping[str, Any], root: bool, depth: int, stale: Mapping[str, str]) -> str:
    now = str(n.get("now") or "")
    word = STATE_WORDS.get(now, plain(now) or "?")
    if now == "changed":
        word += " since it was " + ("made" if root else "read")
    line = "%s  %s  %s" % (plain(n.get("path") or ""), word, short_hash(n.get("hash")))
    if n.get("made") and not n.get("repeat") and n.get("path") in stale:
        line += "  STALE: %s" % plain(stale[str(n.get("path"))])
    made = n.get("made")
    if n.get("repeat"):
        line += "  (repeated above)"
    elif n.get("cut"):
        line += "  (--depth cut: its writer is not shown; raise --depth%s)" % (" above %d" % depth if depth else "")
    elif not made:
        line += "  (source: no recorded step wrote it)"
    elif not root and made.get("hash") and n.get("hash") and made.get("hash") != n.get("hash"):
        line += "  (read another version than its newest writer's %s)" % short_hash(made.get("hash"))
    return line


def _details(made: Mapping[str, Any]) -> List[str]:
    status = made.get("status") or "?"
    lines = ["written by %s, attempt %s (%s), %s" % (plain(made.get("tool") or "?"), made.get("attempt", "?"),
                                                     plain(status), when(made.get("at"))),
             "run %s (%s), step %s" % (plain(made.get("run_id") or "?"), plain(made.get("workflow") or "unnamed"),
                                       plain(made.get("step_key") or "?"))]
    if made.get("args") is not None:
        lines.append("args %s" % args_text(made.get("args"), ARGS_SUMMARY))
    if made.get("env"):
        lines.append("env  %s" % env_text(made.get("env")))
    if not made.get("inputs"):
        lines.append("read no recorded file")
    return lines


def format_text(root: Mapping[str, Any], depth: int = 0, stale: Optional[Mapping[str, str]] = None) -> List[str]:
    """The lineage as a tree: each file, what it is now (and, from ``stale`` (path → reason), why
    it is stale), its writer's attempt in a few lines, then its inputs indented under it (``├─``,
    ``└─``)."""
    stale = stale or {}
    out: List[str] = []

    def visit(n: Mapping[str, Any], first: str, rest: str, is_root: bool) -> None:
        out.append(first + _headline(n, is_root, depth, stale))
        made = n.get("made") if not n.get("repeat") else None
        if not made:
            return
        inputs = list(made.get("inputs") or [])
        bar = rest + ("│  " if inputs else "   ")
        out.extend((bar + d).rstrip() for d in _details(made))
        for i, child in enumerate(inputs):
            last = i == len(inputs) - 1
            visit(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), False)

    visit(root, "", "", True)
    return out


def format_mermaid(root: Mapping[str, Any], stale: Optional[Mapping[str, str]] = None) -> str:
    """The lineage as a Mermaid flowchart, left to right: files (rectangles; changed or missing
    ones in red, stale ones (``stale``: path → reason) in orange, sources in grey, cut ones
    dashed) and the attempts that wrote them (rounded), each input's arrow into the attempt that
    read it and the attempt's into what it wrote."""
    stale = stale or {}
    files: Dict[str, str] = {}
    attempts: Dict[Tuple[str, str, int], str] = {}
    lines: List[str] = ["flowchart LR"]
    edges: List[str] = []
    classes: Dict[str, List[str]] = {}

    def file_id(n: Mapping[str, Any]) -> str:
        path = str(n.get("path") or "")
        if path not in files:
            files[path] = "f%d" % len(files)
            now = str(n.get("now") or "")
            label = [path, "%s %s" % (now or "?", short_hash(n.get("hash")))]
            if path in stale:
                label.append("stale: " + stale[path])
            lines.append("    %s[%s]" % (files[path], _mermaid_label(label)))
            if now in ("changed", "missing", "unreadable"):
                classes.setdefault("changed", []).append(files[path])
            elif path in stale:
                classes.setdefault("stale", []).append(files[path])
        return files[path]

    def visit(n: Mapping[str, Any]) -> str:
        fid = file_id(n)
        made = n.get("made")
        if n.get("repeat"):
            return fid
        if not made:
            if n.get("cut"):
                classes.setdefault("cut", []).append(fid)
            elif fid not in classes.get("changed", ()):
                classes.setdefault("source", []).append(fid)
            return fid
        key = (str(made.get("run_id")), str(made.get("step_key")), int(made.get("attempt") or 0))
        if key not in attempts:
            attempts[key] = "a%d" % len(attempts)
            label = ["%s #%d" % (made.get("tool") or "?", key[2]), "run %s" % key[0], "step %s" % key[1]]
            env = env_text(made.get("env"), 60) if made.get("env") else ""
            if env:
                label.append(env)
            lines.append("    %s(%s)" % (attempts[key], _mermaid_label(label)))
            for child in made.get("inputs") or []:
                edges.append("    %s --> %s" % (visit(child), attempts[key]))
        edges.append("    %s --> %s" % (attempts[key], fid))
        return fid

    visit(root)
    seen = set()
    for edge in edges:
        if edge not in seen:
            seen.add(edge)
            lines.append(edge)
    styles = {"changed": "fill:#fdd,stroke:#c00", "stale": "fill:#fed,stroke:#d70", "source": "fill:#eee,stroke:#999",
              "cut": "stroke-dasharray:4 3"}
    for name in ("changed", "stale", "source", "cut"):
        if classes.get(name):
            lines.append("    classDef %s %s" % (name, styles[name]))
            lines.append("    class %s %s" % (",".join(sorted(set(classes[name]))), name))
    return "\n".join(lines)


COMMAND = LineageCommand()
