"""Progress and logs from inside a tool (issue #21 item 5; docs/reference/python/tool-calls.md "Progress and logs from
inside a tool"): ``current_call().progress()`` and ``.log()`` become ``step_progress`` and
``step_log`` events, throttled, and the step record's ``progress`` and ``logs``; for in-process
tools (the C ABI's dccflow_call_report) and for a pool worker's tools (MCP notifications)."""

import json
import math
import os
import re
import sys
import textwrap
import time

import pytest

import dcc_flow
from dcc_flow import Engine, WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")


@pytest.fixture()
def engine():
    with Engine() as eng:
        yield eng


def of_types(events, *types):
    return [e for e in events if e["type"] in types]


def test_progress_and_logs_become_events_in_order_and_stay_on_the_record(engine):
    took = []

    @engine.tool()
    def export(frames):
        start = time.monotonic()
        call = dcc_flow.current_call()
        call.progress(0, frames, "opening")
        for f in range(1, frames + 1):
            time.sleep(0.002)
            call.progress(f, frames, "caching frames")
            if f % 40 == 0:
                call.log("cached frame", frame=f, path="/cache/f%d.bgeo" % f)
        call.progress(frames, frames, "done")
        took.append(time.monotonic() - start)
        return {"frames": frames}

    run = engine.submit("steps: [{id: export, tool: export, args: {frames: 120}}]")
    events = list(run.events(timeout=30))
    result = run.wait(timeout=10)
    assert result.ok, result.error

    kinds = [e["type"] for e in events if e.get("step_key") == "export"]
    assert kinds[0] == "step_enter" and kinds[-1] == "step_exit", kinds
    progress = of_types(events, "step_progress")
    # At most 10 a second (one more for the first, written at once, and one at the end): the
    # 122 reports were coalesced, and the last is kept.
    assert 1 <= len(progress) <= took[0] * 10 + 2, (len(progress), took)
    assert progress[-1]["detail"] == {"done": 120, "total": 120, "message": "done", "attempt": 1}
    assert all(e["status"] == "running" and e["attempt"] == 1 for e in progress)
    dones = [e["detail"]["done"] for e in progress]
    assert dones == sorted(dones)
    lines = [line for e in of_types(events, "step_log") for line in e["detail"]["lines"]]
    assert [(line["text"], line["fields"]["frame"]) for line in lines] == [("cached frame", 40), ("cached frame", 80),
                                                                        ("cached frame", 120)]
    assert lines[0] == {"stream": "log", "text": "cached frame", "attempt": 1,
                        "fields": {"frame": 40, "path": "/cache/f40.bgeo"}}
    # Every report event precedes step_exit.
    exit_seq = next(e["seq"] for e in events if e["type"] == "step_exit")
    assert all(e["seq"] < exit_seq for e in of_types(events, "step_progress", "step_log"))

    step = engine.get_status(run.run_id, all_steps=True).step("export")
    assert step.progress == {"done": 120, "total": 120, "message": "done", "attempt": 1}
    assert [(e["stream"], e["text"]) for e in step.logs] == [("log", "cached frame")] * 3


def test_a_tight_loop_is_throttled_and_excess_lines_counted(engine):
    n = 20000

    took = []

    @engine.tool()
    def spin():
        start = time.monotonic()
        call = dcc_flow.current_call()
        for i in range(n):
            call.progress(i + 1, n)
            call.log("line %d" % i)
        took.append(time.monotonic() - start)
        return None

    run = engine.submit("steps: [{id: s, tool: spin}]")
    events = list(run.events(timeout=60))
    assert run.wait(timeout=10).ok
    progress = of_types(events, "step_progress")
    logs = of_types(events, "step_log")
    assert progress[-1]["detail"]["done"] == n  # the last value is never lost
    limit = took[0] * 10 + 2  # writes at most 10 a second
    assert len(progress) <= limit and len(logs) <= limit, (len(progress), len(logs), took)
    kept = sum(len(e["detail"]["lines"]) for e in logs)
    dropped = sum(e["detail"].get("dropped", 0) for e in logs)
    assert kept + dropped == n
    assert all(len(e["detail"]["lines"]) <= 100 for e in logs)
    assert dropped > 0
    step = engine.get_status(run.run_id, all_steps=True).step("s")
    assert len(step.logs) == 1000  # the record keeps as many lines as a pool worker's, not only the live ones
    assert step.logs_dropped == n - len(step.logs)
    assert step.logs[-1]["text"] == logs[-1]["detail"]["lines"][-1]["text"]  # the newest are kept


