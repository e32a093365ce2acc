"""Maya adapter: ``install(engine)`` pumps main-lane tools from an idle scriptJob.

In an interactive Maya, main-lane tools then run on Maya's main thread between UI events, at most
``budget`` seconds per idle tick. In ``mayapy``/batch mode nothing is registered (``inline`` is
True): ``engine.run()`` runs the tools on the calling thread.
"""

from typing import Any

from ._host import host_module
from ._pump import DEFAULT_BUDGET, IdlePump

__all__ = ["install", "is_batch"]


def is_batch() -> bool:
    """True in mayapy / ``maya -batch`` (no UI event loop). Outside Maya an ``ImportError`` says
    where ``maya.cmds`` is found."""
    cmds = host_module("maya.cmds", "maya")  # imported lazily: never at dcc_flow import time

    return bool(cmds.about(batch=True))


def install(engine: Any, budget: float = DEFAULT_BUDGET) -> IdlePump:
    """Register an idle scriptJob that runs ``engine.pump(budget)``; return the pump.

    Call ``pump.uninstall()`` (or close the engine) to remove the scriptJob. Outside Maya an
    ``ImportError`` says where ``maya.cmds`` is found.
    """
    cmds = host_module("maya.cmds", "maya")

    pump = IdlePump(engine, budget, inline=is_batch())
    if pump.inline:
        return pump
    job = cmds.scriptJob(idleEvent=pump.tick)

    def remove() -> None:
        if cmds.scriptJob(exists=job):
            cmds.scriptJob(kill=job, force=True)

    return pump._installed(remove)
