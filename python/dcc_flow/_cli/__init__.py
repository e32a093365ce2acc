"""The ``dcc-flow`` command line (``python -m dcc_flow`` too). Private: the interface is the CLI.

Adding a command
----------------
1. Write ``dcc_flow/_cli/<name>.py`` with a ``Command`` subclass (``_base.py``) and a module-level
   ``COMMAND = <Subclass>()``: ``name``, ``summary``, ``description``, ``examples``,
   ``add_arguments(parser)``, ``run(args, ctx) -> int``. ``validate.py`` and ``graph.py`` are models.
2. Add ``"<name>"`` to ``COMMAND_MODULES`` below, where it should appear in ``dcc-flow --help``.
3. Test it in ``tests/py/test_cli.py`` (``main([...])`` with capsys) and document it in its part of
   docs/reference/cli/ (see docs/reference/cli/contributing.md), named in ``_base.DOC_PARTS``.

Conventions: results go to ``ctx.out``, diagnostics to ``ctx.err``; ``--json`` switches results to
JSON; a spec argument goes through ``_specfile.load_spec`` (``-`` = stdin); failures raise
``CliError`` (exit 1) and bad command lines ``UsageError`` (exit 2), printed as one line. Modules
whose name starts with ``_`` are helpers, the others are commands.
"""

import argparse
import difflib
import importlib
import logging
import os
import platform
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._errors import DccFlowError, LibraryLoadError, NotFoundError
from ._base import (
    EXIT_FAILURE,
    EXIT_USAGE,
    PROG,
    ArgumentParser,
    CliError,
    Command,
    Context,
    HelpFormatter,
    ParserExit,
    UsageError,
    one_line,
    plain,
    terminal_safe,
)

__all__ = ["main", "COMMAND_MODULES", "commands"]

#: The command modules of this package, in the order ``dcc-flow --help`` lists them.
COMMAND_MODULES = (
    "validate",
    "run",
    "status",
    "runs",
    "show",
    "cancel",
    "approve",
    "pause",
    "unpause",
    "resume",
    "prune",
    "schedules",
    "workflows",
    "serve",
    "worker",
    "pools",
    "graph",
    "lineage",
    "stale",
    "cache",
    "resources",
)

#: Set to 1 to let unexpected exceptions out with their traceback.
DEBUG_ENV = "DCC_FLOW_DEBUG"

_EXIT_INTERRUPTED = 130


def commands() -> Dict[str, Command]:
    """The registered commands by name, in help order."""
    out: Dict[str, Command] = {}
    for module_name in COMMAND_MODULES:
        module = importlib.import_module("%s.%s" % (__name__, module_name))
        command: Command = module.COMMAND
        out[command.name] = command
    return out


def _version_text() -> str:
    from .. import __version__, library_version

    lines = ["%s %s" % (PROG, __version__)]
    try:
        info = library_version()
        lines.append(
            "library %s (C ABI %s, %s) %s"
            % (info.get("version"), info.get("abi_version"), info.get("go_version"), info.get("path"))
        )
    except (LibraryLoadError, DccFlowError, RuntimeError) as exc:
        lines.append("library not loaded: %s" % one_line(str(exc)))
    lines.append("python %s (%s)" % (platform.python_version(), sys.executable or "?"))
    return "\n".join(lines)


class _VersionAction(argparse.Action):
    """``--version``: the library is loaded only when this is asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: Optional[str] = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: Optional[str] = None,
    ) -> None:
        Context(PROG).print(_version_text())
        parser.exit(0)


def _build_parser(registry: Dict[str, Command]) -> Tuple[ArgumentParser, Dict[str, ArgumentParser]]:
    """The top-level parser, and the parser of each command by name."""
    examples: List[str] = []
    for command in registry.values():
        if command.examples:
            comment, line = command.examples[0]
            examples.append("  # %s\n  %s" % (comment, line))
    epilog = (
        "examples:\n%s\n\n"
        "Run '%s COMMAND --help' for the options and examples of a command.\n"
        "exit codes: 0 success, 1 failure (an invalid spec, an unreadable file, a failed run, ...),\n"
        "2 usage error, 3 a run was cancelled or interrupted (run, resume, status), 130 Ctrl-C\n"
        "reference: docs/reference/cli/README.md; set %s=1 to see the traceback of an unexpected error"
        % ("\n\n".join(examples), PROG, DEBUG_ENV)
    )
    parser = ArgumentParser(
        prog=PROG,
        description="Check, draw and run dcc-flow workflows: pipelines of DCC tool calls written as YAML or JSON.",
        epilog=epilog,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="show the versions of dcc-flow, its native library and Python, and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    children: Dict[str, ArgumentParser] = {}
    for command in registry.values():
        child = sub.add_parser(
            command.name,
            help=command.summary,
            description=command.description or command.summary,
            epilog=command.epilog(),
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        command.add_arguments(child)
        children[command.name] = child
    return parser, children


#: Options of ``dcc-flow`` itself (before the command) that take a value: `_command_word` skips it.
_TOP_LEVEL_OPTIONS_WITH_VALUE: Tuple[str, ...] = ()


def _command_word(argv: Sequence[str]) -> Optional[str]:
    """The command word of a command line (the first positional argument), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--":
            return None
        elif arg in _TOP_LEVEL_OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-") or arg == "-":
            return arg
    return None


def _unknown_command(name: str, registry: Dict[str, Command]) -> UsageError:
    names = list(registry)
    close = difflib.get_close_matches(name, names, n=1)
    hint = "did you mean %r?" % close[0] if close else "commands: %s" % ", ".join(names)
    return UsageError("unknown command %r; %s" % (name, hint), prog=PROG)


