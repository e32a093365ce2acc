"""The everyday commands do what docs/reference/cli/README.md says (issue 32): ``run -`` reads the spec from
stdin, ``run --db :memory:`` never waits for an approval nothing can give nor prints a hint that
cannot work, ``run``/``resume`` take ``--lease-secs`` as ``serve`` does, and the DCC adapters and
the Blender tour say what to install when their DCC module is missing."""

import json
import os
import subprocess
import sys

import pytest

import dcc_flow
from conftest import PYTHON_DIR, ROOT
from dcc_flow._cli._base import Context
from test_cli import BAD_SPEC, assert_one_error_line, call, run_cli
from test_postgres import cluster, pg_url  # noqa: F401  (fixtures)

ECHO_SPEC = """\
name: echo_flow
inputs:
  who: { type: string, default: world }
steps:
  - id: hello
    tool: flow__echo
    args: { greeting: "hello {{inputs.who}}" }
"""

APPROVE_SPEC = """\
name: gated
steps:
  - id: prepare
    tool: flow__echo
    args: { x: 1 }
  - id: review
    kind: approve
    prompt: "Ship it?"
    depends_on: [prepare]
"""

PARENT_SPEC = """\
name: parent
steps:
  - id: child
    kind: workflow
    workflow: gated
"""


def _result(stdout):
    """The last JSON line of run's output (not a terminal): the result."""
    return json.loads(stdout.strip().splitlines()[-1])


# --- 1. `-` reads the spec from stdin, for every command that takes a spec file ------------------


def test_run_reads_a_yaml_spec_from_stdin():
    result = run_cli("run", "-", "--db", ":memory:", "--input", "who=stdin", stdin=ECHO_SPEC)
    assert result.returncode == 0, result.stderr
    res = _result(result.stdout)
    assert res["status"] == "completed"
    assert res["outputs"]["hello"] == {"greeting": "hello stdin"}


def test_run_reads_a_json_spec_from_stdin_and_dry_runs_it():
    text = dcc_flow.WorkflowSpec.from_yaml_str(ECHO_SPEC).to_json()
    result = run_cli("run", "-", "--db", ":memory:", stdin=text)
    assert result.returncode == 0, result.stderr
    assert _result(result.stdout)["outputs"]["hello"] == {"greeting": "hello world"}
    result = run_cli("run", "-", "--dry-run", stdin=text)
    assert result.returncode == 0, result.stderr
    assert "hello" in result.stdout and "flow__echo" in result.stdout


def test_run_of_a_bad_spec_on_stdin_names_stdin():
    result = run_cli("run", "-", "--db", ":memory:", stdin=BAD_SPEC)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("<stdin>:4:11: invalid_tool_name: "), result.stderr
    assert lines[-1] == "dcc-flow run: error: <stdin>: invalid spec (3 errors); nothing was run"


def test_every_command_that_takes_a_spec_file_reads_stdin():
    # validate, graph and run are the commands whose argument is a spec file (docs/reference/cli/README.md,
    # Conventions); each of them reads `-`.
    for args in (["validate", "-"], ["graph", "-"], ["run", "-", "--db", ":memory:"]):
        result = run_cli(*args, stdin=ECHO_SPEC)
        assert result.returncode == 0, (args, result.stderr)
        assert "no such file" not in result.stderr


# --- 2. an in-memory run never waits for an approval nothing can give -----------------------------


def test_run_in_memory_refuses_an_approve_step_before_it_starts(tmp_path):
    spec = tmp_path / "gated.yaml"
    spec.write_text(APPROVE_SPEC, encoding="utf-8")
    result = run_cli("run", str(spec), "--db", ":memory:", "--timeout", "20")
    assert result.returncode == 1
    assert result.stdout == ""  # no run started: no event
    assert_one_error_line(result.stderr, "dcc-flow run")
    assert "step review is an approve step" in result.stderr
    assert "--approve-all" in result.stderr and "--db FILE" in result.stderr
    assert "nothing was run" in result.stderr
    # The same from stdin, with $DCC_FLOW_DB naming the in-memory engine.
    result = run_cli("run", "-", "--timeout", "20", stdin=APPROVE_SPEC, env={"DCC_FLOW_DB": ":memory:"})
    assert result.returncode == 1 and "<stdin>: step review is an approve step" in result.stderr
    # --approve-all answers it: the run completes.
    result = run_cli("run", str(spec), "--db", ":memory:", "--approve-all", "--timeout", "20")
    assert result.returncode == 0, result.stderr
    assert _result(result.stdout)["outputs"]["review"]["approved"] is True


