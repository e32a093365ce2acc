"""Code-first workflows: ``@task`` and ``@workflow`` compile, by tracing, to a ``WorkflowSpec``.

::

    from dcc_flow import FlowContext, Retry, task, workflow

    @task(name="maya__export_fbx", retries=2, timeout_seconds=300, idempotency_key="export_{scene}")
    def export(scene: str) -> dict:
        ...

    @workflow
    def vendor_intake(ctx: FlowContext, date: str) -> None:
        listing = list_sftp(date, step_id="list")
        with ctx.foreach(listing.files, concurrency=4) as file:
            export(scene=file.path)

Decorating a workflow calls its function once (eagerly, unless ``lazy=True``) with *references*
in place of values: each parameter is a reference to ``{{inputs.<name>}}``, each task call
records a step and returns a reference to that step's output. References build template paths
(``ref.files``, ``ref["files"]``, ``ref[0]``) and become templates where they are used, so the
result is exactly the spec a YAML file would hold. Using a reference as a Python value (``if``,
``for``, ``len``, ``str``, ``==``…) raises ``WorkflowTraceError``, naming the step, the line and
the construct to use instead. Outside tracing a task is the plain function.

Ordering follows the spec (docs/spec.md, "Ordering"): a step runs after the step before it. The
compiler adds ``depends_on`` only where Python's data flow needs more than that: a step that uses
the output of a sibling it would not otherwise wait for (inside ``ctx.parallel()``, or after an
``after=`` that skipped it) also waits for that sibling.
"""

import collections.abc
import enum
import functools
import inspect
import json
import linecache
import math
import os
import re
import string
import sys
import threading
import typing
from typing import Any, Callable, Dict, Iterator, List, Mapping, NoReturn, Optional, Sequence, Set, Tuple, Union

from ._errors import DccFlowError, LibraryLoadError
from ._spec import RetryPolicy, WorkflowSpec

if typing.TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine, RunResult

__all__ = [
    "task",
    "workflow",
    "Task",
    "Workflow",
    "Retry",
    "unmapped",
    "Unmapped",
    "Ref",
    "FlowContext",
    "WorkflowTraceError",
]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_PATH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_JSONPATH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_FIELD = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
_RESERVED = frozenset(["inputs", "steps", "item", "env", "trigger", "run"])
_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TRACER_KEYWORDS = ("step_id", "after")
_MAP_KEYWORDS = ("step_id", "after", "concurrency", "on_any_fail", "as_", "timeout_seconds")
_INPUT_FIELDS = frozenset(["type", "format", "enum", "description", "default", "required"])

Site = Tuple[str, int]
ToolInfo = Tuple[str, Callable[..., Any], str, Optional[int]]


# --- errors and call sites -------------------------------------------------------------------


class WorkflowTraceError(DccFlowError, TypeError):
    """A code-first workflow could not be traced or compiled.

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


def _is_own_frame(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PKG_DIR)


def _user_site() -> Site:
    """The ``(file, line)`` of the innermost frame outside the dcc_flow package."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_own_frame(filename):
            return filename, int(frame.f_lineno)
        frame = frame.f_back
    return "<unknown>", 0


def _fail(message: str, site: Optional[Site] = None, step_id: Optional[str] = None) -> NoReturn:
    where = site if site is not None else _user_site()
    raise WorkflowTraceError("%s:%d: %s" % (where[0], where[1], message), step_id, where[0], where[1])


def _where(site: Site) -> str:
    return "%s:%d" % site


# --- references ------------------------------------------------------------------------------


def _jsonpath_segment(name: str) -> str:
    return "." + name if _JSONPATH_NAME.match(name) else "['%s']" % name


class Ref:
    """A reference to a value that exists only when the workflow runs (a step output, an input,
    the current foreach item, ``env``, ``trigger`` or ``run``).

    ``ref.name``, ``ref["name"]`` and ``ref[0]`` give references to parts of it. Pass references
    as task arguments (they become ``{{…}}`` templates), as ``ctx.foreach`` items or as a
    ``ctx.branch`` condition (they become JSONPath). Any attempt to read the value in Python
    raises ``WorkflowTraceError``.
    """

    __slots__ = ("_trace", "_kind", "_root", "_path", "_owner")

    _trace: "_Tracer"
    _kind: str
    _root: str
    _path: Tuple[Union[str, int], ...]
    _owner: Optional["_Step"]

    def __init__(
        self,
        trace: "_Tracer",
        kind: str,
        root: str,
        path: Tuple[Union[str, int], ...] = (),
        owner: Optional["_Step"] = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "_trace", trace)
        set_(self, "_kind", kind)
        set_(self, "_root", root)
        set_(self, "_path", path)
        set_(self, "_owner", owner)

    # -- rendering ------------------------------------------------------------------------------

    def _template_path(self) -> str:
        if self._kind == "input":
            text = "inputs." + self._root
        else:
            text = self._root
        for part in self._path:
            text += "[%d]" % part if isinstance(part, int) else "." + part
        return text

    def _template(self) -> str:
        return "{{" + self._template_path() + "}}"

    def _jsonpath(self) -> str:
        if self._kind == "input":
            text = "$.inputs" + _jsonpath_segment(self._root)
        else:
            text = "$" + _jsonpath_segment(self._root)
        for part in self._path:
            text += "[%d]" % part if isinstance(part, int) else _jsonpath_segment(part)
        return text

    def _describe(self) -> str:
        if self._kind == "step":
            what = "the output of step '%s'" % self._root
        elif self._kind == "input":
            what = "input '%s'" % self._root
        elif self._kind == "item":
            owner = self._owner.id if self._owner is not None else "?"
            what = "the item '%s' of foreach step '%s'" % (self._root, owner)
        else:
            what = "'%s'" % self._root
        return "%s (%s)" % (what, self._template())

    def _step_id(self) -> Optional[str]:
        if self._kind == "step":
            return self._root
        if self._kind == "item" and self._owner is not None:
            return self._owner.id
        return None

    def __repr__(self) -> str:
        return "<dcc_flow.Ref %s>" % self._template()

    # -- building paths -------------------------------------------------------------------------

    def __getattr__(self, name: str) -> "Ref":
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, key: Any) -> "Ref":
        if isinstance(key, (bool, slice)):
            self._refuse(
                "ref[%r]" % (key,),
                "A path takes a key name or a non-negative index; slice or filter the value in a task.",
            )
        if isinstance(key, int):
            if key < 0:
                self._refuse(
                    "ref[%d]" % key,
                    "Template paths take non-negative indexes; pick from the end in a task.",
                )
            return Ref(self._trace, self._kind, self._root, self._path + (key,), self._owner)
        if isinstance(key, str):
            if not _PATH_NAME.match(key):
                self._refuse(
                    "ref[%r]" % key,
                    "A template path name matches [A-Za-z_][A-Za-z0-9_-]*; return the value under such "
                    "a key from the task instead.",
                )
            return Ref(self._trace, self._kind, self._root, self._path + (key,), self._owner)
        if isinstance(key, Ref):
            self._refuse(
                "ref[other_ref]",
                "A path cannot depend on another run-time value; iterate with `with ctx.foreach(ref) as item:` "
                "or pick the element in a task.",
            )
        self._refuse("ref[%s]" % type(key).__name__, "Use a key name (str) or a non-negative index (int).")

    # -- everything else is refused -------------------------------------------------------------

    def _refuse(self, construct: str, advice: str) -> NoReturn:
        workflow = self._trace.flow.name
        _fail(
            "%s on %s while tracing workflow '%s': a reference stands for a value that exists only when "
            "the workflow runs. %s" % (construct, self._describe(), workflow, advice),
            step_id=self._step_id(),
        )

    def __bool__(self) -> bool:
        self._refuse(
            "`if ref` (truth test: if/while/and/or/not/bool())",
            "Use ctx.branch(ref, then=..., else_=...) instead of `if`.",
        )

    def __iter__(self) -> Iterator[Any]:
        self._refuse(
            "iterating (`for x in ref`, iter(), list(), unpacking)",
            "Use task.map(...) or `with ctx.foreach(ref) as item:` instead of a for loop.",
        )

    def __reversed__(self) -> Iterator[Any]:
        self._refuse(
            "reversed(ref)",
            "Use task.map(...) or `with ctx.foreach(ref) as item:` instead of a for loop.",
        )

    def __len__(self) -> int:
        self._refuse(
            "len(ref)",
            "The length is known only at run time: compute it in a task, or branch on the list itself "
            "(an empty list is false) with ctx.branch(ref, then=..., else_=...).",
        )

    def __contains__(self, item: object) -> bool:
        self._refuse(
            "`x in ref`",
            "Test membership in a task and branch on its output with ctx.branch(...), or select with a "
            "JSONPath filter.",
        )

    def __str__(self) -> str:
        self._refuse(
            "str(ref)",
            "Build text with ctx.template('...{}...', ref) (rendered at run time), or pass the reference "
            "itself as an argument.",
        )

    def __format__(self, format_spec: str) -> str:
        self._refuse(
            "format(ref) / an f-string",
            "Build text with ctx.template('...{}...', ref) (rendered at run time) instead of an f-string.",
        )

    def __bytes__(self) -> bytes:
        self._refuse("bytes(ref)", "Convert the value inside a task.")

    def __eq__(self, other: object) -> bool:
        self._refuse(
            "`ref == x`",
            "Compare inside a task and use ctx.branch(task_output, then=..., else_=...) on the result.",
        )

    def __ne__(self, other: object) -> bool:
        self._refuse(
            "`ref != x`",
            "Compare inside a task and use ctx.branch(task_output, then=..., else_=...) on the result.",
        )

    def _compare(self, op: str) -> NoReturn:
        self._refuse(
            "`ref %s x`" % op,
            "Compare inside a task and use ctx.branch(task_output, then=..., else_=...) on the result.",
        )

    def __lt__(self, other: object) -> bool:
        self._compare("<")

    def __le__(self, other: object) -> bool:
        self._compare("<=")

    def __gt__(self, other: object) -> bool:
        self._compare(">")

    def __ge__(self, other: object) -> bool:
        self._compare(">=")

    def __hash__(self) -> int:
        self._refuse(
            "hash(ref) (a reference as a dict key or set member)",
            "References cannot be keys; use them as values (e.g. {'scene': ref}).",
        )

    def _convert(self, fn: str) -> NoReturn:
        self._refuse(
            "%s(ref)" % fn,
            "The value exists only at run time: convert it inside a task that takes the reference as an "
            "argument.",
        )

    def __int__(self) -> int:
        self._convert("int")

    def __float__(self) -> float:
        self._convert("float")

    def __complex__(self) -> complex:
        self._convert("complex")

    def __index__(self) -> int:
        self._convert("operator.index")

    def __round__(self, ndigits: Optional[int] = None) -> int:
        self._convert("round")

    def _arith(self, op: str) -> NoReturn:
        self._refuse(
            "`ref %s x`" % op,
            "Compute inside a task; to build text use ctx.template('...{}...', ref).",
        )

    def __add__(self, other: Any) -> Any:
        self._arith("+")

    def __radd__(self, other: Any) -> Any:
        self._arith("+")

    def __sub__(self, other: Any) -> Any:
        self._arith("-")

    def __rsub__(self, other: Any) -> Any:
        self._arith("-")

    def __mul__(self, other: Any) -> Any:
        self._arith("*")

    def __rmul__(self, other: Any) -> Any:
        self._arith("*")

    def __truediv__(self, other: Any) -> Any:
        self._arith("/")

    def __rtruediv__(self, other: Any) -> Any:
        self._arith("/")

    def __floordiv__(self, other: Any) -> Any:
        self._arith("//")

    def __mod__(self, other: Any) -> Any:
        self._arith("%")

    def __rmod__(self, other: Any) -> Any:
        self._arith("%")

    def __pow__(self, other: Any) -> Any:
        self._arith("**")

    def __and__(self, other: Any) -> Any:
        self._arith("&")

    def __or__(self, other: Any) -> Any:
        self._arith("|")

    def __neg__(self) -> Any:
        self._arith("-")

    def __abs__(self) -> Any:
        self._convert("abs")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(
            "calling a reference",
            "A reference is a value, not a function (`ref.name` only builds a path, here '%s'): call the "
            "task and pass the reference as an argument; use ref['name'] for a key named like a method."
            % self._template_path(),
        )

    def keys(self) -> NoReturn:
        """Refused: ``**ref`` cannot be unpacked while tracing."""
        self._refuse("`**ref` / ref.keys()", "Pass the reference as one argument (use ref['keys'] for a key).")

    def __setattr__(self, name: str, value: Any) -> None:
        self._refuse("setting ref.%s" % name, "References are read-only; compute new values in a task.")

    def __delattr__(self, name: str) -> None:
        self._refuse("deleting ref.%s" % name, "References are read-only.")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._refuse("`ref[key] = value`", "References are read-only; compute new values in a task.")

    def __delitem__(self, key: Any) -> None:
        self._refuse("`del ref[key]`", "References are read-only.")

    def __copy__(self) -> "Ref":
        return self

    def __deepcopy__(self, memo: Any) -> "Ref":
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._refuse("pickling a reference", "References exist only while a workflow is traced.")


