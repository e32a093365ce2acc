"""Pause and unpause of a run (docs/reference/state-machine.md "Pause"): Engine.pause / Engine.unpause and
the Run methods."""

import json
import threading
import time

import pytest

import dcc_flow
from dcc_flow import Engine, InvalidStateError, StepStatus, WorkflowStatus

FOREACH = """
name: shots
steps:
  - id: each
    kind: foreach
    items: [sh010, sh020, sh030, sh040, sh050]
    steps:
      - {id: export, tool: export, args: {shot: "{{item}}"}}
"""

CHAIN = """
name: chain
steps:
  - {id: a, tool: step_a}
  - {id: b, tool: step_b}
  - {id: c, tool: step_c}
"""


def _pause_events(engine, run_id):
    return [(ev["type"], ev["status"], ev.get("detail")) for ev in engine.events(run_id=run_id, timeout=0)
            if ev["type"] in ("run_paused", "run_unpaused")]


def test_pause_mid_foreach_starts_no_new_item_and_unpause_finishes_it():
    with Engine() as engine:
        calls = []
        holder = {}

        @engine.tool()
        def export(shot):
            calls.append(shot)
            if len(calls) == 1:  # paused while this item is in flight: it finishes, no other starts
                holder["run"].pause("farm full", by="wrangler")
                holder["run"].pause("again")  # idempotent
            return {"shot": shot}

        run = engine.submit(FOREACH)
        holder["run"] = run
        result = run.wait(timeout=0.5)
        assert result.timed_out and result.status is WorkflowStatus.PAUSED and not result.terminal
        assert calls == ["sh010"]
        done = [s for s in engine.get_status(run.run_id, all_steps=True).steps if s.key.endswith(".export")]
        assert [(s.key, s.status) for s in done] == [("each[0].export", StepStatus.COMPLETED)]

        run.unpause("farm free", by="wrangler")
        result = run.wait(timeout=10)
        assert result.status is WorkflowStatus.COMPLETED, result.error
        assert calls == ["sh010", "sh020", "sh030", "sh040", "sh050"]
        assert _pause_events(engine, run.run_id) == [
            ("run_paused", "paused", {"reason": "farm full", "by": "wrangler"}),
            ("run_unpaused", "running", {"reason": "farm free", "by": "wrangler"}),
        ]
        with pytest.raises(InvalidStateError, match="completed"):
            run.pause()
        with pytest.raises(InvalidStateError):
            engine.unpause(run.run_id)


def test_paused_run_survives_reopen_and_unpause_reruns_no_completed_step(tmp_path):
    db = tmp_path / "flow.db"
    calls = []

    def register(engine, holder):
        @engine.tool()
        def step_a():
            calls.append("a")
            return 1

        @engine.tool()
        def step_b():
            calls.append("b")
            holder["run"].pause("end of day")  # b finishes, c does not start
            return 2

        @engine.tool()
        def step_c():
            calls.append("c")
            return 3

    holder = {}
    with Engine(db=db) as engine:
        register(engine, holder)
        run = engine.submit(CHAIN)
        holder["run"] = run
        assert run.wait(timeout=0.5).status is WorkflowStatus.PAUSED
        run_id = run.run_id
    assert calls == ["a", "b"]

    with Engine(db=db) as engine:
        status = engine.get_status(run_id)
        assert status.status is WorkflowStatus.PAUSED and not status.terminal
        assert {s.key: s.status for s in status.steps} == {"a": StepStatus.COMPLETED, "b": StepStatus.COMPLETED}
        with pytest.raises(dcc_flow.DccFlowError) as e:  # its tools are not registered yet
            engine.unpause(run_id)
        assert e.value.code == "unknown_tool"
        assert engine.get_status(run_id).status is WorkflowStatus.PAUSED
        register(engine, holder)
        holder["run"] = None  # step_b must not run again (None.pause would fail it)
        # Waiting on a paused run that no engine runs waits without spinning the CPU, and follows
        # the run once it is unpaused (from another thread here).
        cpu = time.process_time()
        result = dcc_flow.Run(engine, run_id).wait(timeout=0.5)
        assert result.timed_out and result.status is WorkflowStatus.PAUSED
        assert time.process_time() - cpu < 0.25, "wait() spun on a paused run"
        threading.Timer(0.2, lambda: engine.unpause(run_id, by="lead")).start()
        result = dcc_flow.Run(engine, run_id).wait(timeout=10)
        assert result.status is WorkflowStatus.COMPLETED, result.error
        assert result.outputs == {"a": 1, "b": 2, "c": 3}
    assert calls == ["a", "b", "c"]


def test_cancel_of_a_paused_run_and_a_read_only_engine_pauses_through_the_owner(tmp_path):
    db = tmp_path / "flow.db"
    gated = 'steps: [{id: gate, kind: approve, prompt: "ship?"}, {id: after, tool: flow__echo, args: {value: 1}}]'
    with Engine(db=db) as owner:
        run = owner.submit(gated)
        for ev in run.events(timeout=10):
            if ev["type"] == "approve_requested":
                break
        with Engine(db=db, read_only=True) as beside:
            beside.pause(run.run_id, "hold", by="td")
            assert owner.get_status(run.run_id).status is WorkflowStatus.PAUSED
            beside.unpause(run.run_id, by="td")
            assert owner.get_status(run.run_id).status is WorkflowStatus.WAITING
            beside.pause(run.run_id)
        run.cancel("not this week")
        result = run.wait(timeout=10)
        assert result.status is WorkflowStatus.CANCELLED and "not this week" in json.dumps(result.error)
