"""``dcc-flow run --workers N`` and ``--worker-threads N``, and the warning for steps whose tools
run one at a time (docs/reference/cli/run.md, "Concurrency").

- ``--workers N`` runs the tools of the ``--tools`` modules in N ``dcc-flow worker`` processes: a
  pool named ``tools`` (docs/guide/pools.md) and ``tool_pools`` routes for each tool the modules
  define; built-ins (``flow__*``) and the tools of code-first workflows stay in this process.
- ``--worker-threads N`` registers the plain functions of the ``--tools`` modules on the worker
  lane and serves that lane with N threads (a ``@task(thread=...)`` or ``register(engine)`` keeps
  its own lane).
- ``serial_warnings`` names each step that asks for concurrency (``foreach`` with
  ``concurrency`` > 1, ``parallel``, a ``depends_on`` fan-out) while its tools run in this process
  on one thread, with the fix.
"""

import argparse
from typing import Any, Dict, List, Optional, Set

from .._spec import WorkflowSpec
from .._tool_modules import ToolModuleError, engine_serial_steps, module_tool_names, worker_pool_config
from ._base import CliError, UsageError

__all__ = ["add_workers_arguments", "workers_config", "plain_thread", "serial_warnings"]


def add_workers_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers N`` and ``--worker-threads N`` of ``dcc-flow run``."""
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="run the tools of --tools in N worker processes (dcc-flow worker, a pool named "
                             "'tools': docs/guide/pools.md), so N calls run at once, each in its own process "
                             "(default: in this process)")
    parser.add_argument("--worker-threads", type=int, default=0, metavar="N",
                        help="run the plain functions of --tools and worker-lane tools on N threads of this "
                             "process (threads help tools that wait on I/O; CPU-bound Python needs --workers)")


def check_arguments(args: argparse.Namespace) -> None:
    if args.workers < 0 or args.workers > 256:
        raise UsageError("--workers must be from 1 to 256 (0: no worker processes); got %d" % args.workers,
                         prog="dcc-flow run")
    if args.worker_threads < 0:
        raise UsageError("--worker-threads must be >= 1 (0: none); got %d" % args.worker_threads,
                         prog="dcc-flow run")
    if args.workers and not args.tools:
        raise UsageError("--workers runs the tools of --tools modules in worker processes; give --tools MODULE",
                         prog="dcc-flow run")


def workers_config(args: argparse.Namespace, importer: Any) -> Optional[Dict[str, Any]]:
    """The engine config ``--workers N`` adds (None without it): the pool of N worker processes
    serving the ``--tools`` modules, and ``tool_pools`` routes for every tool they define."""
    check_arguments(args)
    if not args.workers or getattr(args, "dry_run", False):
        return None
    try:
        names = module_tool_names(args.tools, importer)
        if not names:
            raise CliError("--workers: --tools %s defines no tools to run in worker processes"
                           % " ".join(args.tools))
        return worker_pool_config(args.tools, args.workers, names=names)
    except (ToolModuleError, ValueError) as exc:
        raise CliError(str(exc)) from None


def plain_thread(args: argparse.Namespace) -> str:
    """The lane of the plain functions of ``--tools``: ``worker`` with ``--worker-threads N``."""
    return "worker" if getattr(args, "worker_threads", 0) > 0 and not getattr(args, "workers", 0) else "main"


def serial_warnings(engine: Any, spec: Any, config: Optional[Dict[str, Any]], worker_threads: int,
                    plain: Set[str]) -> List[str]:
    """One line per step of ``spec`` (a ``WorkflowSpec`` or a ``@workflow``; others give none) that
    asks for concurrency while its tools run in this process on one thread, with the fix."""
    inner = getattr(spec, "spec", None)
    if isinstance(inner, WorkflowSpec):
        engine._register_flow_tools(spec)  # a @workflow's tasks, registered as submit would
        spec = inner
    if not isinstance(spec, WorkflowSpec):
        return []
    pools = (config or {}).get("tool_pools") or {}
    return [s.cli_text() for s in engine_serial_steps(engine, spec, pools, worker_threads, plain)]