def test_run_in_memory_cancels_an_approval_it_could_not_see(tmp_path, capsys, monkeypatch):
    # The approval opens in a sub-workflow's run, which the spec of the run does not show: on a
    # terminal no `dcc-flow approve` hint is printed (it could not reach this engine), and the run
    # is cancelled at once with the advice, rather than waiting (here: until --timeout).
    (tmp_path / "gated.yaml").write_text(APPROVE_SPEC, encoding="utf-8")
    (tmp_path / "parent.yaml").write_text(PARENT_SPEC, encoding="utf-8")
    monkeypatch.setattr(Context, "out_is_tty", property(lambda self: True))
    code, out, err = call(capsys, "run", "parent", "--workflows", str(tmp_path), "--db", ":memory:",
                          "--timeout", "30")
    assert code == 3, (out, err)
    assert "dcc-flow approve" not in out
    assert "cancelled" in out
    assert_one_error_line(err, "dcc-flow run")
    assert "step review waits for approval" in err and "--approve-all" in err
    assert "timed out" not in err
    assert "dcc-flow show" not in err  # an in-memory run is gone when the command ends


def test_run_approve_all_answers_a_sub_workflow_approval(tmp_path):
    (tmp_path / "gated.yaml").write_text(APPROVE_SPEC, encoding="utf-8")
    (tmp_path / "parent.yaml").write_text(PARENT_SPEC, encoding="utf-8")
    result = run_cli("run", "parent", "--workflows", str(tmp_path), "--db", ":memory:", "--approve-all",
                     "--timeout", "30")
    assert result.returncode == 0, result.stderr
    assert _result(result.stdout)["outputs"]["child"]["review"]["approved"] is True