class _Template(str):
    """Text built by ``FlowContext.template``: a plain string holding ``{{…}}`` placeholders, which
    remembers the references it was built from (for dependency and scope checks)."""

    _refs: Tuple[Ref, ...]


class Unmapped:
    """An argument of ``task.map(...)`` passed whole to every call instead of being iterated."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "unmapped(%r)" % (self.value,)


def unmapped(value: Any) -> Unmapped:
    """Mark an argument of ``task.map(...)`` as passed whole to every call (not iterated)."""
    return Unmapped(value)


# --- the trace -------------------------------------------------------------------------------


class _Scope:
    """One step list being built: the top level, a foreach body, parallel children, then/else."""

    __slots__ = ("kind", "steps", "owner", "chain", "frontier", "splice_target", "chain_end")

    def __init__(
        self,
        kind: str,
        owner: Optional["_Step"],
        chain: Tuple["_Step", ...],
        splice_target: Optional["_Scope"] = None,
    ) -> None:
        self.kind = kind  # "seq", "par", or "guard" (inside `with ctx.branch(...)`, outside then/else)
        self.steps: List[_Step] = []
        self.owner = owner
        self.chain = chain  # the enclosing foreach steps, outermost first
        self.frontier: Optional[List[str]] = None  # what the next implicit step waits for, when not the last step
        self.splice_target = splice_target  # sub-workflow scopes: the list they are spliced into
        # steps[0..chain_end] each wait for the one before and nothing else: a step among them
        # waits, through them, for every step before it (-1: no such prefix yet).
        self.chain_end = -1

    def to_list(self) -> List[Dict[str, Any]]:
        return [s.to_dict() for s in self.steps]


class _Step:
    """A step being built, with what the compiler needs to order it."""

    __slots__ = ("id", "data", "scope", "refs", "children", "base", "implicit", "depends_on", "site", "as_name",
                 "pos")

    def __init__(self, step_id: str, data: Dict[str, Any], site: Site) -> None:
        self.id = step_id
        self.data = data
        self.site = site
        self.scope: Optional[_Scope] = None
        self.refs: Set[str] = set()  # step ids used by this step or anything inside it
        self.children: List[Tuple[str, _Scope]] = []
        self.base: List[str] = []
        self.implicit = True
        self.depends_on: Optional[List[str]] = None
        self.as_name: Optional[str] = None
        self.pos = -1  # its index in scope.steps

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.data)
        if self.depends_on is not None:
            out["depends_on"] = list(self.depends_on)
        for key, scope in self.children:
            out[key] = scope.to_list()
        return out


_state = threading.local()


def _stack() -> List["_Tracer"]:
    stack: Optional[List[_Tracer]] = getattr(_state, "stack", None)
    if stack is None:
        stack = []
        _state.stack = stack
    return stack


def _current() -> Optional["_Tracer"]:
    stack = _stack()
    return stack[-1] if stack else None


def _sanitize_id(name: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_-]", "_", name) or "step"
    if not re.match(r"[A-Za-z_]", text[0]):
        text = "_" + text
    return text[:64]


class _Tracer:
    """The state of one compilation of a @workflow."""

    def __init__(self, flow: "Workflow") -> None:
        self.flow = flow
        self.steps: Dict[str, _Step] = {}
        self.inputs: Set[str] = set(flow._input_names)
        self.as_names: Set[str] = set()
        self.prefixes: Set[str] = set()
        self.suffixes: Dict[str, int] = {}  # id stem → the suffix new_id last gave it (1: none)
        self.prefix = ""
        self.root = _Scope("seq", None, ())
        self.scopes: List[_Scope] = [self.root]
        self.flows: List[Workflow] = [flow]
        self.tasks: Dict[str, Task] = {}
        self.pending: List[_Block] = []
        self.ctx = FlowContext(self)

    # -- scope handling ------------------------------------------------------------------------

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def push(self, scope: _Scope) -> None:
        self.scopes.append(scope)

    def pop(self, scope: _Scope) -> None:
        if self.scopes[-1] is not scope:
            _fail("blocks were closed out of order in workflow '%s'" % self.flow.name)
        self.scopes.pop()

    def check_active(self, what: str, site: Site) -> None:
        if _current() is not self:
            _fail(
                "%s belongs to workflow '%s', which is not being traced here; use the ctx passed to the "
                "workflow function you are in" % (what, self.flow.name),
                site,
            )

    # -- ids -----------------------------------------------------------------------------------

    def _is_taken(self, name: str) -> bool:
        return name in self.steps or name in _RESERVED or name in self.inputs or name in self.as_names

    def _taken(self, name: str) -> Optional[str]:
        if name in self.steps:
            return "step id '%s' is already used (%s)" % (name, _where(self.steps[name].site))
        if name in _RESERVED:
            return "'%s' is a reserved name (%s)" % (name, ", ".join(sorted(_RESERVED)))
        if name in self.inputs:
            return "'%s' is an input of workflow '%s'" % (name, self.flow.name)
        if name in self.as_names:
            return "'%s' names the items of a foreach" % name
        return None

    def new_id(self, base: str, explicit: Optional[str], site: Site) -> str:
        if explicit is not None:
            if not isinstance(explicit, str) or not _ID.match(explicit):
                _fail("step id %r must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$" % (explicit,), site)
            full = self.prefix + explicit
            if len(full) > 64:
                _fail("step id '%s' is longer than 64 characters; shorten the sub-workflow prefix" % full, site)
            problem = self._taken(full)
            if problem is not None:
                _fail("cannot name a step '%s': %s" % (full, problem), site, step_id=full)
            return full
        stem = self.prefix + _sanitize_id(base)
        # Probing resumes where the last id made from this stem stopped: n calls of one task
        # cost O(n) in all, not O(n²).
        n = self.suffixes.get(stem, 1)
        candidate = stem if n == 1 else "%s_%d" % (stem, n)
        while self._is_taken(candidate):
            n += 1
            candidate = "%s_%d" % (stem, n)
        self.suffixes[stem] = n
        if len(candidate) > 64:
            _fail("step id '%s' is longer than 64 characters; give the step a shorter step_id=" % candidate, site)
        return candidate

    def new_prefix(self, base: str, explicit: Optional[str], site: Site) -> str:
        if explicit is not None:
            if not isinstance(explicit, str) or not _ID.match(explicit):
                _fail("step_id %r must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$" % (explicit,), site)
            full = self.prefix + explicit
            if full in self.prefixes:
                _fail("sub-workflow prefix '%s' is already used" % full, site)
        else:
            stem = self.prefix + _sanitize_id(base)
            full, n = stem, 1
            while full in self.prefixes:
                n += 1
                full = "%s_%d" % (stem, n)
        self.prefixes.add(full)
        return full

    def choose_as(self, explicit: Optional[str], derived: Optional[str], site: Site) -> str:
        if explicit is not None:
            if not isinstance(explicit, str) or not _ID.match(explicit):
                _fail("as_=%r must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$" % (explicit,), site)
            if explicit != "item" and (explicit in self.steps or explicit in self.inputs or explicit in _RESERVED):
                _fail("as_='%s' clashes with a step id, an input or a reserved name" % explicit, site)
            self.as_names.add(explicit)
            return explicit
        usable = derived is not None and _ID.match(derived) is not None
        if usable and derived not in self.steps and derived not in self.inputs and derived not in _RESERVED:
            assert derived is not None
            self.as_names.add(derived)
            return derived
        return "item"

    # -- references ----------------------------------------------------------------------------

    def check_ref(self, ref: Ref, site: Site, use: str) -> None:
        """Refuse a reference that cannot be used here (another trace, out of scope)."""
        if ref._trace is not self:
            _fail(
                "%s uses %s from workflow '%s', not from workflow '%s' being traced here. References cannot "
                "cross workflows: make the value a parameter of this workflow (or of a sub-workflow)."
                % (use, ref._describe(), ref._trace.flow.name, self.flow.name),
                site,
                step_id=ref._step_id(),
            )
        chain = self.scope.chain
        owner = ref._owner
        if ref._kind == "item" and owner is not None:
            index = next((i for i, f in enumerate(chain) if f is owner), -1)
            if index < 0:
                _fail(
                    "%s uses %s outside its `with ctx.foreach(...)` block; after the loop use the loop's "
                    "output (loop.output: one object per item, keyed by body step id)" % (use, ref._describe()),
                    site,
                    step_id=owner.id,
                )
            for inner in chain[index + 1:]:
                if inner.as_name == ref._root:
                    _fail(
                        "%s uses %s inside foreach step '%s', whose items have the same name; give the inner "
                        "loop another variable name (or as_=...)" % (use, ref._describe(), inner.id),
                        site,
                        step_id=owner.id,
                    )
        elif ref._kind == "step" and owner is not None:
            assert owner.scope is not None
            for loop in owner.scope.chain:
                if not any(f is loop for f in chain):
                    _fail(
                        "%s uses %s outside foreach step '%s', where that step runs once per item; use the "
                        "loop's output instead ('%s' is a list with one {'%s': ...} per item)"
                        % (use, ref._describe(), loop.id, loop.id, owner.id),
                        site,
                        step_id=owner.id,
                    )
            scope: Optional[_Scope] = self.scope
            while scope is not None:
                block = scope.owner
                if block is owner:
                    _fail(
                        "%s uses %s inside that step's own block, before it has an output" % (use, ref._describe()),
                        site,
                        step_id=owner.id,
                    )
                scope = block.scope if block is not None else scope.splice_target
        elif ref._kind == "step":
            _fail("%s uses a reference to an unknown step" % use, site)

    # -- adding steps --------------------------------------------------------------------------

    def _sibling(self, step_id: str, scope: _Scope) -> Optional[_Step]:
        step: Optional[_Step] = self.steps.get(step_id)
        while step is not None:
            if step.scope is scope:
                return step
            owner_scope = step.scope
            step = owner_scope.owner if owner_scope is not None else None
        return None

    def _preds(self, step: _Step, scope: _Scope) -> List[str]:
        if step.depends_on is not None:
            return step.depends_on
        if scope.kind == "seq":
            return [scope.steps[step.pos - 1].id] if step.pos > 0 else []
        return []

    def _covered(self, base: Sequence[str], wanted: Sequence[_Step], scope: _Scope) -> Set[str]:
        """The ids of ``wanted`` (earlier siblings) that a step waiting for ``base`` already waits
        for, directly or through the siblings it waits for.

        Predecessors always come earlier in the list, so the walk stops below the earliest wanted
        step, and at a step of the scope's leading chain, which reaches every step before it: the
        cost does not grow with the length of a sequential workflow."""
        if not wanted:
            return set()
        floor = min(w.pos for w in wanted)
        reach = -1  # every step at or below this position is waited for
        seen: Set[str] = set()
        todo = list(base)
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            node = self.steps.get(current)
            if node is None or node.scope is not scope or node.pos <= floor:
                continue
            if node.pos <= scope.chain_end:
                reach = max(reach, node.pos)
                continue
            todo.extend(self._preds(node, scope))
        return {w.id for w in wanted if w.id in seen or w.pos <= reach}

    def _default_base(self, scope: _Scope) -> Tuple[List[str], bool]:
        if scope.frontier is not None:
            return list(scope.frontier), False
        if scope.kind == "seq" and scope.steps:
            return [scope.steps[-1].id], True
        return [], True

    def _after_ids(self, after: Any, site: Site, scope: _Scope, step: _Step) -> Optional[List[str]]:
        """Map ``after=`` to sibling ids of ``scope``; record every target in ``step.refs``."""
        if after is None:
            return None
        items = list(after) if isinstance(after, (list, tuple)) else [after]
        out: List[str] = []
        for item in items:
            target = item.output if isinstance(item, _Block) else item
            if not isinstance(target, Ref) or target._kind != "step":
                _fail(
                    "after= takes step references (task results, ctx.approve(...), loop.output); got %s"
                    % (target._describe() if isinstance(target, Ref) else type(target).__name__),
                    site,
                )
            self.check_ref(target, site, "after=")
            step.refs.add(target._root)
            sibling = self._sibling(target._root, scope)
            if sibling is not None and sibling.id not in out:
                out.append(sibling.id)
        return out

    def add(self, step: _Step, after: Any = None) -> None:
        """Append ``step`` to the current list (its depends_on is computed by ``finalize``)."""
        scope = self.scope
        if scope.kind == "guard":
            _fail(
                "inside `with ctx.branch(...) as br:` steps go in `with br.then():` or `with br.else_():`",
                step.site,
                step_id=step.id,
            )
        explicit = self._after_ids(after, step.site, scope, step)
        if explicit is not None:
            step.base, step.implicit = explicit, False
        else:
            step.base, step.implicit = self._default_base(scope)
        step.scope = scope
        step.pos = len(scope.steps)
        scope.steps.append(step)
        scope.frontier = None
        self.steps[step.id] = step

    def finalize(self, step: _Step) -> None:
        """Compute ``depends_on``: the explicit or implicit predecessors, plus the siblings whose
        output the step (or anything inside it) uses and that it would not otherwise wait for."""
        scope = step.scope
        assert scope is not None
        wanted_by_id: Dict[str, _Step] = {}
        for ref_id in step.refs:
            sibling = self._sibling(ref_id, scope)
            if sibling is not None and sibling.pos < step.pos:
                wanted_by_id[sibling.id] = sibling
        wanted = sorted(wanted_by_id.values(), key=lambda w: w.pos)
        covered = self._covered(step.base, wanted, scope)
        extra = [w.id for w in wanted if w.id not in covered]
        if step.implicit and not extra:
            step.depends_on = None
        else:
            step.depends_on = list(step.base) + extra
        if scope.kind == "seq" and step.depends_on is None and step.pos == scope.chain_end + 1:
            scope.chain_end = step.pos
        owner = scope.owner
        if owner is not None:
            owner.refs |= step.refs

    def splice(self, sub: _Scope, after: Any, site: Site, first: Optional[_Step]) -> None:
        """Move the steps traced for a sub-workflow call into the current list, keeping the
        sub-workflow's own ordering (it starts where the call is, the next step waits for all of it)."""
        scope = self.scope
        steps = list(sub.steps)
        if not steps:
            return
        # The sub-workflow's terminal steps, in its own (sequential) semantics.
        waited: Set[str] = set()
        for i, s in enumerate(steps):
            if s.depends_on is not None:
                waited.update(s.depends_on)
            elif i > 0:
                waited.add(steps[i - 1].id)
        terminals = [s.id for s in steps if s.id not in waited]
        holder = first if first is not None else steps[0]
        explicit = self._after_ids(after, site, scope, holder)
        if explicit is not None:
            entry, entry_implicit = explicit, False
        else:
            entry, entry_implicit = self._default_base(scope)
        for i, s in enumerate(steps):
            deps = s.depends_on
            if deps is None and i == 0 or (deps is not None and not deps):
                s.base, s.implicit = list(entry), entry_implicit and i == 0
            elif deps is None:
                s.base, s.implicit = [steps[i - 1].id], scope.kind == "seq"
            else:
                s.base, s.implicit = list(deps), False
            s.scope = scope
            s.pos = len(scope.steps)
            scope.steps.append(s)
            scope.frontier = None
            self.finalize(s)
        if scope.kind == "seq" and terminals != [steps[-1].id]:
            scope.frontier = terminals

    def use_task(self, task: "Task", site: Site) -> None:
        info = task.tool_info()
        if info is None:
            return
        known = self.tasks.get(info[0])
        if known is None:
            self.tasks[info[0]] = task
            return
        other = known.tool_info()
        assert other is not None
        if other[1] is not info[1]:
            _fail(
                "two different functions use the tool name '%s' (%s and %s); give one another name="
                % (info[0], _describe_fn(other[1]), _describe_fn(info[1])),
                site,
            )
        if other[2:] != info[2:]:
            _fail(
                "tool '%s' is used with different thread/max_concurrent options (%r vs %r)"
                % (info[0], other[2:], info[2:]),
                site,
            )


