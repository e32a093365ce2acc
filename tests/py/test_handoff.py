"""The hand-back rule: every tool call the package pulls is run and answered once, or handed back.

Each test here failed before the rule existed: a call pulled just as a deadline passed was dropped
(the run stayed ``running`` for good), a cancelled foreach kept running a batch of 16 calls,
``run.events()`` waited for a call nobody ran, and ``run.wait()`` on a background thread ran
``maya.cmds`` tools off the main thread while a DCC adapter was installed.
"""

import sys
import threading
import time

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus, _ffi
from test_dcc_adapters import FakeMaya

#: Generous bound for a run that must end; a run left hanging fails the test instead of the suite.
LIMIT = 20.0


def wait_terminal(engine, run_id, limit=LIMIT):
    """Poll (without driving) until the run is terminal; its status, or the stuck one."""
    deadline = time.monotonic() + limit
    status = engine.get_status(run_id)
    while not status.terminal and time.monotonic() < deadline:
        time.sleep(0.01)
        status = engine.get_status(run_id)
    return status


@pytest.fixture
def engine():
    with dcc_flow.Engine() as e:
        yield e


def sleeper(engine, seconds, log=None):
    @engine.tool(name="nap")
    def nap(i=0):
        if log is not None:
            log.append((time.monotonic(), i, threading.current_thread().name))
        time.sleep(seconds)
        return i


