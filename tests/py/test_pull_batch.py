"""A ``serve_tools`` thread takes several ready calls in one crossing and answers them in one
(``dccflow_calls_complete_many``), keeping the hand-back rule: each call runs exactly once, a
batch of slow calls is handed back to idle threads, and a cancelled call is never started
(docs/design/performance.md, docs/reference/c-abi/calls.md)."""

import collections
import threading
import time

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus, _driver, _ffi


@pytest.fixture
def engine():
    with dcc_flow.Engine() as e:
        yield e


@pytest.fixture
def crossings(monkeypatch):
    """Counts the crossings of the driver, by export name."""
    counts = collections.Counter()
    real = _ffi.call_encoded

    def counting(name, *args, **kwargs):
        counts[name] += 1
        return real(name, *args, **kwargs)

    monkeypatch.setattr(_ffi, "call_encoded", counting)
    return counts


def fanout(n, concurrency):
    return {"steps": [{"id": "each", "kind": "foreach", "items": list(range(n)), "concurrency": concurrency,
                       "steps": [{"id": "f", "tool": "w", "args": {"i": "{{item}}"}}]}]}


def test_quick_calls_are_taken_and_answered_in_batches(engine, crossings):
    ran = collections.Counter()
    lock = threading.Lock()

    @engine.tool(name="w", thread="worker")
    def w(i):
        with lock:
            ran[i] += 1
        return i * 2

    engine.serve_tools(workers=2)
    n = 400
    result = engine.run(fanout(n, 32))
    assert result.ok, result.error
    assert result.outputs["each"] == [{"f": i * 2} for i in range(n)]
    assert ran == dict.fromkeys(range(n), 1), "a call ran twice or never"
    assert crossings["dccflow_calls_complete_many"] > 0, dict(crossings)
    answers = crossings["dccflow_calls_complete"] + crossings["dccflow_calls_complete_many"]
    assert answers < n, "one crossing per call: %r" % dict(crossings)


def test_a_slow_batch_is_handed_back_to_idle_threads(engine, monkeypatch):
    monkeypatch.setattr(_driver, "BATCH_HOLD", 0.0)  # any batch is slow: the rest goes back at once
    ran = collections.defaultdict(list)
    lock = threading.Lock()

    @engine.tool(name="w", thread="worker")
    def w(i):
        with lock:
            ran[i].append(threading.current_thread().name)
        time.sleep(0.02)
        return i

    released = []
    real = _driver.Driver.host_call

    def host_call(self, name, payload):
        if name == "dccflow_calls_release":
            released.append(list(payload["call_ids"]))
        return real(self, name, payload)

    monkeypatch.setattr(_driver.Driver, "host_call", host_call)
    engine.serve_tools(workers=4)
    result = engine.run(fanout(16, 16))
    assert result.ok, result.error
    assert sorted(ran) == list(range(16)) and all(len(v) == 1 for v in ran.values()), ran
    assert released, "no batch was handed back"
    assert len({name for names in ran.values() for name in names}) > 1, "one thread ran every call"


def test_a_cancelled_call_of_a_batch_is_never_started(engine):
    log = []
    lock = threading.Lock()
    holder = {}

    @engine.tool(name="w", thread="worker")
    def w(i):
        with lock:
            log.append((time.monotonic(), i))
        if i == 0:
            # Noted before the cancel: the run may end, and the test read it, as soon as the
            # cancel is made. No call starts in between: one worker thread, running this one.
            holder["at"] = time.monotonic()
            holder["run"].cancel("test")
        time.sleep(0.01)  # longer than BATCH_HOLD: the rest of its batch goes back
        return i

    run = engine.submit(fanout(16, 16))
    holder["run"] = run
    engine.serve_tools(workers=1)
    deadline = time.monotonic() + 20
    while not run.status.is_terminal and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.status is WorkflowStatus.CANCELLED
    started_after = [entry for entry in log if entry[0] > holder["at"]]
    assert started_after == [], "calls started after cancel: %r" % started_after


def test_a_blocked_call_does_not_hold_the_rest_of_its_batch(engine):
    """A tool that blocks (here until the next item starts, as a barrier of --worker-threads does)
    must not keep the calls its thread took with it from idle threads: they are handed back while
    it runs (_driver.RELEASE_AFTER)."""
    started = threading.Event()

    @engine.tool(name="w", thread="worker")
    def w(i):
        if i == 0:
            if not started.wait(10):
                raise RuntimeError("item 1 never started while item 0 ran")
        else:
            started.set()
        return i

    run = engine.submit(fanout(4, 4))
    time.sleep(0.05)  # the four calls queued: the first thread to pull takes them all
    engine.serve_tools(workers=2)
    run.wait(20)
    assert run.status is WorkflowStatus.COMPLETED, run.result().error


def test_a_worker_thread_waits_for_its_next_calls_in_the_crossing_that_answers(engine, monkeypatch):
    """The crossing that answers a serve_tools thread's calls also waits (POLL_MS) for the next
    ones: with a wait of 0 it came back empty-handed whenever the engine had not queued the next
    item yet, and the thread paid a second crossing (``dccflow_calls_next`` in _worker_loop) per
    batch to wait there (docs/design/performance.md)."""
    import json

    waits = []
    real = _ffi.call_encoded

    def recording(name, handle, data, *args, **kwargs):
        if name in ("dccflow_calls_complete", "dccflow_calls_complete_many") and \
                threading.current_thread().name.startswith("dcc_flow-worker"):
            doc = json.loads(data)
            if doc.get("next"):  # not an answer sent before handing back the rest of a slow batch
                waits.append(doc["next"]["timeout_ms"])
        return real(name, handle, data, *args, **kwargs)

    monkeypatch.setattr(_ffi, "call_encoded", recording)

    @engine.tool(name="w", thread="worker")
    def w(i):
        return i

    engine.serve_tools(workers=2)
    result = engine.run(fanout(200, 8))
    assert result.ok, result.error
    assert waits, "no answer crossed from a serve_tools thread"
    assert set(waits) == {_driver.POLL_MS}, "answers asked for the next calls with waits %r" % sorted(set(waits))