def _late_positionals(parser: ArgumentParser, namespace: argparse.Namespace, extras: Sequence[str]) -> List[str]:
    """Give the words argparse left over to the command's optional positionals (``nargs`` ``?`` or
    ``*``) that took no word, in order, and return the extras still left. argparse fills
    positionals only from the words before the first option, so ``dcc-flow show RUN --db f.db
    STEP`` would leave ``STEP`` unrecognized (python/cpython#58401). A word that looks like an
    option (but ``-``, standard input) stops the filling; a word the positional refuses (its
    ``type`` or ``choices``) is a usage error naming it, as argparse's own would be."""
    left = list(extras)
    for action in parser._actions:
        if action.option_strings or action.nargs not in ("?", "*"):
            continue
        if not left or (left[0].startswith("-") and left[0] != "-"):
            break
        if getattr(namespace, action.dest, None) != _untaken(parser, action):
            continue  # it took words where argparse put them
        take = 1 if action.nargs == "?" else next(
            (i for i, w in enumerate(left) if w.startswith("-") and w != "-"), len(left))
        try:
            value = parser._get_values(action, left[:take])
        except argparse.ArgumentError as exc:
            raise UsageError(str(exc), prog=parser.prog) from None
        setattr(namespace, action.dest, value)
        del left[:take]
    return left


def _untaken(parser: ArgumentParser, action: argparse.Action) -> Any:
    """What argparse stores for an optional positional given no word: its default (converted by
    its ``type`` when a string, as argparse does), or [] for ``*`` without one."""
    try:
        return parser._get_values(action, [])
    except argparse.ArgumentError:
        return action.default


def _unrecognized(extras: Sequence[str], parser: ArgumentParser) -> UsageError:
    """``unrecognized arguments: --jsn; did you mean --json?`` for the command's own parser."""
    message = "unrecognized arguments: %s" % " ".join(extras)
    options = [o for action in parser._actions for o in action.option_strings]
    first = extras[0].split("=", 1)[0]
    close = difflib.get_close_matches(first, options, n=1) if first.startswith("-") else []
    if close:
        message += "; did you mean %s?" % close[0]
    return UsageError(message, prog=parser.prog)


class _TerminalSafeHandler(logging.Handler):
    """What ``logging.lastResort`` does for the command line — WARNING and up, the message alone, on
    the current ``sys.stderr`` — with ``plain`` applied to the message (``terminal_safe`` to a
    traceback): a warning may quote a database server's or a tool's words, which must not act on
    the terminal (docs/operations/running.md, "Security")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = plain(record.getMessage())  # one line: a quoted newline must not forge another
            if record.exc_info:
                text += "\n" + terminal_safe(logging.Formatter().formatException(record.exc_info))
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


_LOG_HANDLER = _TerminalSafeHandler()


def _install_log_handler() -> None:
    """Show the ``dcc_flow`` logger's warnings through ``_TerminalSafeHandler``, unless logging is
    configured (a handler on the root or the ``dcc_flow`` logger): then it is the user's."""
    logger = logging.getLogger("dcc_flow")
    if not logging.getLogger().handlers and not logger.handlers:
        logger.addHandler(_LOG_HANDLER)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``dcc-flow`` command line with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Never raises (except with ``DCC_FLOW_DEBUG=1``) and never calls ``sys.exit``: errors are printed
    as one line on stderr; the exit code is 0 on success, 1 on failure, 2 for a bad command line.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    prog = PROG
    namespace: Optional[argparse.Namespace] = None
    _install_log_handler()
    try:
        registry = commands()
        word = _command_word(args)
        if word is not None and word not in registry:
            raise _unknown_command(word, registry)
        parser, children = _build_parser(registry)
        try:
            namespace, extras = parser.parse_known_args(args)
        except ParserExit as done:
            return done.status
        command = registry.get(namespace.command or "")
        if command is None:
            if extras:
                raise _unrecognized(extras, parser)
            raise UsageError("missing command; commands: %s" % ", ".join(registry), prog=PROG)
        prog = "%s %s" % (PROG, command.name)
        if extras:
            extras = _late_positionals(children[command.name], namespace, extras)
        if extras:
            raise _unrecognized(extras, children[command.name])
        ctx = Context(prog)
        if command.owns_stdout(namespace):  # it runs tools: their stray output goes to stderr
            with ctx.own_stdout():
                return command.run(namespace, ctx)
        return command.run(namespace, ctx)
    except UsageError as exc:
        where = exc.prog or prog
        Context(where).error("%s (see '%s --help')" % (exc.message.rstrip("."), where))
        return EXIT_USAGE
    except CliError as exc:
        Context(exc.prog or prog).error(exc.message)
        return exc.exit_code
    except (LibraryLoadError, DccFlowError) as exc:
        message = str(exc)
        if isinstance(exc, NotFoundError) and namespace is not None:  # "no run with id …" of a file not there
            from ._engine import missing_db

            missing = missing_db(namespace)
            if missing:
                message += "; " + missing
        Context(prog).error(message)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        Context(prog).eprint("%s: interrupted" % prog)
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`dcc-flow graph f.yaml | head`): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        _silence_stdout()
        return EXIT_FAILURE
    except Exception as exc:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        Context(prog).error(
            "unexpected %s: %s (a bug in dcc-flow; set %s=1 for the traceback)"
            % (type(exc).__name__, one_line(str(exc)) or "no message", DEBUG_ENV)
        )
        return EXIT_FAILURE


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
