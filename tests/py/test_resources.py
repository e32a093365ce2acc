"""Scarce resources from Python (docs/guide/resources.md): an engine's declared resources, the
check of a spec's `resources` when a run starts, and Engine.resources()."""

import threading

import pytest

from dcc_flow import Engine, ValidationError
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
