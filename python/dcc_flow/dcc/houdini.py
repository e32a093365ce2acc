"""Houdini adapter: ``install(engine)`` pumps main-lane tools from an event-loop callback.

In an interactive Houdini, ``hou.ui.addEventLoopCallback`` runs the pump on Houdini's main thread,
at most ``budget`` seconds per tick. In ``hython`` (no UI) nothing is registered (``inline`` is
True): ``engine.run()`` runs the tools on the calling thread.
"""

from typing import Any

from ._host import host_module
from ._pump import DEFAULT_BUDGET, IdlePump

__all__ = ["install", "is_batch"]


def is_batch() -> bool:
    """True in hython / a Houdini without UI. Outside Houdini an ``ImportError`` says where
    ``hou`` is found."""
    hou = host_module("hou", "houdini")  # imported lazily: never at dcc_flow import time

    return not hou.isUIAvailable()


def install(engine: Any, budget: float = DEFAULT_BUDGET) -> IdlePump:
    """Register an event-loop callback that runs ``engine.pump(budget)``; return the pump.
    Outside Houdini an ``ImportError`` says where ``hou`` is found."""
    hou = host_module("hou", "houdini")

    pump = IdlePump(engine, budget, inline=is_batch())
    if pump.inline:
        return pump
    callback = pump.tick
    hou.ui.addEventLoopCallback(callback)

    def remove() -> None:
        if callback in hou.ui.eventLoopCallbacks():
            hou.ui.removeEventLoopCallback(callback)

    return pump._installed(remove)
