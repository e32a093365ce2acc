"""Issue #26, items 1–5 and 15: tool results that cannot be sent, numbers, and the smaller faults.

Integers beyond 2**53 (64-bit asset ids, hashes) travel exactly from inputs and tool outputs
through templates, JSONPath, branch conditions, run records, a reopened database and resume.
"""

import json

import pytest

from dcc_flow import Engine, WorkflowStatus

BIG = 2**53 + 1  # the first integer a float64 cannot hold
HUGE = 2**64 - 1
NEG = -(2**63) - 12345


def _spec():
    return {
        "inputs": {"asset_id": {"type": "integer", "required": True}},
        "steps": [
            {"id": "lookup", "tool": "lookup", "args": {"asset_id": "{{inputs.asset_id}}"}},
            {"id": "label", "tool": "echo", "args": {"v": "asset {{lookup.id}} hash {{lookup.hash}}"}},
            {"id": "exact", "tool": "echo", "args": {"v": "{{lookup.hash}}"}},
            {"id": "each", "kind": "foreach", "items": "$.lookup.ids", "as": "aid",
             "steps": [{"id": "one", "tool": "echo", "args": {"v": "{{aid}}"}}]},
            {"id": "big_only", "kind": "foreach", "items": "$.lookup.ids[?@ > 100]",
             "steps": [{"id": "pick", "tool": "echo", "args": {"v": "{{item}}"}}]},
            {"id": "gate", "kind": "branch", "on": "{{lookup.id}}",
             "then": [{"id": "yes", "tool": "echo", "args": {"v": "{{inputs.asset_id}}"}}]},
        ],
    }


def _tools(engine, seen):
    @engine.tool()
    def lookup(asset_id):
        seen.append(asset_id)
        return {"id": asset_id, "hash": HUGE, "ids": [1, BIG, NEG, HUGE], "ratio": 0.1}

    @engine.tool()
    def echo(v):
        seen.append(v)
        return v


def _check(result, seen):
    assert result.status is WorkflowStatus.COMPLETED, result.error
    out = result.outputs
    assert seen[0] == BIG and type(seen[0]) is int
    assert out["lookup"] == {"id": BIG, "hash": HUGE, "ids": [1, BIG, NEG, HUGE], "ratio": 0.1}
    assert out["label"] == "asset %d hash %d" % (BIG, HUGE)
    assert out["exact"] == HUGE
    assert [o["one"] for o in out["each"]] == [1, BIG, NEG, HUGE]
    assert [o["pick"] for o in out["big_only"]] == [BIG, HUGE]
    assert out["yes"] == BIG


def test_large_integers_travel_exactly_through_a_run():
    seen = []
    with Engine() as engine:
        _tools(engine, seen)
        result = engine.run(_spec(), {"asset_id": BIG})
        _check(result, seen)
        assert engine.get_status(result.run_id).raw["inputs"] == {"asset_id": BIG}


def test_large_integers_survive_the_database_and_resume(tmp_path):
    db = str(tmp_path / "flow.db")
    seen = []
    with Engine(db=db) as engine:
        _tools(engine, seen)
        spec = _spec()
        spec["steps"].append({"id": "stop", "tool": "flow__fail", "args": {"kind": "fatal"}})
        failed = engine.run(spec, {"asset_id": BIG})
        assert failed.status is WorkflowStatus.FAILED
        run_id = failed.run_id
    with Engine(db=db) as engine:
        _tools(engine, seen)
        status = engine.get_status(run_id)
        assert status.raw["inputs"] == {"asset_id": BIG}
        assert status.step("lookup").output["hash"] == HUGE
        # Resume reads the stored inputs and outputs back; the steps it reuses feed exact values on.
        result = engine.resume(run_id, force_steps=["label"]).wait(timeout=30)
        assert result.status is WorkflowStatus.FAILED  # `stop` fails again; the rest is reused
        assert result.outputs["label"] == "asset %d hash %d" % (BIG, HUGE)
        assert [o["one"] for o in result.outputs["each"]] == [1, BIG, NEG, HUGE]