def _describe_fn(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if code is not None:
        return "%s at %s:%d" % (name, code.co_filename, code.co_firstlineno)
    return str(name)


# --- converting Python values to spec JSON ---------------------------------------------------


class _Converter:
    """Turns argument values into JSON, references into templates, and records the steps used."""

    def __init__(self, tracer: _Tracer, site: Site, step: _Step) -> None:
        self.tracer = tracer
        self.site = site
        self.step = step

    def ref(self, ref: Ref, where: str) -> None:
        self.tracer.check_ref(ref, self.site, where)
        if ref._kind == "step":
            self.step.refs.add(ref._root)

    def value(self, value: Any, where: str) -> Any:
        if isinstance(value, Ref):
            self.ref(value, where)
            return value._template()
        if isinstance(value, _Block):
            return self.value(value.output, where)
        if isinstance(value, _Template):
            for ref in value._refs:
                self.ref(ref, where)
            return str.__str__(value)
        if isinstance(value, enum.Enum):
            return self.value(value.value, where)
        if isinstance(value, str):
            return str.__str__(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                _fail("%s is %r, which JSON cannot hold" % (where, value), self.site, self.step.id)
            return float(value)
        if isinstance(value, Mapping):
            out: Dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    _fail("%s has a key of type %s; JSON keys are strings" % (where, type(key).__name__),
                          self.site, self.step.id)
                out[key] = self.value(item, "%s[%r]" % (where, key))
            return out
        if isinstance(value, (list, tuple)):
            return [self.value(item, "%s[%d]" % (where, i)) for i, item in enumerate(value)]
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, Unmapped):
            _fail("%s is unmapped(...), which only means something in task.map(...)" % where, self.site,
                  self.step.id)
        if isinstance(value, (Task, Workflow)):
            _fail("%s is the task/workflow %r itself; call it and pass its result" % (where, value),
                  self.site, self.step.id)
        _fail(
            "%s is a %s, not a JSON value (str, number, bool, None, list, dict) or a reference"
            % (where, type(value).__name__),
            self.site,
            self.step.id,
        )

    def selector(self, value: Any, where: str) -> Any:
        """foreach ``items`` / branch ``on``: a reference becomes JSONPath; strings and literals pass."""
        if isinstance(value, _Block):
            value = value.output
        if isinstance(value, Ref):
            self.ref(value, where)
            return value._jsonpath()
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, (Ref, _Template, _Block)):
                    _fail(
                        "%s is a literal list holding references; iterate a reference to a list instead "
                        "(for example the output of a task that builds it)" % where,
                        self.site,
                        self.step.id,
                    )
        return self.value(value, where)


