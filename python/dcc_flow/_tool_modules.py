"""Tool modules: the modules of ``dcc-flow run --tools`` and ``Engine(tools=...)``.

- ``import_tool_module`` imports one (a ``.py`` path or a dotted name);
- ``register_module_tools`` registers its tools on an engine: ``register(engine)`` when the module
  has one, else its ``@task`` functions (their own lane) and its public plain functions (on the
  main lane, or on the worker lane when threads will serve it);
- ``worker_pool_config`` adds a pool of N ``dcc-flow worker`` processes serving those modules to
  an engine config, with ``tool_pools`` routes that send every tool the modules define to it
  (docs/guide/pools.md), so their steps run N at a time, each in its own process;
- ``serial_steps`` finds the steps that ask for concurrency (a ``foreach`` with ``concurrency`` >
  1, a ``parallel``, a ``depends_on`` fan-out) while their tools run one at a time in this process,
  for the warning of ``dcc-flow run``/``validate`` and ``Engine.run`` (docs/reference/cli/run.md, "Concurrency").
"""

import fnmatch
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ._errors import DccFlowError
from ._spec import WorkflowSpec, WorkflowStep
from ._suggest import file_hint

__all__ = ["ToolModuleError", "import_tool_module", "register_module_tools", "module_tool_names",
           "worker_pool_config", "POOL_NAME", "SerialStep", "serial_steps", "is_workflow"]

#: The name of the remote (worker pool) that ``--workers`` / ``Engine(workers=N)`` adds; a step
#: record's worker is ``tools/PID``.
POOL_NAME = "tools"


class ToolModuleError(ImportError):
    """A tool module could not be found or imported, or its pool clashes with the config; the
    message is one line naming the module (or the remote) and the fix."""


def is_workflow(obj: Any) -> bool:
    """Whether obj is a code-first ``@workflow`` (it carries its compiled spec)."""
    return isinstance(getattr(obj, "spec", None), WorkflowSpec)




def is_module_file(spec: str) -> bool:
    """Whether a module spec names a file (``tools.py``, ``lib/tools``) rather than a dotted name."""
    return spec.endswith(".py") or os.sep in spec or (os.altsep is not None and os.altsep in spec)


def import_tool_module(spec: str, what: str = "--tools") -> Any:
    """Import a module file (its folder goes first on sys.path, so it can import its siblings,
    as ``python FILE`` would) or a module name (the working folder is on sys.path, as with
    ``python -m dcc_flow``, also from the ``dcc-flow`` console script). ``what`` starts the
    messages of ``ToolModuleError`` (``--tools tools.py: no such file``)."""
    if spec.endswith(".py") or os.sep in spec:
        if not os.path.isfile(spec):
            raise ToolModuleError("%s %s: no such file%s" % (what, spec, file_hint(spec)))
        folder = os.path.dirname(os.path.abspath(spec))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = "dcc_flow_tools_" + os.path.splitext(os.path.basename(spec))[0]
        loaded = sys.modules.get(name)
        if loaded is not None and os.path.realpath(getattr(loaded, "__file__", "") or "") == os.path.realpath(spec):
            return loaded  # imported already (--tools, then --init of the same file): one module
        loader_spec = importlib.util.spec_from_file_location(name, spec)
        if loader_spec is None or loader_spec.loader is None:
            raise ToolModuleError("%s %s: cannot import it" % (what, spec))
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - a broken tool module is one clear line
            sys.modules.pop(name, None)
            raise ToolModuleError("%s %s: importing it failed: %s: %s"
                                  % (what, spec, type(exc).__name__, exc)) from None
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(spec)
    except Exception as exc:  # noqa: BLE001
        raise ToolModuleError("%s %s: importing it failed: %s: %s" % (what, spec, type(exc).__name__, exc)) from None


