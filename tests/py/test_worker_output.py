"""What a pool worker's tools print reaches the step record (issue #18: ``StepRecord.logs``, the
step JSON's ``logs``, ``dcc-flow show``), persisted, capped (docs/reference/limits.md "Step output"), and
kept when the worker dies during the call. Every test runs real ``dcc-flow worker`` children."""

import os
import sys
import textwrap

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus
from dcc_flow._cli import main as cli_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")

TOOLS = textwrap.dedent('''
    import os, sys
    import dcc_flow

    def register(engine):
        @engine.tool(name="out__flaky")
        def flaky(scene="a.ma"):
            mark = os.environ["OUT_MARK"]
            print("opening", scene)
            if not os.path.exists(mark):
                open(mark, "w").close()
                sys.stderr.write("Warning: license server slow\\n")
                raise dcc_flow.Transient("the license server did not answer")
            print("exported", scene)
            return {"pid": os.getpid()}

        @engine.tool(name="out__chatty")
        def chatty(n=1500):
            for i in range(n):
                print("line %d" % i)
            return {"n": n}

        @engine.tool(name="out__crash")
        def crash():
            with open(os.environ["OUT_MARK"] + ".dir", "w") as f:
                f.write(os.environ["DCC_FLOW_WORKER_OUTPUT_DIR"])  # the engine made it for this worker
            print("loading plug-in AbcExport")
            os.write(1, b"C-level: bad polygon 42\\n")
            sys.stderr.write("Fatal: segmentation violation\\n")
            os._exit(1)
''')


@pytest.fixture()
def remote(tmp_path):
    path = tmp_path / "out_tools.py"
    path.write_text(TOOLS)
    return {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)], "workers": 2,
            "env": {"PYTHONPATH": PYTHON_DIR, "OUT_MARK": str(tmp_path / "mark")}}


def test_each_attempts_output_is_on_the_step_record_persisted_and_shown(remote, tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db, config={"remotes": {"maya": remote}}) as engine:
        result = engine.run({"steps": [{"id": "export", "dcc": "maya", "tool": "out__flaky", "args": {"scene": "a.ma"},
                                        "retry": {"max_attempts": 2, "initial_delay_ms": 10}}]})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        run_id = result.run_id
    with dcc_flow.Engine(db=db) as engine:  # reopened: read from SQLite
        step = engine.get_status(run_id, all_steps=True).step("export")
    assert step.logs == [
        {"stream": "stdout", "text": "opening a.ma", "attempt": 1},
        {"stream": "stderr", "text": "Warning: license server slow", "attempt": 1},
        {"stream": "stdout", "text": "opening a.ma", "attempt": 2},
        {"stream": "stdout", "text": "exported a.ma", "attempt": 2},
    ]
    assert step.logs_dropped == 0

    assert cli_main(["show", run_id, "--db", db]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("export"))
    assert lines[at + 1:at + 7] == [
        "      attempt 1:", "      out| opening a.ma", "      err| Warning: license server slow",
        "      attempt 2:", "      out| opening a.ma", "      out| exported a.ma"]


def test_output_past_the_caps_is_counted_and_show_prints_the_last_lines(remote, tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db, config={"remotes": {"maya": remote}}) as engine:
        result = engine.run({"steps": [{"id": "talk", "dcc": "maya", "tool": "out__chatty", "args": {"n": 1500}}]})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        step = result.step("talk")
        assert len(step.logs) == 1000 and step.logs_dropped == 500  # the worker keeps 1,000 lines of a call
        assert step.logs[0]["text"] == "line 0" and step.logs[-1]["text"] == "line 999"
        status = engine.get_status(result.run_id, all_steps=True).raw  # the JSON of the C ABI and MCP
        assert [s for s in status["steps"] if s["key"] == "talk"][0]["logs_dropped"] == 500
    assert cli_main(["show", result.run_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "      … 1480 more lines\n      out| line 980\n" in out and "      out| line 999\n" in out
    assert "line 979" not in out
    assert cli_main(["show", result.run_id, "--db", db, "--lines", "0"]) == 0
    out = capsys.readouterr().out
    assert "      … 500 more lines\n      out| line 0\n" in out


def test_a_worker_that_dies_mid_call_leaves_the_calls_output_in_the_failure_and_the_step(remote, tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db, config={"remotes": {"maya": remote}}) as engine:
        result = engine.run({"steps": [{"id": "export", "dcc": "maya", "tool": "out__crash"}]})
        assert result.status is WorkflowStatus.FAILED
        step = result.step("export")
        assert step.error["kind"] == "worker_lost"
        message = step.error["message"]
        assert "was lost during the call" in message and "exit status 1" in message
        assert ('the call\'s last output lines (3 in all, on the step record): "loading plug-in AbcExport", '
                '"C-level: bad polygon 42", "Fatal: segmentation violation"') in message
        assert step.logs == [
            {"stream": "stdout", "text": "loading plug-in AbcExport", "attempt": 1},
            {"stream": "stdout", "text": "C-level: bad polygon 42", "attempt": 1},
            {"stream": "stderr", "text": "Fatal: segmentation violation", "attempt": 1},
        ]
        pool = engine.pools()[0]
        assert pool["lost"] == 1
    assert cli_main(["show", result.run_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "      out| loading plug-in AbcExport\n" in out and "      err| Fatal: segmentation violation\n" in out
    out_dir = (tmp_path / "mark.dir").read_text()
    assert os.path.basename(out_dir).startswith("dcc-flow-worker-")
    assert not os.path.exists(out_dir)  # the engine removed the lost worker's output files


@pytest.mark.skipif(sys.platform == "win32", reason="a segfault is a POSIX signal")
def test_a_segfault_leaves_the_python_stack_of_the_call_on_the_step(remote, tmp_path):
    (tmp_path / "segv_tools.py").write_text(textwrap.dedent('''
        import ctypes
        def register(engine):
            @engine.tool(name="out__segv")
            def segv():
                print("opening broken.ma")
                ctypes.string_at(0)  # a segfault in "native code"
    '''))
    remote = dict(remote, command=remote["command"] + ["--tools", str(tmp_path / "segv_tools.py")])
    with dcc_flow.Engine(config={"remotes": {"maya": remote}}) as engine:
        result = engine.run({"steps": [{"id": "export", "dcc": "maya", "tool": "out__segv",
                                        "retry": {"max_attempts": 2, "initial_delay_ms": 10}}]})
        assert result.status is WorkflowStatus.FAILED
        step = result.step("export")
        assert step.error["kind"] == "worker_lost" and step.attempt == 2
        texts = [(e["attempt"], e["stream"], e["text"]) for e in step.logs]
        for attempt in (1, 2):  # each attempt's output, on its own (killed) worker
            assert (attempt, "stdout", "opening broken.ma") in texts
            assert (attempt, "stderr", "Fatal Python error: Segmentation fault") in texts
        assert any('in segv' in text for _, _, text in texts)  # faulthandler's stack of the tool
