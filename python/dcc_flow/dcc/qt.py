"""Qt adapter: ``install(engine)`` pumps main-lane tools from a ``QTimer`` on the Qt main thread.

The adapter for Nuke, Katana, Mari and any tool whose UI runs a Qt event loop, and an alternative
to the ``maya`` and ``houdini`` adapters inside Maya and Houdini (both run their UI on Qt). It uses
the binding the host already imported (PySide6, PySide2, PyQt6 or PyQt5, in that order of
preference when several are loaded, the one with a ``QApplication`` first); it imports one only
when none is loaded, and never at ``dcc_flow`` import time.

Each timer tick runs ``engine.pump(budget)``: pending main-lane calls for at most ``budget``
seconds. While calls run, the next tick is due ``BUSY_MS`` (1 ms) after the end of this one, so the
UI's timers and events that fell due meanwhile go first; once no call ran for ``interval``
seconds, ticks are ``interval`` apart. Without a
``QCoreApplication`` (``nuke -t``, a script that never made one) nothing is registered
(``inline`` is True): ``engine.run()`` runs the tools on the calling thread.
"""

import importlib
import logging
import sys
from typing import Any

from ._pump import DEFAULT_BUDGET, IdlePump

__all__ = ["install", "is_batch", "qt_core", "BINDINGS", "DEFAULT_INTERVAL"]

log = logging.getLogger("dcc_flow")

#: The Qt bindings the adapter knows, in order of preference.
BINDINGS = ("PySide6", "PySide2", "PyQt6", "PyQt5")

#: Seconds between two timer ticks while no main-lane call is pending (the latency of a new call).
DEFAULT_INTERVAL = 0.01

#: Milliseconds from the end of a tick to the next while calls are running. Each tick schedules
#: the next as a single-shot timer from its own end (a repeating timer is due again from its last
#: due time, so after a full budget it would fire before a UI timer that fell due meanwhile; so
#: would a 0 ms one, a posted event): 1 ms lets the UI's overdue timers and events go first.
BUSY_MS = 1


def qt_core() -> Any:
    """The ``QtCore`` module of the Qt binding in use.

    Among the bindings already imported, the first (in ``BINDINGS`` order) whose
    ``QCoreApplication`` exists, else the first imported; when none is imported, the first of
    ``BINDINGS`` that imports. Raises ``ImportError`` naming them all when none can be imported.
    """
    loaded = [name for name in BINDINGS if name in sys.modules]
    cores = []
    for name in loaded:
        try:
            cores.append(importlib.import_module(name + ".QtCore"))
        except ImportError:
            continue
    for core in cores:
        if core.QCoreApplication.instance() is not None:
            return core
    if cores:
        return cores[0]
    for name in BINDINGS:
        try:
            return importlib.import_module(name + ".QtCore")
        except ImportError:
            continue
    raise ImportError("dcc_flow.dcc.qt needs a Qt binding for Python: none of %s can be imported "
                      "(pip install PySide6-Essentials, or run inside a Qt-based DCC)" % ", ".join(BINDINGS))


def is_batch() -> bool:
    """True when no ``QCoreApplication`` exists (no Qt event loop to pump from)."""
    return qt_core().QCoreApplication.instance() is None


def install(engine: Any, budget: float = DEFAULT_BUDGET, interval: float = DEFAULT_INTERVAL) -> IdlePump:
    """Start a ``QTimer`` on the Qt main thread that runs ``engine.pump(budget)``; return the pump.

    Call it on the thread that runs the ``QApplication`` (raises ``RuntimeError`` on another).
    Each tick schedules the next as a ``QTimer.singleShot``. The slot never raises into Qt (PyQt5
    would abort the process): an exception of ``pump()`` is logged and no further tick is
    scheduled. Call ``pump.uninstall()`` (or close the engine) to stop it: the tick already
    scheduled then does nothing. ``interval`` must be > 0 seconds.
    """
    if interval <= 0:
        raise ValueError("interval must be > 0 seconds; got %r" % (interval,))
    core = qt_core()
    app = core.QCoreApplication.instance()
    pump = IdlePump(engine, budget, inline=app is None)
    if pump.inline:
        return pump
    if core.QThread.currentThread() != app.thread():
        raise RuntimeError("dcc_flow.dcc.qt.install() must be called on the Qt main thread (the one that "
                           "runs the QApplication), so that its timer and the main-lane tools run there")
    idle_ms = max(1, int(round(interval * 1000)))
    single_shot = core.QTimer.singleShot  # precise under 2 s, due from now: after the UI's timers

    def tick() -> None:
        if not pump.installed:
            return  # uninstalled while this tick was scheduled: schedule no other
        try:
            pump.tick()
            if pump.installed:
                single_shot(BUSY_MS if pump.next_delay(interval) == 0 else idle_ms, tick)
        except Exception:  # noqa: BLE001 - a slot must never raise into Qt
            log.exception("dcc_flow Qt pump failed; uninstalling it")
            pump.uninstall()

    def remove() -> None:
        pass  # the scheduled tick sees the pump uninstalled and schedules no other

    single_shot(0, tick)
    return pump._installed(remove)
