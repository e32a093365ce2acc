"""Exceptions raised by dcc_flow, and the table that maps the library's stable error codes to them.

The native library reports every failure as an error envelope (docs/reference/c-abi/README.md)::

    {"code": "validation_failed", "message": "...", "step_id": "export", "line": 7, "column": 5,
     "details": {"problems": [...]}}

``_ffi._check`` turns an envelope into an instance of the class registered for its ``code`` in
``CODE_TO_CLASS`` (``DccFlowError`` for codes this version does not know).
"""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

__all__ = [
    "DccFlowError",
    "InvalidRequestError",
    "ValidationError",
    "ParseError",
    "SpecTooLargeError",
    "InternalError",
    "DatabaseLockedError",
    "ReadOnlyError",
    "StorageError",
    "WorkerStartError",
    "InvalidInputError",
    "NotFoundError",
    "UnknownToolError",
    "NotResumableError",
    "SpecChangedError",
    "InvalidStateError",
    "EngineClosedError",
    "StaleHandleError",
    "DccFlowTimeoutError",
    "CancelledError",
    "LibraryLoadError",
    "LibraryNotFoundError",
    "AbiVersionError",
    "WorkflowTraceError",
    "Problem",
    "CODE_TO_CLASS",
    "error_from_envelope",
]