def _literal(value: Any, where: str, site: Site) -> Any:
    """A JSON value that must not hold references (defaults, policy fields)."""
    if isinstance(value, (Ref, _Template, _Block)):
        _fail("%s cannot be a reference" % where, site)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _fail("%s is not a JSON value: %s" % (where, exc), site)
    return json.loads(json.dumps(value))


# --- retry policies --------------------------------------------------------------------------


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, type) and issubclass(value, BaseException):
        kind = getattr(value, "kind", None)
        if isinstance(kind, str) and kind:
            return kind
        for cls, name in (
            (TimeoutError, "timeout"),
            (ConnectionError, "transient"),
            (PermissionError, "permission"),
            (FileNotFoundError, "not_found"),
            (ValueError, "invalid_input"),
            (TypeError, "invalid_input"),
        ):
            if issubclass(value, cls):
                return name
        return "error"
    raise TypeError("retry_on takes error kinds (str) or exception classes; got %r" % (value,))


def _ms(seconds: Any, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise TypeError("%s must be a number of seconds; got %r" % (what, seconds))
    if seconds < 0:
        raise ValueError("%s must be >= 0; got %r" % (what, seconds))
    return int(round(seconds * 1000))


class Retry:
    """How a task's retries are spaced (the ``retry`` block of the spec, in seconds).

    ``Retry(backoff="exponential", initial_delay_seconds=0.5, max_delay_seconds=None, jitter=0.0,
    retry_on=None)``: ``backoff`` is ``fixed``, ``linear`` or ``exponential``; ``max_delay_seconds``
    defaults to 10 (or the initial delay when that is larger); ``jitter`` is relative, in [0, 1];
    ``retry_on`` lists error kinds (``"transient"``, ``"timeout"``, …) or exception classes
    (``ConnectionError`` → ``transient``…); ``None`` keeps the default rule. Give it as
    ``@task(retries=N, retry_delay_seconds=Retry(...))``.
    """

    __slots__ = ("backoff", "initial_delay_ms", "max_delay_ms", "jitter", "retry_on")

    def __init__(
        self,
        backoff: str = "exponential",
        initial_delay_seconds: float = 0.5,
        max_delay_seconds: Optional[float] = None,
        jitter: float = 0.0,
        retry_on: Optional[Sequence[Any]] = None,
    ) -> None:
        self.initial_delay_ms = _ms(initial_delay_seconds, "Retry(initial_delay_seconds=)")
        if max_delay_seconds is None:
            self.max_delay_ms = max(10000, self.initial_delay_ms)
        else:
            self.max_delay_ms = _ms(max_delay_seconds, "Retry(max_delay_seconds=)")
        self.backoff = str(getattr(backoff, "value", backoff))
        self.jitter = jitter
        if retry_on is not None and isinstance(retry_on, (str, bytes)):
            raise TypeError("Retry(retry_on=) takes a list of error kinds, not a single string")
        self.retry_on = None if retry_on is None else [_kind_of(k) for k in retry_on]
        self.policy(2)  # validate now

    def policy(self, max_attempts: int) -> RetryPolicy:
        """The spec's retry policy with ``max_attempts`` attempts in all."""
        return RetryPolicy(
            max_attempts,
            backoff=self.backoff,
            initial_delay_ms=self.initial_delay_ms,
            max_delay_ms=self.max_delay_ms,
            jitter=self.jitter,
            retry_on=self.retry_on,
        )

    def __repr__(self) -> str:
        return "Retry(backoff=%r, initial_delay_seconds=%g, max_delay_seconds=%g, jitter=%r, retry_on=%r)" % (
            self.backoff,
            self.initial_delay_ms / 1000.0,
            self.max_delay_ms / 1000.0,
            self.jitter,
            self.retry_on,
        )


def _retry_from_list(delays: Sequence[Any]) -> Retry:
    ms = [_ms(d, "retry_delay_seconds[%d]" % i) for i, d in enumerate(delays)]
    if not ms:
        raise ValueError("retry_delay_seconds=[] gives no delays; leave it out for the default backoff")
    first = ms[0]
    if all(d == first for d in ms):
        return Retry("fixed", first / 1000.0)
    if first > 0 and all(d == first * (2 ** i) for i, d in enumerate(ms)):
        return Retry("exponential", first / 1000.0, ms[-1] / 1000.0)
    if first > 0 and all(d == first * (i + 1) for i, d in enumerate(ms)):
        return Retry("linear", first / 1000.0, ms[-1] / 1000.0)
    raise ValueError(
        "retry_delay_seconds=%r cannot be expressed by the engine: delays are fixed (d, d, d…), linear "
        "(d, 2d, 3d…) or doubling (d, 2d, 4d…), clamped at the last one; use Retry(...)" % (list(delays),)
    )


# --- tasks -----------------------------------------------------------------------------------


def _check_tool_params(fn: Callable[..., Any], what: str) -> inspect.Signature:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError("%s: cannot read the signature of %r: %s" % (what, fn, exc)) from None
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                "%s: *%s cannot receive tool arguments (the engine passes keyword arguments); "
                "name the parameters" % (what, param.name)
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                "%s: positional-only parameter %r cannot receive tool arguments (the engine passes "
                "keyword arguments)" % (what, param.name)
            )
    return sig


def _check_keywords(kwargs: Mapping[str, Any], sig: inspect.Signature, what: str, site: Site,
                    noun: str = "parameters") -> None:
    """Refuse a keyword the signature does not take, with a "did you mean" hint."""
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY]
    for key in kwargs:
        if key not in names:
            import difflib

            close = difflib.get_close_matches(key, names, n=1)
            hint = "; did you mean '%s'?" % close[0] if close else ""
            _fail("%s: unexpected argument '%s'%s Its %s are (%s)"
                  % (what, key, hint or ".", noun, ", ".join(params)), site)


