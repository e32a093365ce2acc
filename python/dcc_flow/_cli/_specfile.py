"""Reading spec files for the commands that take one (validate, graph, run, ...).

``load_spec(path)`` never raises for a bad spec or an unreadable file: it returns a ``SpecFile``
holding the parsed spec (when it parsed) and every problem, parse-time and semantic, errors and
warnings, sorted by position. ``format_problem`` prints one as ``FILE:LINE:COLUMN: CODE: message``.
"""

import os
import sys
from typing import Any, BinaryIO, Dict, List, Optional

from .._errors import DccFlowError, LibraryLoadError, Problem, ValidationError
from .._spec import WorkflowSpec
from .._suggest import file_hint
from ._base import one_line

__all__ = ["STDIN", "SpecFile", "load_spec", "is_spec_file", "format_problem", "plural"]

#: The file argument that means "read the spec from standard input".
STDIN = "-"
_STDIN_LABEL = "<stdin>"


def is_spec_file(path: str) -> bool:
    """Whether a command's FILE argument names a spec to read with ``load_spec``: ``-`` (standard
    input) or an existing file. (``run``'s target may also be a catalog name or a @workflow.)"""
    return path == STDIN or os.path.isfile(path)


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


class SpecFile:
    """The outcome of reading one spec file.

    ``label`` names the file in messages (the path as given, ``<stdin>`` for ``-``). ``spec`` is
    ``None`` when the file could not be read (``read_error`` says why) or did not parse.
    """

    def __init__(
        self,
        label: str,
        spec: Optional[WorkflowSpec] = None,
        problems: Optional[List[Problem]] = None,
        read_error: Optional[str] = None,
    ) -> None:
        self.label = label
        self.spec = spec
        self.problems: List[Problem] = sorted(problems or [], key=_position)
        self.read_error = read_error

    @property
    def errors(self) -> List[Problem]:
        """The problems of severity error."""
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> List[Problem]:
        """The problems of severity warning."""
        return [p for p in self.problems if not p.is_error]

    @property
    def ok(self) -> bool:
        """True when the file was read, parsed and has no errors (warnings are allowed)."""
        return self.spec is not None and self.read_error is None and not self.errors

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object ``validate --json`` prints for this file."""
        problems = [p.to_dict() for p in self.problems]
        if self.read_error is not None:
            problems.insert(0, {"code": "read_error", "severity": "error", "message": self.read_error})
        spec = self.spec
        return {
            "file": self.label,
            "ok": self.ok,
            "name": spec.name if spec is not None else None,
            "step_count": spec.step_count if spec is not None else None,
            "spec_hash": spec.spec_hash if spec is not None else None,
            "problems": problems,
        }


def _position(problem: Problem) -> Any:
    # Problems without a position go last; the sort is stable, so the library's order stays.
    return (problem.line is None, problem.line or 0, problem.column or 0)


def load_spec(path: str, stdin: Optional[BinaryIO] = None) -> SpecFile:
    """Read and parse one spec file (YAML or JSON, detected from the content); ``-`` is stdin.

    Raises only ``LibraryLoadError`` (the native library is missing or unusable): every other
    failure is recorded in the returned ``SpecFile``.
    """
    label = _STDIN_LABEL if path == STDIN else path
    try:
        if path == STDIN:
            raw = _read_stdin(stdin)
            if raw.lstrip(b" \t\r\n\xef\xbb\xbf").startswith(b"{"):
                spec = WorkflowSpec.from_json(raw, source=label)
            else:
                spec = WorkflowSpec.from_yaml_str(raw, source=label)
        else:
            spec = WorkflowSpec.from_file(path)
    except LibraryLoadError:
        raise
    except OSError as exc:
        what = "standard input" if path == STDIN else path
        hint = file_hint(path) if isinstance(exc, FileNotFoundError) else ""
        return SpecFile(label, read_error="cannot read %s: %s%s" % (what, _reason(exc), hint))
    except ValidationError as exc:
        return SpecFile(label, problems=list(exc.problems) or [_problem_of(exc)])
    except DccFlowError as exc:
        return SpecFile(label, problems=[_problem_of(exc)])
    return SpecFile(label, spec=spec, problems=list(spec.problems) + list(spec.warnings))


def _read_stdin(stdin: Optional[BinaryIO]) -> bytes:
    if stdin is not None:
        return stdin.read()
    if sys.stdin is None:  # pythonw, a DCC's GUI
        raise OSError(0, "there is no standard input")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return bytes(buffer.read())
    return str(sys.stdin.read()).encode("utf-8", "surrogateescape")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _problem_of(exc: DccFlowError) -> Problem:
    return Problem(
        code=exc.code,
        message=one_line(exc.message),
        step_id=exc.step_id,
        line=exc.line,
        column=exc.column,
    )


def format_problem(label: str, problem: Problem) -> str:
    """``FILE:LINE:COLUMN: CODE: message``; warnings as ``FILE:LINE:COLUMN: warning: CODE: message``.

    The position parts that are unknown are left out (``FILE: CODE: message``). A hint the message
    does not already contain is appended after ``; ``.
    """
    where = label
    if problem.line:
        where += ":%d" % problem.line
        if problem.column:
            where += ":%d" % problem.column
    message = problem.message or problem.code
    if problem.hint and problem.hint not in message:
        message = "%s; %s" % (message, problem.hint)
    severity = "" if problem.is_error else "warning: "
    return "%s: %s%s: %s" % (where, severity, problem.code, one_line(message))
