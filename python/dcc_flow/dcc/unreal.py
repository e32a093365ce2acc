"""Unreal Editor adapter: ``install(engine)`` pumps main-lane tools from a Slate post-tick callback.

In the Unreal Editor, ``unreal.register_slate_post_tick_callback`` runs the pump on the game
thread once per editor frame, at most ``budget`` seconds per frame. In a commandlet
(``UnrealEditor-Cmd -run=pythonscript``) or an ``-unattended`` editor, where Slate does not tick,
nothing is registered (``inline`` is True): ``engine.run()`` runs the tools on the calling thread.
"""

from typing import Any

from ._host import host_module
from ._pump import DEFAULT_BUDGET, IdlePump

__all__ = ["install", "is_batch"]


def is_batch() -> bool:
    """True outside an interactive editor: ``not unreal.is_editor()`` or
    ``unreal.SystemLibrary.is_unattended()`` (commandlets, automation)."""
    unreal = host_module("unreal", "unreal")  # imported lazily: never at dcc_flow import time

    return not unreal.is_editor() or bool(unreal.SystemLibrary.is_unattended())


def install(engine: Any, budget: float = DEFAULT_BUDGET) -> IdlePump:
    """Register a Slate post-tick callback that runs ``engine.pump(budget)``; return the pump.
    Outside the Unreal Editor an ``ImportError`` says where ``unreal`` is found."""
    unreal = host_module("unreal", "unreal")

    pump = IdlePump(engine, budget, inline=is_batch())
    if pump.inline:
        return pump

    def post_tick(delta_seconds: float) -> None:
        pump.tick()  # never raises: IdlePump logs a pump() failure and uninstalls

    handle = unreal.register_slate_post_tick_callback(post_tick)

    def remove() -> None:
        unreal.unregister_slate_post_tick_callback(handle)

    return pump._installed(remove)
