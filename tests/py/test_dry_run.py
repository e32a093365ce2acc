"""Dry runs: ``Engine.run(spec, dry_run=True, fixtures=...)`` and ``dcc-flow run --dry-run``.

A dry run checks the spec and inputs, walks the run on the real executor calling no tool (outputs
from fixtures, else None), approves automatically unless told to deny, and records nothing.
"""

import json
import os

import pytest

import dcc_flow
from conftest import FULL_VENDOR_INTAKE
from dcc_flow.__main__ import main

FIXTURES = {
    "list": {"files": [{"path": "/drop/hero.ma"}, {"path": "/drop/chair.ma"}, {"path": "/drop/lamp.ma"}]},
    "maya__export_fbx": {"fbx": "/out/by_tool.fbx"},
    "per_file[2].export": {"fbx": "/out/by_key.fbx"},
    "unreal/import_assets": {"imported": 3},
}

BRANCHY = """\
name: branchy
inputs:
  shot: {type: string, required: true}
steps:
  - {id: probe, tool: studio__probe, args: {shot: "{{inputs.shot}}"}}
  - id: check
    kind: branch
    on: "$.probe.heavy"
    then:
      - {id: farm, tool: studio__farm_submit, args: {shot: "{{inputs.shot}}", frames: "{{probe.frames}}"}}
    else:
      - {id: local, tool: flow__echo, args: {shot: "{{inputs.shot}}"}}
  - {id: report, tool: studio__report, args: {path: "{{check.taken}}"}}
"""


@pytest.fixture()
def engine():
    with dcc_flow.Engine() as e:
        yield e


def test_dry_run_result_shape_order_args_and_fixture_precedence(engine):
    result = engine.run(FULL_VENDOR_INTAKE, {"date": "2026-11-24"}, dry_run=True, fixtures=FIXTURES)
    assert isinstance(result, dcc_flow.DryRunResult) and result.dry_run and result.ok
    assert result.status is dcc_flow.WorkflowStatus.COMPLETED and result.error is None
    assert result.name == "vendor_intake" and len(result.spec_hash) == 64
    assert result.inputs == {"date": "2026-11-24", "scope": "all"}  # the default applied
    assert [(s.order, s.key, s.depth) for s in result.steps] == [
        (1, "list", 0), (0, "per_file", 0), (2, "per_file[0].export", 1), (3, "per_file[1].export", 1),
        (4, "per_file[2].export", 1), (5, "human_gate", 0), (6, "push", 0)]
    assert [s.key for s in result.calls] == ["list", "per_file[0].export", "per_file[1].export", "per_file[2].export",
                                             "push"]
    lst, loop, e0, e1, e2, gate, push = result.steps
    assert lst.args == {"date": "2026-11-24"} and (lst.output_from, lst.fixture) == ("step_id", "list")
    assert e0.args == {"scene": "/drop/hero.ma"} and e1.args == {"scene": "/drop/chair.ma"}
    assert (e0.output_from, e0.fixture, e0.output) == ("tool", "maya__export_fbx", {"fbx": "/out/by_tool.fbx"})
    assert (e2.output_from, e2.fixture, e2.output) == ("key", "per_file[2].export", {"fbx": "/out/by_key.fbx"})
    assert loop.kind == "foreach" and loop.items == 3 and loop.order == 0
    assert gate.prompt == "Push the 2026-11-24 vendor drop to Unreal?" and gate.approved is True
    assert push.kind == "tool_remote" and push.dcc == "unreal" and push.unknown_tool
    assert push.args == {"files": [{"export": {"fbx": "/out/by_tool.fbx"}}, {"export": {"fbx": "/out/by_tool.fbx"}},
                                   {"export": {"fbx": "/out/by_key.fbx"}}]}
    assert (push.output_from, push.fixture) == ("tool", "unreal/import_assets")
    assert result.outputs["push"] == {"imported": 3}
    assert result.unknown_tools == ["maya__export_fbx", "unreal/import_assets", "vendor_intake__list_sftp"]
    assert result.warnings == []
    assert result.step("per_file[1].export") is e1
    with pytest.raises(KeyError):
        result.step("nope")
    text = str(result)
    assert text.splitlines()[0] == "dry run of vendor_intake: no tool is called, nothing is recorded"
    assert '4.   per_file[2].export  tool maya__export_fbx (not registered)  args {"scene": "/drop/lamp.ma"}' \
           '  → fixture "per_file[2].export"' in text
    assert text.splitlines()[-1] == "dry run completed: 5 tool calls, 1 approval"


def test_dry_run_calls_no_tool_and_records_nothing(tmp_path):
    called = []
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db) as engine:
        @engine.tool(name="studio__probe")
        def probe(shot):
            called.append(shot)
            return {"heavy": False}

        result = engine.run(BRANCHY, {"shot": "sh010"}, dry_run=True,
                            fixtures={"probe": {"heavy": True, "frames": [1, 240]}})
        assert called == []  # the registered tool was not called: its fixture answered
        assert result.step("probe").unknown_tool is False
        assert result.unknown_tools == ["studio__farm_submit", "studio__report"]
        assert [(s.key, s.status.value) for s in result.steps] == [
            ("probe", "completed"), ("check", "completed"), ("farm", "completed"), ("local", "skipped"),
            ("report", "completed")]
        assert result.step("check").taken == "then"
        assert result.step("farm").args == {"shot": "sh010", "frames": [1, 240]}
        assert result.step("report").args == {"path": "then"}
        assert result.step("local").error["message"] == 'branch check took "then"'
        assert engine.runs() == [] and engine.last_event_seq() == 0
        # The else arm when the fixture says so; flow__echo there outputs its args.
        other = engine.run(BRANCHY, {"shot": "sh020"}, dry_run=True, fixtures={"studio__probe": {"heavy": False}})
        assert [s.key for s in other.steps if s.status.value == "completed"] == ["probe", "check", "local", "report"]
        assert other.step("local").output == {"shot": "sh020"} and other.step("local").output_from == "echo"
        assert other.step("report").output is None and other.step("report").output_from == "none"
        assert engine.runs() == []
    with dcc_flow.Engine(db) as again:
        assert again.runs() == []


