"""The pull driver: the threads of this process pull an engine's tool calls, run them and answer them.

The Go engine never calls into Python. Tool calls are *pulled*: the thread that drives a run
(``Engine.run``, ``Run.wait``, ``Engine.pump`` or a ``serve_tools`` worker) asks the library for
pending calls, runs them, and answers each with its result; answering and asking for the next call
is one crossing of the C ABI. Main-lane tools run on the thread that drives the run (Maya's main
thread); worker-lane tools run on the ``serve_tools`` pool when one is running, else on the driving
thread too. While a DCC adapter's idle pump is installed, main-lane tools run on the main thread only.

The hand-back rule (docs/reference/python/tools.md, "Lanes: which thread runs a tool"): every call this package
pulls is either run and answered exactly once, or handed back to the engine, which gives it to the
next puller. Each thread pulls as its own *puller*: a call it holds goes back when the loop that
pulled it stops (deadline, budget, stop event), when that loop raises, and when the thread ends.

A ``Driver`` is built from what it needs (the library handle and the engine's tool table), never
from the ``Engine``, and holds no reference to it: the engine owns its driver, and an engine its
user dropped is collected as before (the ``serve_tools`` threads hold the driver weakly).
"""

import json
import logging
import math
import threading
import time
import weakref
from typing import Any, Dict, Generator, List, Mapping, Optional, Set, Union, cast

from . import _capture, _ffi
from ._errors import DccFlowError, EngineClosedError
from ._interrupt import WATCHDOG, ToolInterrupted
from ._spec import WorkflowStatus
from ._tools import ToolEntry, execute
from ._tools import error_members as _tools_error

__all__ = ["Driver", "Outage", "is_closed_error", "POLL_MS"]

log = logging.getLogger("dcc_flow")

#: How long one blocking crossing waits at most: Ctrl-C and close() are noticed this fast.
POLL_MS = 100

# Event streams (``on_event``, ``Engine.events``) and the pulls of a ``serve_tools`` worker retry a
# crossing that fails with one of these codes: the database is unreachable for a while (a
# PostgreSQL restart, a network blip). The first wait is EVENT_RETRY_FIRST seconds, doubling to
# EVENT_RETRY_MAX; one warning per outage, one line when it ends.
EVENT_RETRY_CODES = ("storage", "timeout")
EVENT_RETRY_FIRST = 0.1
EVENT_RETRY_MAX = 5.0

_CLOSED = "this dcc_flow.Engine is closed; open a new one"

#: How many ready calls a ``serve_tools`` thread takes in one crossing (a fan-out of quick calls
#: then costs one crossing per batch, not per call: docs/design/performance.md). Its answers go
#: back together, with the next pull, in one ``dccflow_calls_complete_many``.
BATCH_MAX = 8

#: How long (seconds) the calls of a batch may run before the thread stops holding the rest: past
#: it, the answers so far are sent, the calls not started are handed back to be pulled by an idle
#: thread (a call whose run was cancelled meanwhile is withdrawn then, never started), and the
#: thread takes one call at a time until a batch runs quickly again. So a batch of slow calls
#: never waits behind one thread while others are idle, and a call is started at most this long
#: after it was pulled, as with one call per pull.
BATCH_HOLD = 0.0005

#: How long (seconds) a thread may run one call of a batch before the calls of the batch it has not
#: started are handed back by the driver's releaser thread, while it still runs: a tool that blocks
#: (waits for the other items, renders for minutes) never holds calls other threads could run.
#: 10 ms cost the fan-out of quick calls a third under load: a batch waiting for the GIL among four
#: threads overran it and was handed back, and the releaser's own wake-ups took the GIL.
RELEASE_AFTER = 0.05

#: An answer larger than this (the JSON members of ``execute``) is sent alone, through
#: ``dccflow_calls_complete`` and its size checks, never in a batch.
BATCH_ANSWER_BYTES = 64 << 10


