"""The tools of the soak test (``dcc-flow serve --tools scripts/soak/soak_tools.py``).

Two tools, one per lane, with the same body: ``soak__main`` runs on the serve process's main
thread, ``soak__worker`` on its worker threads. A call sleeps ``ms`` milliseconds in 10 ms slices
(checking ``current_call().cancelled`` between slices when ``aware``), then fails with a transient
error while ``attempt <= fail_times``, fails for good with ``fail``, or returns.

Every call appends two lines to the call log (``$SOAK_CALL_LOG``): one when it starts and one
when it ends, each one ``write`` on a descriptor opened with ``O_APPEND``, so lines from several
threads never interleave and a line written before a SIGKILL is in the file (the kernel holds it;
no fsync is needed when only the process dies). The end line is written before the tool returns,
that is before the engine can know the result: a kill between the two is the "kill window" of
scripts/soak.py. Lines are JSON objects::

    {"ev": "start", "gen": 3, "pid": 4242, "call": 17, "tool": "soak__main", "run": "r01…",
     "step": "fan[2].export", "att": 1, "t": <time.time_ns()>, "c0": false, "key": "export_…"}
    {"ev": "end", …the same…, "t": …, "out": "ok" | "transient" | "fatal" | "cancelled", "c1": false}

``c0``/``c1``: ``cancelled`` at the start / at the end of the call.

``$SOAK_LEAK_BYTES`` (``scripts/soak.py --leak-per-run``, to check the soak's memory check
itself): the first call of each workflow's first step keeps that many bytes for good, i.e. that
much per run that is never released.
"""

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

import dcc_flow

GEN = int(os.environ.get("SOAK_GEN") or 0)
PID = os.getpid()
LEAK_BYTES = int(os.environ.get("SOAK_LEAK_BYTES") or 0)
FIRST_STEPS = ("prepare", "ping", "receive", "tick")  # of soak_pipeline, soak_ping, soak_hook, soak_tick
_leaked: List[bytes] = []
_fd: Optional[int] = None
_lock = threading.Lock()


def _log(record: Dict[str, Any]) -> None:
    global _fd
    if _fd is None:
        with _lock:
            if _fd is None:
                path = os.environ.get("SOAK_CALL_LOG") or os.devnull
                _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, (json.dumps(record) + "\n").encode("utf-8"))


def _work(ms: int = 0, fail_times: int = 0, fail: bool = False, aware: bool = True, retry_ms: Optional[int] = None,
          key: str = "") -> Dict[str, Any]:
    call = dcc_flow.current_call()
    if call is None:
        raise RuntimeError("soak tools run only as dcc-flow tools")
    base = {"gen": GEN, "pid": PID, "call": call.call_id, "tool": call.tool, "run": call.run_id,
            "step": call.step_key, "att": call.attempt}
    if key:
        base["key"] = key
    _log(dict(base, ev="start", t=time.time_ns(), c0=call.cancelled))
    if call.attempt > 1 and retry_ms is not None:
        ms = retry_ms
    until = time.monotonic() + max(0, int(ms or 0)) / 1000.0
    while True:
        left = until - time.monotonic()
        if left <= 0:
            break
        if aware and call.cancelled:
            _log(dict(base, ev="end", t=time.time_ns(), out="cancelled", c1=True))
            raise dcc_flow.ToolError("the call was cancelled after %d ms" % ms, kind="cancelled")
        time.sleep(min(0.01, left))
    if call.attempt <= int(fail_times or 0):
        _log(dict(base, ev="end", t=time.time_ns(), out="transient", c1=call.cancelled))
        raise dcc_flow.Transient("attempt %d of a flaky call" % call.attempt)
    if fail:
        _log(dict(base, ev="end", t=time.time_ns(), out="fatal", c1=call.cancelled))
        raise dcc_flow.Fatal("this step always fails")
    if LEAK_BYTES and call.step_key in FIRST_STEPS and call.attempt == 1:
        _leaked.append(os.urandom(LEAK_BYTES))
    _log(dict(base, ev="end", t=time.time_ns(), out="ok", c1=call.cancelled))
    return {"gen": GEN, "attempt": call.attempt, "ms": ms}


def soak__main(ms: int = 0, fail_times: int = 0, fail: bool = False, aware: bool = True,
               retry_ms: Optional[int] = None, key: str = "") -> Dict[str, Any]:
    """Soak tool on the main lane: sleep, maybe fail, log the call."""
    return _work(ms, fail_times, fail, aware, retry_ms, key)


def soak__worker(ms: int = 0, fail_times: int = 0, fail: bool = False, aware: bool = True,
                 retry_ms: Optional[int] = None, key: str = "") -> Dict[str, Any]:
    """Soak tool on the worker lane: sleep, maybe fail, log the call."""
    return _work(ms, fail_times, fail, aware, retry_ms, key)


def register(engine: Any) -> None:
    """Register the two soak tools (``dcc-flow serve --tools`` calls this)."""
    engine.register_tool(soak__main, name="soak__main")
    engine.register_tool(soak__worker, name="soak__worker", thread="worker")
