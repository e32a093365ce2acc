"""What every ``dcc-flow`` command is built from: ``Command``, ``Context`` and the CLI errors.

A command never calls ``sys.exit`` and never lets a traceback out: it returns an exit code, or raises
``CliError`` (exit code 1) / ``UsageError`` (exit code 2), which ``main`` prints as one line.
"""

import argparse
import contextlib
import os
import sys
from typing import Any, Dict, Iterator, List, NoReturn, Optional, Sequence, TextIO, Tuple

__all__ = [
    "PROG",
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "CliError",
    "UsageError",
    "Command",
    "Context",
    "ArgumentParser",
    "HelpFormatter",
    "one_line",
]

PROG = "dcc-flow"

EXIT_OK = 0
EXIT_FAILURE = 1  # the command ran and failed: an invalid spec, an unreadable file, a failed run
EXIT_USAGE = 2  # the command line itself is wrong: an unknown option, a missing argument


def _escape_table(keep: str) -> Dict[int, str]:
    """A str.translate table that writes each character a terminal acts on as a visible ``\\uXXXX``
    escape, except those in ``keep``: control characters (C0, DEL, C1: an escape sequence, a
    carriage return, a bell), line and paragraph separators and bidirectional controls."""
    chars = list(range(0x20)) + list(range(0x7F, 0xA0)) + [0x200E, 0x200F, 0x2028, 0x2029]
    chars += list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A))
    return {c: "\\u%04x" % c for c in chars if chr(c) not in keep}


_FIELD_ESCAPES = _escape_table("")
_TEXT_ESCAPES = _escape_table("\n\t")


def plain(text: object) -> str:
    """``text`` for one line of human output: every control character, line break and bidirectional
    control written as a ``\\uXXXX`` escape, so a name, reason or message from a spec, a tool or an
    MCP client cannot forge a line, move the cursor, retitle the window or clear the screen."""
    return str(text).translate(_FIELD_ESCAPES)


def terminal_safe(text: str) -> str:
    """``text`` with what ``plain`` escapes escaped, except line breaks and tabs (multi-line output
    such as a traceback). JSON stays valid JSON: the escapes are JSON's own."""
    return text.translate(_TEXT_ESCAPES)


def one_line(text: str) -> str:
    """``text`` with its line breaks (and runs of whitespace around them) folded to ``; ``."""
    out = ""
    for line in (line.strip() for line in str(text).splitlines()):
        if line:
            out += (" " if out.endswith(":") else "; " if out else "") + line
    return out


class CliError(Exception):
    """A failure to report as one line, ``<prog>: error: <message>``, with exit code ``exit_code``."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, prog: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.prog = prog


def load_config_section(option: str, path: str, key: str, example: str) -> Dict[str, Any]:
    """The ``key`` object (``remotes``, ``resources``) of the JSON file given to ``option``: the
    file's object itself, or its ``key`` member when the file is a whole engine config. A file that
    cannot be read, is not JSON or holds no object is a CliError naming the option and the file,
    with ``example`` of what it should hold."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise CliError("%s %s: %s" % (option, path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise CliError("%s %s: not JSON: %s" % (option, path, exc)) from None
    if isinstance(doc, dict) and isinstance(doc.get(key), dict):
        doc = doc[key]
    if not isinstance(doc, dict):
        raise CliError("%s %s: expected a JSON object of %s by name, e.g. %s" % (option, path, key, example))
    return doc


class UsageError(CliError):
    """The command line is wrong (exit code 2); the line points to ``<prog> --help``."""

    exit_code = EXIT_USAGE


