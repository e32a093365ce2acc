"""Frozen Python views of a workflow spec, built from the library's canonical JSON.

Parsing and validation happen in Go (``dccflow_spec_parse``); these classes only read the canonical
form (docs/reference/c-abi/spec-exports.md, "The canonical spec JSON"). Every view is immutable: setting or deleting an
attribute raises ``AttributeError``. Two views are equal (and hash equal) when their canonical
JSON is equal. Re-parse the YAML to change anything.
"""

import enum
import json
import os
import re
from types import MappingProxyType
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from . import _ffi
from ._errors import InternalError, ParseError, Problem, SpecTooLargeError, ValidationError
from ._json import freeze, go_json, thaw
from ._yaml import dump_spec

__all__ = [
    "BackoffKind",
    "WorkflowStatus",
    "StepStatus",
    "RetryPolicy",
    "StepPolicy",
    "InputSpec",
    "WorkflowStep",
    "WorkflowSpec",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
# Characters a YAML 1.1 parser does not read literally inside a JSON string (DEL and C1 controls
# are rejected, NEL/LS/PS are folded as line breaks); their \u escapes are read exactly.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")

TextLike = Union[str, bytes, bytearray, memoryview]
PathLike = Union[str, "os.PathLike[str]"]


class _StrEnum(str, enum.Enum):
    """An enum whose members are also their string value; ``str()`` and ``format()`` give the value
    on every Python version."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class BackoffKind(_StrEnum):
    """The shape of the delay between retry attempts."""

    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class WorkflowStatus(_StrEnum):
    """The status of a whole run."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def is_terminal(self) -> bool:
        """True for completed, failed, cancelled and interrupted (no change without a resume)."""
        return self in _TERMINAL_RUN


class StepStatus(_StrEnum):
    """The status of one step instance."""

    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    WAITING_APPROVAL = "waiting_approval"
    #: A tool step waiting for the units of the scarce resources it asks for
    #: (docs/guide/resources.md): ``StepRecord.waiting`` says what for; it has not called its tool.
    WAITING_RESOURCES = "waiting_resources"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"

    @property
    def is_terminal(self) -> bool:
        """True for completed, failed, cancelled, skipped and interrupted."""
        return self in _TERMINAL_STEP


_TERMINAL_RUN = frozenset(
    [WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED, WorkflowStatus.INTERRUPTED]
)
_TERMINAL_STEP = frozenset(
    [StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED, StepStatus.INTERRUPTED]
)

#: Error kinds not retried when a retry policy has no ``retry_on`` list (docs/reference/spec.md, "retry").
NOT_RETRIED_BY_DEFAULT = frozenset(["fatal", "cancelled", "invalid_input", "permission", "not_found", "invalid_output",
                                    "too_large"])


class _View:
    """Base of the frozen views: holds the canonical JSON object it was built from."""

    __slots__ = ("_data", "_json")

    _data: Dict[str, Any]
    _json: Optional[str]

    def _init(self, data: Dict[str, Any]) -> None:
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_json", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            "%s is immutable (cannot set %r); re-parse the spec to change it" % (type(self).__name__, name)
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError("%s is immutable (cannot delete %r)" % (type(self).__name__, name))

    def to_json(self) -> str:
        """The canonical JSON of this object (sorted keys, no whitespace, Go's byte form)."""
        text = self._json
        if text is None:
            text = go_json(self._data)
            object.__setattr__(self, "_json", text)
        return text

    def to_dict(self) -> Dict[str, Any]:
        """A deep, mutable copy of the canonical JSON object."""
        out: Dict[str, Any] = thaw(self._data)
        return out

    def _key(self) -> Any:
        return self.to_json()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(self._key() == other._key())

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_restore_view, (type(self).__name__, self.to_dict()))