def test_a_silent_tool_writes_no_report(engine):
    @engine.tool()
    def quiet():
        return 1

    run = engine.submit("steps: [{id: q, tool: quiet}]")
    events = list(run.events(timeout=10))
    assert not of_types(events, "step_progress", "step_log")
    assert engine.get_status(run.run_id, all_steps=True).step("q").progress is None


def test_bad_progress_values_fail_the_tool_and_odd_fields_do_not(engine):
    @engine.tool()
    def bad(which):
        call = dcc_flow.current_call()
        call.log("odd fields", obj=object(), nan=math.nan)  # never fails: repr
        if which == "nan":
            call.progress(math.nan)
        elif which == "str":
            call.progress("3")
        elif which == "negative":
            call.progress(1, -2)
        return "ok"

    for which, kind in (("nan", "invalid_input"), ("str", "invalid_input"), ("negative", "invalid_input")):
        result = engine.run("steps: [{id: b, tool: bad, args: {which: %s}}]" % which)
        assert result.status is WorkflowStatus.FAILED and result.step("b").error["kind"] == kind, which
    result = engine.run("steps: [{id: b, tool: bad, args: {which: fine}}]")
    assert result.ok
    text = json.dumps(engine.get_status(result.run_id, all_steps=True).step("b").logs)
    assert "odd fields" in text


def test_progress_outside_a_tool_is_not_available():
    assert dcc_flow.current_call() is None


def test_a_report_after_the_engine_closed_is_dropped_quietly():
    eng = Engine()
    calls = []

    @eng.tool()
    def t():
        call = dcc_flow.current_call()
        calls.append(call)
        return 1

    assert eng.run("steps: [{id: t, tool: t}]").ok
    eng.close()
    calls[0].progress(1)  # no exception: the report is dropped
    calls[0].log("after close")


TOOLS = textwrap.dedent('''
    import time
    import dcc_flow

    def register(engine):
        @engine.tool(name="pg__export")
        def export(frames=50):
            call = dcc_flow.current_call()
            for i in range(500):
                call.log("burst %d" % i)
            for f in range(1, frames + 1):
                time.sleep(0.004)
                call.progress(f, frames, "caching frames")
                if f % 25 == 0:
                    call.log("cached frame", frame=f)
            return {"frames": frames}
''')


@pytest.mark.skipif(sys.platform == "win32", reason="pool workers are POSIX processes here")
def test_a_pool_worker_tools_progress_and_logs_reach_the_events(tmp_path):
    path = tmp_path / "pg_tools.py"
    path.write_text(TOOLS)
    remote = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)],
              "env": {"PYTHONPATH": PYTHON_DIR}, "workers": 1}
    with Engine(config={"remotes": {"maya": remote}}) as eng:
        run = eng.submit({"steps": [{"id": "export", "dcc": "maya", "tool": "pg__export", "args": {"frames": 50}}]})
        events = list(run.events(timeout=60))
        result = run.wait(timeout=10)
        assert result.ok, result.error
        progress = of_types(events, "step_progress")
        assert progress and progress[-1]["detail"] == {"done": 50, "total": 50, "message": "caching frames",
                                                       "attempt": 1}
        assert len(progress) <= 10, len(progress)  # ~0.2 s of progress at 10 a second at most
        logs = of_types(events, "step_log")
        lines = [line["text"] for e in logs for line in e["detail"]["lines"]]
        assert lines[-2:] == ["cached frame", "cached frame"]  # logged after the burst: the newest are kept
        dropped = sum(e["detail"].get("dropped", 0) for e in logs)
        assert len(lines) + dropped == 502 and dropped > 0  # the burst was throttled, its excess counted
        exit_seq = next(e["seq"] for e in events if e["type"] == "step_exit")
        assert all(e["seq"] < exit_seq for e in progress + logs)
        step = eng.get_status(run.run_id, all_steps=True).step("export")
        assert step.progress["done"] == 50 and step.worker.startswith("maya/")
        assert {"stream": "log", "text": "cached frame", "attempt": 1, "fields": {"frame": 25}} in step.logs


# -- the command line ------------------------------------------------------------------------------