def test_dry_run_denied_approval_and_warnings(engine):
    result = engine.run(FULL_VENDOR_INTAKE, {"date": "2026-11-24"}, dry_run=True,
                        fixtures={"list": {"files": []}, "lsit": 1}, approvals={"human_gate": False})
    assert not result.ok and result.status is dcc_flow.WorkflowStatus.FAILED
    assert result.error["kind"] == "denied" and result.error["step_key"] == "human_gate"
    assert [(s.key, s.status.value) for s in result.steps] == [
        ("list", "completed"), ("per_file", "completed"), ("human_gate", "failed"), ("push", "skipped")]
    assert result.step("per_file").items == 0 and result.step("human_gate").approved is False
    assert result.warnings == ['fixture "lsit" names no tool step or tool of the spec, so it is not used; '
                               'did you mean "list"?']
    with pytest.raises(dcc_flow.RunFailedError) as info:
        result.raise_for_status()
    assert info.value.code == "denied"
    assert "warning: " + result.warnings[0] in str(result)


def test_dry_run_refuses_what_a_run_refuses(engine):
    with pytest.raises(dcc_flow.InvalidInputError):
        engine.run(FULL_VENDOR_INTAKE, dry_run=True)  # date is required
    with pytest.raises(dcc_flow.ValidationError):
        engine.run("steps: [{id: a, tol: x}]", dry_run=True)
    with pytest.raises(TypeError, match="dry_run=True"):
        engine.run(FULL_VENDOR_INTAKE, {"date": "2026-11-24"}, fixtures={})
    with pytest.raises(TypeError, match="approvals"):
        engine.dry_run(FULL_VENDOR_INTAKE, {"date": "2026-11-24"}, approvals={"human_gate": "no"})


def test_dry_run_of_a_codefirst_workflow_registers_its_tasks(engine):
    @dcc_flow.task(name="studio__double")
    def double(x):
        raise AssertionError("a dry run calls no tool")

    @dcc_flow.workflow
    def flow(x: int):
        double(x=x)

    result = engine.run(flow, {"x": 21}, dry_run=True, fixtures={"studio__double": 42})
    assert result.ok and result.unknown_tools == []
    assert result.calls[0].args == {"x": 21} and result.calls[0].output == 42


# --- the command line ----------------------------------------------------------------------------


def test_cli_dry_run_text_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flow.yaml").write_text(FULL_VENDOR_INTAKE, encoding="utf-8")
    (tmp_path / "f.json").write_text(json.dumps(FIXTURES), encoding="utf-8")
    code = main(["run", "flow.yaml", "--input", "date=2026-11-24", "--dry-run", "--fixtures", "f.json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "dry run of vendor_intake: no tool is called, nothing is recorded"
    assert lines[1] == ('1. list                  tool vendor_intake__list_sftp (not registered)  '
                        'args {"date": "2026-11-24"}  → fixture "list"')
    assert lines[2] == "   per_file              foreach over 3 items"
    assert lines[6] == ('5. human_gate            approve "Push the 2026-11-24 vendor drop to Unreal?"  '
                        '→ approved automatically')
    assert lines[7].startswith('6. push                  tool_remote unreal/import_assets (not registered)  args {"files": [')
    assert lines[-1] == "dry run completed: 5 tool calls, 1 approval"
    assert err.splitlines() == [
        "dcc-flow run: warning: tool %s is not registered here: a real run would be refused" % t
        for t in ("maya__export_fbx", "unreal/import_assets", "vendor_intake__list_sftp")]
    assert not os.path.exists(tmp_path / ".dcc-flow")  # nothing recorded, no database created

    code = main(["run", "flow.yaml", "--input", "date=2026-11-24", "--dry-run", "--fixtures", "f.json",
                 "--deny", "human_gate", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "failed" and doc["error"]["kind"] == "denied"
    assert [s["key"] for s in doc["steps"]] == ["list", "per_file", "per_file[0].export", "per_file[1].export",
                                                "per_file[2].export", "human_gate", "push"]
    assert doc["steps"][4]["args"] == {"scene": "/drop/lamp.ma"} and doc["steps"][4]["output_from"] == "key"


def test_cli_dry_run_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flow.yaml").write_text(FULL_VENDOR_INTAKE, encoding="utf-8")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    code = main(["run", "flow.yaml", "--input", "date=2026-11-24", "--fixtures", "list.json"])
    _, err = capsys.readouterr()
    assert code == 2 and "--fixtures and --deny need --dry-run" in err
    code = main(["run", "flow.yaml", "--input", "date=2026-11-24", "--dry-run", "--fixtures", "list.json"])
    _, err = capsys.readouterr()
    assert code == 1 and "--fixtures list.json: want a JSON object" in err
    code = main(["run", "flow.yaml", "--input", "date=2026-11-24", "--dry-run", "--fixtures", "missing.json"])
    _, err = capsys.readouterr()
    assert code == 1 and "--fixtures missing.json: No such file or directory" in err