class Driver:
    """``engine.drive_forever()`` on a thread of its own, as ``dcc-flow serve`` runs it."""

    def __init__(self, engine):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=engine.drive_forever, args=(self.stop,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "drive_forever did not stop"


def test_drive_forever_runs_main_calls_slower_than_its_poll(engine):
    sleeper(engine, 0.15)
    spec = {"steps": [{"id": "s%d" % i, "tool": "nap", "args": {"i": i}} for i in range(5)]}
    run = engine.submit(spec)
    with Driver(engine):
        status = wait_terminal(engine, run.run_id)
    assert status.status is WorkflowStatus.COMPLETED, status
    assert status.outputs == {"s%d" % i: i for i in range(5)}


def test_drive_forever_runs_a_retried_step(engine):
    attempts = []

    @engine.tool(name="flaky")
    def flaky():
        attempts.append(dcc_flow.current_call().attempt)
        if len(attempts) < 3:
            raise dcc_flow.Transient("not yet")
        return "ok"

    run = engine.submit({"steps": [{"id": "f", "tool": "flaky",
                                    "retry": {"max_attempts": 3, "initial_delay_ms": 100}}]})
    with Driver(engine):
        status = wait_terminal(engine, run.run_id)
    assert status.status is WorkflowStatus.COMPLETED, status
    assert attempts == [1, 2, 3]


def test_short_waits_lose_no_call(engine):
    sleeper(engine, 0.15)
    run = engine.submit({"steps": [{"id": "s%d" % i, "tool": "nap", "args": {"i": i}} for i in range(5)]})
    for _ in range(10):
        run.wait(timeout=0.05)
    result = run.wait(timeout=LIMIT)
    assert not result.timed_out
    assert result.status is WorkflowStatus.COMPLETED, result


def test_pump_with_a_small_budget_loses_no_call(engine):
    sleeper(engine, 0.02)
    run = engine.submit({"steps": [{"id": "s%d" % i, "tool": "nap", "args": {"i": i}} for i in range(8)]})
    ran = 0
    deadline = time.monotonic() + LIMIT
    while not run.result().terminal and time.monotonic() < deadline:
        ran += engine.pump(budget=0.001)
    assert run.result().status is WorkflowStatus.COMPLETED
    assert ran == 8


def test_cancel_starts_no_further_call(engine):
    log = []
    sleeper(engine, 0.1, log)
    run = engine.submit({"steps": [{"id": "each", "kind": "foreach", "items": list(range(64)), "concurrency": 32,
                                    "steps": [{"id": "n", "tool": "nap", "args": {"i": "{{item}}"}}]}]})
    waiter = threading.Thread(target=run.wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + LIMIT
    while not log and time.monotonic() < deadline:
        time.sleep(0.001)
    assert log, "no call started"
    run.cancel("test")
    cancelled_at = time.monotonic()
    waiter.join(LIMIT)
    assert not waiter.is_alive()
    assert run.status is WorkflowStatus.CANCELLED
    started_after = [entry for entry in log if entry[0] > cancelled_at]
    assert started_after == [], "calls started after cancel: %r" % started_after
    # At most the call that was running when the run was cancelled finished (one per thread).
    assert len(log) <= 2, log


def test_events_drive_the_run(engine):
    sleeper(engine, 0.01)
    run = engine.submit({"steps": [{"id": "a", "tool": "nap"}, {"id": "b", "tool": "nap", "args": {"i": 1}}]})
    types = [ev["type"] for ev in run.events(timeout=LIMIT)]
    assert types[0] == "workflow_started"
    assert types[-1] == "workflow_terminal"
    assert run.result().status is WorkflowStatus.COMPLETED


def test_leaving_events_early_hands_calls_back(engine):
    sleeper(engine, 0.01)
    run = engine.submit({"steps": [{"id": "s%d" % i, "tool": "nap", "args": {"i": i}} for i in range(3)]})
    for ev in run.events(timeout=LIMIT):
        if ev["type"] == "step_exit":
            break  # the next step's call may have been pulled with these events
    result = run.wait(timeout=LIMIT)
    assert result.status is WorkflowStatus.COMPLETED, result


def test_calls_of_a_thread_that_ended_go_back(engine):
    ran = []

    @engine.tool(name="t")
    def t():
        ran.append(threading.current_thread().name)
        return 1

    run = engine.submit({"steps": [{"id": "t", "tool": "t"}]})
    taken = []

    def take_and_vanish():
        # What a host thread that dies between pulling a call and running it leaves behind.
        puller = engine._driver.puller()
        reply = _ffi.call("dccflow_calls_next", engine.handle,
                          {"puller": puller, "lanes": ["main"], "timeout_ms": 5000})
        taken.extend(reply["calls"])

    th = threading.Thread(target=take_and_vanish, name="vanishing")
    th.start()
    th.join()
    assert len(taken) == 1
    del th
    result = run.wait(timeout=LIMIT)
    assert result.status is WorkflowStatus.COMPLETED, result
    assert ran == ["MainThread"]


def test_keyboard_interrupt_in_a_tool_answers_its_call(engine):
    calls = []

    @engine.tool(name="interrupted")
    def interrupted():
        calls.append(1)
        raise KeyboardInterrupt

    run = engine.submit({"steps": [{"id": "k", "tool": "interrupted"}]})
    with pytest.raises(KeyboardInterrupt):
        run.wait(timeout=LIMIT)
    status = wait_terminal(engine, run.run_id)
    # The step ended with kind cancelled (its answer), or the run was cancelled first by wait().
    assert status.status in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED), status
    assert status.step("k").error["kind"] == "cancelled"
    assert calls == [1]
    assert engine._call("dccflow_calls_next", {"lanes": ["main", "worker"], "timeout_ms": 0})["calls"] == []


@pytest.mark.parametrize("lane", ["main", "worker"])
@pytest.mark.parametrize("bad, kind, says", [
    ("exit", "fatal", "SystemExit"),
    ("surrogate", "invalid_output", "not valid Unicode"),
    ("deep", "invalid_output", "not JSON-serialisable"),
    ("huge", "too_large", "bytes of JSON; the limit is 67108864"),
])
def test_a_tool_result_that_cannot_be_sent_fails_its_step(engine, lane, bad, kind, says):
    calls = []

    @engine.tool(name="odd", thread=lane)
    def odd():
        calls.append(1)
        if bad == "exit":
            sys.exit(3)
        if bad == "surrogate":
            return {"name": "caf\udce9.ma"}  # what os.listdir returns for a name that is not UTF-8
        if bad == "huge":
            return "x" * (65 << 20)
        deep = []
        for _ in range(100000):
            deep = [deep]
        return deep

    if lane == "worker":
        engine.serve_tools(workers=1)
    # A retry policy does not run it again: none of these kinds is retried by default.
    run = engine.submit({"steps": [{"id": "o", "tool": "odd", "retry": {"max_attempts": 3, "initial_delay_ms": 1}}]})
    result = run.wait(timeout=LIMIT)
    assert result.status is WorkflowStatus.FAILED, result
    assert result.error["kind"] == kind
    assert says in result.error["message"]
    assert calls == [1]


def test_wait_on_a_background_thread_leaves_main_calls_to_the_dcc_pump(engine, monkeypatch):
    from dcc_flow.dcc import maya as flow_maya

    fake = FakeMaya(batch=False)
    fake.install(monkeypatch)
    threads = []

    @engine.tool(name="cmds_tool")
    def cmds_tool():
        threads.append(threading.current_thread().name)
        return 1

    pump = flow_maya.install(engine)
    try:
        run = engine.submit({"steps": [{"id": "a", "tool": "cmds_tool"}, {"id": "b", "tool": "cmds_tool"}]})
        results = []
        bg = threading.Thread(target=lambda: results.append(run.wait(timeout=LIMIT)), name="background")
        bg.start()
        with pytest.raises(RuntimeError, match="main thread"):
            bg_pump = []
            t = threading.Thread(target=lambda: bg_pump.append(_raises(engine.pump)))
            t.start()
            t.join()
            raise bg_pump[0]
        deadline = time.monotonic() + LIMIT
        while bg.is_alive() and time.monotonic() < deadline:
            fake.idle()  # the DCC's idle loop, on the main thread
            time.sleep(0.001)
        bg.join(1)
        assert results and results[0].status is WorkflowStatus.COMPLETED
        assert threads == ["MainThread", "MainThread"]
    finally:
        pump.uninstall()
    # Without the pump, a waiting thread runs main-lane tools itself again.
    threads.clear()
    done = []
    bg = threading.Thread(target=lambda: done.append(engine.run({"steps": [{"id": "a", "tool": "cmds_tool"}]})),
                          name="background")
    bg.start()
    bg.join(LIMIT)
    assert done and done[0].ok and threads == ["background"]


def _raises(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - handed to the main thread to check
        return exc
    return AssertionError("no exception")
