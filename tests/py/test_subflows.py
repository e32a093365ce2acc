"""Sub-workflows (docs/reference/spec.md "workflow", docs/reference/python/running.md "Sub-workflows"): a ``kind: workflow``
step runs a catalog workflow as a child run; a ``@workflow`` called inside another compiles to
one; show, status and resume see the child."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dcc_flow
from dcc_flow import Engine, ValidationError, task, workflow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = """
name: child
inputs:
  shot: {type: string, required: true}
steps:
  - {id: a, tool: flow__echo, args: {v: "a-{{inputs.shot}}"}}
  - {id: b, tool: flow__echo, args: {v: "{{steps.a.output.v}}-b"}}
"""

PARENT = """
name: parent
steps:
  - {id: sub, kind: workflow, workflow: child, inputs: {shot: sh010}}
  - {id: after, tool: flow__echo, args: {got: "{{steps.sub.output.b.v}}"}}
"""


def test_a_workflow_step_outputs_the_child_outputs_and_links_the_child():
    with Engine() as engine:
        engine.register_workflow(CHILD)
        result = engine.run(PARENT)
        assert result.ok, result.error
        assert result.outputs["sub"] == {"a": {"v": "a-sh010"}, "b": {"v": "a-sh010-b"}}
        assert result.outputs["after"] == {"got": "a-sh010-b"}
        assert [(c["step_key"], c["name"], c["status"]) for c in result.children] == [("sub", "child", "completed")]
        child_id = result.children[0]["run_id"]
        assert result.step("sub").kind == "workflow" and result.step("sub").child_run_id == child_id
        child = engine.get_status(child_id)
        assert (child.parent_run_id, child.parent_step_key) == (result.run_id, "sub")
        assert child.outputs == result.outputs["sub"]
    spec = dcc_flow.WorkflowSpec.from_yaml_str(PARENT)
    step = spec.step("sub")
    assert (step.kind, step.workflow, dict(step.inputs)) == ("workflow", "child", {"shot": "sh010"})
    text = spec.to_yaml()
    assert text.index("workflow: \"child\"") < text.index("inputs:\n      shot:")
    assert dcc_flow.WorkflowSpec.from_yaml_str(text) == spec


def test_a_failed_child_fails_the_step_with_its_kind_and_names_the_child():
    def export(scene):
        raise dcc_flow.ToolError("licence server says no", kind="permission")

    with Engine() as engine:
        engine.register_tool(export, name="export")
        engine.register_workflow("name: broken\nsteps:\n  - {id: e, tool: export, args: {scene: x}}\n")
        result = engine.run("name: p\nsteps:\n  - {id: sub, kind: workflow, workflow: broken}\n")
        assert result.status.value == "failed"
        assert result.error["kind"] == "permission" and result.error["step_key"] == "sub"
        child_id = result.children[0]["run_id"]
        assert child_id in result.error["message"] and "licence server says no" in result.error["message"]


def test_cancelling_the_parent_cancels_the_child():
    started = threading.Event()
    release = threading.Event()

    def slow():
        started.set()
        release.wait(20)
        return {}

    with Engine() as engine:
        engine.register_tool(slow, name="slow", thread="worker")
        engine.serve_tools(1)
        engine.register_workflow("name: slow_child\nsteps:\n  - {id: s, tool: slow}\n")
        run = engine.submit("name: p\nsteps:\n  - {id: sub, kind: workflow, workflow: slow_child}\n")
        assert started.wait(20)
        run.cancel("operator stop")
        result = run.wait(timeout=20)
        release.set()
        assert result.status.value == "cancelled"
        child = engine.get_status(result.children[0]["run_id"])
        deadline = time.monotonic() + 20
        while not child.terminal and time.monotonic() < deadline:
            time.sleep(0.01)
            child = engine.get_status(child.run_id)
        assert child.status.value == "cancelled"
        assert "parent run %s" % result.run_id in child.error["message"]
        assert "operator stop" in child.error["message"]


def test_recursion_is_refused_when_registered_and_depth_is_bounded_at_run_time():
    with Engine() as engine:
        engine.register_workflow("name: a\nsteps:\n  - {id: call_b, kind: workflow, workflow: b}\n")
        with pytest.raises(ValidationError) as info:
            engine.register_workflow("name: b\nsteps:\n  - {id: call_a, kind: workflow, workflow: a}\n")
        assert info.value.problems[0].code == "cycle"
        assert "b → a → b" in str(info.value)
    with Engine(config={"max_depth": 1}) as engine:
        engine.register_workflow("name: leaf\nsteps:\n  - {id: x, tool: flow__echo}\n")
        engine.register_workflow("name: mid\nsteps:\n  - {id: down, kind: workflow, workflow: leaf}\n")
        result = engine.run("name: top\nsteps:\n  - {id: down, kind: workflow, workflow: mid}\n")
        assert result.status.value == "failed" and result.error["kind"] == "limit_exceeded"
        assert "max_depth" in result.error["message"]


# --- code-first ------------------------------------------------------------------------------------


@task(name="subflow_render")
def render(shot: str) -> dict:
    return {"frames": "/render/%s" % shot}


@workflow
def render_shot(shot: str):
    render(shot)


@workflow
def nightly(ctx, shot: str):
    out = render_shot(shot=shot)
    render(shot=ctx.template("{}-again", out.render.frames), step_id="again")


@workflow(inline=True)
def render_inline(shot: str):
    render(shot)


@workflow
def nightly_inlined(shot: str):
    render_inline(shot)
    render_shot.inline(shot=shot, step_id="copy")


def test_a_nested_workflow_compiles_to_a_workflow_step_and_runs_as_a_child():
    step = nightly.spec.step("render_shot")
    assert step.kind == "workflow" and step.workflow == "render_shot" and dict(step.inputs) == {"shot": "{{inputs.shot}}"}
    assert nightly.subflows == (render_shot,)
    with Engine() as engine:
        result = engine.run(nightly, {"shot": "sh010"})  # registers render_shot and its task first
        assert result.ok, result.error
        assert result.outputs["render_shot"] == {"render": {"frames": "/render/sh010"}}
        assert result.outputs["again"] == {"frames": "/render//render/sh010-again"}
        assert [w["name"] for w in engine.workflows()] == ["render_shot"]


def test_inlining_stays_available():
    ids = [s.id for s in nightly_inlined.spec.steps]
    assert ids == ["render_inline__render", "copy__render"]
    assert nightly_inlined.subflows == ()
    assert all(s.kind == "tool" for s in nightly_inlined.spec.steps)


def test_mutual_recursion_of_code_first_workflows_is_refused_at_registration():
    @workflow(lazy=True)
    def ping(n: int):
        pong(n=n)

    @workflow(lazy=True)
    def pong(n: int):
        ping(n=n)

    with Engine() as engine, pytest.raises(ValidationError, match="cycle|leads back"):
        engine.register_workflow(ping)


# --- resume after the process is killed mid-child ---------------------------------------------------

_KILLED = textwrap.dedent("""
    import os, sys, time
    import dcc_flow

    db, counts = sys.argv[1], sys.argv[2]

    def work(k):
        with open(counts, "a") as f:
            f.write(k + "\\n")
        if k == "y" and not os.path.exists(counts + ".go"):
            print("blocked", file=sys.__stdout__, flush=True)  # print() alone: the step's line
            time.sleep(600)
        return {"k": k}

    with dcc_flow.Engine(db=db) as engine:
        engine.register_tool(work, name="work")
        engine.register_workflow("name: leaf\\nsteps:\\n  - {id: x, tool: work, args: {k: x}}\\n"
                                 "  - {id: y, tool: work, args: {k: y}}\\n")
        engine.register_workflow("name: mid\\nsteps:\\n  - {id: m1, tool: work, args: {k: m1}}\\n"
                                 "  - {id: inner, kind: workflow, workflow: leaf}\\n  - {id: m2, tool: work, args: {k: m2}}\\n")
        engine.run("name: top\\nsteps:\\n  - {id: t1, tool: work, args: {k: t1}}\\n"
                   "  - {id: sub, kind: workflow, workflow: mid}\\n  - {id: t2, tool: work, args: {k: t2}}\\n")
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_mid_child_then_resume_runs_no_completed_child_step_again(tmp_path):
    db, counts = str(tmp_path / "flow.db"), str(tmp_path / "counts.txt")
    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, str(script), db, counts], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "blocked"  # y is in flight, two levels down
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    with open(counts + ".go", "w"):
        pass

    def work(k):
        with open(counts, "a") as f:
            f.write(k + "\n")
        return {"k": k}

    with Engine(db=db) as engine:
        engine.register_tool(work, name="work")
        top = engine.runs(name="top")[0]
        assert top.status.value == "interrupted"
        mid_id = engine.get_status(top.run_id).children[0]["run_id"]
        result = engine.resume(top.run_id).wait(timeout=60)
        assert result.ok, result.error
        assert [c["run_id"] for c in result.children] == [mid_id]  # resumed under its id, not restarted
        assert result.outputs["sub"]["inner"] == {"x": {"k": "x"}, "y": {"k": "y"}}
    with open(counts) as f:
        calls = f.read().split()
    # Every step that completed before the kill ran once; y, in flight when killed, ran again.
    assert sorted(calls) == sorted(["t1", "m1", "x", "y", "y", "m2", "t2"]), calls


