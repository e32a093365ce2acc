"""The ``with`` blocks of a workflow: ``ctx.foreach`` (and ``task.map``), ``ctx.parallel`` and
``ctx.branch`` with its ``then``/``else_`` arms."""

import linecache
from typing import Any, Dict, List, Optional, Tuple

from ._base import Site, _fail, _user_site
from ._convert import _Converter
from ._refs import Ref
from ._trace import _Block, _Scope, _Step, _Tracer


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
