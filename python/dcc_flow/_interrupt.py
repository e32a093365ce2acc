"""Stopping in-process tools: a watchdog that interrupts a tool whose attempt timed out or whose
run was cancelled.

A host tool runs on a thread of the host process (Maya's main thread, a ``serve_tools`` thread).
The engine decides when its attempt ends (its ``timeout_secs`` counts from when the call was
handed to the thread; a cancel ends it at once) and then reports the call *cancelled*. One
daemon thread per process, the watchdog, polls the calls running in this process every
``POLL_SECS`` (one crossing per engine for all of them: ``dccflow_call_cancelled`` with
``call_ids``) and raises ``ToolInterrupted`` in the thread of each call the engine gave up on, with
``PyThreadState_SetAsyncExc``: the exception appears at the tool's next Python instruction.

What cannot be stopped this way: a thread blocked in C code (``time.sleep``, a socket read, a
DCC command, a render) sees the exception only when that call returns. The engine waits its
*interrupt grace* (``interrupt_grace_secs``, default 2 s) for the tool to stop, then records the
attempt as abandoned, naming the thread, and moves on; the tool's late result is dropped, and a
retry of the step waits until the thread has left the tool (docs/reference/python/tools.md, "Timeouts and
cancel: what can be stopped").

The exception is raised at most once per call, only while the thread is inside the tool
function (``Watchdog.leave`` withdraws one not delivered yet), and is a ``BaseException``: an
``except Exception`` in the tool does not swallow it, while ``finally`` blocks and ``with``
exits run as for any exception (but for the frame it interrupts on CPython 3.13, which can raise
it past that frame's handlers: python/cpython#139622).

When nothing runs, the watchdog parks on an event after ``IDLE_TICKS`` polls; ``enter`` wakes
it. Entering and leaving cost a lock and a dict operation each: no crossing, no thread wake-up
while it is awake.
"""

import ctypes
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Optional

__all__ = ["ToolInterrupted", "Watchdog", "WATCHDOG", "can_interrupt"]

log = logging.getLogger("dcc_flow")

#: How often running calls are checked (seconds): a cancelled tool in Python code stops within
#: about this long of the cancel.
POLL_SECS = 0.02
#: Polls with nothing running before the watchdog parks.
IDLE_TICKS = 250

#: A watch's states: the tool runs; it was told to stop (the exception is pending: a thread
#: blocked in C stays here); the exception reached it (it unwinds, or cleans up); it left.
_RUNNING, _INTERRUPTED, _DELIVERED, _DONE = 0, 1, 2, 3


class ToolInterrupted(BaseException):
    """Raised inside an in-process tool when its attempt timed out or its run was cancelled (or
    its engine closed): the engine no longer wants its result. A ``BaseException``, like
    ``KeyboardInterrupt``, so ``except Exception`` does not swallow it; catch it only to clean
    up, then re-raise. (``current_call().cancelled`` is then True.)"""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # Made by the interpreter where it is raised (or first caught), in the tool's thread: the
        # watchdog learns that the tool is no longer blocked in C.
        WATCHDOG.delivered(threading.get_ident())


def _async_exc_api() -> Optional[Callable[[int, Any], int]]:
    """``PyThreadState_SetAsyncExc(thread_id, exc_or_NULL)``, or None where ctypes cannot reach it."""
    try:
        fn = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except (AttributeError, ValueError, OSError):  # no pythonapi (an interpreter without it)
        return None
    fn.argtypes = [ctypes.c_ulong, ctypes.py_object]
    fn.restype = ctypes.c_int
    clear = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
        ("PyThreadState_SetAsyncExc", ctypes.pythonapi))

    def set_async(tid: int, exc: Any) -> int:
        if exc is None:
            return int(clear(tid, None))
        return int(fn(tid, exc))

    return set_async


_set_async = _async_exc_api()


def can_interrupt() -> bool:
    """Whether this interpreter lets the watchdog raise an exception in another thread."""
    return _set_async is not None


class _Watch:
    """One running call: its thread, its call id, the engine handle it came from."""

    __slots__ = ("tid", "call_id", "handle", "state", "__weakref__")

    def __init__(self, tid: int, call_id: int, handle: int) -> None:
        self.tid, self.call_id, self.handle, self.state = tid, call_id, handle, _RUNNING


# Checks which of a handle's call ids the engine gave up on: (handle, ids) -> cancelled ids.
Checker = Callable[[int, List[int]], List[int]]