class Problem:
    """One problem found in a spec or a schedule file: immutable, compared by value.

    ``code`` is a stable problem code (``unknown_field``, ``cycle``, …), ``severity`` is
    ``"error"`` or ``"warning"``; ``step_id``, ``path``, ``line``, ``column``, ``hint``, ``file``
    and ``schedule_id`` are ``None`` when unknown. ``line`` and ``column`` are 1-based positions
    in the text. A spec's problems name their step (``step_id``); a schedule file's name the file
    and the schedule (``file``, ``schedule_id``): the library reports both with one type.
    """

    __slots__ = ("code", "severity", "message", "step_id", "path", "line", "column", "hint", "file", "schedule_id")

    code: str
    severity: str
    message: str
    step_id: Optional[str]
    path: Optional[str]
    line: Optional[int]
    column: Optional[int]
    hint: Optional[str]
    file: Optional[str]
    schedule_id: Optional[str]

    def __init__(
        self,
        code: str,
        message: str,
        severity: str = "error",
        step_id: Optional[str] = None,
        path: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
        hint: Optional[str] = None,
        file: Optional[str] = None,
        schedule_id: Optional[str] = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "code", code)
        set_(self, "severity", severity)
        set_(self, "message", message)
        set_(self, "step_id", step_id or None)
        set_(self, "path", path or None)
        set_(self, "line", line or None)
        set_(self, "column", column or None)
        set_(self, "hint", hint or None)
        set_(self, "file", file or None)
        set_(self, "schedule_id", schedule_id or None)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Problem":
        """Build a problem from its JSON object (docs/reference/c-abi/spec-exports.md, "Problem")."""
        return cls(
            code=str(d.get("code") or "unknown"),
            message=str(d.get("message") or ""),
            severity=str(d.get("severity") or "error"),
            step_id=d.get("step_id"),
            path=d.get("path"),
            line=d.get("line"),
            column=d.get("column"),
            hint=d.get("hint"),
            file=d.get("file"),
            schedule_id=d.get("schedule_id"),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object form; unknown fields are omitted, as the library does."""
        out: Dict[str, Any] = {"code": self.code, "severity": self.severity, "message": self.message}
        for name in ("step_id", "path", "line", "column", "hint", "file", "schedule_id"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @property
    def is_error(self) -> bool:
        """True unless the problem is a warning."""
        return self.severity != "warning"

    def _key(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Problem is immutable; cannot set %r" % name)

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Problem is immutable; cannot delete %r" % name)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_problem_from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(
            "%s=%r" % (name, getattr(self, name))
            for name in self.__slots__
            if getattr(self, name) is not None
        )
        return "Problem(%s)" % fields

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        """One line: ``line 7:5 steps[1] (id "export"): message``, or for a problem of a schedule
        file ``nightly.schedules.yaml:7:19 schedule "nightly": message``.

        The step id is always named: when the library's message does not already quote it, it is
        appended as ``(step "id")``.
        """
        parts = []
        if self.severity == "warning":
            parts.append("warning:")
        if self.file:
            parts.append("%s:%d:%d" % (self.file, self.line, self.column or 0) if self.line else self.file + ":")
        elif self.line:
            parts.append("line %d:%d" % (self.line, self.column or 0))
        message = self.message or self.code
        if self.step_id and ('"%s"' % self.step_id) not in message:
            message = '%s (step "%s")' % (message, self.step_id)
        parts.append(message)
        return " ".join(parts)


def _problem_from_dict(d: Mapping[str, Any]) -> Problem:
    return Problem.from_dict(d)


class DccFlowError(Exception):
    """Base class of every error the library reports.

    ``code`` is the stable error code (``validation_failed``, ``internal``, …), ``details`` the
    envelope's ``details`` object (``{}`` when absent); ``step_id``, ``line`` and ``column`` are
    ``None`` when unknown.
    """

    default_code = "error"

    def __init__(
        self,
        message: str,
        code: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        step_id: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details: Dict[str, Any] = dict(details or {})
        self.step_id = step_id or None
        self.line = line or None
        self.column = column or None

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Tuple[Any, ...]:
        return (
            _rebuild_error,
            (type(self), self.message, self.code, self.details, self.step_id, self.line, self.column),
        )


def _rebuild_error(
    cls: Type[DccFlowError],
    message: str,
    code: str,
    details: Dict[str, Any],
    step_id: Optional[str],
    line: Optional[int],
    column: Optional[int],
) -> DccFlowError:
    err = cls.__new__(cls)
    DccFlowError.__init__(err, message, code, details, step_id, line, column)
    if isinstance(err, ValidationError):
        problems = details.get("problems") or []
        err.problems = [Problem.from_dict(p) for p in problems if isinstance(p, Mapping)]
    return err


class InvalidRequestError(DccFlowError, ValueError):
    """The request sent to the library was malformed (a bug in the caller or in dcc_flow)."""

    default_code = "invalid_request"


_V = TypeVar("_V", bound="ValidationError")


class ValidationError(DccFlowError, ValueError):
    """A spec has problems. ``problems`` lists every one (``Problem`` objects).

    The message has one line per problem and names each problem's step id::

        3 problems in spec:
          line 7:5 steps[1] (id "export"): unknown field "tol"; did you mean "tool"?
          ...
    """

    default_code = "validation_failed"

    def __init__(
        self,
        message: str,
        code: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        step_id: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
        problems: Optional[Iterable[Problem]] = None,
    ) -> None:
        super().__init__(message, code, details, step_id, line, column)
        self.problems: List[Problem] = list(problems or [])

    @classmethod
    def from_problems(
        cls: Type[_V],
        problems: Sequence[Problem],
        code: Optional[str] = None,
        source: Optional[str] = None,
        details: Optional[Mapping[str, Any]] = None,
        fallback_message: str = "",
    ) -> _V:
        """Build the error with a message listing every problem (errors first, then warnings)."""
        ordered = [p for p in problems if p.is_error] + [p for p in problems if not p.is_error]
        first = ordered[0] if ordered else None
        if details is None:
            details = {"problems": [p.to_dict() for p in ordered]}
        return cls(
            format_problems(ordered, source, fallback_message),
            code=code,
            details=details,
            step_id=first.step_id if first else None,
            line=first.line if first else None,
            column=first.column if first else None,
            problems=ordered,
        )

    @property
    def errors(self) -> List[Problem]:
        """The problems of severity ``error``."""
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> List[Problem]:
        """The problems of severity ``warning``."""
        return [p for p in self.problems if not p.is_error]


class ParseError(ValidationError):
    """The spec text is not well-formed YAML/JSON (or not UTF-8), or is not a mapping."""

    default_code = "parse_error"


class SpecTooLargeError(ValidationError):
    """The spec exceeds a size, nesting-depth or step-count limit."""

    default_code = "too_large"


class InvalidInputError(ValidationError):
    """A run's inputs do not match the workflow's declarations (code ``invalid_input``): a
    ``ValidationError`` whose ``problems`` name each input."""

    default_code = "invalid_input"


class InternalError(DccFlowError):
    """A bug in the library (a recovered Go panic); ``details["stack"]`` has the Go stack."""

    default_code = "internal"


class DatabaseLockedError(DccFlowError):
    """Another process owns the database (code ``db_locked``): open it with ``read_only=True``
    to look at its runs and approve or cancel them through that process.
    ``details["holder"]`` says which process holds it."""

    default_code = "db_locked"


class ReadOnlyError(DccFlowError):
    """A read-only engine was asked to start, resume or prune runs (code ``read_only``)."""

    default_code = "read_only"


class StorageError(DccFlowError):
    """The database could not be read or written (code ``storage``): a full disk, an I/O error,
    a corrupted (malformed) file, a file that cannot be opened. Not a bug in dcc-flow: free disk
    space, fix or restore the file, or use another database (docs/operations/running.md)."""

    default_code = "storage"


class WorkerStartError(DccFlowError):
    """A worker of a pool could not be started (code ``worker_start``): its program is missing,
    it exited at start, or it did not answer ``initialize`` within ``start_timeout_secs``. The
    message names the pool, the command and the end of its standard error (docs/guide/pools.md)."""

    default_code = "worker_start"


class NotFoundError(DccFlowError, LookupError):
    """No run, workflow, schedule or step instance with that id or name (code ``not_found``)."""

    default_code = "not_found"


class UnknownToolError(DccFlowError, LookupError):
    """A workflow names tools that are not registered (code ``unknown_tool``);
    ``details["tools"]`` lists them. After a restart, register the host tools again."""

    default_code = "unknown_tool"


class NotResumableError(DccFlowError):
    """The run cannot resume (code ``not_resumable``): it is still running, or it completed and
    no ``force_steps`` were named."""

    default_code = "not_resumable"


class SpecChangedError(DccFlowError):
    """The run was started from another spec than the one the caller expects (code
    ``spec_changed``); ``details`` has both hashes."""

    default_code = "spec_changed"


class InvalidStateError(DccFlowError):
    """The request does not fit the current state (code ``invalid_state``): no open approval of
    that step, a store that cannot do it, a database of an unknown schema…"""

    default_code = "invalid_state"


class EngineClosedError(DccFlowError, RuntimeError):
    """The engine is closed (code ``closed``): open a new one. A ``RuntimeError``, as every call
    on a closed engine has always raised."""

    default_code = "closed"


class StaleHandleError(EngineClosedError):
    """The handle of a closed engine (or of one from before a fork) was used (code
    ``stale_handle``)."""

    default_code = "stale_handle"


class DccFlowTimeoutError(DccFlowError, TimeoutError):
    """A wait ended before what it waited for (code ``timeout``): the other process that owns
    the database did not answer, a call did not come back in time."""

    default_code = "timeout"


class CancelledError(DccFlowError):
    """The operation was cancelled (code ``cancelled``)."""

    default_code = "cancelled"


class WorkflowTraceError(DccFlowError, TypeError):
    """A code-first workflow could not be traced or compiled (raised by ``dcc_flow._flow`` while
    tracing; no code of the library maps to it).

    The message starts with the user's ``file:line`` and names the step; ``step_id``,
    ``filename`` and ``lineno`` are also attributes (``None`` when unknown).
    """

    default_code = "trace_error"

    def __init__(
        self,
        message: str,
        step_id: Optional[str] = None,
        filename: Optional[str] = None,
        lineno: Optional[int] = None,
    ) -> None:
        super().__init__(message, code="trace_error", step_id=step_id)
        self.filename = filename
        self.lineno = lineno

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.message, self.step_id, self.filename, self.lineno))


class LibraryLoadError(OSError):
    """The native library could not be loaded or is not usable."""


class LibraryNotFoundError(LibraryLoadError):
    """The native library file was not found at any of the paths tried."""


class AbiVersionError(LibraryLoadError):
    """The native library speaks a different C ABI version than this Python package."""


#: Stable error code → exception class. Codes missing here raise ``DccFlowError``.
CODE_TO_CLASS: Dict[str, Type[DccFlowError]] = {
    "invalid_request": InvalidRequestError,
    "parse_error": ParseError,
    # The library reports an empty or non-mapping spec with the problem code as envelope code.
    "not_a_mapping": ParseError,
    "validation_failed": ValidationError,
    "too_large": SpecTooLargeError,
    "internal": InternalError,
    "db_locked": DatabaseLockedError,
    "read_only": ReadOnlyError,
    "storage": StorageError,
    "worker_start": WorkerStartError,
    "invalid_input": InvalidInputError,
    "not_found": NotFoundError,
    "unknown_tool": UnknownToolError,
    "not_resumable": NotResumableError,
    "spec_changed": SpecChangedError,
    "invalid_state": InvalidStateError,
    "closed": EngineClosedError,
    "stale_handle": StaleHandleError,
    "timeout": DccFlowTimeoutError,
    "cancelled": CancelledError,
}


def format_problems(problems: Sequence[Problem], source: Optional[str] = None, fallback: str = "") -> str:
    """``N problems in <source>:`` followed by one indented line per problem."""
    where = source or "spec"
    if not problems:
        return fallback or "invalid spec (%s)" % where
    count = len(problems)
    head = "%d problem%s in %s:" % (count, "" if count == 1 else "s", where)
    return head + "".join("\n  " + p.format() for p in problems)


def error_from_envelope(envelope: Mapping[str, Any], source: Optional[str] = None) -> DccFlowError:
    """The exception for an error envelope ``{"code", "message", "step_id"?, ...}``."""
    code = str(envelope.get("code") or "internal")
    message = str(envelope.get("message") or "dcc-flow library error (%s)" % code)
    details = envelope.get("details")
    if not isinstance(details, Mapping):
        details = {}
    cls = CODE_TO_CLASS.get(code)
    if cls is None:
        # An envelope that lists spec problems is a validation error whatever its code.
        cls = ValidationError if isinstance(details.get("problems"), list) else DccFlowError
    if issubclass(cls, ValidationError):
        raw = details.get("problems")
        problems = [Problem.from_dict(p) for p in raw if isinstance(p, Mapping)] if isinstance(raw, list) else []
        if not problems:
            problems = [
                Problem(
                    code=code,
                    message=message,
                    step_id=envelope.get("step_id"),
                    line=envelope.get("line"),
                    column=envelope.get("column"),
                )
            ]
        err: DccFlowError = cls.from_problems(problems, code=code, source=source, details=details)
        return err
    if code == "internal" and details.get("stack"):
        message = "%s\n(this is a bug in dcc-flow; please report it with the Go stack in .details['stack'])" % message
    return cls(
        message,
        code=code,
        details=details,
        step_id=envelope.get("step_id"),
        line=envelope.get("line"),
        column=envelope.get("column"),
    )