class Task:
    """A function that is a workflow step when called inside a ``@workflow``, and the plain
    function everywhere else. Made by ``@task``; ``with_options(...)`` returns a changed copy."""

    _OPTIONS = (
        "name",
        "retries",
        "retry_delay_seconds",
        "timeout_seconds",
        "idempotency_key",
        "idempotency_scope",
        "idempotency_ttl_seconds",
        "thread",
        "max_concurrent",
        "dcc",
        "id",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        retries: Optional[int] = None,
        retry_delay_seconds: Union[None, float, Sequence[float], Retry] = None,
        timeout_seconds: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        idempotency_scope: Optional[str] = None,
        idempotency_ttl_seconds: Optional[int] = None,
        thread: str = "main",
        max_concurrent: Optional[int] = None,
        dcc: Optional[str] = None,
        id: Optional[str] = None,
    ) -> None:
        if not callable(fn):
            raise TypeError("@task needs a function; got %r" % (fn,))
        if isinstance(fn, (Task, Workflow)):
            raise TypeError("@task applied to %r, which is already a task or workflow" % (fn,))
        label = "@task on %s" % getattr(fn, "__name__", repr(fn))
        self.fn = fn
        self._signature = _check_tool_params(fn, label)
        self._options: Dict[str, Any] = {
            "name": name,
            "retries": retries,
            "retry_delay_seconds": retry_delay_seconds,
            "timeout_seconds": timeout_seconds,
            "idempotency_key": idempotency_key,
            "idempotency_scope": idempotency_scope,
            "idempotency_ttl_seconds": idempotency_ttl_seconds,
            "thread": thread,
            "max_concurrent": max_concurrent,
            "dcc": dcc,
            "id": id,
        }
        fn_name = str(getattr(fn, "__name__", "task"))
        if name is None:
            tool = re.sub(r"[^A-Za-z0-9_-]", "_", fn_name)[:64] or "task"
        elif not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ValueError("%s: name=%r is not a valid tool name (^[A-Za-z0-9_-]{1,64}$), e.g. "
                             "'maya__export_fbx'" % (label, name))
        else:
            tool = name
        self.name = tool
        self.step_base = _sanitize_id(fn_name)
        if id is not None and (not isinstance(id, str) or not _ID.match(id)):
            raise ValueError("%s: id=%r must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$" % (label, id))
        self.id = id
        if thread not in ("main", "worker"):
            raise ValueError("%s: thread must be 'main' or 'worker'; got %r" % (label, thread))
        self.thread = thread
        if max_concurrent is not None and (
            isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1
        ):
            raise ValueError("%s: max_concurrent must be None or an int >= 1; got %r" % (label, max_concurrent))
        self.max_concurrent = max_concurrent
        if dcc is not None and (not isinstance(dcc, str) or not _ID.match(dcc)):
            raise ValueError("%s: dcc=%r must name a remote MCP server (^[A-Za-z_][A-Za-z0-9_-]{0,63}$)"
                             % (label, dcc))
        self.dcc = dcc
        self._policy = self._build_policy(label)
        self._key: Optional[str] = None
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str):
                raise TypeError("%s: idempotency_key must be a string (a template or 'auto')" % label)
            params = self._signature.parameters
            has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
            for field in _KEY_FIELD.findall(idempotency_key):
                if field not in params and not has_var_kw:
                    raise ValueError(
                        "%s: idempotency_key %r names {%s}, which is not a parameter of %s (parameters: %s)"
                        % (label, idempotency_key, field, fn_name, ", ".join(params) or "none")
                    )
            self._key = idempotency_key or None
        if (idempotency_scope is not None or idempotency_ttl_seconds) and self._key is None:
            raise ValueError("%s: idempotency_scope / idempotency_ttl_seconds need an idempotency_key" % label)
        functools.update_wrapper(self, fn, updated=())

    def _build_policy(self, label: str) -> Dict[str, Any]:
        opts = self._options
        policy: Dict[str, Any] = {}
        timeout = opts["timeout_seconds"]
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
                raise ValueError("%s: timeout_seconds must be a number > 0 (leave it out for none); got %r"
                                 % (label, timeout))
            policy["timeout_secs"] = timeout
        retries = opts["retries"]
        delay = opts["retry_delay_seconds"]
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValueError("%s: retries must be an int >= 0; got %r" % (label, retries))
        try:
            if isinstance(delay, Retry):
                shape: Optional[Retry] = delay
            elif delay is None:
                shape = None
            elif isinstance(delay, (list, tuple)):
                shape = _retry_from_list(delay)
                if retries is None:
                    retries = len(delay)
            else:
                shape = Retry("fixed", delay)
        except (TypeError, ValueError) as exc:
            raise type(exc)("%s: %s" % (label, exc)) from None
        if shape is not None and retries is None:
            raise ValueError("%s: retry_delay_seconds needs retries=N (the number of retries)" % label)
        if retries:
            policy["retry"] = (shape or Retry()).policy(retries + 1).to_dict()
        scope = opts["idempotency_scope"]
        if scope is not None:
            if scope not in ("workflow", "global"):
                raise ValueError("%s: idempotency_scope must be 'workflow' or 'global'; got %r" % (label, scope))
            policy["idempotency_scope"] = scope
        ttl = opts["idempotency_ttl_seconds"]
        if ttl is not None:
            if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
                raise ValueError("%s: idempotency_ttl_seconds must be an int >= 0; got %r" % (label, ttl))
            if ttl:
                policy["idempotency_ttl_secs"] = ttl
        return policy

    # -- public surface ------------------------------------------------------------------------

    def with_options(self, **changes: Any) -> "Task":
        """A copy with some options changed (any ``@task`` option, and ``id`` for the step id)."""
        unknown = sorted(set(changes) - set(self._OPTIONS))
        if unknown:
            raise TypeError("with_options() got unknown option(s) %s; options: %s"
                            % (", ".join(unknown), ", ".join(self._OPTIONS)))
        merged = dict(self._options)
        merged.update(changes)
        return Task(self.fn, **merged)

    def tool_info(self) -> Optional[ToolInfo]:
        """``(tool name, function, thread, max_concurrent)`` for ``Engine`` registration; ``None``
        for a remote (``dcc=``) task, which is served by another MCP server."""
        if self.dcc is not None:
            return None
        return (self.name, self.fn, self.thread, self.max_concurrent)

    def __repr__(self) -> str:
        return "<dcc_flow.Task %s (tool %r)>" % (getattr(self.fn, "__qualname__", self.step_base), self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tracer = _current()
        if tracer is None:
            return self.fn(*args, **kwargs)
        site = _user_site()
        step_id, after = None, None
        params = self._signature.parameters
        if "step_id" in kwargs and "step_id" not in params:
            step_id = kwargs.pop("step_id")
        if "after" in kwargs and "after" not in params:
            after = kwargs.pop("after")
        arguments = self._arguments(args, kwargs, site)
        return self._trace(tracer, arguments, site, step_id, after)

    def map(self, *args: Any, **kwargs: Any) -> Ref:
        """Inside a workflow: one call per item of the one iterated argument (a reference or a
        literal list); wrap the others in ``unmapped(...)``. Compiles to a ``foreach`` step whose
        ``as`` name is the iterated parameter's name; returns a reference to the foreach output.

        Keywords for the loop: ``concurrency``, ``on_any_fail``, ``timeout_seconds``, ``step_id``
        (the foreach id, default ``per_<param>``), ``as_`` and ``after``.
        """
        tracer = _current()
        site = _user_site()
        if tracer is None:
            raise TypeError("%s.map(...) only works inside a @workflow; outside, loop over the plain function"
                            % self.step_base)
        loop_opts = {k: kwargs.pop(k) for k in _MAP_KEYWORDS if k in kwargs}
        arguments = self._arguments(args, kwargs, site)
        mapped = [
            name for name, value in arguments.items()
            if isinstance(value, (Ref, _Block)) or (isinstance(value, (list, tuple)) and not isinstance(value, str))
        ]
        if len(mapped) != 1:
            _fail(
                "%s.map(...) iterates exactly one argument (a reference or a list) and found %s; wrap the "
                "ones passed whole in unmapped(...)"
                % (self.step_base, ", ".join(mapped) if mapped else "none"),
                site,
            )
        name = mapped[0]
        block = _Foreach(
            tracer,
            arguments[name],
            concurrency=loop_opts.get("concurrency"),
            on_any_fail=loop_opts.get("on_any_fail"),
            as_=loop_opts.get("as_"),
            step_id=loop_opts.get("step_id"),
            after=loop_opts.get("after"),
            timeout_seconds=loop_opts.get("timeout_seconds"),
            site=site,
            derived=name,
        )
        arguments[name] = block._enter(site)
        for key, value in list(arguments.items()):
            if isinstance(value, Unmapped):
                arguments[key] = value.value
        self._trace(tracer, arguments, site, None, None)
        block._exit(site)
        return block.output

    # -- tracing -------------------------------------------------------------------------------

    def _arguments(self, args: Tuple[Any, ...], kwargs: Dict[str, Any], site: Site) -> Dict[str, Any]:
        _check_keywords(kwargs, self._signature, "calling task %s(...) (tool '%s')" % (self.step_base, self.name), site)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            problem = str(exc)
        else:
            problem = ""
        if problem:
            _fail(
                "calling task %s(...) (tool '%s'): %s; its parameters are (%s)"
                % (self.step_base, self.name, problem, ", ".join(self._signature.parameters)),
                site,
            )
        out: Dict[str, Any] = {}
        for pname, value in bound.arguments.items():
            if self._signature.parameters[pname].kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            else:
                out[pname] = value
        return out

    def _render_key(self, args_json: Dict[str, Any], site: Site, step_id: str) -> Optional[str]:
        key = self._key
        if key is None or key == "auto":
            return key

        def field(match: "re.Match[str]") -> str:
            pname = match.group(1)
            if pname in args_json:
                value = args_json[pname]
            else:
                param = self._signature.parameters.get(pname)
                if param is None or param.default is inspect.Parameter.empty:
                    _fail(
                        "idempotency_key %r of task %s names {%s}, which this call does not pass"
                        % (key, self.step_base, pname),
                        site,
                        step_id,
                    )
                value = _literal(param.default, "default of %s" % pname, site)
            if isinstance(value, str):
                return value
            return json.dumps(value, separators=(",", ":"), sort_keys=True)

        return _KEY_FIELD.sub(field, key)

    def _trace(self, tracer: _Tracer, arguments: Dict[str, Any], site: Site, step_id: Any, after: Any) -> Ref:
        explicit = step_id if step_id is not None else self.id
        sid = tracer.new_id(self.step_base, explicit, site)
        step = _Step(sid, {}, site)
        conv = _Converter(tracer, site, step)
        args_json = {k: conv.value(v, "argument %r of %s(...)" % (k, self.step_base)) for k, v in arguments.items()}
        data: Dict[str, Any] = {"id": sid}
        if self.dcc is not None:
            data["kind"] = "tool_remote"
            data["dcc"] = self.dcc
        else:
            data["kind"] = "tool"
        data["tool"] = self.name
        data["args"] = args_json
        data.update(self._policy)
        key = self._render_key(args_json, site, sid)
        if key is not None:
            data["idempotency_key"] = key
        step.data = data
        tracer.add(step, after)
        tracer.finalize(step)
        tracer.use_task(self, site)
        return Ref(tracer, "step", sid, (), step)


def task(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    retries: Optional[int] = None,
    retry_delay_seconds: Union[None, float, Sequence[float], Retry] = None,
    timeout_seconds: Optional[float] = None,
    idempotency_key: Optional[str] = None,
    idempotency_scope: Optional[str] = None,
    idempotency_ttl_seconds: Optional[int] = None,
    thread: str = "main",
    max_concurrent: Optional[int] = None,
    dcc: Optional[str] = None,
    id: Optional[str] = None,
) -> Any:
    """Decorator (bare or with options): make ``fn`` a ``Task``.

    ``name`` is the tool name (default: the function name); ``retries`` the number of retries;
    ``retry_delay_seconds`` a number (fixed), a list (fixed, linear or doubling delays) or a
    ``Retry``; ``timeout_seconds`` the per-attempt deadline; ``idempotency_key`` ``"auto"`` or a
    template where ``{param}`` is replaced by that argument (``"export_{scene}"``), with
    ``idempotency_scope`` / ``idempotency_ttl_seconds``; ``thread`` and ``max_concurrent`` as for
    ``Engine.tool``; ``dcc`` makes it a ``tool_remote`` step on that MCP server; ``id`` the step id
    (default: the function name, then ``_2``, ``_3``…).
    """
    options: Dict[str, Any] = {
        "name": name,
        "retries": retries,
        "retry_delay_seconds": retry_delay_seconds,
        "timeout_seconds": timeout_seconds,
        "idempotency_key": idempotency_key,
        "idempotency_scope": idempotency_scope,
        "idempotency_ttl_seconds": idempotency_ttl_seconds,
        "thread": thread,
        "max_concurrent": max_concurrent,
        "dcc": dcc,
        "id": id,
    }
    if fn is not None:
        return Task(fn, **options)

    def decorate(func: Callable[..., Any]) -> Task:
        return Task(func, **options)

    return decorate


# --- blocks: foreach, parallel, branch -------------------------------------------------------


class _Block:
    """A control-flow step built with a ``with`` block (or at once)."""

    def __init__(self, tracer: _Tracer, site: Site, what: str) -> None:
        self._tracer = tracer
        self._site = site
        self._what = what
        self._step: Optional[_Step] = None
        self._state = "new"  # new -> open -> closed
        tracer.pending.append(self)

    @property
    def id(self) -> str:
        """The step id (known once the block is entered)."""
        if self._step is None:
            _fail("%s has no step id before its `with` block starts" % self._what, _user_site())
        return self._step.id

    @property
    def output(self) -> Ref:
        """A reference to the step's output (a foreach: one object per item, keyed by body step id;
        a parallel: an object keyed by child id; a branch: ``{"condition", "taken"}``)."""
        if self._step is None:
            _fail("%s has no output before its `with` block starts" % self._what, _user_site())
        return Ref(self._tracer, "step", self._step.id, (), self._step)

    def _open(self, site: Site) -> None:
        self._tracer.check_active(self._what, site)
        if self._state != "new":
            _fail("%s was already used; create a new one for another block" % self._what, site)
        self._state = "open"
        self._tracer.pending.remove(self)

    def _close(self) -> None:
        self._state = "closed"

    def __repr__(self) -> str:
        sid = self._step.id if self._step is not None else "?"
        return "<dcc_flow %s %s (%s)>" % (type(self).__name__.strip("_").lower(), sid, self._state)


def _on_any_fail(value: Any, site: Site) -> Optional[str]:
    if value is None:
        return None
    if value not in ("abort", "continue"):
        _fail("on_any_fail must be 'abort' or 'continue'; got %r" % (value,), site)
    return str(value)


def _timeout(value: Any, site: Site) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        _fail("timeout_seconds must be a number > 0 (leave it out for none); got %r" % (value,), site)
    return float(value) if isinstance(value, float) else int(value)


_AS_CACHE: Dict[Tuple[str, int], Dict[int, List[Tuple[bool, str]]]] = {}


def _with_targets(filename: str) -> Dict[int, List[Tuple[bool, str]]]:
    """Line number → ``(is a .foreach(...) call, variable name)`` of every ``with <expr> as name``
    item in a source file (cached per file content)."""
    import ast  # only when a foreach is traced: keeps `import dcc_flow` light

    lines = linecache.getlines(filename)
    key = (filename, hash(tuple(lines)))
    cached = _AS_CACHE.get(key)
    if cached is not None:
        return cached
    found: Dict[int, List[Tuple[bool, str]]] = {}
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.With, ast.AsyncWith)):
                continue
            for item in node.items:
                expr = item.context_expr
                target = item.optional_vars
                if not isinstance(target, ast.Name):
                    continue
                func = expr.func if isinstance(expr, ast.Call) else None
                is_foreach = isinstance(func, ast.Attribute) and func.attr == "foreach"
                # The header runs up to the line before the body (Python 3.7 has no end_lineno).
                end = max(getattr(expr, "end_lineno", None) or expr.lineno, node.body[0].lineno - 1)
                for line in range(min(node.lineno, expr.lineno), end + 1):
                    found.setdefault(line, []).append((is_foreach, target.id))
    _AS_CACHE[key] = found
    return found


