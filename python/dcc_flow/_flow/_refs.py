"""References: ``Ref`` (a value that exists only when the workflow runs), the text
``ctx.template`` builds from them, and ``unmapped(...)`` for ``task.map``."""

import typing
from typing import Any, Iterator, NoReturn, Optional, Tuple, Union

from ._base import _JSONPATH_NAME, _PATH_NAME, _fail

if typing.TYPE_CHECKING:  # pragma: no cover
    from ._trace import _Step, _Tracer


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