def _restore_view(type_name: str, data: Dict[str, Any]) -> Any:
    cls: Any = {"RetryPolicy": RetryPolicy, "StepPolicy": StepPolicy, "WorkflowStep": WorkflowStep}[type_name]
    return cls._from_dict(data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RetryPolicy(_View):
    """How a failed step is retried.

    Built from a spec's ``retry`` block, or directly (defaults as in docs/reference/spec.md, "retry")::

        RetryPolicy(3, backoff="exponential", initial_delay_ms=500, max_delay_ms=10000)
    """

    __slots__ = ()

    def __init__(
        self,
        max_attempts: int,
        backoff: Union[BackoffKind, str] = BackoffKind.EXPONENTIAL,
        initial_delay_ms: int = 500,
        max_delay_ms: int = 10000,
        jitter: float = 0.0,
        retry_on: Optional[Iterable[str]] = None,
        multiplier: Optional[float] = None,
    ) -> None:
        if not _is_int(max_attempts) or max_attempts < 1:
            raise ValueError("max_attempts must be an integer >= 1 (1 = no retry), got %r" % (max_attempts,))
        try:
            kind = BackoffKind(backoff)
        except ValueError:
            raise ValueError(
                "backoff must be one of %s, got %r" % (", ".join(k.value for k in BackoffKind), backoff)
            ) from None
        for name, value in (("initial_delay_ms", initial_delay_ms), ("max_delay_ms", max_delay_ms)):
            if not _is_int(value) or value < 0:
                raise ValueError("%s must be an integer >= 0, got %r" % (name, value))
        if initial_delay_ms > max_delay_ms:
            raise ValueError(
                "initial_delay_ms (%d) must be <= max_delay_ms (%d)" % (initial_delay_ms, max_delay_ms)
            )
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0.0 <= jitter <= 1.0:
            raise ValueError("jitter must be a number in [0, 1], got %r" % (jitter,))
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not 1 <= multiplier <= 100:
                raise ValueError("multiplier must be a number from 1 to 100, got %r" % (multiplier,))
            if kind is not BackoffKind.EXPONENTIAL:
                raise ValueError("multiplier applies to exponential backoff only, not %r" % kind.value)
        kinds: Optional[List[str]] = None
        if retry_on is not None:
            if isinstance(retry_on, (str, bytes)):
                raise ValueError("retry_on must be a list of error kinds, not a single string")
            kinds = [str(k) for k in retry_on]
        data: Dict[str, Any] = {
            "backoff": kind.value,
            "initial_delay_ms": initial_delay_ms,
            "jitter": jitter,
            "max_attempts": max_attempts,
            "max_delay_ms": max_delay_ms,
            "retry_on": kinds,
        }
        if multiplier is not None:
            data["multiplier"] = multiplier
        self._init(data)

    @classmethod
    def _from_dict(cls, data: Dict[str, Any]) -> "RetryPolicy":
        self = cls.__new__(cls)
        self._init(data)
        return self

    @property
    def max_attempts(self) -> int:
        """Attempts in all, including the first (1 = no retry)."""
        return int(self._data.get("max_attempts", 1))

    @property
    def backoff(self) -> BackoffKind:
        """The delay shape."""
        return BackoffKind(self._data.get("backoff", "exponential"))

    @property
    def initial_delay_ms(self) -> int:
        """The base delay in milliseconds."""
        return int(self._data.get("initial_delay_ms", 500))

    @property
    def max_delay_ms(self) -> int:
        """The upper clamp of a delay, in milliseconds (applied before jitter)."""
        return int(self._data.get("max_delay_ms", 10000))

    @property
    def jitter(self) -> float:
        """Relative jitter in [0, 1]: the delay is multiplied by ``1 + U(-jitter, +jitter)``."""
        return float(self._data.get("jitter", 0))

    @property
    def multiplier(self) -> Optional[float]:
        """The growth factor of exponential backoff, or ``None`` when not set (the default, 2)."""
        value = self._data.get("multiplier")
        return None if value is None else value

    @property
    def retry_on(self) -> Optional[Tuple[str, ...]]:
        """The error kinds that are retried, or ``None`` for the default set (see ``is_retryable``)."""
        kinds = self._data.get("retry_on")
        return None if kinds is None else tuple(kinds)

    def next_delay_ms(self, attempt: int) -> int:
        """The unjittered delay before attempt number ``attempt`` (1-based), in milliseconds.

        Attempt 1 has no delay. For n >= 2: fixed = initial, linear = initial * (n - 1),
        exponential = initial * multiplier**(n - 2) (multiplier 2 when not set); the result is
        clamped to ``max_delay_ms`` and truncated to whole milliseconds. With a multiplier the
        power is n - 2 float multiplications, stopping once past the clamp, as the engine does.
        Raises ``ValueError`` unless ``attempt`` is an integer >= 1.
        """
        if not _is_int(attempt) or attempt < 1:
            raise ValueError("attempt must be an integer >= 1 (1 is the first run), got %r" % (attempt,))
        if attempt == 1:
            return 0
        initial, cap = self.initial_delay_ms, self.max_delay_ms
        kind = self.backoff
        if kind is BackoffKind.FIXED:
            delay = initial
        elif kind is BackoffKind.LINEAR:
            delay = initial * (attempt - 1)
        elif self.multiplier is not None:
            value, factor = float(initial), float(self.multiplier)
            i = 0
            while i < attempt - 2 and 0 < value <= cap:
                value *= factor
                i += 1
            return cap if value > cap else int(value)
        else:
            shift = attempt - 2
            # Beyond 2**63 every non-zero base is past any clamp; avoid building huge integers.
            delay = initial << shift if shift < 63 else (cap if initial else 0)
        return min(delay, cap)

    def is_retryable(self, kind: str) -> bool:
        """Whether an attempt that failed with error kind ``kind`` is retried (ignoring max_attempts).

        ``cancelled`` never is. With ``retry_on`` set, only the listed kinds are. Without it,
        every kind is except ``fatal``, ``cancelled``, ``invalid_input``, ``permission``,
        ``not_found``, ``invalid_output`` and ``too_large``. The empty kind counts as ``error``.
        (The engine's rule: engine/spec/retry_policy.go; both are checked against
        testdata/golden/shared_rules.json.)
        """
        kind = str(kind) or "error"
        if kind == "cancelled":
            return False
        retry_on = self.retry_on
        if retry_on is None:
            return kind not in NOT_RETRIED_BY_DEFAULT
        return kind in retry_on

    def __repr__(self) -> str:
        return (
            "RetryPolicy(max_attempts=%d, backoff=%r, initial_delay_ms=%d, max_delay_ms=%d, jitter=%r, retry_on=%r%s)"
        ) % (
            self.max_attempts,
            self.backoff.value,
            self.initial_delay_ms,
            self.max_delay_ms,
            self.jitter,
            list(self.retry_on) if self.retry_on is not None else None,
            "" if self.multiplier is None else ", multiplier=%r" % (self.multiplier,),
        )


_POLICY_KEYS = ("timeout_secs", "retry", "idempotency_key", "idempotency_scope", "idempotency_ttl_secs")


class StepPolicy(_View):
    """The execution policy of a step: timeout, retry and idempotency. Fields absent are ``None``."""

    __slots__ = ("_retry",)

    _retry: Optional[RetryPolicy]

    @classmethod
    def _from_dict(cls, data: Dict[str, Any]) -> "StepPolicy":
        self = cls.__new__(cls)
        self._init({k: data[k] for k in _POLICY_KEYS if k in data})
        retry = self._data.get("retry")
        object.__setattr__(self, "_retry", RetryPolicy._from_dict(retry) if isinstance(retry, dict) else None)
        return self

    @property
    def timeout_secs(self) -> Optional[Union[int, float]]:
        """The per-attempt deadline in seconds, or ``None`` for no timeout."""
        value = self._data.get("timeout_secs")
        return None if value is None else value

    @property
    def retry(self) -> Optional[RetryPolicy]:
        """The retry policy, or ``None`` when the step is not retried."""
        return self._retry

    @property
    def idempotency_key(self) -> Optional[str]:
        """The idempotency key template (or ``"auto"``), or ``None``."""
        return self._data.get("idempotency_key")

    @property
    def idempotency_scope(self) -> str:
        """``"workflow"`` (the default) or ``"global"``."""
        return str(self._data.get("idempotency_scope") or "workflow")

    @property
    def idempotency_ttl_secs(self) -> Optional[int]:
        """How long a cached output is used, in seconds; ``None`` means no expiry."""
        value = self._data.get("idempotency_ttl_secs")
        return None if not value else int(value)

    @property
    def is_empty(self) -> bool:
        """True when the policy sets nothing (no timeout, retry, idempotency key or TTL)."""
        return not any(self._data.get(k) for k in ("timeout_secs", "retry", "idempotency_key", "idempotency_ttl_secs"))

    def __repr__(self) -> str:
        if self.is_empty:
            return "StepPolicy()"
        parts = []
        if self.timeout_secs is not None:
            parts.append("timeout_secs=%r" % self.timeout_secs)
        if self.retry is not None:
            parts.append("retry=%r" % self.retry)
        if self.idempotency_key is not None:
            parts.append("idempotency_key=%r" % self.idempotency_key)
            parts.append("idempotency_scope=%r" % self.idempotency_scope)
        if self.idempotency_ttl_secs is not None:
            parts.append("idempotency_ttl_secs=%r" % self.idempotency_ttl_secs)
        return "StepPolicy(%s)" % ", ".join(parts)


class InputSpec(_View):
    """One declared workflow input. Equal to another when both name and canonical JSON are equal."""

    __slots__ = ("_name",)

    _name: str

    @classmethod
    def _from_dict(cls, name: str, data: Dict[str, Any]) -> "InputSpec":
        self = cls.__new__(cls)
        self._init(data)
        object.__setattr__(self, "_name", name)
        return self

    @property
    def name(self) -> str:
        """The input's name (its key under ``inputs``)."""
        return self._name

    @property
    def type(self) -> str:
        """``string``, ``number``, ``integer``, ``boolean``, ``object``, ``array`` or ``any``."""
        return str(self._data.get("type") or "any")

    @property
    def required(self) -> bool:
        """Whether a run must provide the input."""
        return bool(self._data.get("required", False))

    @property
    def has_default(self) -> bool:
        """Whether a default is declared (``default`` may itself be ``None``)."""
        return "default" in self._data

    @property
    def default(self) -> Any:
        """The default value (deep-frozen), or ``None``."""
        return freeze(self._data.get("default"))

    @property
    def format(self) -> Optional[str]:
        """A format hint such as ``"date"``, or ``None``."""
        return self._data.get("format")

    @property
    def description(self) -> Optional[str]:
        """The description, or ``None``."""
        return self._data.get("description")

    @property
    def enum(self) -> Optional[Tuple[Any, ...]]:
        """The allowed values, or ``None`` for any value."""
        values = self._data.get("enum")
        return None if values is None else tuple(freeze(values))

    def _key(self) -> Any:
        return (self._name, self.to_json())

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_restore_input, (self.name, self.to_dict()))

    def __repr__(self) -> str:
        parts = ["%r" % self.name, "type=%r" % self.type]
        if self.required:
            parts.append("required=True")
        if self.has_default:
            parts.append("default=%r" % (self._data.get("default"),))
        if self.format is not None:
            parts.append("format=%r" % self.format)
        if self.enum is not None:
            parts.append("enum=%r" % (list(self._data["enum"]),))
        return "InputSpec(%s)" % ", ".join(parts)


