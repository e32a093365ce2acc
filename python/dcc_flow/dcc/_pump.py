"""The part of the DCC adapters that does not depend on a DCC."""

import logging
import time
from typing import Any, Callable, Optional

log = logging.getLogger("dcc_flow")

#: Default time budget of one idle tick, in seconds: short enough for a responsive viewport.
DEFAULT_BUDGET = 0.010

#: After a call ran, how long (seconds) a tick keeps looking for the next one before it returns,
#: within its budget; and how often it looks.
FOLLOW = 0.002
FOLLOW_POLL = 0.0001


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
        self._last_call = float("-inf")  # time.monotonic() when a tick last ran a call

    def tick(self) -> int:
        """Run pending main-lane calls for at most ``budget`` seconds; return how many ran.

        A call that becomes pending while the tick runs (the next item of a sequential foreach,
        queued a fraction of a millisecond after the previous call is answered) runs in the same
        tick while budget is left: after a call, the tick looks for the next one for up to
        ``FOLLOW`` seconds before it gives the main thread back.
        """
        if self.engine.closed:
            self.uninstall()
            return 0
        self.ticks += 1
        ran = 0
        deadline = time.monotonic() + self.budget
        last = float("-inf")  # when this tick last ran a call
        try:
            while True:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    break
                n = int(self.engine.pump(left))
                ran += n
                if n:
                    last = time.monotonic()
                elif time.monotonic() - last < FOLLOW:
                    time.sleep(FOLLOW_POLL)  # the next call of a sequential run is ~0.1 ms away
                else:
                    break
        except Exception:  # noqa: BLE001 - an idle callback must never raise into the DCC
            log.exception("dcc_flow idle pump failed; uninstalling it")
            self.uninstall()
            return 0
        finally:
            self.calls += ran
        if ran:
            self._last_call = time.monotonic()
        return ran

    def next_delay(self, interval: float) -> float:
        """Seconds until a timer-driven adapter (Blender, Qt) should tick again: 0 (the next turn
        of the event loop) while a tick ran a call less than ``interval`` seconds ago, since the
        next call of a running workflow usually follows within microseconds; else ``interval``."""
        return 0.0 if time.monotonic() - self._last_call < interval else interval

    def _installed(self, remove: Callable[[], None]) -> "IdlePump":
        """Record how to remove the registered callback. From now until ``uninstall()``, the
        engine runs main-lane calls on the main thread only (docs/reference/python/dcc.md, "Inside Maya and
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