class ParserExit(Exception):
    """``--help`` or ``--version`` was printed: leave ``main`` with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions and example epilogs as written; a little more room for option names."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 30, width: Any = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, width)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if action.nargs == argparse.PARSER:
            # argparse measures command names without the indent it prints them with: make room
            # so a long name ("schedules") keeps its summary on the same line.
            names = [len(name) for name in (action.choices or {})]
            needed = max(names, default=0) + self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, needed)

    def _format_action(self, action: argparse.Action) -> str:
        text = super()._format_action(action)
        if action.nargs == argparse.PARSER:
            # The command list: drop the "COMMAND" line argparse puts above the commands.
            text = "\n".join(text.split("\n")[1:])
        return text


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that raises instead of exiting.

    A bad command line raises ``UsageError``; ``--help``/``--version`` raise ``ParserExit`` after
    printing, so ``main()`` returns an exit code even when called in-process (tests, Maya).
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)

    def exit(self, status: int = 0, message: Optional[str] = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise ParserExit(status)


class Context:
    """What a running command writes to: ``out`` (results) and ``err`` (diagnostics).

    ``prog`` is ``"dcc-flow <command>"``, the prefix of error lines.
    """

    def __init__(self, prog: str, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> None:
        self.prog = prog
        self.out: TextIO = out if out is not None else sys.stdout
        self.err: TextIO = err if err is not None else sys.stderr

    @property
    def out_is_tty(self) -> bool:
        """True when results go to a terminal (show progress and colour), False for pipes and files."""
        isatty = getattr(self.out, "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (OSError, ValueError):
            return False

    def print(self, text: str = "") -> None:
        """Write one line of results to ``out`` (``terminal_safe``: what a terminal would act on is
        escaped; fields that must stay on one line go through ``plain`` first)."""
        _write(self.out, terminal_safe(text) + "\n")

    def write(self, text: str) -> None:
        """Write results to ``out`` as they are (no newline added): only the command's own
        control characters (a progress line's carriage return); pass others through ``plain``."""
        _write(self.out, text)

    def table(self, rows: Sequence[Sequence[str]], indent: str = "") -> None:
        """Write rows (the first is the header) as columns two spaces apart, each line
        ``indent``-ed and without trailing blanks; each cell is ``plain``."""
        rows = [[plain(cell) for cell in row] for row in rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
        for row in rows:
            self.print(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())

    def eprint(self, text: str = "") -> None:
        """Write one line of diagnostics to ``err`` (``terminal_safe``, as ``print``)."""
        _write(self.err, terminal_safe(text) + "\n")

    def error(self, message: str) -> None:
        """Write ``<prog>: error: <message>`` to ``err`` (the command goes on; raise CliError to stop)."""
        self.eprint("%s: error: %s" % (self.prog, one_line(message)))

    def warning(self, message: str) -> None:
        """Write ``<prog>: warning: <message>`` to ``err``."""
        self.eprint("%s: warning: %s" % (self.prog, one_line(message)))

    @contextlib.contextmanager
    def own_stdout(self) -> Iterator[None]:
        """While it is active, standard output is ``out``'s alone: ``out`` writes to a duplicate of
        the real standard output, and file descriptor 1 and ``sys.stdout`` point at standard
        error, so what a tool writes that its step cannot capture (a thread it started, a C
        extension writing to fd 1; docs/reference/python/tool-calls.md "Output of in-process tools") goes to standard
        error instead of into the command's JSON lines. Everything is put back at the end.

        When ``out`` is not the process's standard output (a stream given to Context) nothing
        changes; when it has no file descriptor (pytest's capsys, an IDE console) only
        ``sys.stdout`` is pointed at ``sys.stderr``.
        """
        out, real_stdout = self.out, sys.stdout
        if out is not real_stdout or out is None:
            yield
            return
        fd = _fileno(out)
        saved = dup = None
        if fd is not None:
            try:
                out.flush()
                saved = os.dup(fd)
                dup = open(saved, "w", encoding=getattr(out, "encoding", None) or "utf-8",  # noqa: SIM115 - closed below
                           errors=getattr(out, "errors", None) or "strict", closefd=True)
                err_fd = _fileno(sys.stderr)
                os.dup2(2 if err_fd is None else err_fd, fd)
            except (OSError, ValueError):  # a closed stderr, fd limits: only sys.stdout moves
                if dup is not None:
                    dup.close()
                elif saved is not None:
                    os.close(saved)
                saved = dup = None
        if dup is not None:
            self.out = dup
        if sys.stderr is not None:
            sys.stdout = sys.stderr
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()  # what stray writers left in its buffer: to stderr, not stdout
            sys.stdout = real_stdout
            self.out = out
            if dup is not None and saved is not None and fd is not None:
                with contextlib.suppress(OSError, ValueError):
                    dup.flush()
                with contextlib.suppress(OSError):
                    os.dup2(saved, fd)
                with contextlib.suppress(OSError, ValueError):
                    dup.close()


def _fileno(stream: Any) -> Optional[int]:
    """The file descriptor of ``stream``, or None when it has none (StringIO, capsys, closed)."""
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return None


def _write(stream: TextIO, text: str) -> None:
    """Write ``text``; characters the stream's encoding lacks (a cp1252 console) become escapes."""
    try:
        stream.write(text)
    except UnicodeEncodeError:
        encoding = getattr(stream, "encoding", None) or "ascii"
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()



#: The page of docs/reference/cli/ whose ``## NAME`` section documents each command (the
#: command's help names it); a command not listed is documented in the index.
DOC_PARTS = {
    "validate": "validate.md",
    "run": "run.md",
    "status": "inspecting.md",
    "runs": "inspecting.md",
    "show": "inspecting.md",
    "cancel": "run-control.md",
    "approve": "run-control.md",
    "pause": "run-control.md",
    "unpause": "run-control.md",
    "resume": "run-control.md",
    "prune": "run-control.md",
    "schedules": "catalog.md",
    "workflows": "catalog.md",
    "serve": "serve.md",
    "worker": "workers.md",
    "pools": "workers.md",
    "graph": "graph.md",
    "lineage": "assets.md",
    "stale": "assets.md",
    "cache": "assets.md",
    "resources": "resources.md",
}


def doc_reference(name: str) -> str:
    """Where a command is documented: its part of docs/reference/cli/ and ``#NAME``."""
    if name in DOC_PARTS:
        return "docs/reference/cli/%s#%s" % (DOC_PARTS[name], name)
    return "docs/reference/cli/README.md"


class Command:
    """One ``dcc-flow`` subcommand. Subclass it in ``dcc_flow/_cli/<name>.py`` as ``COMMAND``.

    - ``name``: the word after ``dcc-flow``;
    - ``summary``: one line in ``dcc-flow --help``;
    - ``description``: the paragraph at the top of ``dcc-flow <name> --help``;
    - ``examples``: ``(comment, command line)`` pairs, shown under "examples:" in the help;
    - ``exit_codes``: what each exit code means, shown at the end of the help;
    - ``add_arguments(parser)``: declare positional arguments and options (argparse);
    - ``run(args, ctx)``: do the work, write with ``ctx``, return an exit code (0 = success), or
      raise ``CliError``/``UsageError``. ``DccFlowError`` and ``LibraryLoadError`` may propagate:
      ``main`` prints them as one line with exit code 1;
    - ``owns_stdout(args)``: True for a command that runs tools (``Context.own_stdout``).
    """

    name: str = ""
    summary: str = ""
    description: str = ""
    examples: Sequence[Tuple[str, str]] = ()
    exit_codes: str = "0 success, 1 failure, 2 usage error"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's arguments (none by default)."""

    def run(self, args: argparse.Namespace, ctx: Context) -> int:
        raise NotImplementedError("%s.run" % type(self).__name__)

    def owns_stdout(self, args: argparse.Namespace) -> bool:
        """True when the command runs tools in this process: ``main`` then runs it inside
        ``Context.own_stdout``, so that standard output carries only what the command writes."""
        return False

    def epilog(self) -> str:
        """The help epilog: the examples, then where to read more."""
        lines: List[str] = []
        if self.examples:
            lines.append("examples:")
            for comment, command in self.examples:
                lines.append("  # %s" % comment)
                lines.append("  %s" % command)
                lines.append("")
        lines.append("exit codes: %s" % self.exit_codes)
        lines.append("reference: %s" % doc_reference(self.name))
        return "\n".join(lines)
