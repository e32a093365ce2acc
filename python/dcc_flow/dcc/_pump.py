"""The part of the DCC adapters that does not depend on a DCC."""

import logging
from typing import Any, Callable, Optional

log = logging.getLogger("dcc_flow")

#: Default time budget of one idle tick, in seconds: short enough for a responsive viewport.
DEFAULT_BUDGET = 0.010


class IdlePump:
    """A registered idle callback that pumps an engine's main-lane calls.

    ``tick()`` is what the DCC calls when idle; ``uninstall()`` removes the callback (idempotent).
    ``inline`` is True in batch mode, where nothing is registered and runs are driven by
    ``Engine.run``/``Run.wait`` on the calling thread.
    """

    def __init__(self, engine: Any, budget: float, inline: bool = False) -> None:
        if budget <= 0:
            raise ValueError("budget must be > 0 seconds; got %r" % (budget,))
        self.engine = engine
        self.budget = budget
        self.inline = inline
        self.ticks = 0
        self.calls = 0
        self._remove: Optional[Callable[[], None]] = None

    def tick(self) -> int:
        """Run pending main-lane calls for at most ``budget`` seconds; return how many ran."""
        if self.engine.closed:
            self.uninstall()
            return 0
        self.ticks += 1
        try:
            ran = int(self.engine.pump(self.budget))
        except Exception:  # noqa: BLE001 - an idle callback must never raise into the DCC
            log.exception("dcc_flow idle pump failed; uninstalling it")
            self.uninstall()
            return 0
        self.calls += ran
        return ran

    def _installed(self, remove: Callable[[], None]) -> "IdlePump":
        """Record how to remove the registered callback. From now until ``uninstall()``, the
        engine runs main-lane calls on the main thread only (docs/python.md, "Inside Maya and
        Houdini"): ``Run.wait()`` on another thread waits while this pump runs them."""
        self._remove = remove
        self.engine._bind_main_thread(self)
        return self

    @property
    def installed(self) -> bool:
        return self._remove is not None

    def uninstall(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            self.engine._unbind_main_thread(self)
            remove()