def _restore_input(name: str, data: Dict[str, Any]) -> InputSpec:
    return InputSpec._from_dict(name, data)


def _step_tuple(items: Any) -> Tuple["WorkflowStep", ...]:
    if not isinstance(items, list):
        return ()
    return tuple(WorkflowStep._from_dict(s) for s in items if isinstance(s, dict))


def _walk(steps: Iterable["WorkflowStep"]) -> Iterator["WorkflowStep"]:
    for step in steps:
        yield step
        for child in step._children():
            yield from _walk(child)


class WorkflowStep(_View):
    """One step of a spec. Fields that do not apply to its ``kind`` are ``None`` (or empty)."""

    __slots__ = ("_steps", "_then", "_else", "_policy", "_args", "_inputs")

    _steps: Tuple["WorkflowStep", ...]
    _then: Tuple["WorkflowStep", ...]
    _else: Tuple["WorkflowStep", ...]
    _policy: StepPolicy
    _args: Mapping[str, Any]
    _inputs: Mapping[str, Any]

    @classmethod
    def _from_dict(cls, data: Dict[str, Any]) -> "WorkflowStep":
        self = cls.__new__(cls)
        self._init(data)
        set_ = object.__setattr__
        set_(self, "_steps", _step_tuple(data.get("steps")))
        set_(self, "_then", _step_tuple(data.get("then")))
        set_(self, "_else", _step_tuple(data.get("else")))
        set_(self, "_policy", StepPolicy._from_dict(data))
        args = data.get("args")
        set_(self, "_args", freeze(args) if isinstance(args, dict) else _EMPTY)
        inputs = data.get("inputs")
        set_(self, "_inputs", freeze(inputs) if isinstance(inputs, dict) else _EMPTY)
        return self

    def _children(self) -> Tuple[Tuple["WorkflowStep", ...], ...]:
        return (self._steps, self._then, self._else)

    @property
    def id(self) -> str:
        """The step id, unique in the whole spec."""
        return str(self._data.get("id", ""))

    @property
    def kind(self) -> str:
        """``tool``, ``tool_remote``, ``foreach``, ``parallel``, ``branch``, ``approve`` or ``workflow``."""
        return str(self._data.get("kind", ""))

    @property
    def description(self) -> Optional[str]:
        """The description, or ``None``."""
        return self._data.get("description")

    @property
    def depends_on(self) -> Optional[Tuple[str, ...]]:
        """Sibling ids this step waits for; ``()`` = start at once; ``None`` = after the previous sibling."""
        deps = self._data.get("depends_on")
        return None if deps is None else tuple(deps)

    @property
    def tool(self) -> Optional[str]:
        """The tool name (``tool`` and ``tool_remote`` steps), else ``None``."""
        return self._data.get("tool")

    @property
    def dcc(self) -> Optional[str]:
        """The remote MCP server name (``tool_remote`` steps), else ``None``."""
        return self._data.get("dcc")

    @property
    def pool(self) -> Optional[str]:
        """The worker pool a ``tool`` step runs on when the engine has it (docs/guide/pools.md), else ``None``."""
        return self._data.get("pool")

    @property
    def resources(self) -> Mapping[str, int]:
        """The units of the engine's scarce resources each attempt of a ``tool`` or ``tool_remote``
        step holds, by name (docs/guide/resources.md): a read-only mapping, empty when none."""
        return MappingProxyType(dict(self._data.get("resources") or {}))

    @property
    def args(self) -> Mapping[str, Any]:
        """The tool arguments: a read-only mapping (nested lists are tuples); empty for other kinds."""
        return self._args

    @property
    def items(self) -> Any:
        """What a ``foreach`` iterates: a JSONPath or template string, or a literal (frozen) value."""
        return freeze(self._data.get("items"))

    @property
    def as_(self) -> Optional[str]:
        """The name each ``foreach`` item is bound to (default ``"item"``), else ``None``."""
        return self._data.get("as")

    @property
    def concurrency(self) -> Optional[int]:
        """How many ``foreach`` items run at once (default 1), else ``None``."""
        value = self._data.get("concurrency")
        return None if value is None else int(value)

    @property
    def on_any_fail(self) -> Optional[str]:
        """``"abort"`` or ``"continue"`` for ``foreach`` and ``parallel`` steps, else ``None``."""
        return self._data.get("on_any_fail")

    @property
    def steps(self) -> Tuple["WorkflowStep", ...]:
        """The body of a ``foreach`` or the branches of a ``parallel`` step; ``()`` for other kinds."""
        return self._steps

    @property
    def on(self) -> Any:
        """A ``branch`` step's condition (JSONPath, template or literal), else ``None``."""
        return freeze(self._data.get("on"))

    @property
    def condition(self) -> Any:
        """Alias of ``on``."""
        return self.on

    @property
    def then(self) -> Tuple["WorkflowStep", ...]:
        """The steps run when a ``branch`` condition is true."""
        return self._then

    @property
    def else_(self) -> Tuple["WorkflowStep", ...]:
        """The steps run when a ``branch`` condition is false (``else`` in the spec)."""
        return self._else

    @property
    def prompt(self) -> Optional[str]:
        """The question of an ``approve`` step, else ``None``."""
        return self._data.get("prompt")

    @property
    def workflow(self) -> Optional[str]:
        """The catalog workflow a ``workflow`` step runs as a child run, else ``None``."""
        return self._data.get("workflow")

    @property
    def inputs(self) -> Mapping[str, Any]:
        """The inputs of a ``workflow`` step's child run (templates allowed): a read-only mapping;
        empty for other kinds."""
        return self._inputs

    @property
    def policy(self) -> StepPolicy:
        """Timeout, retry and idempotency settings."""
        return self._policy

    @property
    def timeout_secs(self) -> Optional[Union[int, float]]:
        """Shortcut for ``policy.timeout_secs``."""
        return self.policy.timeout_secs

    @property
    def retry(self) -> Optional[RetryPolicy]:
        """Shortcut for ``policy.retry``."""
        return self.policy.retry

    def walk(self) -> Iterator["WorkflowStep"]:
        """This step and every step nested in it, depth-first in document order."""
        return _walk((self,))

    def __repr__(self) -> str:
        extra = ""
        if self.tool is not None:
            extra = ", tool=%r" % self.tool
        elif self.workflow is not None:
            extra = ", workflow=%r" % self.workflow
        elif self.steps or self.then or self.else_:
            extra = ", children=%d" % (sum(1 for _ in self.walk()) - 1)
        return "WorkflowStep(id=%r, kind=%r%s)" % (self.id, self.kind, extra)