def test_run_on_a_database_file_still_waits_for_the_approval_and_says_how(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "gated.yaml"
    spec.write_text(APPROVE_SPEC, encoding="utf-8")
    monkeypatch.setattr(Context, "out_is_tty", property(lambda self: True))
    code, out, err = call(capsys, "run", str(spec), "--db", str(tmp_path / "flow.db"), "--timeout", "1")
    assert code == 3
    assert "review waits for approval: dcc-flow approve r" in out
    assert "timed out" in err and "dcc-flow show r" in err


# --- 3. --lease-secs on run and resume, as on serve ----------------------------------------------


@pytest.mark.parametrize("command", [["run", "x.yaml"], ["resume", "last"], ["serve"]])
def test_lease_secs_needs_a_postgresql_database(tmp_path, command):
    result = run_cli(*command, "--lease-secs", "2", "--db", str(tmp_path / "flow.db"), cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert_one_error_line(result.stderr, "dcc-flow " + command[0])
    assert "--lease-secs needs --db postgresql://" in result.stderr
    assert not (tmp_path / "flow.db").exists()


def test_run_and_resume_pass_lease_secs_to_the_engine(pg_url, tmp_path):  # noqa: F811
    spec = tmp_path / "echo.yaml"
    spec.write_text(ECHO_SPEC, encoding="utf-8")
    # The engine checks the lease (at least 0.1 s, docs/operations/cluster.md): a bad one is its error, so
    # the option reached it.
    result = run_cli("run", str(spec), "--db", pg_url, "--lease-secs", "0.01")
    assert result.returncode == 1
    assert "lease_secs" in result.stderr, result.stderr
    result = run_cli("run", str(spec), "--db", pg_url, "--lease-secs", "1", "--timeout", "60")
    assert result.returncode == 0, result.stderr
    run_id = _result(result.stdout)["run_id"]
    result = run_cli("resume", run_id, "--db", pg_url, "--lease-secs", "0.01")
    assert result.returncode == 1 and "lease_secs" in result.stderr, result.stderr
    result = run_cli("resume", run_id, "--db", pg_url, "--lease-secs", "1", "--force", "hello", "--timeout", "60")
    assert result.returncode == 0, result.stderr


def test_help_of_run_and_resume_lists_lease_secs(capsys):
    for command in ("run", "resume"):
        code, out, _ = call(capsys, command, "--help")
        assert code == 0 and "--lease-secs SECS" in out, command



# --- 5. the DCC adapters say what to install when their DCC module is missing ---------------------


@pytest.mark.parametrize("adapter, hidden, words", [
    ("blender", ["bpy"], ["Blender's bpy module", "pip install bpy==5.0.1", "Python 3.11", "blender --background"]),
    ("maya", ["maya", "maya.cmds"], ["Maya's maya.cmds module", "mayapy"]),
    ("houdini", ["hou"], ["Houdini's hou module", "hython"]),
    ("unreal", ["unreal"], ["Unreal's unreal module", "Unreal Editor"]),
])
def test_an_adapter_without_its_dcc_module_says_what_to_install(monkeypatch, adapter, hidden, words):
    import importlib

    module = importlib.import_module("dcc_flow.dcc." + adapter)
    for name in hidden:  # as outside the DCC (bpy is installed in the dev venv: hide it)
        monkeypatch.setitem(sys.modules, name, None)
    with dcc_flow.Engine() as engine:
        for call_it in (module.is_batch, lambda: module.install(engine)):
            with pytest.raises(ImportError) as info:
                call_it()
            message = str(info.value)
            assert message.startswith("dcc_flow.dcc.%s needs " % adapter), message
            for word in words:
                assert word in message, message
            assert isinstance(info.value.__cause__, ImportError)  # the import's own error stays


# --- 6. the Blender tour stops before its run starts when bpy is missing --------------------------


def _without_bpy(*args):
    """`dcc-flow ARGS` in a Python where `import bpy` fails (as without `pip install bpy`)."""
    code = ("import sys; sys.modules['bpy'] = None\n"
            "from dcc_flow.__main__ import main\n"
            "sys.exit(main(%r))" % (list(args),))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8",
                          env=env, cwd=ROOT, timeout=120)


def test_the_blender_tour_without_bpy_stops_before_the_run_starts(tmp_path):
    out = tmp_path / "intake"
    # The command line of README.md and docs/reference/python/README.md.
    result = _without_bpy("run", "examples/blender_intake.yaml", "--tools", "examples/blender_intake_tools.py",
                          "--input", "out=%s" % out, "--approve-all", "--db", str(tmp_path / "flow.db"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""  # no run started: not one event
    assert_one_error_line(result.stderr, "dcc-flow run")
    assert "examples/blender_intake_tools.py" in result.stderr
    assert "bpy" in result.stderr and "pip install bpy==5.0.1 on Python 3.11" in result.stderr
    assert "a bug in dcc-flow" not in result.stderr
    assert not out.exists()


def test_a_tools_register_that_fails_is_the_modules_error_not_a_bug(tmp_path):
    tools = tmp_path / "tools.py"
    tools.write_text("def register(engine):\n    raise ImportError('needs nuke: run it in Nuke')\n", encoding="utf-8")
    result = run_cli("run", "-", "--tools", str(tools), "--db", ":memory:", stdin=ECHO_SPEC)
    assert result.returncode == 1 and result.stdout == ""
    assert_one_error_line(result.stderr, "dcc-flow run")
    assert "--tools %s: its register(engine) failed: ImportError: needs nuke: run it in Nuke" % tools in result.stderr


def test_a_sub_workflow_approval_says_how_to_answer_it_on_a_terminal(tmp_path, capsys, monkeypatch):
    # On a database file `dcc-flow approve` reaches the child run: the terminal shows its id.
    (tmp_path / "gated.yaml").write_text(APPROVE_SPEC, encoding="utf-8")
    (tmp_path / "parent.yaml").write_text(PARENT_SPEC, encoding="utf-8")
    monkeypatch.setattr(Context, "out_is_tty", property(lambda self: True))
    code, out, err = call(capsys, "run", "parent", "--workflows", str(tmp_path), "--db", str(tmp_path / "flow.db"),
                          "--timeout", "1")
    assert code == 3, (out, err)
    hint = [line for line in out.replace("\r", "\n").splitlines() if "waits for approval: dcc-flow approve" in line]
    assert len(hint) == 1, out
    child = hint[0].split("sub-workflow run ")[1].split(")")[0]
    assert hint[0].startswith("review (sub-workflow run %s) waits for approval: dcc-flow approve %s review"
                              % (child, child)), hint
    with dcc_flow.Engine(str(tmp_path / "flow.db")) as engine:
        assert engine.get_status(child).parent_run_id  # the id shown is the child run's


def test_serve_in_memory_does_not_point_to_dcc_flow_approve():
    import io

    from dcc_flow._cli.serve import log_run_event

    ev = {"type": "approve_requested", "run_id": "r01", "step_key": "review", "progress": {}}
    out = io.StringIO()
    log_run_event(None, ev, out)  # a database: another terminal's dcc-flow approve reaches it
    assert out.getvalue().endswith("run r01 waits for approval of review (dcc-flow approve r01 review)\n")
    out = io.StringIO()
    log_run_event(None, ev, out, reachable=False)
    assert "dcc-flow approve r01" not in out.getvalue()
    assert "dashboard (--ui) or over its MCP (--mcp)" in out.getvalue()


def test_commands_that_look_create_no_database(tmp_path, capsys):
    """``status``, ``runs``, ``show``, ``cancel`` on a database file that does not exist yet say
    there are no runs, that the file does not exist, and create no file: a file they created would be theirs for a moment, and a
    ``dcc-flow run`` starting on it then would find it in use."""
    db = str(tmp_path / "new.db")
    code, out, err = call(capsys, "runs", "--db", db)
    assert code == 0 and not os.path.exists(db), (out, err)
    for args in (["status", "last"], ["show", "last"], ["cancel", "last"]):
        code, out, err = call(capsys, *args, "--db", db)
        assert code == 1 and "the database %s does not exist" % db in err, (args, out, err)
        assert not os.path.exists(db), "%s created %s" % (args[0], db)
