"""Tasks: ``@task`` makes a function a ``Task``, a workflow step when called while tracing (a
``tool`` or ``tool_remote`` step, or a ``foreach`` for ``task.map``) and the plain function
otherwise."""

import functools
import hashlib
import inspect
import json
import re
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from .._schema import args_schema
from .._tools import file_args, resources_option
from ._base import (
    _ID,
    _KEY_FIELD,
    _MAP_KEYWORDS,
    _TOOL_NAME,
    Site,
    ToolInfo,
    _check_keywords,
    _fail,
    _sanitize_id,
    _user_site,
)
from ._blocks import _Foreach
from ._convert import _Converter, _literal
from ._refs import Ref, Unmapped
from ._retry import Retry, _retry_from_list
from ._trace import _Block, _current, _FlowCallable, _Step, _Tracer


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


def _cache_policy(fn: Callable[..., Any], cache: Any, label: str) -> Any:
    """The spec's ``cache`` of a task (docs/guide/assets.md, "Caching"): None when off. ``True``
    (or a mapping without ``version``) takes the task's source hash as the tool's version, so
    that editing the function is a cache miss; a function whose source Python cannot read (made
    in a REPL) has no version."""
    if cache is None or cache is False:
        return None
    if cache is True:
        cache = {}
    if not isinstance(cache, Mapping):
        raise TypeError("%s: cache must be True, False or a mapping of version, ttl_secs and key; got %r"
                        % (label, cache))
    unknown = sorted(set(cache) - {"version", "ttl_secs", "key"})
    if unknown:
        raise ValueError("%s: cache has unknown field(s) %s; fields: version, ttl_secs, key"
                         % (label, ", ".join(unknown)))
    out = dict(cache)
    if "version" not in out:
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        if source:
            out["version"] = "src:" + hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    ttl = out.get("ttl_secs")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0):
        raise ValueError("%s: cache ttl_secs must be an int >= 0; got %r" % (label, ttl))
    return out or True


class Task(_FlowCallable):
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
        "pool",
        "id",
        "reads",
        "writes",
        "cache",
        "resources",
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
        pool: Optional[str] = None,
        reads: Union[None, str, Sequence[str]] = None,
        writes: Union[None, str, Sequence[str]] = None,
        cache: Union[None, bool, Mapping[str, Any]] = None,
        resources: Optional[Mapping[str, int]] = None,
    ) -> None:
        if not callable(fn):
            raise TypeError("@task needs a function; got %r" % (fn,))
        if isinstance(fn, _FlowCallable):
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
            "pool": pool,
            "id": id,
            "reads": reads,
            "writes": writes,
            "cache": cache,
            "resources": resources,
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
        if pool is not None:
            if not isinstance(pool, str) or not _ID.match(pool):
                raise ValueError("%s: pool=%r must name a worker pool, a remote of the engine config "
                                 "(^[A-Za-z_][A-Za-z0-9_-]{0,63}$)" % (label, pool))
            if dcc is not None:
                raise ValueError("%s: give pool= or dcc=, not both: dcc=%r always calls that remote (a tool_remote "
                                 "step); pool=%r runs the tool there when the engine has that remote and "
                                 "in-process otherwise" % (label, dcc, pool))
        self.pool = pool
        self.resources = resources_option(resources, label)
        # The arguments that are paths of files it reads and writes, reported with every call
        # (Engine.register_tool's reads=, writes=); checked against the signature here.
        files = file_args(fn, reads, writes, label)
        self.reads: Tuple[str, ...] = tuple(n for n, role, _ in files if role == "read")
        self.writes: Tuple[str, ...] = tuple(n for n, role, _ in files if role == "write")
        self._policy = self._build_policy(label)
        self._key: Optional[str] = None
        self._schema: Optional[Dict[str, Any]] = None  # tool_schema(), made on first use
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
        if self._key is not None and "cache" in self._policy:
            raise ValueError("%s: give cache= (skipped while its files are unchanged) or idempotency_key= "
                             "(skipped when a key was seen), not both" % label)
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
        cache = _cache_policy(self.fn, opts["cache"], label)
        if cache is not None:
            policy["cache"] = cache
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

    def tool_schema(self) -> Dict[str, Any]:
        """The JSON Schema of the tool's arguments, made from the function's type hints
        (docs/reference/python/tools.md "Tool schemas"): the engine checks every call against it, so a call
        with a wrong type fails with kind ``invalid_input`` before the function runs."""
        if self._schema is None:
            self._schema = args_schema(self.fn)
        return self._schema

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
        if self.pool is not None:
            data["pool"] = self.pool
        data["args"] = args_json
        if self.resources:
            data["resources"] = dict(self.resources)
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
    pool: Optional[str] = None,
    reads: Union[None, str, Sequence[str]] = None,
    writes: Union[None, str, Sequence[str]] = None,
    cache: Union[None, bool, Mapping[str, Any]] = None,
    resources: Optional[Mapping[str, int]] = None,
) -> Any:
    """Decorator (bare or with options): make ``fn`` a ``Task``.

    ``name`` is the tool name (default: the function name); ``retries`` the number of retries;
    ``retry_delay_seconds`` a number (fixed), a list (fixed, linear or doubling delays) or a
    ``Retry``; ``timeout_seconds`` the per-attempt deadline; ``idempotency_key`` ``"auto"`` or a
    template where ``{param}`` is replaced by that argument (``"export_{scene}"``), with
    ``idempotency_scope`` / ``idempotency_ttl_seconds``; ``thread`` and ``max_concurrent`` as for
    ``Engine.tool``; ``dcc`` makes it a ``tool_remote`` step on that MCP server; ``pool`` runs
    the tool on that worker pool when the engine's config has the remote and in-process when it
    does not (the step's ``pool:``, docs/guide/pools.md "Routing"); ``id`` the step id (default: the
    function name, then ``_2``, ``_3``…); ``reads`` and ``writes`` name the arguments that are
    paths of files it reads and writes, reported with every call wherever the tool runs, in-process
    or on a pool worker (``Engine.register_tool``; docs/reference/python/tool-calls.md "Files and
    environment"); ``cache=True`` (or a mapping of ``version``, ``ttl_secs``, ``key``) skips the
    step while a completed call had the same arguments, environment and version and the files it
    read and wrote still hold their hashes (the spec's ``cache``, docs/guide/assets.md): without a
    ``version`` the function's source hash is it, so editing the function runs the step again;
    ``resources`` (``{"houdini": 1}``) the units of the engine's scarce resources each call holds,
    waiting for them when they are taken (the spec's ``resources``, docs/guide/resources.md).
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
        "pool": pool,
        "id": id,
        "reads": reads,
        "writes": writes,
        "cache": cache,
        "resources": resources,
    }
    if fn is not None:
        return Task(fn, **options)

    def decorate(func: Callable[..., Any]) -> Task:
        return Task(func, **options)

    return decorate