def _derive_as(site: Site, index: int) -> Optional[str]:
    """The variable of the ``with`` item at ``site`` (``with ctx.foreach(x) as file`` → ``file``);
    ``index`` counts the foreach blocks of the same ``with`` statement already entered."""
    filename, line = site
    if not filename or filename.startswith("<"):
        return None
    candidates = _with_targets(filename).get(line) or []
    calls = [name for is_foreach, name in candidates if is_foreach]
    names = calls or [name for _, name in candidates]
    return names[index] if index < len(names) else None


class _Foreach(_Block):
    """``with ctx.foreach(items) as item:`` — the body runs once per item."""

    def __init__(
        self,
        tracer: _Tracer,
        items: Any,
        concurrency: Any,
        on_any_fail: Any,
        as_: Any,
        step_id: Any,
        after: Any,
        timeout_seconds: Any,
        site: Site,
        derived: Optional[str] = None,
    ) -> None:
        super().__init__(tracer, site, "ctx.foreach(...)")
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                        or concurrency < 1):
            _fail("concurrency must be an int >= 1; got %r" % (concurrency,), site)
        self._items = items
        self._concurrency = concurrency
        self._on_any_fail = _on_any_fail(on_any_fail, site)
        self._timeout = _timeout(timeout_seconds, site)
        self._as = as_
        self._step_id = step_id
        self._after = after
        self._derived = derived
        self._body: Optional[_Scope] = None

    def _enter(self, site: Site) -> Ref:
        self._open(site)
        tracer = self._tracer
        derived = self._derived
        if derived is None:
            same_statement = sum(1 for loop in tracer.scope.chain if loop.site == site)
            derived = _derive_as(site, same_statement)
        as_name = tracer.choose_as(self._as, derived, site)
        sid = tracer.new_id("per_" + as_name, self._step_id, site)
        step = _Step(sid, {}, site)
        step.as_name = as_name
        conv = _Converter(tracer, site, step)
        items = conv.selector(self._items, "foreach items")
        data: Dict[str, Any] = {"id": sid, "kind": "foreach", "items": items, "as": as_name}
        if self._concurrency is not None:
            data["concurrency"] = self._concurrency
        if self._on_any_fail is not None:
            data["on_any_fail"] = self._on_any_fail
        if self._timeout is not None:
            data["timeout_secs"] = self._timeout
        step.data = data
        tracer.add(step, self._after)
        self._step = step
        parent = tracer.scope
        body = _Scope("seq", step, parent.chain + (step,))
        step.children.append(("steps", body))
        self._body = body
        tracer.push(body)
        return Ref(tracer, "item", as_name, (), step)

    def _exit(self, site: Site) -> None:
        assert self._step is not None and self._body is not None
        self._tracer.pop(self._body)
        if not self._body.steps:
            _fail("foreach step '%s' has an empty body: call a task inside the `with` block" % self._step.id,
                  self._step.site, self._step.id)
        self._tracer.finalize(self._step)
        self._close()

    def __enter__(self) -> Ref:
        return self._enter(_user_site())

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            if self._body is not None and self._tracer.scopes[-1] is self._body:
                self._tracer.scopes.pop()
            return
        self._exit(_user_site())
        return None


class _Parallel(_Block):
    """``with ctx.parallel():`` — every step created inside is a branch that starts at once."""

    def __init__(self, tracer: _Tracer, on_any_fail: Any, step_id: Any, after: Any, timeout_seconds: Any,
                 site: Site) -> None:
        super().__init__(tracer, site, "ctx.parallel()")
        self._on_any_fail = _on_any_fail(on_any_fail, site)
        self._timeout = _timeout(timeout_seconds, site)
        self._step_id = step_id
        self._after = after
        self._children: Optional[_Scope] = None

    def __enter__(self) -> "_Parallel":
        site = _user_site()
        self._open(site)
        tracer = self._tracer
        sid = tracer.new_id("parallel", self._step_id, site)
        step = _Step(sid, {}, site)
        data: Dict[str, Any] = {"id": sid, "kind": "parallel"}
        if self._on_any_fail is not None:
            data["on_any_fail"] = self._on_any_fail
        if self._timeout is not None:
            data["timeout_secs"] = self._timeout
        step.data = data
        tracer.add(step, self._after)
        self._step = step
        children = _Scope("par", step, tracer.scope.chain)
        step.children.append(("steps", children))
        self._children = children
        tracer.push(children)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._step is not None and self._children is not None
        if exc_type is not None:
            if self._tracer.scopes[-1] is self._children:
                self._tracer.scopes.pop()
            return
        self._tracer.pop(self._children)
        if not self._children.steps:
            _fail("parallel step '%s' has no branches: call tasks inside the `with` block" % self._step.id,
                  self._step.site, self._step.id)
        self._tracer.finalize(self._step)
        self._close()
        return None


class _Arm:
    """``with br.then():`` / ``with br.else_():`` — one step list of a branch."""

    def __init__(self, branch: "_Branch", key: str) -> None:
        self._branch = branch
        self._key = key

    def __enter__(self) -> None:
        branch = self._branch
        site = _user_site()
        if branch._state != "open" or branch._tracer.scope is not branch._guard:
            _fail("br.%s() must be used directly inside `with ctx.branch(...) as br:`" %
                  ("then" if self._key == "then" else "else_"), site)
        branch._tracer.push(branch._arm(self._key))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        scope = self._branch._arm(self._key)
        tracer = self._branch._tracer
        if exc_type is not None:
            if tracer.scopes[-1] is scope:
                tracer.scopes.pop()
            return
        tracer.pop(scope)
        return None


