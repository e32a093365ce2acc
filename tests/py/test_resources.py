"""Scarce resources from Python (docs/guide/resources.md): an engine's declared resources, the
check of a spec's `resources` when a run starts, and Engine.resources()."""

import threading
import time

import pytest

from dcc_flow import Engine, ValidationError, task, workflow
from dcc_flow._cli import main

SPEC = """
name: licensed
steps:
  - id: cook
    tool: cook
    args: {}
    resources: {houdini: 1}
"""


def test_a_run_asking_for_an_undeclared_resource_is_refused():
    with Engine(config={"resources": {"houdini": {"limit": 2}}}) as engine:
        engine.register_tool(lambda: {"ok": True}, name="cook")
        with pytest.raises(ValidationError) as err:
            engine.run(SPEC.replace("houdini: 1", "houdinni: 1"))
        assert 'did you mean "houdini"?' in str(err.value)
        with pytest.raises(ValidationError) as err:
            engine.run(SPEC.replace("houdini: 1", "houdini: 3"))
        assert "ask for at most 2" in str(err.value)


def test_a_zero_limit_is_refused():
    with pytest.raises(Exception) as err:
        Engine(config={"resources": {"gpu": {"limit": 0}}})
    assert "resources.gpu.limit: must be 1 to 1,000,000" in str(err.value)


def test_resources_lists_the_holder_while_the_tool_runs():
    started, release = threading.Event(), threading.Event()

    def cook():
        started.set()
        assert release.wait(30)
        return {"ok": True}

    with Engine(config={"resources": {"houdini": {"limit": 2}}}) as engine:
        engine.register_tool(cook)
        run = engine.submit(SPEC)
        results = []
        driver = threading.Thread(target=lambda: results.append(run.wait(timeout=30)))  # runs cook
        driver.start()
        assert started.wait(30)
        (houdini,) = engine.resources()
        assert houdini["name"] == "houdini" and houdini["limit"] == 2 and houdini["in_use"] == 1
        assert [(h["run_id"], h["step_key"], h["amount"]) for h in houdini["holders"]] == [(run.run_id, "cook", 1)]
        assert houdini["queue"] == []
        release.set()
        driver.join(30)
        assert results and results[0].ok
        (houdini,) = engine.resources()
        assert houdini["in_use"] == 0 and houdini["holders"] == []


def test_an_engine_without_resources_lists_none():
    with Engine() as engine:
        assert engine.resources() == []


@pytest.mark.parametrize("argv, message", [
    (["resources", "--resource", "houdini"], "write NAME=LIMIT"),
    (["resources", "--resource", "houdini=0"], "write NAME=LIMIT"),
    (["resources", "--resource", "houdini=4", "--resource", "houdini=2"], "--resource houdini is given twice"),
])
def test_cli_resource_option_usage_errors(argv, message, capsys, tmp_path):
    assert main(argv + ["--db", str(tmp_path / "flow.db")]) == 2
    assert message in capsys.readouterr().err


def test_cli_resources_lists_the_declared_ones(capsys, tmp_path):
    assert main(["resources", "--resource", "gpu=2", "--resource", "houdini=4", "--db", str(tmp_path / "flow.db")]) == 0
    assert capsys.readouterr().out.splitlines() == ["gpu: 0 of 2 in use, 0 waiting", "houdini: 0 of 4 in use, 0 waiting"]


@task(resources={"houdini": 1, "gpu": 2})
def cook(shot: str) -> dict:
    return {"shot": shot}


@workflow
def licensed_flow(shot: str = "sh010"):
    cook(shot)


def test_a_task_s_resources_compile_to_the_step_s_field_and_are_held_when_it_runs():
    assert licensed_flow.spec.to_dict()["steps"][0]["resources"] == {"houdini": 1, "gpu": 2}
    with Engine(config={"resources": {"houdini": {"limit": 1}, "gpu": {"limit": 2}}}) as engine:
        result = licensed_flow.run(engine, shot="sh020")
        assert result.ok, result.error
        assert result.outputs["cook"] == {"shot": "sh020"}
        assert [r["in_use"] for r in engine.resources()] == [0, 0]
    with Engine() as engine:  # declares none: refused before any step runs
        with pytest.raises(ValidationError) as err:
            licensed_flow.run(engine)
        assert "which the engine does not declare" in str(err.value)


