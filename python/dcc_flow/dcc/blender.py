"""Blender adapter: ``install(engine)`` pumps main-lane tools from a persistent ``bpy.app.timers``
callback.

In an interactive Blender, the timer runs ``engine.pump(budget)`` on Blender's main thread between
UI events and asks to run again at once while calls are running, else after ``interval`` seconds.
It is registered with ``persistent=True``, so opening another ``.blend`` (or
``read_factory_settings``) does not remove it. In ``blender --background`` and in the ``bpy``
Python module (``pip install bpy``, where ``bpy.app.background`` is True and timers never tick)
nothing is registered (``inline`` is True): ``engine.run()`` runs the tools on the calling thread.

Every tool that touches ``bpy`` belongs on the main lane (the default): Blender's data and
operators are not thread-safe, and a ``bpy`` call from a worker thread can crash Blender.
"""

import logging
from typing import Any, Optional

from ._host import host_module
from ._pump import DEFAULT_BUDGET, IdlePump

__all__ = ["install", "is_batch", "DEFAULT_INTERVAL"]

log = logging.getLogger("dcc_flow")

#: Seconds between two timer ticks while no main-lane call is pending (the latency of a new call).
DEFAULT_INTERVAL = 0.02


def is_batch() -> bool:
    """True in ``blender --background`` and in the ``bpy`` module (no UI event loop). Outside
    Blender, without the ``bpy`` module, an ``ImportError`` says how to get it."""
    bpy = host_module("bpy", "blender")  # imported lazily: never at dcc_flow import time

    return bool(bpy.app.background)


def install(engine: Any, budget: float = DEFAULT_BUDGET, interval: float = DEFAULT_INTERVAL) -> IdlePump:
    """Register a persistent ``bpy.app.timers`` callback that runs ``engine.pump(budget)``; return
    the pump.

    The callback returns 0 (run again at the next event-loop turn) while a call ran less than
    ``interval`` seconds ago, else ``interval``. It never raises into Blender: an exception of
    ``pump()`` is logged and the timer unregistered. Call ``pump.uninstall()`` (or close the
    engine) to remove it. ``interval`` must be > 0 seconds. Without ``bpy`` (outside Blender, and
    ``pip install bpy==5.0.1`` not done) it raises an ``ImportError`` that says how to get it.
    """
    if interval <= 0:
        raise ValueError("interval must be > 0 seconds; got %r" % (interval,))
    bpy = host_module("bpy", "blender")

    pump = IdlePump(engine, budget, inline=is_batch())
    if pump.inline:
        return pump
    timers = bpy.app.timers

    def timer() -> Optional[float]:
        try:
            pump.tick()
        except Exception:  # noqa: BLE001 - a timer must never raise into Blender
            log.exception("dcc_flow Blender timer failed; uninstalling it")
            pump.uninstall()
            return None
        if not pump.installed:
            return None  # returning None unregisters the timer
        return pump.next_delay(interval)

    def remove() -> None:
        try:
            if timers.is_registered(timer):
                timers.unregister(timer)
        except Exception:  # noqa: BLE001 - Blender is shutting down: its timers are gone
            log.debug("dcc_flow Blender timer already gone", exc_info=True)

    timers.register(timer, first_interval=0.0, persistent=True)
    return pump._installed(remove)