class _Branch(_Block):
    """A ``branch`` step: ``ctx.branch(on, then=fn, else_=fn)`` or ``with ctx.branch(on) as br:``."""

    def __init__(self, tracer: _Tracer, on: Any, step_id: Any, after: Any, timeout_seconds: Any,
                 site: Site) -> None:
        super().__init__(tracer, site, "ctx.branch(...)")
        self._on = on
        self._step_id = step_id
        self._after = after
        self._timeout = _timeout(timeout_seconds, site)
        self._arms: Dict[str, _Scope] = {}
        self._guard: Optional[_Scope] = None

    def _start(self, site: Site) -> None:
        self._open(site)
        tracer = self._tracer
        sid = tracer.new_id("branch", self._step_id, site)
        step = _Step(sid, {}, site)
        conv = _Converter(tracer, site, step)
        data: Dict[str, Any] = {"id": sid, "kind": "branch", "on": conv.selector(self._on, "branch condition")}
        if self._timeout is not None:
            data["timeout_secs"] = self._timeout
        step.data = data
        tracer.add(step, self._after)
        self._step = step
        chain = tracer.scope.chain
        for key in ("then", "else"):
            arm = _Scope("seq", step, chain)
            self._arms[key] = arm
            step.children.append((key, arm))

    def _arm(self, key: str) -> _Scope:
        return self._arms[key]

    def _finish(self) -> None:
        assert self._step is not None
        self._tracer.finalize(self._step)
        self._close()

    def _trace_arm(self, key: str, fn: Any, site: Site) -> None:
        if not callable(fn):
            _fail("ctx.branch(%s=...) takes a function called with no arguments (e.g. a lambda); got %r"
                  % ("then" if key == "then" else "else_", fn), site)
        scope = self._arms[key]
        self._tracer.push(scope)
        fn()
        self._tracer.pop(scope)

    def then(self) -> _Arm:
        """``with br.then():`` — the steps run when the condition is truthy."""
        return _Arm(self, "then")

    def else_(self) -> _Arm:
        """``with br.else_():`` — the steps run otherwise."""
        return _Arm(self, "else")

    def __enter__(self) -> "_Branch":
        site = _user_site()
        self._start(site)
        assert self._step is not None
        guard = _Scope("guard", self._step, self._tracer.scope.chain)
        self._guard = guard
        self._tracer.push(guard)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            if self._guard is not None and self._tracer.scopes[-1] is self._guard:
                self._tracer.scopes.pop()
            return
        assert self._guard is not None
        self._tracer.pop(self._guard)
        self._finish()
        return None


# --- the context ----------------------------------------------------------------------------


class FlowContext:
    """What a ``@workflow`` function receives as its first parameter ``ctx``: the structured
    control flow of the spec. It is valid only while its workflow is traced."""

    def __init__(self, tracer: _Tracer) -> None:
        self._tracer = tracer

    def _active(self, what: str) -> Tuple[_Tracer, Site]:
        site = _user_site()
        self._tracer.check_active("ctx.%s" % what, site)
        return self._tracer, site

    def __repr__(self) -> str:
        return "<dcc_flow.FlowContext of workflow %r>" % self._tracer.flow.name

    @property
    def workflow_name(self) -> str:
        """The name of the workflow being traced."""
        return self._tracer.flow.name

    def foreach(
        self,
        items: Any,
        concurrency: Optional[int] = None,
        on_any_fail: Optional[str] = None,
        as_: Optional[str] = None,
        step_id: Optional[str] = None,
        after: Any = None,
        timeout_seconds: Optional[float] = None,
    ) -> _Foreach:
        """``with ctx.foreach(ref, concurrency=4) as file:`` — a ``foreach`` step whose body is the
        steps created in the block. ``items`` is a reference (compiled to JSONPath), a JSONPath or
        template string, or a literal list. The ``as`` name is the ``with`` variable's name (else
        ``item``, or ``as_=``); the step id defaults to ``per_<as>``. After the block, the loop's
        ``.output`` is a reference to the list of per-item results."""
        tracer, site = self._active("foreach()")
        return _Foreach(tracer, items, concurrency, on_any_fail, as_, step_id, after, timeout_seconds, site)

    def parallel(
        self,
        on_any_fail: Optional[str] = None,
        step_id: Optional[str] = None,
        after: Any = None,
        timeout_seconds: Optional[float] = None,
    ) -> _Parallel:
        """``with ctx.parallel():`` — a ``parallel`` step; each step created in the block is a
        branch (a sub-workflow call stays one ordered chain). A branch that uses a sibling's
        output waits for it (``depends_on``). Step id default: ``parallel``."""
        tracer, site = self._active("parallel()")
        return _Parallel(tracer, on_any_fail, step_id, after, timeout_seconds, site)

    def branch(
        self,
        on: Any,
        then: Optional[Callable[[], Any]] = None,
        else_: Optional[Callable[[], Any]] = None,
        step_id: Optional[str] = None,
        after: Any = None,
        timeout_seconds: Optional[float] = None,
    ) -> _Branch:
        """A ``branch`` step on ``on`` (a reference → JSONPath, or a literal), with the steps
        ``then()`` / ``else_()`` create (functions called with no arguments, e.g. lambdas). Without
        ``then``/``else_``, use it as ``with ctx.branch(on) as br:`` with ``with br.then():`` and
        ``with br.else_():`` blocks. Step id default: ``branch``."""
        tracer, site = self._active("branch()")
        block = _Branch(tracer, on, step_id, after, timeout_seconds, site)
        if then is None and else_ is None:
            return block
        block._start(site)
        if then is not None:
            block._trace_arm("then", then, site)
        if else_ is not None:
            block._trace_arm("else", else_, site)
        block._finish()
        return block

    def approve(
        self,
        prompt: Any = "",
        timeout_seconds: Optional[float] = None,
        step_id: Optional[str] = None,
        after: Any = None,
    ) -> Ref:
        """An ``approve`` step: the run waits for a human. ``prompt`` is text (``ctx.template(...)``
        for values known at run time). Returns a reference to ``{"approved", "reason", "by"}``.
        Step id default: ``approve``."""
        tracer, site = self._active("approve()")
        sid = tracer.new_id("approve", step_id, site)
        step = _Step(sid, {}, site)
        conv = _Converter(tracer, site, step)
        text = conv.value(prompt, "the approve prompt")
        if not isinstance(text, str):
            _fail("the approve prompt must be text; got %s" % type(prompt).__name__, site, sid)
        data: Dict[str, Any] = {"id": sid, "kind": "approve", "prompt": text}
        timeout = _timeout(timeout_seconds, site)
        if timeout is not None:
            data["timeout_secs"] = timeout
        step.data = data
        tracer.add(step, after)
        tracer.finalize(step)
        return Ref(tracer, "step", sid, (), step)

    def template(self, format_string: str, *args: Any, **kwargs: Any) -> str:
        """Text with run-time values: ``str.format`` syntax where each reference becomes a
        ``{{…}}`` placeholder (``ctx.template("Push {}?", date)`` → ``"Push {{inputs.date}}?"``);
        other values are formatted now; literal braces are doubled, as in ``str.format``. Use the
        result as an argument value or an approve prompt."""
        tracer, site = self._active("template()")
        formatter = string.Formatter()
        parts: List[str] = []
        refs: List[Ref] = []
        auto = 0
        for literal, field, spec, conversion in formatter.parse(format_string):
            parts.append(literal)
            if field is None:
                continue
            if field == "" or field[0] in ".[":
                field = str(auto) + field
                auto += 1
            value, _ = formatter.get_field(field, args, kwargs)
            if isinstance(value, _Block):
                value = value.output
            if isinstance(value, Ref):
                if spec or conversion:
                    _fail("ctx.template: a reference cannot take a format spec or conversion ({%s}); format it "
                          "in a task" % field, site)
                tracer.check_ref(value, site, "ctx.template")
                refs.append(value)
                parts.append(value._template())
            elif isinstance(value, _Template):
                refs.extend(value._refs)
                parts.append(str.__str__(value))
            else:
                if conversion:
                    value = formatter.convert_field(value, conversion)
                parts.append(format(value, spec or ""))
        text = _Template("".join(parts))
        text._refs = tuple(refs)
        return text

    @property
    def env(self) -> Ref:
        """A reference to the environment (``ctx.env.MAYA_LOCATION`` → ``{{env.MAYA_LOCATION}}``)."""
        return Ref(self._tracer, "env", "env")

    @property
    def trigger(self) -> Ref:
        """A reference to what started the run (``ctx.trigger.payload``)."""
        return Ref(self._tracer, "trigger", "trigger")

    @property
    def run_info(self) -> Ref:
        """A reference to the run itself (``ctx.run_info.id``, ``ctx.run_info.name``)."""
        return Ref(self._tracer, "run", "run")


# --- workflows -------------------------------------------------------------------------------


def _origin(annotation: Any) -> Any:
    return getattr(annotation, "__origin__", None)