def test_a_large_integer_literal_in_a_spec_is_exact():
    with Engine() as engine:
        @engine.tool()
        def echo(v):
            return v

        yaml_text = "steps:\n  - {id: a, tool: echo, args: {v: %d}}\n  - {id: b, tool: echo, args: {v: [%d]}}\n" % (HUGE, NEG)
        result = engine.run(yaml_text)
        assert result.outputs == {"a": HUGE, "b": [NEG]}
        assert json.loads(json.dumps(result.outputs))["a"] == HUGE


def test_events_on_a_closed_engine_raise_at_once():
    engine = Engine()
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.events()
    with pytest.raises(RuntimeError, match="closed"):
        engine.events(timeout=0.1)


@pytest.mark.parametrize("kind, reason", [
    ("cancelled", "step a was cancelled"),
    ("timeout", "step a failed (timeout)"),
])
@pytest.mark.parametrize("dag", [False, True])
def test_a_skipped_step_says_how_its_dependency_ended(kind, reason, dag):
    from dcc_flow import ToolError

    with Engine() as engine:
        @engine.tool()
        def stop():
            raise ToolError("the artist pressed stop", kind=kind)

        b = {"id": "b", "tool": "flow__echo"}
        if dag:
            b["depends_on"] = ["a"]
        result = engine.run({"steps": [{"id": "a", "tool": "stop"}, b]})
        assert result.step("b").status.value == "skipped"
        assert result.step("b").error["message"] == reason


def test_an_engine_with_a_tool_pool_and_event_callbacks_is_garbage_collected(tmp_path):
    import gc
    import threading
    import time
    import weakref

    db = str(tmp_path / "flow.db")
    before = set(threading.enumerate())
    seen = []

    def use_and_drop():
        engine = Engine(db=db)

        @engine.tool(thread="worker")
        def work():
            return 1

        engine.serve_tools(workers=2)
        ended = threading.Event()

        def on_event(ev):
            seen.append(ev["type"])
            if ev["type"] == "workflow_terminal":
                ended.set()

        engine.on_event(on_event)
        assert engine.run("steps: [{id: w, tool: work}]").ok
        # run() returns at the terminal state; the callback thread delivers that event a poll
        # later, and dropping the engine first leaves it undelivered (the events of an engine
        # its user dropped are not promised): wait for it, so the callbacks ran, then drop.
        assert ended.wait(10), seen
        return weakref.ref(engine)

    def collected(ref):
        deadline = time.monotonic() + 10
        while ref() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.02)
        return ref() is None

    refs = []
    for _ in range(3):  # the same database each time: a dropped engine must unlock it
        refs.append(use_and_drop())
        assert collected(refs[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not [t for t in threading.enumerate() if t not in before and t.name.startswith("dcc_flow")]:
            break
        time.sleep(0.02)
    assert [t.name for t in threading.enumerate() if t not in before and t.name.startswith("dcc_flow")] == []
    assert "workflow_terminal" in seen
    with Engine(db=db) as again:  # the collected engines released the database
        assert len(again.runs()) == 3


def test_close_raises_its_error_once_and_the_engine_is_closed(monkeypatch):
    from dcc_flow import _ffi
    from dcc_flow._errors import StorageError

    real = _ffi.call
    engine = Engine()
    handle = engine._handle

    def failing_close(name, h, payload=None, source=None):
        if name == "dccflow_engine_close":
            real(name, h, payload)  # the library closes it, then reports what it could not write
            raise StorageError("the last writes of database x.db failed: disk full")
        return real(name, h, payload, source)

    monkeypatch.setattr(_ffi, "call", failing_close)
    with pytest.raises(StorageError, match="disk full"):
        engine.close()
    assert engine.closed
    engine.close()  # a second close is a no-op
    monkeypatch.setattr(_ffi, "call", real)
    with pytest.raises(Exception, match="stale|closed"):
        real("dccflow_runs_list", handle, {})
