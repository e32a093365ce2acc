"""dcc-flow pause / unpause (docs/reference/cli/README.md), as subprocesses against one file database."""
import textwrap

import dcc_flow
from test_cli_engine import cli

CHAIN = """
name: chain
steps:
  - {id: a, tool: step_a}
  - {id: b, tool: step_b}
  - {id: c, tool: step_c}
"""


def test_pause_and_unpause_a_run_another_process_runs(tmp_path):
    db = str(tmp_path / "flow.db")
    gated = {"name": "gated", "steps": [{"id": "gate", "kind": "approve", "prompt": "ship?"},
                                        {"id": "after", "tool": "flow__echo", "args": {"value": 1}}]}
    with dcc_flow.Engine(db=db) as owner:
        run = owner.submit(gated)
        for ev in run.events(timeout=10):
            if ev["type"] == "approve_requested":
                break
        proc = cli("pause", "last", "--reason", "farm full", "--by", "ana", "--db", db, cwd=tmp_path, check=0)
        assert proc.stdout == "run %s: paused\n" % run.run_id
        assert cli("pause", run.run_id, "--db", db, cwd=tmp_path, check=0).stdout == "run %s: paused\n" % run.run_id
        assert "paused" in cli("status", run.run_id, "--db", db, cwd=tmp_path, check=0).stdout
        paused = [ev for ev in owner.events(run_id=run.run_id, timeout=0) if ev["type"] == "run_paused"]
        assert [ev["detail"] for ev in paused] == [{"reason": "farm full", "by": "ana"}]

        proc = cli("unpause", run.run_id, "--by", "ana", "--db", db, cwd=tmp_path, check=0)
        assert proc.stdout == "run %s: waiting\n" % run.run_id
        owner.approve(run.run_id, "gate", True)
        assert run.wait(timeout=10).ok
    proc = cli("pause", run.run_id, "--db", db, cwd=tmp_path, check=1)
    assert proc.stderr == "dcc-flow pause: error: cannot pause run %s: it is completed (finished)\n" % run.run_id


def test_unpause_runs_a_run_paused_before_a_restart_without_rerunning_completed_steps(tmp_path):
    db = str(tmp_path / "flow.db")
    calls = tmp_path / "calls.txt"
    (tmp_path / "tools.py").write_text(textwrap.dedent("""
        def _call(name):
            with open("calls.txt", "a") as f:
                f.write(name + "\\n")
            return name

        def step_a():
            return _call("a")

        def step_b():
            return _call("b")

        def step_c():
            return _call("c")
    """))
    holder = {}
    with dcc_flow.Engine(db=db) as engine:
        for name in "abc":
            def tool(name=name):
                with open(str(calls), "a") as f:
                    f.write(name + "\n")
                if name == "b":
                    holder["run"].pause("end of day")  # b finishes; c does not start
                return name
            engine.register_tool(tool, name="step_" + name)
        run = engine.submit(CHAIN)
        holder["run"] = run
        assert run.wait(timeout=0.5).status is dcc_flow.WorkflowStatus.PAUSED
    assert calls.read_text() == "a\nb\n"

    proc = cli("unpause", run.run_id, "--tools", "tools.py", "--db", db, cwd=tmp_path, check=0)
    assert "completed" in proc.stdout, proc.stdout + proc.stderr
    assert calls.read_text() == "a\nb\nc\n"
    with dcc_flow.Engine(db=db) as engine:
        result = engine.get_status(run.run_id)
        assert result.status is dcc_flow.WorkflowStatus.COMPLETED and result.outputs == {"a": "a", "b": "b", "c": "c"}


def test_progress_line_shows_the_pause():
    import io

    from dcc_flow._cli._base import Context
    from dcc_flow._cli.run import Progress

    out = io.StringIO()
    progress = Progress(Context("dcc-flow run", out=out), "r1", "shots", tty=True)
    progress.event({"run_id": "r1", "type": "approve_requested", "step_key": "gate", "progress": {}})
    progress.event({"run_id": "r1", "type": "run_paused", "detail": {"reason": "farm full", "by": "ana"},
                    "progress": {}})
    assert "paused (dcc-flow unpause r1)" in progress.line() and "waiting for approval" not in progress.line()
    assert "run r1 paused by ana: farm full (dcc-flow unpause r1)\n" in out.getvalue()
    progress.event({"run_id": "r1", "type": "run_unpaused", "detail": {"reason": "", "by": "ana"}, "progress": {}})
    assert "paused" not in progress.line() and "waiting for approval of gate" in progress.line()
    assert "run r1 unpaused by ana\n" in out.getvalue()
