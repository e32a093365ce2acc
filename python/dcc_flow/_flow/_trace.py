"""The trace of one ``@workflow`` compilation: the step lists being built (``_Scope``), the steps
(``_Step``), the per-thread stack of active tracers, the ``_Tracer`` that names steps, checks
references and computes ``depends_on``, and ``_Block``, the base of the ``with`` blocks.

``_Block`` and ``_FlowCallable`` live here, below the blocks, tasks and workflows, because the tracer
and the value converter must recognise them; the subclasses live in ``_blocks``,
``_task`` and ``_workflow``.
"""

import threading
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ._base import _ID, _RESERVED, Site, _describe_fn, _fail, _sanitize_id, _user_site, _where
from ._refs import Ref

if typing.TYPE_CHECKING:  # pragma: no cover
    from ._task import Task
    from ._workflow import FlowContext, Workflow


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


class _FlowCallable:
    """The base of ``Task`` and ``Workflow``: lets the tracer and the converter recognise them
    without importing the modules that define them."""


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


class _Tracer:
    """The state of one compilation of a @workflow."""

    def __init__(self, flow: "Workflow", context: Callable[["_Tracer"], "FlowContext"]) -> None:
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
        self.subflows: Dict[str, Workflow] = {}  # the workflows `kind: workflow` steps run, by name
        self.pending: List[_Block] = []
        self.ctx = context(self)  # the FlowContext (passed in: it lives above the tracer)

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

    def use_subflow(self, flow: "Workflow", site: Site) -> None:
        """Record a workflow a ``kind: workflow`` step runs (registered with the parent)."""
        known = self.subflows.get(flow.name)
        if known is not None and known is not flow:
            _fail(
                "two different workflows are named '%s' (%s and %s); give one another name="
                % (flow.name, _describe_fn(known.fn), _describe_fn(flow.fn)),
                site,
            )
        self.subflows[flow.name] = flow

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