class Driver:
    """Pulls and runs the tool calls of one engine (its library ``handle``) on the threads that
    drive it, with the engine's ``tools`` (its table, read as it changes).

    The engine sets ``closed`` when ``close()`` starts (no new pull; ``Engine`` methods raise
    ``EngineClosedError``) and ``handle_closed`` once the library closed the handle (until then
    the host side, answers and hand-backs, still crosses). ``workers`` are the ``serve_tools``
    threads, which stop when ``workers_stop`` is set.
    """

    def __init__(self, handle: int, tools: Mapping[str, ToolEntry]) -> None:
        self.handle = handle
        self.tools = tools
        self.closed = False
        self.handle_closed = False
        self.workers: List[threading.Thread] = []
        self.workers_stop = threading.Event()
        self._lock = threading.Lock()
        self._pullers = threading.local()  # .holder: this thread's _PullerHolder
        self.dead_pullers: List[int] = []  # pullers of ended threads, to close
        self._main_thread: Optional[threading.Thread] = None  # set while a DCC adapter's pump runs
        self._main_owners: List[object] = []
        self._batch_releaser: Optional[_Releaser] = None  # made by the first batch
        #: The engine's ``environment=`` (checked), added to the process's (``set_environment``) in
        #: every answer; None = the process's alone.
        self.environment: Optional[Dict[str, Any]] = None

    def _check_open(self) -> None:
        if self.closed:
            raise EngineClosedError(_CLOSED)

    def _call(self, name: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
        self._check_open()
        return _ffi.call(name, self.handle, payload)

    def lanes(self) -> List[str]:
        """The lanes the calling thread serves: main when it may run main-lane tools (see
        ``may_run_main``), and worker when no ``serve_tools`` pool is running."""
        lanes = ["main"] if self.may_run_main() else []
        if not (self.workers and not self.workers_stop.is_set()):
            lanes.append("worker")
        return lanes

    def may_run_main(self) -> bool:
        """False on a thread other than the DCC's main thread while a DCC adapter's idle pump is
        installed: main-lane tools (``maya.cmds``, ``hou``) then run only in that pump."""
        return self._main_thread is None or self._main_thread is threading.current_thread()

    def bind_main_thread(self, owner: object) -> None:
        """A DCC adapter's idle pump was installed: main-lane calls now run on the main thread only."""
        with self._lock:
            self._main_owners.append(owner)
            self._main_thread = threading.main_thread()

    def unbind_main_thread(self, owner: object) -> None:
        with self._lock:
            self._main_owners = [o for o in self._main_owners if o is not owner]
            if not self._main_owners:
                self._main_thread = None

    def puller(self) -> int:
        """This thread's puller id, opened on first use; handed to ``dead_pullers`` when the
        thread ends (its thread-local holder is freed), so the calls it held go back."""
        if self.dead_pullers:
            self.close_dead_pullers()
        holder = getattr(self._pullers, "holder", None)
        if holder is None:
            puller = int(self._call("dccflow_puller_open", {"name": threading.current_thread().name})["puller"])
            holder = _PullerHolder(puller, self.dead_pullers)
            self._pullers.holder = holder
        return holder.id

    def close_dead_pullers(self) -> None:
        """Close the pullers of threads that ended (and of loops that raised): their calls go back."""
        while self.dead_pullers and not self.handle_closed:
            try:
                puller = self.dead_pullers.pop()
            except IndexError:  # another thread took the last one
                return
            try:
                self.host_call("dccflow_puller_close", {"puller": puller})
            except DccFlowError as exc:
                if is_closed_error(exc):
                    return  # the engine closed: nothing is handed out any more
                raise

    def drop_puller(self) -> None:
        """Close this thread's puller now (after an exception in a pull loop): whatever it still
        holds, including a call whose reply the exception cut off, goes back to the engine."""
        holder = getattr(self._pullers, "holder", None)
        if holder is not None:
            del self._pullers.holder
            holder.release()
            self.close_dead_pullers()

    def host_call(self, name: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
        """A crossing of the host side (hand back, close a puller): allowed while ``close()``
        runs, until the handle is closed."""
        if self.handle_closed:
            raise EngineClosedError(_CLOSED)
        return _ffi.call(name, self.handle, payload)

    def cancelled(self, call_id: int) -> bool:
        if self.handle_closed:
            return True
        return bool(_ffi.call("dccflow_call_cancelled", self.handle, {"call_id": call_id}).get("cancelled"))

    def report(self, call_id: int, progress: Optional[Dict[str, Any]], logs: List[Dict[str, Any]],
               dropped: int) -> None:
        """Send what a running tool reported (``current_call().progress``/``.log``, coalesced by
        ``_tools.ReportThrottle``) to the engine, which writes it; a report the engine cannot take
        is dropped, never raised into the tool. Lines the engine no longer takes — the call's run
        was cancelled, or its attempt abandoned after its timeout, while the tool went on (its
        ``finally:`` blocks) — go to this process's own streams (``_capture.write_through``), as
        the output of a thread that runs no tool: never lost silently."""
        if self.handle_closed:
            _capture.write_through(logs)
            return
        doc: Dict[str, Any] = {"call_id": call_id}
        if progress is not None:
            doc["progress"] = progress
        if logs:
            doc["logs"] = logs
        if dropped:
            doc["dropped"] = dropped
        try:
            data = json.dumps(doc, ensure_ascii=False, allow_nan=False, default=repr, separators=(",", ":"))
        except (ValueError, TypeError, RecursionError):  # NaN, a cycle, nesting too deep in fields
            for entry in logs:
                if "fields" in entry:
                    entry["fields"] = {"repr": repr(entry["fields"])}
            data = json.dumps(doc, ensure_ascii=False, default=repr, separators=(",", ":"))
        try:
            taken = _ffi.call_encoded("dccflow_call_report", self.handle, data.encode("utf-8", "replace"))
        except DccFlowError as exc:
            log.debug("report of call %s dropped: %s", call_id, exc)
            taken = {}
        if not taken.get("accepted") and logs:
            _capture.write_through(logs)

    def complete(self, call: Mapping[str, Any], members: str, next_json: Optional[str]) -> Dict[str, Any]:
        """Answer a call that ran (``members``: see ``_tools.execute``), asking for the next calls
        when ``next_json`` is given. An answer the library cannot take fails the step instead:
        text that is not Unicode with kind ``invalid_output``, a request over the size limit
        with kind ``too_large`` (checked on the text before encoding it when that already tells).
        A call that ran is answered exactly once, never handed back."""
        tail = "}" if next_json is None else ',"next":' + next_json + "}"
        # A str of n code points encodes to at least n bytes: an oversized answer is refused
        # without building its bytes (500 MB of output must not cost another 500 MB here).
        data = None if len(members) > _ffi.MAX_REQUEST_BYTES else _encode_answer(members + tail)
        if isinstance(data, UnicodeEncodeError):
            data = (_tools_error(call, "invalid_output", "tool %r returned text that is not valid Unicode (%s); "
                                 "return file names as str that are UTF-8, e.g. os.fsdecode of bytes "
                                 "paths re-encoded with errors='replace'" % (call.get("tool"), data)) + tail
                    ).encode("utf-8")
        elif data is None or len(data) > _ffi.MAX_REQUEST_BYTES:
            size = len(members) if data is None else len(data)
            data = (_tools_error(call, "too_large", "tool %r returned %s%d bytes of JSON; the limit is %d (64 MiB): "
                                 "write large data to a file and return its path (file_refs)"
                                 % (call.get("tool"), "at least " if data is None else "", size,
                                    _ffi.MAX_REQUEST_BYTES)) + tail).encode("utf-8")
        if self.handle_closed:  # answered until the close is over: a closing engine waits for it
            raise EngineClosedError(_CLOSED)
        try:
            out = _ffi.call_encoded("dccflow_calls_complete", self.handle, data)
        except DccFlowError as exc:
            if exc.code not in ("too_large", "invalid_json"):
                raise
            kind = "too_large" if exc.code == "too_large" else "invalid_output"
            data = (_tools_error(call, kind, "the result of tool %r could not be delivered: %s"
                                 % (call.get("tool"), exc.message)) + tail).encode("utf-8")
            out = _ffi.call_encoded("dccflow_calls_complete", self.handle, data)
        if not out.get("accepted", True):
            log.info("late result of %s (%s) was dropped: the call had timed out or been cancelled",
                     call.get("step_key"), call.get("tool"))
        return out

    def serve(self, calls: List[Dict[str, Any]], next_json: Optional[str],
              puller: int = 0) -> Optional[Dict[str, Any]]:
        """Run pulled calls and answer each; the last answer also asks for more (``next_json``,
        an encoded calls_next request) and its reply is returned (None without ``next_json``).

        Several calls (a batch a ``serve_tools`` thread took) are answered together in one
        ``dccflow_calls_complete_many`` with the next pull. Once a batch has run for longer than
        BATCH_HOLD, the answers so far are sent and the calls not started are handed back (for
        ``puller``); the reply then says ``"held": False``. A call still running after
        RELEASE_AFTER has the rest handed back meanwhile, by the driver's ``_Releaser``.

        A tool interrupted by ``KeyboardInterrupt`` (or another ``BaseException`` that is not
        ``SystemExit``) has its call answered with a ``cancelled`` step error before the exception
        goes on, after the answers of the calls that ran before it; the calls after it are still
        held and go back with the puller.
        """
        if len(calls) == 1:
            members = self._run(calls[0], [])
            out = self.complete(calls[0], members, next_json)
            return out if next_json is not None else None
        started = time.monotonic()
        done: List[Any] = []  # (call, members) ran and not answered yet
        held = True
        batch = _Batch(puller, calls[1:], started)
        self._releaser().add(batch)
        try:
            call: Optional[Dict[str, Any]] = calls[0]
            while call is not None:
                members = self._run(call, done)
                if len(members) > BATCH_ANSWER_BYTES:  # alone, through complete's size checks
                    self._answer_many(done, None)
                    done = []
                    self.complete(call, members, None)
                else:
                    done.append((call, members))
                with batch.lock:
                    rest, call = batch.rest, None
                    if rest and time.monotonic() - started > BATCH_HOLD:
                        batch.rest = []  # slow calls: hand back what did not start, to idle threads
                    elif rest:
                        call = rest.pop(0)
                    else:
                        rest = []
                if rest and call is None:
                    self._answer_many(done, None)
                    done = []
                    self.host_call("dccflow_calls_release",
                                   {"puller": puller, "call_ids": [c["call_id"] for c in rest]})
            held = not batch.taken
        finally:
            self._releaser().discard(batch)
        if not held or len(done) < len(calls):
            held = False
        reply = self._answer_many(done, next_json)
        if reply is None and next_json is not None:
            reply = self._call_encoded("dccflow_calls_next", next_json)
        if reply is not None and not held:
            reply["held"] = False
        return reply

    def _releaser(self) -> "_Releaser":
        releaser = self._batch_releaser
        if releaser is None:
            with self._lock:
                if self._batch_releaser is None:
                    self._batch_releaser = _Releaser(weakref.ref(self))
                releaser = self._batch_releaser
        return releaser

    def _run(self, call: Dict[str, Any], done: List[Any]) -> str:
        """Run one call and return its answer's members (``_tools.execute``); on an interruption,
        answer ``done`` (calls that ran) and the call itself, then raise."""
        try:
            return execute(self.tools.get(call.get("tool")), call, self.cancelled,  # type: ignore[arg-type]
                           self.report, self.handle, env=self.environment)
        except ToolInterrupted:
            # Raised past execute's own handlers (CPython 3.13: python/cpython#139622): the
            # engine gave up on the call; answer it and go on, as execute would have.
            WATCHDOG.leave_call(int(call.get("call_id") or 0))
            return _tools_error(call, "cancelled", "tool %r was interrupted: the engine gave up on the call"
                                % call.get("tool"))
        except BaseException as exc:
            if not self.handle_closed:
                for ran, members in done:
                    self.complete(ran, members, None)
                del done[:]
                self.complete(call, _tools_error(call, "cancelled", "the tool was interrupted by %s"
                                                 % type(exc).__name__), None)
            raise

    def _answer_many(self, done: List[Any], next_json: Optional[str]) -> Optional[Dict[str, Any]]:
        """Answer the calls of ``done`` ((call, members) pairs) in one crossing, asking for the
        next calls when ``next_json`` is given; return that reply (None without ``next_json``,
        or with nothing to answer). An answer the library refuses as malformed makes each go
        alone through ``complete`` instead (none of a refused batch was taken)."""
        if not done:
            return None
        if len(done) == 1:
            one = self.complete(done[0][0], done[0][1], next_json)
            return one if next_json is not None else None
        data = '{"answers":[' + "},".join(m for _, m in done) + "}]"
        data += "}" if next_json is None else ',"next":' + next_json + "}"
        encoded = _encode_answer(data)
        if self.handle_closed:
            raise EngineClosedError(_CLOSED)
        out: Optional[Dict[str, Any]] = None
        if isinstance(encoded, bytes):
            try:
                out = _ffi.call_encoded("dccflow_calls_complete_many", self.handle, encoded)
            except DccFlowError as exc:
                if exc.code not in ("too_large", "invalid_json", "invalid_request"):
                    raise
        if out is None:  # one of them could not be taken as it is: each on its own, with its checks
            reply: Optional[Dict[str, Any]] = None
            for i, (call, members) in enumerate(done):
                last = i == len(done) - 1
                r = self.complete(call, members, next_json if last else None)
                if last:
                    reply = r
            return reply if next_json is not None else None
        for (call, _), accepted in zip(done, out.get("accepted") or ()):
            if not accepted:
                log.info("late result of %s (%s) was dropped: the call had timed out or been cancelled",
                         call.get("step_key"), call.get("tool"))
        return out if next_json is not None else None

    def pull_loop(self, run_id: Optional[str], deadline: Optional[float], lanes: List[str],
                  budget: Optional[float] = None, stop: Optional[threading.Event] = None,
                  events_after: Optional[int] = None, counter: Optional[List[int]] = None,
                  idle: Optional[float] = None, first: Optional[Dict[str, Any]] = None,
                  batch: int = 1) -> Generator[List[Dict[str, Any]], None, Optional[Dict[str, Any]]]:
        """Pull and run calls on ``lanes`` (of ``run_id`` only when given) until the run is
        terminal, ``deadline`` (monotonic) passes, ``budget`` seconds are spent (then it does not
        wait for calls), ``stop`` is set or the engine closes; return the last run summary
        (``{"status", "terminal"}``) or None.

        With ``events_after`` (a sequence number) it yields each non-empty batch of the run's
        events as they arrive, and stops only after the ``workflow_terminal`` event; ``idle``
        (seconds) then moves the deadline to that long after the last batch. ``counter[0]``
        counts the calls it ran. The calls it holds when it stops, or raises, go back.
        ``first`` is a calls_next reply this thread's puller already got (its calls are served
        first). ``batch`` (> 1: a ``serve_tools`` thread) is how many ready calls it may take in
        one crossing; after a batch that ran longer than BATCH_HOLD it takes one at a time until
        one runs quickly again.
        """
        if idle is not None:
            deadline = time.monotonic() + idle
        puller = self.puller()
        started = time.monotonic()
        reply: Optional[Dict[str, Any]] = first  # its "calls" are pulled and not started yet
        run: Optional[Dict[str, Any]] = None
        cached_key: Any = None
        req_json = ""
        take = max(1, batch)  # how many calls the next pull may take
        ok = False
        outage = Outage("run %s" % run_id if run_id else "tool calls")
        try:
            while True:
                if self.dead_pullers:
                    self.close_dead_pullers()
                now = time.monotonic()
                if (self.closed or (stop is not None and stop.is_set())
                        or (deadline is not None and now >= deadline)
                        or (budget is not None and now - started >= budget)):
                    ok = True
                    return run
                # A serve_tools thread (batch > 1) waits for the next calls in the crossing that
                # answers its batch: returning empty-handed to wait in _worker_loop would cost a
                # second crossing per batch, and the engine spins for a puller that just answered.
                wait_ms = 0 if budget is not None and batch <= 1 else POLL_MS
                if deadline is not None:
                    wait_ms = max(0, min(wait_ms, int((deadline - now) * 1000)))
                key = (wait_ms, events_after, take)
                if key != cached_key:
                    req: Dict[str, Any] = {"puller": puller, "lanes": lanes, "max": take, "timeout_ms": wait_ms}
                    if run_id is not None:
                        req["run_id"] = run_id
                    if events_after is not None:
                        req["events_after"] = events_after
                    cached_key, req_json = key, json.dumps(req)
                calls = reply.get("calls") if reply else None
                if calls:
                    reply = None  # serve owns them now: it answers each, even when it raises
                    reply = self.serve(calls, req_json, puller)
                    if batch > 1:
                        take = batch if reply is None or reply.pop("held", True) else 1
                    if counter is not None:
                        counter[0] += len(calls)
                else:
                    try:
                        reply = self._call_encoded("dccflow_calls_next", req_json)
                    except DccFlowError as exc:  # it holds no call here: waiting out an outage is safe
                        if self.closed or not outage.failed(exc):
                            raise
                        continue
                    outage.ok()
                assert reply is not None
                run = cast(Optional[Dict[str, Any]], reply.get("run"))
                if events_after is not None:
                    events = reply.get("events") or []
                    if events:
                        events_after = max(events_after, max(int(ev.get("seq", 0)) for ev in events))
                        yield events
                        if idle is not None:
                            deadline = time.monotonic() + idle
                        if any(ev.get("type") == "workflow_terminal" for ev in events):
                            ok = True
                            return run
                        if reply.get("calls") and self.cancelled(int(reply["calls"][0]["call_id"])):
                            # Cancelled or timed out while the consumer held the events: not
                            # started. Hand it back, so the engine lets go of it now.
                            self._call("dccflow_calls_release",
                                       {"puller": puller, "call_ids": [c["call_id"] for c in reply["calls"]]})
                            reply = None
                    elif run is not None and run.get("terminal") and not reply.get("calls"):
                        ok = True
                        return run  # terminal, and its events were all read (or pruned)
                    continue
                has_calls = bool(reply.get("calls"))
                if run is not None and run.get("terminal") and not has_calls:
                    ok = True
                    return run
                if not has_calls and budget is not None:
                    ok = True
                    return run
        finally:
            if not ok:
                self.drop_puller()  # raised (or abandoned): hand back all it holds
            elif reply and reply.get("calls") and not self.handle_closed:
                try:
                    self.host_call("dccflow_calls_release",
                                   {"puller": puller, "call_ids": [c["call_id"] for c in reply["calls"]]})
                except DccFlowError as exc:
                    if not is_closed_error(exc):
                        raise

    def _call_encoded(self, name: str, req_json: str) -> Dict[str, Any]:
        self._check_open()
        return _ffi.call_encoded(name, self.handle, req_json.encode("utf-8"))

    def drive(self, run_id: Optional[str], deadline: Optional[float], lanes: Optional[List[str]] = None,
              budget: Optional[float] = None, stop: Optional[threading.Event] = None,
              counter: Optional[List[int]] = None, first: Optional[Dict[str, Any]] = None,
              batch: int = 1) -> Optional[Dict[str, Any]]:
        """Serve calls until the run is terminal, the deadline passes, the budget is spent or
        ``stop`` is set (see ``pull_loop``); return the last run summary seen or None.

        On a thread that may serve no lane (a background thread while a DCC adapter's pump runs
        main-lane calls and a pool runs worker-lane ones) it only waits."""
        lanes = self.lanes() if lanes is None else lanes
        if not lanes:
            return self.wait_only(run_id, deadline, stop)
        watch_logs = run_id is not None and log.isEnabledFor(logging.INFO)
        loop = self.pull_loop(run_id, deadline, lanes, budget, stop, 0 if watch_logs else None, counter, first=first,
                              batch=batch)
        while True:
            try:
                events = next(loop)
            except StopIteration as end:
                result: Optional[Dict[str, Any]] = end.value
                return result
            for ev in events:
                _log_event(ev)

    def wait_only(self, run_id: Optional[str], deadline: Optional[float],
                  stop: Optional[threading.Event]) -> Optional[Dict[str, Any]]:
        """Wait, without pulling calls, until the run is terminal, ``deadline`` passes, ``stop``
        is set or the engine closes."""
        while not self.closed and not (stop is not None and stop.is_set()):
            wait = POLL_MS / 1000.0
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return None
            if run_id is None:
                (stop or threading.Event()).wait(wait)
                continue
            status = self._call("dccflow_run_wait", {"run_id": run_id, "timeout_ms": max(1, int(wait * 1000))})
            if WorkflowStatus(status.get("status", "pending")).is_terminal:
                return {"status": status.get("status"), "terminal": True}
        return None

    def serve_tools(self, workers: int) -> None:
        """Start ``workers`` daemon threads that run worker-lane tools until ``workers_stop``."""
        ref = weakref.ref(self)
        for i in range(workers):
            t = threading.Thread(target=_worker_loop, args=(ref, self.workers_stop), name="dcc_flow-worker-%d" % i,
                                 daemon=True)
            self.workers.append(t)
            t.start()

    def join_workers(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for each ``serve_tools`` thread (but the calling one) to end."""
        current = threading.current_thread()
        for t in self.workers:
            if t is not current:
                t.join(timeout=timeout)


class _Batch:
    """The calls of a batch a thread took and has not started (``rest``, under ``lock``): the
    thread pops the next one to start it, or the releaser takes them all to hand them back."""

    __slots__ = ("puller", "rest", "started", "lock", "taken")

    def __init__(self, puller: int, rest: List[Dict[str, Any]], started: float) -> None:
        self.puller = puller
        self.rest = rest
        self.started = started
        self.lock = threading.Lock()
        self.taken = False  # the releaser handed back its rest


class _Releaser:
    """Hands back the calls of a batch whose thread is still running one of them after
    RELEASE_AFTER seconds (a slow or blocked tool: they must not wait behind it while other threads
    idle). One daemon thread per driver, polling every RELEASE_AFTER while batches run and waiting
    on a condition otherwise; it holds its driver weakly, and ends after a second without batches
    (the next batch starts it again)."""

    def __init__(self, ref: "weakref.ref[Driver]") -> None:
        self.ref = ref
        self.cv = threading.Condition(threading.Lock())
        self.batches: Set[_Batch] = set()
        self.thread: Optional[threading.Thread] = None
        self.idle = False  # the thread waits for a batch (add wakes it)

    def add(self, batch: _Batch) -> None:
        with self.cv:
            self.batches.add(batch)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="dcc_flow-batch-releaser", daemon=True)
                self.thread.start()
            elif self.idle:
                self.cv.notify()

    def discard(self, batch: _Batch) -> None:
        with self.cv:
            self.batches.discard(batch)

    def _loop(self) -> None:
        while True:
            with self.cv:
                if not self.batches:
                    self.idle = True
                    self.cv.wait(1.0)
                    self.idle = False
                    if not self.batches:
                        self.thread = None
                        return
            time.sleep(RELEASE_AFTER)
            now = time.monotonic()
            with self.cv:
                late = [b for b in self.batches if now - b.started >= RELEASE_AFTER]
            for b in late:
                with b.lock:
                    rest, b.rest = b.rest, []
                    if rest:
                        b.taken = True
                if not rest:
                    continue
                driver = self.ref()
                if driver is None:
                    return
                try:
                    driver.host_call("dccflow_calls_release",
                                     {"puller": b.puller, "call_ids": [c["call_id"] for c in rest]})
                except Exception:  # noqa: BLE001 - closed engine or puller: the calls went back with it
                    log.debug("handing back a batch's calls failed", exc_info=True)
                driver = None


class _PullerHolder:
    """Holds a thread's puller id in the engine's ``threading.local``. When the thread ends the
    holder is freed and its id goes to ``dead`` (only a list append: the thread is being torn
    down), to be closed by the next pull loop of any thread."""

    __slots__ = ("id", "release", "__weakref__")

    def __init__(self, puller: int, dead: List[int]) -> None:
        self.id = puller
        self.release = weakref.finalize(self, dead.append, puller)


def is_closed_error(exc: BaseException) -> bool:
    """The engine is closed (or its handle is stale): the one failure that ends a loop quietly."""
    return isinstance(exc, EngineClosedError) or getattr(exc, "code", None) in ("closed", "stale_handle")


# A serve_tools thread holds its driver only while it runs calls, never while it waits: the wait is
# a crossing on the handle alone, and the driver is looked up through a weak reference when there
# is work. So an engine its user no longer references is garbage-collected as docs/reference/python/README.md
# promises (its handle closed, its database unlocked), its driver with it, and the threads then end
# on their own. (Engine.on_event's thread does the same with the engine.)


def _worker_loop(ref: "weakref.ref[Driver]", stop: threading.Event) -> None:
    """A ``serve_tools`` thread: serve worker-lane calls until ``stop``, the engine closes, or it
    is collected (its driver with it). Only the engine's closing ends it; any other failure is
    logged and it goes on (no call is run twice: the pull loop answers every call it ran, and hands
    back the rest)."""
    outage = Outage("worker %s" % threading.current_thread().name)
    while not stop.is_set():
        driver = ref()
        if driver is None or driver.closed:
            return
        try:
            handle = driver.handle
            request = json.dumps({"puller": driver.puller(), "lanes": ["worker"], "max": BATCH_MAX,
                                  "timeout_ms": POLL_MS})
            del driver
            reply = _ffi.call_encoded("dccflow_calls_next", handle, request.encode("utf-8"))  # waits without it
            outage.ok()
            if not reply.get("calls"):
                continue
            driver = ref()
            if driver is None:
                return  # collected while we waited: its handle is closed, the call went with it
            # Run the call, then the next ones while there are some (complete-and-next), then wait again.
            driver.drive(None, None, lanes=["worker"], budget=math.inf, stop=stop, first=reply, batch=BATCH_MAX)
        except Exception as exc:  # noqa: BLE001 - the pool must outlive a failing crossing
            driver = ref()
            if driver is None or driver.closed or is_closed_error(exc):
                return
            driver = None
            if isinstance(exc, DccFlowError) and outage.failed(exc):
                continue  # the database is unreachable for a while: one warning, then backoff
            log.exception("dcc_flow worker %s", threading.current_thread().name)
            time.sleep(0.05)
        driver = None


class Outage:
    """Backoff for a stream (events, a worker's pulls) whose crossing fails while the database is
    unreachable: ``failed`` waits and says whether to retry (a code of EVENT_RETRY_CODES), logging
    one warning per outage; ``ok`` ends the outage (an info line with its length), resets the backoff."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.delay = 0.0
        self.since = 0.0
        self.errors = 0

    def failed(self, exc: DccFlowError) -> bool:
        if exc.code not in EVENT_RETRY_CODES:
            return False
        if self.errors == 0:
            self.since = time.monotonic()
            log.warning("dcc_flow %s: events unavailable, retrying with backoff (up to %gs apart): %s",
                        self.what, EVENT_RETRY_MAX, exc.message)
        self.errors += 1
        self.delay = min(EVENT_RETRY_MAX, self.delay * 2 if self.delay else EVENT_RETRY_FIRST)
        time.sleep(self.delay)
        return True

    def ok(self) -> None:
        if self.errors:
            log.info("dcc_flow %s: events back after %.1fs (%d failed tries)", self.what,
                     time.monotonic() - self.since, self.errors)
            self.errors, self.delay = 0, 0.0


def _encode_answer(text: str) -> Union[bytes, UnicodeEncodeError]:
    """``text`` as UTF-8, or the error when it holds a lone surrogate (a non-UTF-8 file name)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc


def _log_event(ev: Mapping[str, Any]) -> None:
    kind = ev.get("type", "")
    key = ev.get("step_key") or ""
    detail = ev.get("detail") or {}
    if kind == "step_progress":  # what a tool reported: "export 37/120 caching frames"
        total = detail.get("total")
        log.info("run %s %s %s %s%s%s", ev.get("run_id", ""), kind, key, detail.get("done"),
                 "" if total is None else "/%s" % total, " " + detail["message"] if detail.get("message") else "")
        return
    if kind == "step_log":  # the lines a tool logged, one record each
        for line in detail.get("lines") or ():
            log.info("run %s %s: %s%s", ev.get("run_id", ""), key, line.get("text", ""),
                     " %s" % json.dumps(line["fields"], sort_keys=True) if line.get("fields") else "")
        if detail.get("dropped"):
            log.info("run %s %s: %d more lines not shown here (logged too fast; the step record has them)",
                     ev.get("run_id", ""), key, detail["dropped"])
        return
    progress = ev.get("progress") or {}
    log.info("run %s %s%s %s (%s/%s)", ev.get("run_id", ""), kind, " " + key if key else "",
             ev.get("status", ""), progress.get("completed", "?"), progress.get("total", "?"))
