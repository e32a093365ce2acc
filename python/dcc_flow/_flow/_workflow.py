"""Workflows: ``@workflow`` traces a function into a ``WorkflowSpec``; ``FlowContext`` is the ``ctx``
that function receives (blocks, approvals, templates, ``env``/``trigger``/``run``)."""

import collections.abc
import functools
import inspect
import json
import string
import threading
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from .._errors import LibraryLoadError
from .._spec import RetryPolicy, WorkflowSpec
from ._base import (
    _ID,
    _INPUT_FIELDS,
    _RESERVED,
    Site,
    WorkflowTraceError,
    _check_keywords,
    _fail,
    _user_site,
    _where,
)
from ._blocks import _Branch, _Foreach, _Parallel, _timeout
from ._convert import _Converter, _literal
from ._refs import Ref, _Template
from ._retry import Retry
from ._task import Task
from ._trace import _Block, _current, _FlowCallable, _Scope, _stack, _Step, _Tracer

if typing.TYPE_CHECKING:  # pragma: no cover
    from .._engine import Engine
    from .._results import RunResult


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


class Workflow(_FlowCallable):
    """A code-first workflow made by ``@workflow``. ``spec`` is its ``WorkflowSpec``, ``tasks`` the
    tasks its steps call (``Engine.run(flow, inputs)`` registers them as tools), ``subflows`` the
    workflows its ``kind: workflow`` steps run (registered in the catalog with it)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        description: Optional[str] = None,
        inputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
        lazy: bool = False,
        inline: bool = False,
        defaults: Optional[Mapping[str, Any]] = None,
        on_failure: Optional[Any] = None,
    ) -> None:
        if not callable(fn) or isinstance(fn, _FlowCallable):
            raise TypeError("@workflow needs a function; got %r" % (fn,))
        self.fn = fn
        fn_name = str(getattr(fn, "__name__", "workflow"))
        label = "@workflow on %s" % fn_name
        code = getattr(fn, "__code__", None)
        self._site: Site = (code.co_filename, code.co_firstlineno) if code is not None else ("<unknown>", 0)
        if name is not None and not isinstance(name, str):
            raise TypeError("%s: name must be a string" % label)
        self.name = name if name is not None else fn_name
        self._inline = bool(inline)
        if description is None:
            doc = inspect.getdoc(fn) or ""
            description = doc.strip().splitlines()[0].strip() if doc.strip() else ""
        self.description = description
        self._ctx_param: Optional[inspect.Parameter] = None
        self._input_names: List[str] = []
        self._inputs = self._declare_inputs(label, inputs or {})
        self._defaults = _defaults_block(label, defaults)
        self._on_failure, self._on_failure_tasks = _on_failure_steps(label, on_failure)
        self._lock = threading.RLock()
        self._traced: Optional[Tuple[Dict[str, Any], Tuple[Task, ...]]] = None
        self._subflows: Tuple[Workflow, ...] = ()
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
        tracer = _Tracer(self, FlowContext)
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
        self._subflows = tuple(tracer.subflows.values())
        if self._defaults:
            data["defaults"] = self._defaults
        if self._on_failure:
            data["on_failure"] = self._on_failure
        for task in self._on_failure_tasks:
            tracer.use_task(task, self._site)
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
    def subflows(self) -> Tuple["Workflow", ...]:
        """The workflows this one's ``kind: workflow`` steps run (calls of another ``@workflow``
        that are not inlined), one per name. ``Engine.run``, ``submit`` and ``register_workflow``
        register them in the catalog (with their tasks and their own sub-workflows) first."""
        self._compile()
        return self._subflows

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
        from .._engine import Engine

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
        """Inside another ``@workflow``: a ``kind: workflow`` step that runs this workflow as a
        child run (docs/reference/spec.md, "workflow"); returns a reference to its output, the child's
        outputs by step id. A workflow made with ``inline=True`` has its steps inlined instead
        (see ``inline``). Outside a workflow it is an error: use ``run``."""
        tracer = _current()
        site = _user_site()
        if tracer is None:
            var = str(getattr(self.fn, "__name__", "flow"))
            raise TypeError(
                "workflow '%s' is not a plain function: run it with %s.run(engine, **inputs) or "
                "engine.run(%s, inputs), or call it inside another @workflow to run it as a child run "
                "(%s.inline(...) inlines its steps)"
                % (self.name, var, var, var)
            )
        if self._inline:
            return self._inline_call(tracer, site, args, kwargs)
        return self._step_call(tracer, site, args, kwargs)

    def inline(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another ``@workflow``: inline this workflow's steps, ids prefixed ``name__``
        (``step_id=`` sets the prefix), instead of running it as a child run; returns what its
        function returns. The code-first form of copying its steps into the caller."""
        tracer = _current()
        site = _user_site()
        if tracer is None:
            raise TypeError("%s.inline(...) only works inside a @workflow" % getattr(self.fn, "__name__", self.name))
        return self._inline_call(tracer, site, args, kwargs)

    def _bind(
        self, tracer: _Tracer, site: Site, args: Tuple[Any, ...], kwargs: Dict[str, Any], defaults: bool
    ) -> Tuple[Dict[str, Any], Any, Any]:
        """The inputs of a call (with the defaults of those not passed when ``defaults``), its
        ``step_id`` and its ``after``."""
        if any(f is self for f in tracer.flows) or tracer.flow.name == self.name:
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
                if defaults:
                    values[input_name] = self._inputs[input_name]["default"]
            else:
                _fail("calling sub-workflow %s(...): missing input %r" % (self.name, input_name), site)
        return values, step_id, after

    def _step_call(self, tracer: _Tracer, site: Site, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Ref:
        """A ``kind: workflow`` step running this workflow; its inputs are the values passed (the
        child applies its own defaults)."""
        values, step_id, after = self._bind(tracer, site, args, kwargs, defaults=False)
        sid = tracer.new_id(str(getattr(self.fn, "__name__", self.name)), step_id, site)
        step = _Step(sid, {}, site)
        conv = _Converter(tracer, site, step)
        inputs = {k: conv.value(v, "input %r of sub-workflow %s(...)" % (k, self.name)) for k, v in values.items()}
        step.data = {"id": sid, "kind": "workflow", "workflow": self.name, "inputs": inputs}
        tracer.add(step, after)
        tracer.finalize(step)
        tracer.use_subflow(self, site)
        return Ref(tracer, "step", sid, (), step)

    def _inline_call(self, tracer: _Tracer, site: Site, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if self._defaults or self._on_failure:
            _fail("workflow '%s' has %s, which an inlined call cannot keep (they belong to a run): call it "
                  "without inline to run it as a sub-workflow" % (self.name, " and ".join(
                      n for n, v in (("defaults=", self._defaults), ("on_failure=", self._on_failure)) if v)), site)
        values, step_id, after = self._bind(tracer, site, args, kwargs, defaults=True)
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


def _defaults_block(label: str, defaults: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The spec's ``defaults`` block from ``@workflow(defaults=...)``: ``timeout_secs`` and
    ``retry`` (a ``RetryPolicy``, or a mapping in the spec's form). The library checks the values."""
    if defaults is None:
        return {}
    if not isinstance(defaults, collections.abc.Mapping):
        raise TypeError("%s: defaults= must be a mapping such as {'retry': RetryPolicy(3), 'timeout_secs': 600}"
                        % label)
    unknown = sorted(set(defaults) - {"retry", "timeout_secs"})
    if unknown:
        raise ValueError("%s: defaults= has unknown key(s) %s; keys: retry, timeout_secs" % (label, ", ".join(unknown)))
    out: Dict[str, Any] = {}
    if defaults.get("timeout_secs") is not None:
        out["timeout_secs"] = defaults["timeout_secs"]
    retry = defaults.get("retry")
    if isinstance(retry, Retry):
        raise TypeError("%s: defaults['retry'] needs the number of attempts: give RetryPolicy(n, ...) "
                        "or Retry(...).policy(n)" % label)
    if isinstance(retry, RetryPolicy):
        out["retry"] = retry.to_dict()
    elif retry is not None:
        out["retry"] = dict(retry)
    return out


def _on_failure_steps(label: str, steps: Optional[Any]) -> Tuple[List[Dict[str, Any]], List[Task]]:
    """The spec's ``on_failure`` list from ``@workflow(on_failure=[...])``: step mappings in the
    spec's form, whose ``tool`` may be a ``@task`` (its tool name is used, and ``Engine.run``
    registers it with the flow's other tasks)."""
    if steps is None:
        return [], []
    if isinstance(steps, (str, bytes)) or not isinstance(steps, collections.abc.Sequence):
        raise TypeError("%s: on_failure= must be a list of steps such as "
                        "[{'id': 'alert', 'tool': post_slack, 'args': {'text': '{{run.error.message}}'}}]" % label)
    out: List[Dict[str, Any]] = []
    tasks: List[Task] = []
    for i, step in enumerate(steps):
        if not isinstance(step, collections.abc.Mapping):
            raise TypeError("%s: on_failure[%d] must be a mapping (a step in the spec's form); got %r"
                            % (label, i, step))
        step = dict(step)
        tool = step.get("tool")
        if isinstance(tool, Task):
            step["tool"] = tool.name
            if tool.dcc is not None:
                step.setdefault("dcc", tool.dcc)
            else:
                tasks.append(tool)
        out.append(step)
    return out, tasks


def workflow(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    inputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    lazy: bool = False,
    inline: bool = False,
    defaults: Optional[Mapping[str, Any]] = None,
    on_failure: Optional[Any] = None,
) -> Any:
    """Decorator (bare or with options): make ``fn`` a ``Workflow`` compiled by tracing.

    ``fn``'s parameters are the inputs (annotation → type, default → default, none → required),
    except a first parameter named ``ctx`` (or annotated ``FlowContext``), which receives the
    ``FlowContext``. ``name`` defaults to the function name, ``description`` to the first line
    of its docstring; ``inputs={"date": {"format": "date"}}`` adds fields to a declaration. The
    function is traced at decoration (so mistakes fail at import) unless ``lazy=True``, which
    waits for the first ``.spec`` (useful when it calls tasks defined further down the module).

    ``defaults={"retry": RetryPolicy(3), "timeout_secs": 600}`` is the spec's ``defaults`` and
    ``on_failure=[{"id": "alert", "tool": post_slack, "args": {...}}]`` its ``on_failure`` steps
    (docs/reference/spec.md), where ``tool`` may be a ``@task``.

    Called inside another ``@workflow``, a workflow is a ``kind: workflow`` step that runs it as
    a child run; with ``inline=True`` its steps are inlined into the caller instead (as
    ``flow.inline(...)`` does for one call).
    """
    if fn is not None:
        return Workflow(fn, name=name, description=description, inputs=inputs, lazy=lazy, inline=inline,
                        defaults=defaults, on_failure=on_failure)

    def decorate(func: Callable[..., Any]) -> Workflow:
        return Workflow(func, name=name, description=description, inputs=inputs, lazy=lazy, inline=inline,
                        defaults=defaults, on_failure=on_failure)

    return decorate