class Watchdog:
    """Interrupts the running calls the engine gave up on (see the module docstring)."""

    def __init__(self, check: Optional[Checker] = None, poll: float = POLL_SECS) -> None:
        self._check = check or _check_cancelled
        self._poll = poll
        # Reentrant: ToolInterrupted's __init__ takes it in the tool's thread, which may be
        # delivered the exception while it holds it (in leave()).
        self._lock = threading.RLock()
        self._watches: Dict[_Watch, None] = {}
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._parked = True
        self.interrupted = 0  # how many exceptions it raised (tests read it)

    @staticmethod
    def watch(handle: int, call_id: int) -> _Watch:
        """The watch of call ``call_id`` of engine ``handle`` on the calling thread, not watched
        yet: ``enter`` it inside the ``try`` whose ``finally`` leaves it, so that an
        interruption delivered as ``enter`` returns still finds it there."""
        return _Watch(threading.get_ident(), call_id, handle)

    def enter(self, w: _Watch) -> None:
        """The thread of ``w`` starts running its call: it may be interrupted from now on."""
        with self._lock:
            self._watches[w] = None
            if self._parked:
                self._parked = False
                self._start_locked()

    def leave_call(self, call_id: int) -> None:
        """Leave the calling thread's watch of ``call_id``, wherever an interruption cut it off
        (CPython 3.13 can raise it past the frame that would leave it: python/cpython#139622)."""
        tid = threading.get_ident()
        with self._lock:
            found = [w for w in self._watches if w.tid == tid and w.call_id == call_id]
        for w in found:
            self.leave(w)

    def after_fork(self) -> None:
        """In a forked child: no thread runs there but the forking one, and the watchdog's is gone."""
        self._lock = threading.RLock()
        self._watches = {}
        self._wake = threading.Event()
        self._thread = None
        self._parked = True

    def leave(self, w: _Watch) -> None:
        """The thread left the tool: it is not interrupted from now on, and an interruption not
        delivered yet is withdrawn. Safe to call twice."""
        with self._lock:
            self._watches.pop(w, None)
            if w.state == _INTERRUPTED and _set_async is not None:
                _set_async(w.tid, None)
            w.state = _DONE

    def delivered(self, tid: int) -> None:
        """ToolInterrupted reached thread ``tid``: its interrupted watches are no longer pending."""
        with self._lock:
            for w in self._watches:
                if w.tid == tid and w.state == _INTERRUPTED:
                    w.state = _DELIVERED

    def blocked(self, tid: int) -> bool:
        """Whether thread ``tid`` (a ``threading.get_ident()``) is inside a tool that was told to
        stop and has not seen the exception yet: blocked in C (or between two instructions)."""
        with self._lock:
            inner = [w for w in self._watches if w.tid == tid]
            return bool(inner) and inner[-1].state == _INTERRUPTED

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="dcc_flow-watchdog", daemon=True)
            self._thread.start()
        else:
            self._wake.set()

    def _loop(self) -> None:
        idle = 0
        while True:
            self._wake.wait(self._poll)
            with self._lock:
                watches = list(self._watches)
                if not watches:
                    idle += 1
                    if idle >= IDLE_TICKS:
                        self._parked = True
                        self._wake.clear()
                else:
                    idle = 0
                    self._wake.clear()
                parked = self._parked
            if parked:
                self._wake.wait()  # until enter() wakes it
                self._wake.clear()
                idle = 0
                continue
            if watches:
                self._sweep(watches)

    def _sweep(self, watches: List[_Watch]) -> None:
        # A thread can run a tool inside a tool (one that drives a run on the same thread): an
        # interruption reaches the innermost first, so only the innermost watch of each thread
        # (the last entered) is checked; the outer one is, once the inner one has left.
        innermost: Dict[int, _Watch] = {}
        for w in watches:
            innermost[w.tid] = w
        by_handle: Dict[int, List[_Watch]] = {}
        for w in innermost.values():
            by_handle.setdefault(w.handle, []).append(w)
        for handle, ws in by_handle.items():
            try:
                gone = set(self._check(handle, [w.call_id for w in ws]))
            except Exception as exc:  # noqa: BLE001 - any failure: try again at the next poll
                if not _closed(exc):
                    log.debug("dcc_flow watchdog: checking calls of engine %s failed: %s", handle, exc)
                    continue
                gone = {w.call_id for w in ws}  # the engine closed: its runs ended, stop their tools
            for w in ws:
                if w.call_id in gone:
                    self._interrupt(w)

    def _interrupt(self, w: _Watch) -> None:
        if _set_async is None:
            return
        with self._lock:
            if w.state != _RUNNING:
                return
            w.state = _INTERRUPTED
            _set_async(w.tid, ToolInterrupted)
            self.interrupted += 1


def _closed(exc: BaseException) -> bool:
    """The engine's handle is closed or stale."""
    return getattr(exc, "code", None) in ("closed", "stale_handle")


def _check_cancelled(handle: int, ids: List[int]) -> List[int]:
    from . import _ffi

    out = _ffi.call("dccflow_call_cancelled", handle, {"call_ids": ids})
    return [int(i) for i in out.get("cancelled_ids") or ()]


#: The process's watchdog.
WATCHDOG = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG.after_fork)