def register_module_tools(engine: Any, modules: Sequence[str], plain_thread: str = "main",
                          plain: Optional[Set[str]] = None,
                          importer: Callable[[str], Any] = import_tool_module) -> List[str]:
    """Import each module and register its tools on ``engine``; return the tool names registered.

    A module with ``register(engine)`` registers what it wants; otherwise each public function
    defined in it is a tool named after the function, on lane ``plain_thread`` (``"main"``, or
    ``"worker"`` when ``serve_tools`` threads will run them), a ``@task`` is registered under its
    tool name (``@task(name="maya__export")``) with its own thread and limits, and a ``@workflow``
    is not a tool. The names of the plain functions are added to ``plain`` when given."""
    names: List[str] = []
    for spec in modules:
        module = importer(spec)
        register = getattr(module, "register", None)
        before = set(engine.tools)
        if callable(register):
            try:
                register(engine)
            except DccFlowError:
                raise  # the engine's own one-line error (a duplicate tool name, ...)
            except Exception as exc:  # noqa: BLE001 - a tool module's failure is its own, one clear line
                raise ToolModuleError("--tools %s: its register(engine) failed: %s: %s"
                                      % (spec, type(exc).__name__, exc)) from None
        else:
            for name in dir(module):
                fn = getattr(module, name)
                if name.startswith("_") or not callable(fn) or isinstance(fn, type):
                    continue
                if is_workflow(fn):
                    continue
                info = fn.tool_info() if hasattr(fn, "tool_info") else None
                if info is not None:  # a @task, wherever it was defined
                    tool_name, task_fn, lane, max_concurrent = info
                    engine.register_tool(task_fn, name=tool_name, thread=lane, max_concurrent=max_concurrent,
                                         schema=fn.tool_schema(), reads=getattr(fn, "reads", None),
                                         writes=getattr(fn, "writes", None))
                elif getattr(fn, "__module__", None) == module.__name__:
                    engine.register_tool(fn, name=name, thread=plain_thread)
                    if plain is not None:
                        plain.add(name)
        names.extend(sorted(set(engine.tools) - before))
    return names


def module_tool_names(modules: Sequence[str], importer: Callable[[str], Any] = import_tool_module) -> List[str]:
    """The names of the tools ``modules`` define, as a worker serving them registers them: the
    modules are imported here and registered on a scratch in-memory engine (``register(engine)``
    is called on it)."""
    from ._engine import Engine

    with Engine() as registry:
        return sorted(set(register_module_tools(registry, modules, importer=importer)))


