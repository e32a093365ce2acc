"""Every attempt of a step is a record: StepRecord.attempts (AttemptRecord), StepRecord.args,
RunResult.resumes (docs/reference/python/running.md "Attempts")."""

import os
import socket
import sys

import pytest

import dcc_flow
from dcc_flow import AttemptRecord, Engine, StepStatus, WorkflowStatus


@pytest.fixture(params=["memory", "sqlite"])
def engine(request, tmp_path):
    kwargs = {"db": str(tmp_path / "flow.db")} if request.param == "sqlite" else {}
    with Engine(**kwargs) as eng:
        yield eng


def test_every_attempt_is_recorded_with_its_rendered_args_and_error(engine):
    state = {"calls": 0}

    @engine.tool(schema={"type": "object", "properties": {"shot": {"type": "string"},
                                                          "pin": {"type": "string", "writeOnly": True}}})
    def push(shot, pin, api_token):
        state["calls"] += 1
        if state["calls"] < 3:
            raise dcc_flow.Transient("farm busy (%d)" % state["calls"])
        return {"shot": shot}

    spec = dcc_flow.WorkflowSpec.from_yaml_str(
        "name: flaky\ninputs: {shot: {type: string}}\nsteps:\n"
        "  - {id: push, tool: push, args: {shot: '{{inputs.shot}}', pin: '0000', api_token: abc},"
        " retry: {max_attempts: 3, initial_delay_ms: 1}}\n")
    result = engine.run(spec, inputs={"shot": "sh010"})
    assert result.ok, result.error
    step = result.step("push")
    assert step.args == {"shot": "sh010", "pin": "[redacted]", "api_token": "[redacted]"}
    assert [a.attempt for a in step.attempts] == [1, 2, 3] and step.attempts_dropped == 0
    assert all(isinstance(a, AttemptRecord) for a in step.attempts)
    first, last = step.attempts[0], step.attempts[-1]
    assert first.status is StepStatus.FAILED and first.error["kind"] == "transient"
    assert first.error["message"].endswith("farm busy (1)") and "Traceback" in first.error.get("trace", "")
    assert last.status is StepStatus.COMPLETED and last.error is None and last.exit == ""
    assert last.tool == "push" and last.args == step.args and last.started_at and last.finished_at
    assert (last.host, last.pid, last.worker) == (socket.gethostname(), os.getpid(), "")  # in-process: this process
    assert repr(first) == "AttemptRecord(attempt=1, status=failed, error='transient')"


def test_a_resume_keeps_the_attempts_before_it_and_records_who(engine):
    state = {"broken": True}

    @engine.tool()
    def export(scene):
        if state["broken"]:
            raise dcc_flow.Fatal("corrupt scene")
        return scene

    spec = dcc_flow.WorkflowSpec.from_yaml_str("steps:\n  - {id: export, tool: export, args: {scene: a.ma}}\n")
    first = engine.run(spec)
    assert first.status is WorkflowStatus.FAILED and first.resumes == []
    state["broken"] = False
    result = engine.resume(first.run_id, by="wrangler").wait(timeout=10)
    assert result.ok
    attempts = result.step("export").attempts
    assert [(a.attempt, a.status) for a in attempts] == [(1, StepStatus.FAILED), (2, StepStatus.COMPLETED)]
    assert attempts[0].error["message"].endswith("corrupt scene")
    assert [(r["by"], r.get("forced")) for r in result.resumes] == [("wrangler", None)]
    assert result.resumes[0]["at"] >= attempts[0].finished_at
    again = engine.resume(first.run_id, force_steps=["export"]).wait(timeout=10)  # by: the login name
    assert [r.get("forced") for r in again.resumes] == [None, ["export"]]
    assert again.resumes[1]["by"]
    assert [a.attempt for a in again.step("export").attempts] == [1, 2, 3]


def test_steps_without_attempts_have_none(engine):
    spec = dcc_flow.WorkflowSpec.from_yaml_str(
        "steps:\n  - {id: each, kind: foreach, items: [1], steps: [{id: e, tool: flow__echo, args: {v: '{{item}}'}}]}\n")
    result = engine.get_status(engine.run(spec).run_id, all_steps=True)
    each, inner = result.step("each"), result.step("each[0].e")
    assert each.attempts == () and each.args is None
    assert inner.args == {"v": 1} and len(inner.attempts) == 1


POOL_TOOLS = '''
import os, signal, sys

def register(engine):
    @engine.tool(name="at__crash")
    def crash(token, mark):
        if not os.path.exists(mark):
            open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # a DCC that dies under its tool
        return {"pid": os.getpid()}
'''


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_a_lost_pool_worker_is_an_attempt_with_its_pid_and_signal(tmp_path):
    tools = tmp_path / "at_tools.py"
    tools.write_text(POOL_TOOLS)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pool = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(tools)], "workers": 1,
            "env": {"PYTHONPATH": os.path.join(root, "python")}}
    spec = {"steps": [{"id": "call", "dcc": "maya", "tool": "at__crash",
                       "args": {"token": "t0p", "mark": str(tmp_path / "crashed")},
                       "retry": {"max_attempts": 2, "initial_delay_ms": 1}}]}
    with Engine(db=str(tmp_path / "flow.db"), config={"remotes": {"maya": pool}}) as engine:
        result = engine.run(spec)
        assert result.ok, result.error
        lost, ok = result.step("call").attempts
    assert lost.status is StepStatus.FAILED and lost.error["kind"] == "worker_lost"
    assert lost.exit == "signal: killed", lost.error["message"]
    assert lost.worker == "maya/%d" % lost.pid and lost.host == socket.gethostname()
    assert ok.status is StepStatus.COMPLETED and ok.pid == result.outputs["call"]["pid"] != lost.pid
    assert lost.args["token"] == "[redacted]" and lost.tool == "maya/at__crash"  # a tool_remote step: DCC/TOOL