# --- dcc-flow show --------------------------------------------------------------------------------


def test_cli_show_nests_the_child_steps_under_the_workflow_step(tmp_path):
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, timeout=60)

    ran = cli("run", "parent.yaml", "--workflows", "flows")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_id = json.loads(ran.stdout.splitlines()[-1])["run_id"]
    shown = cli("show", run_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("sub "))
    assert lines[at].startswith("  sub") and "completed" in lines[at]
    assert lines[at + 1].startswith("      child run r") and "(child): completed, 2/2 steps" in lines[at + 1]
    assert lines[at + 2].startswith("      a ") and lines[at + 3].startswith("      b ")
    assert lines[at + 4].startswith("  after")
    status = cli("status", run_id)
    assert status.returncode == 0, status.stderr
    child_id = lines[at + 1].split()[2]
    assert "child run %s (child) of step sub: completed" % child_id in status.stdout
    assert "child of run %s, step sub" % run_id in cli("status", child_id).stdout
    graph = cli("graph", "parent.yaml")
    assert graph.returncode == 0, graph.stderr
    assert 'sub(["sub<br/>workflow child"])' in graph.stdout


def test_a_dry_run_answers_a_workflow_step_from_the_fixtures_and_starts_no_child():
    with Engine() as engine:
        engine.register_workflow(CHILD)
        dry = engine.run(PARENT, dry_run=True, fixtures={"sub": {"b": {"v": "from fixture"}}})
        assert dry.ok, dry.error
        sub = dry.step("sub")
        assert (sub.order, sub.kind, sub.workflow, sub.args, sub.output_from, sub.fixture) == \
            (1, "workflow", "child", {"shot": "sh010"}, "step_id", "sub")
        assert dry.outputs["after"] == {"got": "from fixture"}
        assert [s.key for s in dry.calls] == ["after"]  # a workflow step calls no tool
        text = str(dry)
        assert 'sub    workflow child  inputs {"shot": "sh010"}  → fixture "sub"' in text, text
        assert text.endswith("dry run completed: 1 tool call, 1 sub-workflow"), text
        assert engine.runs() == []  # no child run, no run at all
        # No fixture: null, and a workflow that is not registered is a warning.
        dry = engine.run(PARENT.replace("workflow: child", "workflow: chilld"), dry_run=True)
        assert dry.step("sub").output is None and dry.step("sub").output_from == "none"
        assert any('"chilld", which is not registered' in w and 'did you mean "child"' in w for w in dry.warnings), \
            dry.warnings


def test_a_dry_run_of_a_code_first_workflow_registers_no_sub_workflow_and_does_not_warn():
    with Engine() as engine:
        dry = engine.run(nightly, {"shot": "sh010"}, dry_run=True,
                         fixtures={"render_shot": {"render": {"frames": "/f"}}})
        assert dry.ok, dry.error
        assert dry.step("render_shot").output_from == "step_id" and dry.outputs["again"] is None  # id = name
        assert dry.warnings == []
        assert engine.workflows() == []  # a dry run registers nothing in the catalog


def test_a_workflow_with_defaults_or_on_failure_cannot_be_inlined():
    @workflow(defaults={"timeout_secs": 60})
    def guarded(shot: str):
        render(shot)

    with pytest.raises(dcc_flow.WorkflowTraceError) as exc:
        @workflow
        def uses_it(shot: str):
            guarded.inline(shot=shot)
    assert "defaults=" in str(exc.value) and "without inline" in str(exc.value)

    @workflow
    def calls_it(shot: str):
        guarded(shot=shot)  # as a sub-workflow its defaults stay with its own runs
    assert calls_it.spec.step("guarded").kind == "workflow"
