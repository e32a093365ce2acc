"""Code-first workflows from the command line: `dcc-flow run flows.py:intake`, `--tools` on a
module of @task functions, and the folders a tools module imports its siblings from."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLOWS = textwrap.dedent("""\
    from dcc_flow import task, workflow
    import helpers  # a sibling module of this file

    @task(name="studio__greet")
    def greet(who: str) -> dict:
        return {"msg": helpers.shout("hi " + who)}

    @workflow
    def intake(ctx, who: str = "bob"):
        return {"greeting": greet(who)}

    NOT_A_FLOW = 3
    """)


@pytest.fixture
def studio(tmp_path):
    pkg = tmp_path / "pipeline"
    pkg.mkdir()
    (pkg / "helpers.py").write_text("def shout(s):\n    return s.upper()\n")
    (pkg / "flows.py").write_text(FLOWS)
    return tmp_path


def cli(*args, cwd, console_script=False):
    """The CLI as ``python -m dcc_flow`` (the working folder on sys.path) or as the installed
    ``dcc-flow`` console script (only the script's own folder on sys.path)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    if console_script:
        shim = os.path.join(str(cwd), "bin", "dcc-flow")
        os.makedirs(os.path.dirname(shim), exist_ok=True)
        with open(shim, "w") as f:
            f.write("import sys\nfrom dcc_flow.__main__ import main\nsys.exit(main())\n")
        argv = [sys.executable, shim]
    else:
        argv = [sys.executable, "-m", "dcc_flow"]
    return subprocess.run(argv + list(args), cwd=str(cwd), env=env, capture_output=True, text=True, timeout=60)


def result_of(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_run_a_workflow_of_a_python_file(studio):
    # The file's folder is on sys.path, so `import helpers` works from any working folder.
    out = result_of(cli("run", os.path.join("pipeline", "flows.py") + ":intake", "--input", "who=al",
                        "--json", "--db", ":memory:", cwd=studio, console_script=True))
    assert out["status"] == "completed"
    assert out["outputs"] == {"greet": {"msg": "HI AL"}}


def test_run_a_workflow_of_a_module_from_the_console_script(studio):
    # The console script's sys.path lacks the working folder; a module name is found there as
    # with `python -m dcc_flow`.
    out = result_of(cli("run", "flows:intake", "--json", "--db", ":memory:", cwd=studio / "pipeline",
                        console_script=True))
    assert out["outputs"] == {"greet": {"msg": "HI BOB"}}


@pytest.mark.parametrize("target, message", [
    ("pipeline/flows.py:intak", "pipeline/flows.py:intak: pipeline/flows.py has no 'intak'; did you mean 'intake'?"),
    ("pipeline/flows.py:zzz", "pipeline/flows.py:zzz: pipeline/flows.py has no 'zzz'; its workflows: intake"),
    ("pipeline/flows.py:greet", "pipeline/flows.py:greet: 'greet' is a Task, not a @workflow"),
    ("pipeline/flows.py:NOT_A_FLOW", "'NOT_A_FLOW' is a int, not a @workflow"),
    ("pipeline/flow.py:intake", "run pipeline/flow.py: no such file; did you mean 'pipeline/flows.py'?"),
])
def test_a_bad_workflow_target_is_one_clear_line(studio, target, message):
    proc = cli("run", target.replace("/", os.sep), "--db", ":memory:", cwd=studio)
    assert proc.returncode == 1
    assert message.replace("/", os.sep) in proc.stderr, proc.stderr


def test_tools_registers_tasks_under_their_tool_names(studio):
    spec = studio / "hello.yaml"
    spec.write_text("name: hello\nsteps: [{ id: g, tool: studio__greet, args: { who: yaml } }]\n")
    out = result_of(cli("run", str(spec), "--tools", os.path.join("pipeline", "flows.py"), "--json",
                        "--db", ":memory:", cwd=studio, console_script=True))
    assert out["outputs"] == {"g": {"msg": "HI YAML"}}
    # The @workflow is not a tool, and the task is not registered under its function name.
    from dcc_flow._cli._engine import load_tools

    with dcc_flow.Engine() as engine:
        assert load_tools(engine, [str(studio / "pipeline" / "flows.py")]) == ["studio__greet"]


def test_register_workflow_registers_the_flows_tasks(studio, monkeypatch):
    monkeypatch.syspath_prepend(str(studio / "pipeline"))
    import flows  # noqa: E402 - the fixture's module

    with dcc_flow.Engine() as engine:
        assert engine.register_workflow(flows.intake) == "intake"
        assert "studio__greet" in engine.tools
        result = engine.run("intake", {"who": "cat"})
        assert result.outputs == {"greet": {"msg": "HI CAT"}}