@pytest.mark.parametrize("resources, message", [
    ({"houdini": 0}, "must be a whole number of units from 1 to 1,000,000; got 0"),
    ({"houdini": True}, "got True"),
    ({"hou dini": 1}, "is not a resource name"),
    ({"gpu": 1.5}, "got 1.5"),
])
def test_a_task_s_bad_resources_are_refused(resources, message):
    with pytest.raises(ValueError) as err:
        task(resources=resources)(lambda: None)
    assert message in str(err.value)


def test_a_run_s_own_priority_is_its_place_in_the_queue():
    started, release = threading.Event(), threading.Event()

    def cook():
        started.set()
        assert release.wait(30)
        return {"ok": True}

    with Engine(config={"resources": {"houdini": {"limit": 1}}}) as engine:
        engine.register_tool(cook)
        first = engine.submit(SPEC)
        results = []
        driver = threading.Thread(target=lambda: results.append(first.wait(timeout=30)))
        driver.start()
        assert started.wait(30)
        second = engine.submit(SPEC, priority=7)
        deadline = time.monotonic() + 30
        while not engine.resources()[0]["queue"]:
            assert time.monotonic() < deadline, "the second run's step never queued"
            time.sleep(0.005)
        (waiter,) = engine.resources()[0]["queue"]
        assert waiter["label"] == second.run_id + "/cook" and waiter["priority"] == 7 and waiter["position"] == 1
        release.set()
        driver.join(30)
        assert results and results[0].ok
        assert second.wait(timeout=30).ok
        with pytest.raises(TypeError):
            engine.submit(SPEC, priority="high")
        with pytest.raises(Exception) as err:
            engine.submit(SPEC, priority=5000)
        assert "priority must be -1000 to 1000" in str(err.value)


def test_cli_run_priority(capsys, tmp_path):
    spec = tmp_path / "licensed.yaml"
    spec.write_text("name: licensed\nsteps: [{id: cook, tool: flow__echo, resources: {houdini: 1}}]\n", encoding="utf-8")
    db = str(tmp_path / "flow.db")
    assert main(["run", str(spec), "--resource", "houdini=1", "--priority", "5", "--db", db]) == 0
    assert main(["run", str(spec), "--resource", "houdini=1", "--priority", "5000", "--db", db]) == 2
    assert "give a whole number from -1000 to 1000" in capsys.readouterr().err


def test_the_spec_objects_show_resources_and_priority():
    from dcc_flow import WorkflowSpec

    spec = WorkflowSpec.from_yaml_str("name: p\npriority: 12\nsteps: [{id: a, tool: t, resources: {gpu: 2}}, {id: b, tool: t}]")
    assert spec.priority == 12
    assert dict(spec.steps[0].resources) == {"gpu": 2} and dict(spec.steps[1].resources) == {}
    assert WorkflowSpec.from_yaml_str("steps: [{id: a, tool: t}]").priority == 0
    assert WorkflowSpec.from_yaml_str("steps: [{id: a, tool: t}]").fair_share is None
    shared = WorkflowSpec.from_yaml_str("fair_share: '{{inputs.show}}'\ninputs: {show: string}\nsteps: [{id: a, tool: t}]")
    assert shared.fair_share == "{{inputs.show}}"


def test_a_tool_registered_with_resources_holds_them_for_steps_without_their_own():
    """register_tool(resources=...): every call of the tool holds them, unless its step says its
    own; the worker lane's calls of a limit-1 resource run one at a time."""
    cond = threading.Condition()
    running, most = [0], [0]

    def cook(shot):
        # Each call waits (up to 0.3 s) for a second one to run beside it: calls that may
        # overlap do, however the threads are scheduled.
        with cond:
            running[0] += 1
            most[0] = max(most[0], running[0])
            cond.notify_all()
            cond.wait_for(lambda: running[0] >= 2, timeout=0.3)
            running[0] -= 1
        return {"shot": shot}

    spec = {"name": "shots", "steps": [{"id": "each", "kind": "foreach", "items": ["a", "b", "c", "d"], "concurrency": 4,
                                        "steps": [{"id": "cook", "tool": "cook", "args": {"shot": "{{item}}"}}]}]}
    with Engine(config={"resources": {"houdini": {"limit": 1}, "gpu": {"limit": 4}}}) as engine:
        engine.register_tool(cook, thread="worker")
        engine.serve_tools(4)
        assert engine.run(spec, timeout=60).ok
        assert most[0] > 1, "the calls do not overlap even without resources: the test proves nothing"
        most[0] = 0
        engine.register_tool(cook, thread="worker", resources={"houdini": 1})
        assert engine.run(spec, timeout=60).ok
        assert most[0] == 1, "the tool's houdini ×1 let %d calls run at once" % most[0]
        # A step's own resources replace the tool's: gpu ×1 of 4, so the calls overlap.
        most[0] = 0
        spec["steps"][0]["steps"][0]["resources"] = {"gpu": 1}
        assert engine.run(spec, timeout=60).ok
        assert most[0] > 1, "the step's own resources did not replace the tool's"