CLI_TOOLS = textwrap.dedent('''
    import os, time
    import dcc_flow

    def cache(frames=40):
        call = dcc_flow.current_call()
        for f in range(1, frames + 1):
            call.progress(f, frames, "caching frames")
            time.sleep(0.02)
        call.log("cached", frame=frames)
        while os.environ.get("MARKER") and not os.path.exists(os.environ["MARKER"]):
            time.sleep(0.02)  # a long step: status shows its progress meanwhile
        return {"frames": frames}
''')
CLI_SPEC = "name: cache_job\nsteps:\n  - {id: export, tool: cache}\n"


@pytest.fixture()
def cli_dir(tmp_path):
    (tmp_path / "tools.py").write_text(CLI_TOOLS)
    (tmp_path / "job.yaml").write_text(CLI_SPEC)
    return tmp_path


def _cli_env(**extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, **extra)
    env.pop("DCC_FLOW_DB", None)
    return env


def test_cli_json_lines_carry_progress_and_log_events(cli_dir):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "dcc_flow", "run", "job.yaml", "--tools", "tools.py"], cwd=str(cli_dir),
                          env=_cli_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    progress = of_types(events, "step_progress")
    assert progress and progress[-1]["detail"] == {"done": 40, "total": 40, "message": "caching frames", "attempt": 1}
    assert [line["fields"] for e in of_types(events, "step_log") for line in e["detail"]["lines"]] == [{"frame": 40}]
    run_id = events[-1]["run_id"]
    show = subprocess.run([sys.executable, "-m", "dcc_flow", "show", run_id], cwd=str(cli_dir), env=_cli_env(),
                          capture_output=True, text=True, timeout=60).stdout
    assert "      progress 40/40 caching frames" in show.splitlines(), show
    assert "      log| cached frame=40" in show.splitlines(), show


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_cli_progress_line_shows_the_tools_progress_on_a_terminal(cli_dir):
    from test_cli_engine import run_in_pty, screen

    code, text = run_in_pty(["run", "job.yaml", "--tools", "tools.py", "--db", ":memory:"], cli_dir)
    assert code == 0, text
    draws = [d for d in text.split("\r") if d.strip()]
    shown = [d for d in draws if re.search(r" · export \d+/40 caching frames · ", d)]
    assert shown, draws  # "cache_job r01a… · 0/1 steps · export 37/40 caching frames · 812ms"
    assert shown[0].startswith("cache_job r") and "0/1 steps" in shown[0]
    assert "{" not in text
    lines = screen(text)
    assert lines[0] == "export| cached frame=40", lines  # a logged line stays above the progress line
    assert re.fullmatch(r"run r\w+ completed in .*: 1 step completed", lines[-1]), lines


def test_cli_status_shows_a_long_steps_progress_from_another_process(cli_dir):
    import subprocess

    marker = cli_dir / "go-on"
    runner = subprocess.Popen([sys.executable, "-m", "dcc_flow", "run", "job.yaml", "--tools", "tools.py"],
                              cwd=str(cli_dir), env=_cli_env(MARKER=str(marker)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # Wait for the run to start: a status before would open (and lock) the database first.
        assert json.loads(runner.stdout.readline())["type"] == "workflow_started"
        deadline = time.monotonic() + 30
        status = ""
        while time.monotonic() < deadline and runner.poll() is None:
            proc = subprocess.run([sys.executable, "-m", "dcc_flow", "status", "last"], cwd=str(cli_dir),
                                  env=_cli_env(), capture_output=True, text=True, timeout=60)
            status = proc.stdout + proc.stderr
            if "running export: 40/40 caching frames" in status:
                break
            time.sleep(0.2)
        assert "running export: 40/40 caching frames" in status, (status, runner.poll() and runner.communicate())
        assert ": running, 0/1 steps" in status.splitlines()[0]
    finally:
        marker.write_text("")
        out, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err


def test_reports_are_logged_while_run_drives_the_run(engine, caplog):
    @engine.tool()
    def chatty():
        call = dcc_flow.current_call()
        call.progress(3, 10, "frames")
        call.log("cached", frame=3)
        return 1

    with caplog.at_level("INFO", logger="dcc_flow"):
        result = engine.run("steps: [{id: c, tool: chatty}]")
    assert result.ok
    messages = [r.getMessage() for r in caplog.records]
    assert "run %s step_progress c 3/10 frames" % result.run_id in messages, messages
    assert 'run %s c: cached {"frame": 3}' % result.run_id in messages, messages