def _input_type(annotation: Any) -> str:
    """The spec input type of a parameter annotation (``any`` when not known)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return "any"
    if isinstance(annotation, str):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "object",
                "list": "array"}.get(annotation.strip(), "any")
    origin = _origin(annotation)
    args = getattr(annotation, "__args__", None) or ()
    if origin is Union or type(annotation).__name__ == "UnionType":
        others = [a for a in args if a is not type(None)]
        return _input_type(others[0]) if len(others) == 1 else "any"
    target = origin if origin is not None else annotation
    if not isinstance(target, type):
        return "any"
    if issubclass(target, bool):
        return "boolean"
    if issubclass(target, int):
        return "integer"
    if issubclass(target, float):
        return "number"
    if issubclass(target, (str, bytes)):
        return "string" if issubclass(target, str) else "any"
    if issubclass(target, (dict, collections.abc.Mapping)):
        return "object"
    if issubclass(target, (list, tuple, collections.abc.Sequence)):
        return "array"
    return "any"


def _is_ctx_param(param: inspect.Parameter, annotation: Any) -> bool:
    if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        return False
    if isinstance(annotation, str):
        return param.name == "ctx" or annotation.split(".")[-1] == "FlowContext"
    return param.name == "ctx" or annotation is FlowContext


class Workflow:
    """A code-first workflow made by ``@workflow``. ``spec`` is its ``WorkflowSpec``, ``tasks`` the
    tasks its steps call (``Engine.run(flow, inputs)`` registers them as tools)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        description: Optional[str] = None,
        inputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
        lazy: bool = False,
    ) -> None:
        if not callable(fn) or isinstance(fn, (Task, Workflow)):
            raise TypeError("@workflow needs a function; got %r" % (fn,))
        self.fn = fn
        fn_name = str(getattr(fn, "__name__", "workflow"))
        label = "@workflow on %s" % fn_name
        code = getattr(fn, "__code__", None)
        self._site: Site = (code.co_filename, code.co_firstlineno) if code is not None else ("<unknown>", 0)
        if name is not None and not isinstance(name, str):
            raise TypeError("%s: name must be a string" % label)
        self.name = name if name is not None else fn_name
        if description is None:
            doc = inspect.getdoc(fn) or ""
            description = doc.strip().splitlines()[0].strip() if doc.strip() else ""
        self.description = description
        self._ctx_param: Optional[inspect.Parameter] = None
        self._input_names: List[str] = []
        self._inputs = self._declare_inputs(label, inputs or {})
        self._lock = threading.RLock()
        self._traced: Optional[Tuple[Dict[str, Any], Tuple[Task, ...]]] = None
        self._compiled: Optional[Tuple[WorkflowSpec, Tuple[Task, ...]]] = None
        functools.update_wrapper(self, fn, updated=())
        if not lazy:
            self._trace()
            try:
                self._compile()
            except LibraryLoadError:
                pass  # no native library here (a docs build, a linter): validate on first use of .spec

    def _declare_inputs(self, label: str, overrides: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
        sig = inspect.signature(self.fn)
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to the raw annotations
            hints = {}
        decls: Dict[str, Dict[str, Any]] = {}
        for index, param in enumerate(sig.parameters.values()):
            annotation = hints.get(param.name, param.annotation)
            if index == 0 and _is_ctx_param(param, annotation):
                self._ctx_param = param
                continue
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError("%s: *%s / **%s cannot be workflow inputs; declare each input as a parameter"
                                % (label, param.name, param.name))
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError("%s: positional-only parameter %r cannot be an input" % (label, param.name))
            if not _ID.match(param.name) or param.name in _RESERVED:
                raise ValueError(
                    "%s: parameter %r cannot be an input name (reserved: %s; the first parameter may be "
                    "ctx)" % (label, param.name, ", ".join(sorted(_RESERVED)))
                )
            decl: Dict[str, Any] = {"type": _input_type(annotation)}
            if param.default is inspect.Parameter.empty:
                decl["required"] = True
            else:
                try:
                    decl["default"] = _literal(param.default, "default of input %r" % param.name, self._site)
                except WorkflowTraceError as exc:
                    raise ValueError("%s: %s" % (label, exc.message.split(": ", 1)[-1])) from None
            decls[param.name] = decl
            self._input_names.append(param.name)
        for input_name, extra in overrides.items():
            if input_name not in decls:
                raise ValueError("%s: inputs= names %r, which is not a parameter (inputs: %s)"
                                 % (label, input_name, ", ".join(decls) or "none"))
            unknown = sorted(set(extra) - _INPUT_FIELDS)
            if unknown:
                raise ValueError("%s: inputs[%r] has unknown field(s) %s; fields: %s"
                                 % (label, input_name, ", ".join(unknown), ", ".join(sorted(_INPUT_FIELDS))))
            decls[input_name].update(extra)
            if "default" in extra and "required" not in extra:
                decls[input_name].pop("required", None)
        return decls

    # -- compiling -----------------------------------------------------------------------------

    def _trace(self) -> Tuple[Dict[str, Any], Tuple[Task, ...]]:
        """Call the function with references; return the spec document and the tasks used."""
        if self._traced is not None:
            return self._traced
        tracer = _Tracer(self)
        stack = _stack()
        stack.append(tracer)
        try:
            self._invoke(tracer, {name: Ref(tracer, "input", name) for name in self._input_names})
            if tracer.pending:
                block = tracer.pending[0]
                _fail("%s was created but never used as a `with` block" % block._what, block._site)
        finally:
            stack.remove(tracer)
        if not tracer.root.steps:
            raise WorkflowTraceError(
                "%s:%d: workflow '%s' has no steps: call at least one task in its function"
                % (self._site + (self.name,)),
                None,
                self._site[0],
                self._site[1],
            )
        data = {
            "name": self.name,
            "description": self.description,
            "inputs": self._inputs,
            "steps": tracer.root.to_list(),
        }
        self._traced = (data, tuple(tracer.tasks.values()))
        return self._traced

    def _compile(self) -> Tuple[WorkflowSpec, Tuple[Task, ...]]:
        """Trace (once), then parse and validate the result with the library (once it succeeds)."""
        with self._lock:
            if self._compiled is not None:
                return self._compiled
            data, tasks = self._trace()
            source = "%s (@workflow at %s)" % (self.name, _where(self._site))
            spec = WorkflowSpec.from_json(data, source=source)
            spec.validate()
            self._compiled = (spec, tasks)
            return self._compiled

    def _invoke(self, tracer: _Tracer, values: Dict[str, Any]) -> Any:
        args: List[Any] = []
        kwargs = dict(values)
        param = self._ctx_param
        if param is not None:
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(tracer.ctx)
            else:
                kwargs[param.name] = tracer.ctx
        flows = tracer.flows
        flows.append(self)
        try:
            return self.fn(*args, **kwargs)
        finally:
            flows.pop()

    @property
    def spec(self) -> WorkflowSpec:
        """The compiled ``WorkflowSpec`` (traced on first use for ``lazy=True`` workflows)."""
        return self._compile()[0]

    @property
    def tasks(self) -> Tuple[Task, ...]:
        """The local tasks the steps call, one per tool name (remote ``dcc=`` tasks excluded)."""
        return self._compile()[1]

    @property
    def inputs(self) -> Dict[str, Dict[str, Any]]:
        """The declared inputs, as in the spec."""
        out: Dict[str, Dict[str, Any]] = json.loads(json.dumps(self._inputs))
        return out

    def to_yaml(self) -> str:
        """The spec as YAML (``WorkflowSpec.from_yaml_str(flow.to_yaml()) == flow.spec``)."""
        return self.spec.to_yaml()

    def to_json(self) -> str:
        """The canonical JSON of the spec."""
        return self.spec.to_json()

    def run(self, *engine: "Engine", **inputs: Any) -> "RunResult":
        """Run to the end on ``engine`` (positional, or ``engine=`` when no input has that name;
        default: a temporary in-memory engine) with ``inputs`` as keywords; returns the result."""
        from ._engine import Engine

        if len(engine) > 1:
            raise TypeError("run() takes at most one positional argument (the engine)")
        eng: Optional[Engine] = engine[0] if engine else None
        if eng is None and "engine" in inputs and "engine" not in self._input_names:
            eng = inputs.pop("engine")
        if eng is not None and not isinstance(eng, Engine):
            raise TypeError("run(): engine must be a dcc_flow.Engine; got %s" % type(eng).__name__)
        if eng is not None:
            return eng.run(self, inputs)
        with Engine() as temporary:
            return temporary.run(self, inputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tracer = _current()
        site = _user_site()
        if tracer is None:
            var = str(getattr(self.fn, "__name__", "flow"))
            raise TypeError(
                "workflow '%s' is not a plain function: run it with %s.run(engine, **inputs) or "
                "engine.run(%s, inputs), or call it inside another @workflow to inline its steps"
                % (self.name, var, var)
            )
        if any(f is self for f in tracer.flows):
            _fail("workflow '%s' calls itself; sub-workflows cannot recurse" % self.name, site)
        if args and isinstance(args[0], FlowContext):
            args[0]._tracer.check_active("the ctx passed to %s()" % self.name, site)
            args = args[1:]
        names = set(self._input_names)
        step_id = kwargs.pop("step_id") if "step_id" in kwargs and "step_id" not in names else None
        after = kwargs.pop("after") if "after" in kwargs and "after" not in names else None
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self._input_names]
        _check_keywords(kwargs, inspect.Signature(params), "calling sub-workflow %s(...)" % self.name, site,
                        "inputs")
        try:
            bound = inspect.Signature(params).bind_partial(*args, **kwargs)
        except TypeError as exc:
            problem = str(exc)
        else:
            problem = ""
        if problem:
            _fail("calling sub-workflow %s(...): %s; its inputs are (%s)"
                  % (self.name, problem, ", ".join(self._input_names)), site)
        values: Dict[str, Any] = {}
        for input_name in self._input_names:
            if input_name in bound.arguments:
                values[input_name] = bound.arguments[input_name]
            elif "default" in self._inputs[input_name]:
                values[input_name] = self._inputs[input_name]["default"]
            else:
                _fail("calling sub-workflow %s(...): missing input %r" % (self.name, input_name), site)
        prefix = tracer.new_prefix(str(getattr(self.fn, "__name__", self.name)), step_id, site)
        parent = tracer.scope
        if parent.kind == "guard":
            _fail("inside `with ctx.branch(...) as br:` steps go in `with br.then():` or `with br.else_():`", site)
        sub = _Scope("seq", None, parent.chain, splice_target=parent)
        saved_prefix = tracer.prefix
        tracer.prefix = prefix + "__"
        tracer.push(sub)
        try:
            result = self._invoke(tracer, values)
        finally:
            tracer.prefix = saved_prefix
        tracer.pop(sub)
        if tracer.pending:
            block = tracer.pending[0]
            _fail("%s was created but never used as a `with` block" % block._what, block._site)
        if not sub.steps:
            _fail("sub-workflow '%s' created no steps" % self.name, site)
        tracer.splice(sub, after, site, None)
        return result

    def __repr__(self) -> str:
        return "<dcc_flow.Workflow %r>" % self.name


def workflow(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    inputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    lazy: bool = False,
) -> Any:
    """Decorator (bare or with options): make ``fn`` a ``Workflow`` compiled by tracing.

    ``fn``'s parameters are the inputs (annotation → type, default → default, none → required),
    except a first parameter named ``ctx`` (or annotated ``FlowContext``), which receives the
    ``FlowContext``. ``name`` defaults to the function name, ``description`` to the first line
    of its docstring; ``inputs={"date": {"format": "date"}}`` adds fields to a declaration. The
    function is traced at decoration (so mistakes fail at import) unless ``lazy=True``, which
    waits for the first ``.spec`` (useful when it calls tasks defined further down the module).
    """
    if fn is not None:
        return Workflow(fn, name=name, description=description, inputs=inputs, lazy=lazy)

    def decorate(func: Callable[..., Any]) -> Workflow:
        return Workflow(func, name=name, description=description, inputs=inputs, lazy=lazy)

    return decorate