def _text_of(value: Any, caller: str) -> str:
    """Return spec text as ``str``; bytes must be UTF-8. Raises TypeError for other types."""
    if isinstance(value, str):
        text = value
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            at = exc.start
            raise _not_unicode(
                text.count("\n", 0, at) + 1,
                at - (text.rfind("\n", 0, at) + 1) + 1,
                "spec text contains an unpaired surrogate (U+%04X) at character %d; it is not valid Unicode"
                % (ord(text[at]), at),
            ) from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            raise _not_unicode(
                line, column, "spec text is not valid UTF-8: byte 0x%02x at offset %d (save the file as UTF-8)"
                % (raw[exc.start], exc.start)
            ) from None
    else:
        raise TypeError("%s expects str or bytes (UTF-8), got %s" % (caller, type(value).__name__))
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte order mark, as some Windows editors write
    return text


def _escape_yaml_unsafe(json_text: str) -> str:
    """Escape the characters of ``_YAML_UNSAFE`` in JSON text.

    The library reads JSON with its YAML parser, which rejects raw DEL and C1 controls and folds raw
    NEL/LS/PS as line breaks, although JSON allows them raw inside strings (and Go's own canonical
    JSON contains them raw). In valid JSON they can only occur inside strings, where their ``\\u``
    escapes mean exactly the same; invalid JSON stays invalid.
    """
    if _YAML_UNSAFE.search(json_text):
        return _YAML_UNSAFE.sub(lambda m: "\\u%04x" % ord(m.group(0)), json_text)
    return json_text