@pytest.mark.parametrize("resources,error,message", [
    ({"houdinni": 1}, "InvalidRequestError", 'asks for "houdinni", which the engine does not declare: did you mean "houdini"?'),
    ({"houdini": 3}, "InvalidRequestError", '`resources.houdini` must be 1 to the engine\'s limit of "houdini", 2; got 3'),
    ({"houdini": 0}, "ValueError", "must be a whole number of units from 1 to 1,000,000; got 0"),
    (["houdini"], "TypeError", "resources must be a mapping of resource name to units"),
])
def test_a_tool_s_bad_resources_are_refused_when_it_is_registered(resources, error, message):
    def cook():
        return {}

    with Engine(config={"resources": {"houdini": {"limit": 2}}}) as engine:
        with pytest.raises(Exception) as err:
            engine.register_tool(cook, resources=resources)
        assert type(err.value).__name__ == error and message in str(err.value), str(err.value)
        assert "cook" in str(err.value)
        assert "cook" not in engine.tools


def test_cli_run_names_the_resource_options_a_refused_spec_needs(capsys, tmp_path):
    # The engine's message speaks of "the engine settings"; on the command line they are --resource.
    spec = tmp_path / "shot_sim.yaml"
    spec.write_text("name: shot_sim\nsteps: [{id: cook, tool: flow__echo, resources: {houdini: 1, gpu: 2}}]\n",
                    encoding="utf-8")
    db = str(tmp_path / "flow.db")
    assert main(["run", str(spec), "--db", db]) == 1
    err = capsys.readouterr().err
    assert 'asks for "gpu", which the engine does not declare' in err
    assert err.endswith("(this command declares them with --resource gpu=LIMIT --resource houdini=LIMIT"
                        " or --resources FILE: docs/guide/resources.md)\n"), err
    assert main(["run", str(spec), "--resource", "gpu=1", "--resource", "houdini=1", "--db", db]) == 1
    err = capsys.readouterr().err
    assert "asks for 2 but the engine's limit of \"gpu\" is 1" in err
    assert err.endswith("(this command declares them with --resource gpu=LIMIT or --resources FILE:"
                        " docs/guide/resources.md)\n"), err
    assert main(["run", str(spec), "--resource", "gpu=2", "--resource", "houdini=1", "--db", db]) == 0
    # Other refusals do not name the resource options.
    spec.write_text("name: shot_sim\nsteps: [{id: cook, tool: studio__cook, resources: {gpu: 2}}]\n", encoding="utf-8")
    assert main(["run", str(spec), "--resource", "gpu=2", "--db", db]) == 1
    err = capsys.readouterr().err
    assert "uses unknown tools: studio__cook (add --tools MODULE)" in err and "this command declares" not in err


def test_cli_resume_declares_resources_as_run_does(capsys, tmp_path):
    spec = tmp_path / "licensed.yaml"
    spec.write_text("name: licensed\nsteps: [{id: cook, tool: flow__fail, resources: {houdini: 1}, "
                    "args: {kind: fatal, message: corrupt scene}}]\n", encoding="utf-8")
    db = str(tmp_path / "flow.db")
    assert main(["run", str(spec), "--resource", "houdini=1", "--db", db]) == 1
    capsys.readouterr()
    assert main(["resume", "last", "--db", db]) == 1
    err = capsys.readouterr().err
    assert err.endswith("(this command declares them with --resource houdini=LIMIT or --resources FILE:"
                        " docs/guide/resources.md)\n"), err
    assert main(["resume", "last", "--resource", "houdini=1", "--db", db]) == 1  # flow__fail fails again
    err = capsys.readouterr().err
    assert "corrupt scene" in err and "this command declares" not in err