def worker_command(modules: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
    """The command line and environment of a ``dcc-flow worker`` serving ``modules`` with this
    Python: module files made absolute; ``PYTHONPATH`` = the folder of the ``dcc_flow`` package,
    the folders of the module files, the working folder (for dotted names), then the current
    ``PYTHONPATH``."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = [sys.executable, "-m", "dcc_flow", "worker"]
    paths = [package_dir]
    for spec in modules:
        if is_module_file(spec):
            spec = os.path.abspath(spec)
            paths.append(os.path.dirname(spec))
        command += ["--tools", spec]
    paths.append(os.getcwd())
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    seen: List[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return command, {"PYTHONPATH": os.pathsep.join(seen)}


def worker_pool_config(modules: Sequence[str], workers: int, config: Optional[Mapping[str, Any]] = None,
                       names: Optional[Sequence[str]] = None, name: str = POOL_NAME,
                       importer: Callable[[str], Any] = import_tool_module) -> Dict[str, Any]:
    """``config`` (an engine config, docs/reference/c-abi/README.md) plus a pool ``name`` of ``workers`` worker
    processes serving ``modules`` and the ``tool_pools`` routes that send each of their tools to it
    (``names``, else ``module_tool_names(modules)``). A tool that a ``tool_pools`` pattern of
    ``config`` already routes keeps that route. A remote of ``config`` named ``name`` is an error."""
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 256:
        raise ValueError("workers must be an int from 1 to 256; got %r" % (workers,))
    if not modules:
        raise ValueError("workers=%d runs the tools of tool modules in worker processes; give the modules "
                         "(tools=['tools.py'])" % workers)
    cfg = dict(config or {})
    remotes = dict(cfg.get("remotes") or {})
    if name in remotes:
        raise ValueError("remotes.%s: the worker processes of the tool modules are a pool of that name; "
                         "rename your remote %r" % (name, name))
    if names is None:
        names = module_tool_names(modules, importer)
    command, env = worker_command(modules)
    remotes[name] = {"command": command, "env": env, "workers": workers}
    cfg["remotes"] = remotes
    pools = dict(cfg.get("tool_pools") or {})
    for tool in names:
        if not any(fnmatch.fnmatchcase(tool, pattern) for pattern in pools):
            pools[tool] = name
    cfg["tool_pools"] = pools
    return cfg


class SerialStep:
    """A step that asks for concurrency its tools cannot give: they run in this process on one
    thread. ``what`` is ``"foreach, concurrency 4"``, ``"parallel, 3 branches"`` or ``"depends_on
    lets (some of) them run at the same time"``; ``steps`` the step ids (several for a fan-out); ``tools`` the
    serial tools; ``n`` how many could run at once."""

    __slots__ = ("steps", "what", "tools", "n", "worker_lane", "explicit")

    def __init__(self, steps: List[str], what: str, tools: List[str], n: int, worker_lane: bool,
                 explicit: bool) -> None:
        self.steps, self.what, self.tools, self.n = steps, what, tools, n
        #: every tool is a worker-lane one (no threads serve that lane)
        self.worker_lane = worker_lane
        #: some tool is on the main lane by its own choice (a @task(thread="main"), register(engine))
        self.explicit = explicit

    @property
    def label(self) -> str:
        return ", ".join(self.steps)

    def _head(self) -> str:
        tools = ", ".join(self.tools)
        one = len(self.tools) == 1
        unit = "items" if self.what.startswith("foreach") else (
            "the branches" if self.what.startswith("parallel") else "those steps")
        return "%s (%s): %s %s %s in this process on one thread, so %s run one at a time" % (
            self.label, self.what, "its tool" if one and len(self.steps) == 1 else (
                "their tool" if one else "their tools" if len(self.steps) > 1 else "its tools"),
            tools, "runs" if one else "run", unit)

    def cli_text(self) -> str:
        """The warning of ``dcc-flow run`` and ``validate``: the step, why, and the fix."""
        them = "it" if len(self.tools) == 1 else "them"
        fix = "run with --workers %d to run %s in worker processes" % (self.n, them)
        if self.worker_lane or not self.explicit:
            fix += ", or with --worker-threads %d to run %s on %d threads" % (self.n, them, self.n)
        else:
            fix += ', or register %s with thread="worker" and run with --worker-threads %d' % (them, self.n)
        return "%s; %s" % (self._head(), fix)

    def api_text(self) -> str:
        """The warning of ``Engine.run`` (logged on the ``dcc_flow`` logger)."""
        them = "it" if len(self.tools) == 1 else "them"
        fix = "open the engine with Engine(tools=[MODULE], workers=%d) to run %s in worker processes" % (self.n, them)
        if self.worker_lane:
            fix += ", or call engine.serve_tools(%d)" % self.n
        elif not self.explicit:  # plain functions of Engine(tools=[...])
            fix += ", or with Engine(tools=[MODULE], worker_threads=%d) on %d threads" % (self.n, self.n)
        else:
            fix += ', or register %s with thread="worker" and call engine.serve_tools(%d)' % (them, self.n)
        return "%s; %s (docs/reference/python/tools.md, \"Worker processes\")" % (self._head(), fix)


ToolInfo = Tuple[str, Optional[int]]  # lane, max_concurrent


def serial_steps(spec: WorkflowSpec, tools: Mapping[str, ToolInfo], tool_pools: Optional[Mapping[str, str]] = None,
                 worker_threads: int = 0, plain: Iterable[str] = ()) -> List[SerialStep]:
    """The steps of ``spec`` that ask for concurrency while every call of theirs runs one at a
    time in this process: a ``foreach`` with ``concurrency`` > 1, a ``parallel`` with two or more
    branches, and siblings that ``depends_on`` lets start together, whose ``tool`` steps use
    in-process tools (``tools``: name -> (lane, max_concurrent)) that are on the main lane, or on
    the worker lane with fewer than 2 ``worker_threads``. A step with ``pool:``, a tool a
    ``tool_pools`` pattern routes, a tool of ``max_concurrent`` 1 (serial by its own choice), a
    tool not in ``tools`` (a built-in ``flow__*``, a remote's) and ``tool_remote`` steps are not
    serial. ``plain`` names the tools registered from plain functions (the fix text differs)."""
    pools = list((tool_pools or {}).keys())
    plain_set = set(plain)
    verdict: Dict[str, bool] = {}

    def serial(name: str) -> bool:
        if name not in verdict:
            info = tools.get(name)
            if info is None or any(fnmatch.fnmatchcase(name, p) for p in pools):
                verdict[name] = False
            else:
                lane, max_concurrent = info
                verdict[name] = max_concurrent != 1 and (lane == "main" or worker_threads < 2)
        return verdict[name]

    def serial_tools(steps: Iterable[WorkflowStep]) -> List[str]:
        found: Set[str] = set()
        for root in steps:
            for st in root.walk():
                if st.kind == "tool" and not st.pool and st.tool and serial(st.tool):
                    found.add(st.tool)
        return sorted(found)

    def make(ids: List[str], what: str, names: List[str], n: int) -> SerialStep:
        worker_lane = all(tools[t][0] == "worker" for t in names)
        explicit = any(tools[t][0] == "main" and t not in plain_set for t in names)
        return SerialStep(ids, what, names, n, worker_lane, explicit)

    found: List[SerialStep] = []
    lists: List[Tuple[WorkflowStep, ...]] = [spec.steps, spec.on_failure]
    for step in spec.walk():
        if step.kind == "foreach":
            lists.append(step.steps)
            concurrency = step.concurrency or 1
            names = serial_tools(step.steps) if concurrency > 1 else []
            if names:
                found.append(make([step.id], "foreach, concurrency %d" % concurrency, names, concurrency))
        elif step.kind == "parallel":
            branches = [b for b in step.steps if serial_tools((b,))]
            if len(branches) >= 2:
                names = serial_tools(branches)
                found.append(make([step.id], "parallel, %d branches" % len(step.steps), names, len(branches)))
        elif step.kind == "branch":
            lists.extend((step.then, step.else_))
    for steps in lists:
        for ids, width in _fan_out(steps, lambda s: bool(serial_tools((s,)))):
            members = [s for s in steps if s.id in ids]
            what = "depends_on lets them run at the same time" if width == len(ids) else (
                "depends_on lets some of them run at the same time")
            found.append(make(ids, what, serial_tools(members), width))
    return found


def _fan_out(steps: Sequence[WorkflowStep], candidate: Callable[[WorkflowStep], bool]) -> List[Tuple[List[str], int]]:
    """The groups of ``candidate`` steps of one list linked by "may run at the same time" (neither
    waits, directly or not, for the other), each in list order, with a bound of how many of them
    run at once (all of them when each may run beside every other, else at most 1 + the most steps
    one of them may run beside, and fewer than all); [] when no step has
    ``depends_on``."""
    if not any(s.depends_on is not None for s in steps):
        return []
    ids = [s.id for s in steps]
    deps: Dict[str, List[str]] = {}
    for i, s in enumerate(steps):
        deps[s.id] = list(s.depends_on) if s.depends_on is not None else ([ids[i - 1]] if i else [])
    before: Dict[str, Set[str]] = {}

    def ancestors(sid: str, seen: Tuple[str, ...] = ()) -> Set[str]:
        if sid not in before:
            acc: Set[str] = set()
            for d in deps.get(sid, ()):
                if d in deps and d not in seen:  # a cycle is a validation error: do not loop on it
                    acc.add(d)
                    acc |= ancestors(d, seen + (sid,))
            before[sid] = acc
        return before[sid]

    cands = [s.id for s in steps if candidate(s)]
    # union-find over "may run together"
    parent = {c: c for c in cands}

    def root(c: str) -> str:
        while parent[c] != c:
            c = parent[c]
        return c

    beside = dict.fromkeys(cands, 0)
    for i, a in enumerate(cands):
        for b in cands[i + 1:]:
            if a not in ancestors(b) and b not in ancestors(a):
                parent[root(b)] = root(a)
                beside[a] += 1
                beside[b] += 1
    groups: Dict[str, List[str]] = {}
    for c in cands:
        groups.setdefault(root(c), []).append(c)
    return [(g, len(g) if all(beside[c] == len(g) - 1 for c in g) else min(len(g) - 1, 1 + max(beside[c] for c in g)))
            for g in groups.values() if len(g) >= 2]


def engine_serial_steps(engine: Any, spec: WorkflowSpec, tool_pools: Optional[Mapping[str, str]] = None,
                        worker_threads: int = 0, plain: Iterable[str] = ()) -> List[SerialStep]:
    """``serial_steps`` with the host tools registered on ``engine``."""
    tools = {name: (e.lane, e.max_concurrent) for name, e in dict(engine._tools).items()}
    return serial_steps(spec, tools, tool_pools, worker_threads, plain)


def spec_of(spec: Any) -> Optional[WorkflowSpec]:
    """The ``WorkflowSpec`` of what ``Engine.run`` was given, when it is cheap to get and can ask for
    concurrency: a ``WorkflowSpec``, a ``@workflow``, or spec text or a file whose text mentions
    ``concurrency``, ``parallel`` or ``depends_on``; None otherwise (a catalog name, a mapping)."""
    inner = getattr(spec, "spec", None)
    if isinstance(inner, WorkflowSpec):
        return inner
    if isinstance(spec, WorkflowSpec):
        return spec
    text: Optional[str] = None
    if isinstance(spec, os.PathLike) or isinstance(spec, str) and "\n" not in spec and os.path.isfile(spec):
        with open(os.fspath(spec), "rb") as f:
            text = f.read().decode("utf-8", "replace")
    elif isinstance(spec, str) and "\n" in spec:
        text = spec
    if text is None or not any(w in text for w in ("concurrency", "parallel", "depends_on")):
        return None
    return WorkflowSpec.from_yaml_str(text)


def _api_import(spec: str) -> Any:
    """``import_tool_module`` for ``Engine(tools=...)``: ``tool module x.py: no such file``."""
    return import_tool_module(spec, "tool module")


def engine_config(config: Dict[str, Any], tools: Sequence[str], workers: int, worker_threads: int) -> Dict[str, Any]:
    """``Engine(config, tools=..., workers=N, worker_threads=N)``: the arguments checked, and with
    ``workers`` the config plus the pool (``worker_pool_config``)."""
    if isinstance(tools, str):
        raise TypeError("tools must be a list of module paths or names; got the string %r (write [%r])"
                        % (tools, tools))
    for what, value in (("workers", workers), ("worker_threads", worker_threads)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError("%s must be an int >= 0; got %r" % (what, value))
    if workers:
        return worker_pool_config(list(tools), workers, config, importer=_api_import)
    return config


def load_engine_tools(engine: Any, tools: Sequence[str], workers: int, worker_threads: int) -> None:
    """``Engine(tools=..., worker_threads=...)`` after the engine opened: register the modules'
    tools (plain functions on the worker lane with ``worker_threads`` and no ``workers``) and
    start the ``worker_threads`` (``serve_tools``, also without ``tools``); on an error the engine
    is closed and the error raised."""
    try:
        lane = "worker" if worker_threads and not workers else "main"
        register_module_tools(engine, list(tools), plain_thread=lane, plain=engine._plain_tools, importer=_api_import)
        if worker_threads:
            engine.serve_tools(workers=worker_threads)
    except BaseException:
        engine.close()
        raise


def log_serial_steps(engine: Any, spec: Any, log: Any) -> None:
    """``Engine.run``: log at WARNING each step of ``spec`` that ``serial_steps`` finds, once per
    run. Never raises: the run goes on whatever this finds (a spec it cannot read is skipped)."""
    try:
        ws = spec_of(spec)
        if ws is None:
            return
        found = engine_serial_steps(engine, ws, engine._tool_pools, len(engine._driver.workers), engine._plain_tools)
    except Exception:  # noqa: BLE001 - the run was submitted; a warning must not stop it
        log.debug("dcc_flow: checking the spec for serial steps failed", exc_info=True)
        return
    for step in found:
        log.warning("%s", step.api_text())
