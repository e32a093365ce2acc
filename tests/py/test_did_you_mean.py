"""A mistyped tool, remote, workflow or file name is answered with the closest real one, from
Python, the CLI and (tests/go, engine/mcpserver) Go and MCP."""
import os
import subprocess
import sys

import pytest

import dcc_flow
from dcc_flow import NotFoundError, UnknownToolError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def engine():
    with dcc_flow.Engine() as e:
        yield e


def test_unknown_tool_names_the_registered_one(engine):
    engine.register_tool(lambda path: {"fbx": path}, name="maya__export_fbx")
    spec = """
name: typos
steps:
  - { id: a, tool: maya__exprot_fbx, args: { path: x } }
  - { id: b, tool: zzz_nothing_like_it }
"""
    with pytest.raises(UnknownToolError) as info:
        engine.run(spec)
    assert 'maya__exprot_fbx (did you mean "maya__export_fbx"?)' in str(info.value)
    assert "zzz_nothing_like_it (" not in str(info.value)
    assert info.value.details["suggestions"] == {"maya__exprot_fbx": "maya__export_fbx"}
    assert sorted(info.value.details["tools"]) == ["maya__exprot_fbx", "zzz_nothing_like_it"]


def test_unknown_workflow_names_the_registered_one(engine):
    engine.register_workflow("name: nightly_intake\nsteps: [{ id: a, tool: flow__echo }]\n")
    with pytest.raises(NotFoundError, match='did you mean "nightly_intake"'):
        engine.run("nightly_intkae")
    with pytest.raises(NotFoundError) as info:
        engine.run("render")
    assert "did you mean" not in str(info.value)


def test_a_mistyped_spec_file_names_the_file(engine, tmp_path, monkeypatch):
    (tmp_path / "export.yaml").write_text("name: export\nsteps: [{ id: a, tool: flow__echo }]\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NotFoundError) as info:
        engine.run("exprot.yaml")
    assert str(info.value) == (
        "no workflow named \"exprot.yaml\" is registered; no file 'exprot.yaml' either; "
        "did you mean 'export.yaml'?"
    )
    # A path with a folder is not a catalog name: it is a file or nothing.
    os.mkdir("sub")
    (tmp_path / "sub" / "export.yaml").write_text("name: e\nsteps: [{ id: a, tool: flow__echo }]\n")
    with pytest.raises(NotFoundError) as info:
        engine.run(os.path.join("sub", "exprt.yaml"))
    assert str(info.value) == "no file %r; did you mean %r?" % (
        os.path.join("sub", "exprt.yaml"), os.path.join("sub", "export.yaml"))
    with pytest.raises(NotFoundError) as info:
        engine.run("render.yaml")
    assert str(info.value).endswith("no file 'render.yaml' either")


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_names_the_closest_file_and_tool(tmp_path):
    (tmp_path / "intake.yaml").write_text("name: intake\nsteps: [{ id: a, tool: studio__greet }]\n")
    (tmp_path / "tools.py").write_text("def studio__great(): return {}\n")
    proc = cli("run", "intkae.yaml", "--db", ":memory:", cwd=tmp_path)
    assert proc.returncode == 1
    assert "intkae.yaml: no such file; did you mean 'intake.yaml'?" in proc.stderr
    proc = cli("validate", "intak.yaml", cwd=tmp_path)
    assert proc.returncode != 0
    assert "did you mean 'intake.yaml'?" in proc.stdout + proc.stderr
    proc = cli("run", "intake.yaml", "--tools", "tool.py", "--db", ":memory:", cwd=tmp_path)
    assert "--tools tool.py: no such file; did you mean 'tools.py'?" in proc.stderr
    proc = cli("run", "intake.yaml", "--tools", "tools.py", "--db", ":memory:", cwd=tmp_path)
    assert proc.returncode == 1
    assert 'studio__greet (did you mean "studio__great"?)' in proc.stderr