def _not_unicode(line: int, column: int, message: str) -> ParseError:
    problem = Problem(code="parse_error", message=message, line=line, column=column)
    err = ParseError.from_problems([problem], code="parse_error")
    return err


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, _View):
        return value.to_dict()
    raise TypeError("object of type %s is not JSON serializable" % type(value).__name__)


class WorkflowSpec(_View):
    """A parsed workflow spec (docs/reference/spec.md). Build it with ``from_yaml_str``, ``from_file`` or ``from_json``.

    The spec may still have semantic problems (an unknown template variable, a cycle, …):
    ``validate()`` raises them all as a ``ValidationError``. Structural problems (malformed YAML,
    an unknown field, a wrong type) raise at parse time.
    """

    __slots__ = ("_hash", "_problems", "_warnings", "_source", "_steps", "_inputs", "_on_failure", "_defaults")

    _hash: str
    _problems: Tuple[Problem, ...]
    _warnings: Tuple[Problem, ...]
    _source: Optional[str]
    _steps: Tuple[WorkflowStep, ...]
    _inputs: Mapping[str, InputSpec]
    _on_failure: Tuple[WorkflowStep, ...]
    _defaults: "StepPolicy"

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def _parse(cls, text: Any, fmt: str, source: Optional[str], caller: str) -> "WorkflowSpec":
        body = _text_of(text, caller)
        if fmt == "json" or (fmt == "auto" and body.lstrip(" \t\r\n").startswith("{")):
            body = _escape_yaml_unsafe(body)
        payload: Dict[str, Any] = {"text": body, "format": fmt}
        if source:
            payload["source"] = source
        out = _ffi.call("dccflow_spec_parse", 0, payload, source=source)
        return cls._from_parse_output(out, source)

    @classmethod
    def _from_parse_output(cls, out: Mapping[str, Any], source: Optional[str]) -> "WorkflowSpec":
        data = out.get("spec")
        if not isinstance(data, dict):
            raise InternalError("dccflow_spec_parse returned no spec object")
        self = cls.__new__(cls)
        self._init(data)
        set_ = object.__setattr__
        set_(self, "_hash", str(out.get("spec_hash") or ""))
        set_(self, "_problems", tuple(Problem.from_dict(p) for p in out.get("problems") or () if isinstance(p, dict)))
        set_(self, "_warnings", tuple(Problem.from_dict(p) for p in out.get("warnings") or () if isinstance(p, dict)))
        set_(self, "_source", source or None)
        set_(self, "_steps", _step_tuple(data.get("steps")))
        set_(self, "_on_failure", _step_tuple(data.get("on_failure")))
        raw_defaults = data.get("defaults")
        set_(self, "_defaults", StepPolicy._from_dict(raw_defaults if isinstance(raw_defaults, dict) else {}))
        raw_inputs = data.get("inputs")
        inputs: Dict[str, Any] = raw_inputs if isinstance(raw_inputs, dict) else {}
        set_(self, "_inputs", MappingProxyType({k: InputSpec._from_dict(k, v) for k, v in inputs.items()}))
        return self

    @classmethod
    def from_yaml_str(cls, text: TextLike, source: Optional[str] = None) -> "WorkflowSpec":
        """Parse YAML text (``str`` or UTF-8 ``bytes``); ``source`` labels error messages.

        Raises ``ParseError`` (malformed YAML, not a mapping, not UTF-8), ``ValidationError``
        (unknown field, wrong type, …), ``SpecTooLargeError``, or ``TypeError`` for other types.
        """
        return cls._parse(text, "yaml", source, "WorkflowSpec.from_yaml_str()")

    @classmethod
    def from_json(cls, value: Union[TextLike, Mapping[str, Any]], source: Optional[str] = None) -> "WorkflowSpec":
        """Parse a JSON spec given as text (``str``/``bytes``) or as a ``dict``."""
        if isinstance(value, WorkflowSpec):
            return value
        if isinstance(value, Mapping):
            try:
                text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
            except RecursionError:
                problem = Problem(code="too_large", message="spec nesting is too deep to encode as JSON")
                raise SpecTooLargeError.from_problems([problem], code="too_large", source=source) from None
            except ValueError as exc:  # NaN/Infinity, circular reference
                problem = Problem(code="parse_error", message="spec cannot be encoded as JSON: %s" % exc)
                raise ParseError.from_problems([problem], code="parse_error", source=source) from None
            except TypeError as exc:
                raise TypeError("WorkflowSpec.from_json(): spec is not JSON-serializable: %s" % exc) from None
            return cls._parse(text, "json", source, "WorkflowSpec.from_json()")
        return cls._parse(value, "json", source, "WorkflowSpec.from_json()")

    @classmethod
    def from_file(cls, path: PathLike) -> "WorkflowSpec":
        """Read a ``.yaml``/``.yml``/``.json`` file (the format is detected from its content).

        The path labels error messages. ``OSError`` (``FileNotFoundError``, …) propagates.
        """
        filename = os.fspath(path)
        if not isinstance(filename, str):
            filename = os.fsdecode(filename)
        with open(filename, "rb") as fh:
            raw = fh.read()
        return cls._parse(raw, "auto", filename, "WorkflowSpec.from_file()")

    # --- validation -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise ``ValidationError`` listing every problem; return ``None`` when the spec is valid."""
        errors = [p for p in self._problems if p.is_error]
        if errors:
            raise ValidationError.from_problems(errors, code="validation_failed", source=self.source)

    @property
    def is_valid(self) -> bool:
        """True when ``validate()`` would not raise."""
        return not any(p.is_error for p in self._problems)

    @property
    def problems(self) -> Tuple[Problem, ...]:
        """The semantic problems found (what ``validate()`` raises); ``()`` when valid."""
        return self._problems

    @property
    def warnings(self) -> Tuple[Problem, ...]:
        """Non-fatal problems, such as a clamped jitter."""
        return self._warnings

    # --- properties -----------------------------------------------------------------------------

    @property
    def source(self) -> Optional[str]:
        """The label given at parse time (a file path for ``from_file``), or ``None``."""
        return self._source

    @property
    def name(self) -> str:
        """The workflow name (may be empty)."""
        return str(self._data.get("name") or "")

    @property
    def description(self) -> str:
        """The description (may be empty)."""
        return str(self._data.get("description") or "")

    @property
    def inputs(self) -> Mapping[str, InputSpec]:
        """Declared inputs, read-only, by name."""
        return self._inputs

    @property
    def steps(self) -> Tuple[WorkflowStep, ...]:
        """The top-level steps."""
        return self._steps

    @property
    def on_failure(self) -> Tuple[WorkflowStep, ...]:
        """The steps run once when a run fails (docs/reference/spec.md, "on_failure"); ``()`` when none."""
        return self._on_failure

    @property
    def priority(self) -> int:
        """The priority of the spec's runs when their steps wait for scarce resources, -1000 to
        1000, higher first (docs/guide/resources.md); 0 when not given."""
        return int(self._data.get("priority") or 0)

    @property
    def fair_share(self) -> Optional[str]:
        """The template of the key the spec's runs share a round-robin turn by when their steps
        wait for scarce resources (``"{{inputs.show}}"``, docs/guide/resources.md), else ``None``."""
        return self._data.get("fair_share") or None

    @property
    def defaults(self) -> StepPolicy:
        """The spec's ``defaults`` for its tool steps: ``timeout_secs`` and ``retry`` (docs/reference/spec.md,
        "Defaults"); an empty policy (``is_empty``) when the spec has none."""
        return self._defaults

    @property
    def step_count(self) -> int:
        """The number of steps in the whole tree (nested and ``on_failure`` ones included)."""
        return sum(1 for _ in self.walk())

    @property
    def spec_hash(self) -> str:
        """Lowercase hex sha256 of the canonical JSON: equal for specs that run the same way."""
        return self._hash

    def walk(self) -> Iterator[WorkflowStep]:
        """Every step of the tree, depth-first in document order, then the ``on_failure`` steps."""
        return _walk(self.steps + self.on_failure)

    def __iter__(self) -> Iterator[WorkflowStep]:
        return self.walk()

    def step(self, step_id: str) -> WorkflowStep:
        """The step with id ``step_id`` anywhere in the tree; ``KeyError`` if there is none."""
        for step in self.walk():
            if step.id == step_id:
                return step
        raise KeyError("no step with id %r in workflow %r" % (step_id, self.name or "(unnamed)"))

    # --- output ---------------------------------------------------------------------------------

    def to_yaml(self) -> str:
        """Block-style YAML of the canonical form; ``from_yaml_str(spec.to_yaml()) == spec``."""
        return dump_spec(self._data)

    def _key(self) -> Any:
        return self.spec_hash or self.to_json()

    def __reduce__(self) -> Tuple[Any, ...]:
        state = {
            "spec": self.to_dict(),
            "spec_hash": self.spec_hash,
            "problems": [p.to_dict() for p in self.problems],
            "warnings": [p.to_dict() for p in self.warnings],
        }
        return (_restore_spec, (state, self.source))

    def __repr__(self) -> str:
        return "WorkflowSpec(name=%r, steps=%d, spec_hash=%r)" % (
            self.name,
            self.step_count,
            self.spec_hash[:12],
        )


def _restore_spec(state: Mapping[str, Any], source: Optional[str]) -> WorkflowSpec:
    return WorkflowSpec._from_parse_output(state, source)
