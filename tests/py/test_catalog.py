"""The workflow catalog lasts: kept in the database with its versions, listed by
Engine.workflows()/workflow_versions() and `dcc-flow workflows`; commands that only check
(`dcc-flow schedules`) do not write it."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V1 = "name: cleanup\ndescription: Clean scenes.\nsteps: [{id: a, tool: flow__echo, args: {v: 1}}]\n"
V2 = "name: cleanup\ndescription: Clean scenes, v2.\nsteps: [{id: a, tool: flow__echo, args: {v: 2}}]\n"


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_catalog_outlives_the_engine(tmp_path):
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as engine:
        engine.register_workflow(V1)
        engine.register_workflow(V2)
        assert engine.run("cleanup").workflow_version == 2
    with dcc_flow.Engine(db=db) as engine:
        [entry] = engine.workflows()
        assert (entry["name"], entry["version"], entry["description"]) == ("cleanup", 2, "Clean scenes, v2.")
        assert engine.run("cleanup").outputs == {"a": {"v": 2}}
        engine.register_workflow(V1)  # the first spec again: version 1, current again
        versions = engine.workflow_versions("cleanup")
        assert [(v["version"], v["current"]) for v in versions] == [(2, False), (1, True)]
        assert [r.workflow_version for r in engine.runs()] == [2, 2]
        # A spec never registered has no version, even under a registered name.
        assert engine.run("name: cleanup\nsteps: [{id: a, tool: flow__echo, args: {v: 9}}]").workflow_version == 0
        assert engine.workflows("scenes v2") == []
        assert [w["name"] for w in engine.workflows("clean")] == ["cleanup"]
        # A read-only viewer beside the owner reads the catalog.
        with dcc_flow.Engine(db=db, read_only=True) as viewer:
            assert [w["version"] for w in viewer.workflows()] == [1]


def test_an_in_memory_engine_numbers_versions_too():
    with dcc_flow.Engine() as engine:
        engine.register_workflow(V1)
        engine.register_workflow(V2)
        assert [v["version"] for v in engine.workflow_versions()] == [2, 1]
        assert engine.run("cleanup").workflow_version == 2


def test_cli_workflows_lists_the_catalog_and_versions(tmp_path):
    with dcc_flow.Engine(db=str(tmp_path / "flow.db")) as engine:
        engine.register_workflow(V1)
        engine.register_workflow(V2)
    proc = cli("workflows", "--db", "flow.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    assert header.split() == ["WORKFLOW", "VERSION", "VERSIONS", "STEPS", "REGISTERED", "DESCRIPTION"]
    assert row.split()[:4] == ["cleanup", "2", "2", "1"] and row.endswith("Clean scenes, v2.")
    proc = cli("workflows", "--versions", "cleanup", "--json", "--db", "flow.db", cwd=tmp_path)
    assert [(v["version"], v["current"]) for v in json.loads(proc.stdout)] == [(2, True), (1, False)]
    proc = cli("workflows", "--versions", "clenup", "--db", "flow.db", cwd=tmp_path)
    assert proc.returncode == 1 and "did you mean 'cleanup'?" in proc.stderr
    proc = cli("workflows", "nothing", "--db", "flow.db", cwd=tmp_path)
    assert proc.stdout.splitlines()[-1] == "(no workflows matching 'nothing')"


@pytest.mark.parametrize("with_workflows", [False, True])
def test_checking_schedules_does_not_write_the_catalog(tmp_path, with_workflows):
    # `schedules` registers the folder's specs, or placeholders, only to check names: a real
    # catalog entry of the same name must not be replaced, and nothing new is kept.
    with dcc_flow.Engine(db=str(tmp_path / "flow.db")) as engine:
        engine.register_workflow(V1)
    sched = tmp_path / "sched"
    sched.mkdir()
    (sched / "a.schedules.yaml").write_text(textwrap.dedent("""\
        schedules:
          - { id: nightly, workflow: cleanup, trigger: { kind: cron, expression: "0 0 3 * * *" } }
          - { id: other, workflow: other_flow, trigger: { kind: interval, every: 1h } }
        """))
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "other.yaml").write_text("name: other_flow\nsteps: [{id: a, tool: flow__echo}]\n")
    (specs / "cleanup.yaml").write_text(V2)
    args = ["schedules", str(sched), "--db", "flow.db"] + (["--workflows", str(specs)] if with_workflows else [])
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with dcc_flow.Engine(db=str(tmp_path / "flow.db")) as engine:
        assert [(w["name"], w["version"]) for w in engine.workflows()] == [("cleanup", 1)]
        assert engine.run("cleanup").outputs == {"a": {"v": 1}}
