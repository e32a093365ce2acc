"""``dcc-flow worker`` (issue #18, item 1) driven by a real engine through its MCP client: the
worker is a child process started from the remotes config, as a pool member will be."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")

TOOLS = textwrap.dedent('''
    import os, sys, threading, time
    import dcc_flow

    STARTED = {"init": False}

    def setup():
        STARTED["init"] = True
        print("plugin loaded")  # startup noise must not reach the protocol

    def register(engine):
        @engine.tool(name="wk__echo")
        def echo(value=None):
            print("exporting", value)
            sys.stderr.write("a warning on stderr\\n")
            os.write(1, b"a C library writes to fd 1\\n")
            return {"value": value, "pid": os.getpid(), "init": STARTED["init"],
                    "main": threading.current_thread() is threading.main_thread()}

        @engine.tool(name="wk__scalar")
        def scalar(n=0):
            return n * 2

        @engine.tool(name="wk__fail")
        def fail():
            raise dcc_flow.ToolError("the scene has no camera", kind="qc")

        @engine.tool(name="wk__wait")
        def wait(secs=30.0):
            with open(os.environ["WORKER_MARK"] + ".started", "w") as f:
                f.write("started")
            t = time.time()
            while time.time() - t < secs:
                if dcc_flow.current_call().cancelled:
                    with open(os.environ["WORKER_MARK"], "w") as f:
                        f.write("saw cancel")
                    return {"cancelled": True}
                time.sleep(0.01)
            return {"cancelled": False}
''')


@pytest.fixture()
def remote(tmp_path):
    path = tmp_path / "wk_tools.py"
    path.write_text(TOOLS)
    env = {"PYTHONPATH": PYTHON_DIR, "WORKER_MARK": str(tmp_path / "mark")}
    return {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path), "--init",
                        "%s:setup" % path], "env": env}


def test_a_worker_serves_tools_on_its_main_thread_and_keeps_prints_out_of_the_protocol(remote):
    with dcc_flow.Engine(config={"remotes": {"w": remote}}) as engine:
        result = engine.run({"steps": [
            {"id": "a", "dcc": "w", "tool": "wk__echo", "args": {"value": 2**64 - 1}},
            {"id": "b", "dcc": "w", "tool": "wk__scalar", "args": {"n": 21}},
            {"id": "c", "dcc": "w", "tool": "wk__echo", "args": {"value": "{{b}}"}},
        ]})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        a = result.outputs["a"]
        assert a["value"] == 2**64 - 1 and a["init"] is True and a["main"] is True
        assert a["pid"] != os.getpid() and result.outputs["c"]["pid"] == a["pid"]  # one reused process
        assert result.outputs["b"] == 42 and result.outputs["c"]["value"] == 42


def test_a_tool_error_keeps_its_kind_and_traceback(remote):
    with dcc_flow.Engine(config={"remotes": {"w": remote}}) as engine:
        result = engine.run({"steps": [{"id": "f", "dcc": "w", "tool": "wk__fail"}]})
        assert result.status is WorkflowStatus.FAILED
        err = result.step("f").error
        assert err["kind"] == "qc"
        assert "the scene has no camera" in err["message"]
        assert "Traceback (most recent call last)" in err["trace"] and "in fail" in err["trace"]


def test_cancel_reaches_the_running_tool(remote, tmp_path):
    with dcc_flow.Engine(config={"remotes": {"w": remote}}) as engine:
        run = engine.submit({"steps": [{"id": "w", "dcc": "w", "tool": "wk__wait"}]})
        # The call is in the tool's loop once the tool says it started (step_enter comes first:
        # on a loaded machine the worker process may start the tool much later).
        started = tmp_path / "mark.started"
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), "the tool never started"
        run.cancel()
        assert run.wait(timeout=20).status is WorkflowStatus.CANCELLED
        deadline = time.monotonic() + 10
        while not (tmp_path / "mark").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "mark").read_text() == "saw cancel"


def _worker(tmp_path, *extra):
    path = tmp_path / "wk_tools.py"
    path.write_text(TOOLS)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, WORKER_MARK=str(tmp_path / "mark"))
    return subprocess.Popen([sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path), *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def test_output_lines_travel_with_the_call_and_the_worker_exits_when_stdin_closes(tmp_path):
    import json

    proc = _worker(tmp_path, "--init", "%s:setup" % (tmp_path / "wk_tools.py"))
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                                                                        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wk__echo", "arguments": {"value": 1}}},
        {"jsonrpc": "2.0", "id": 3, "method": "server/discover"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope"}},
    ]
    out, err = proc.communicate("".join(json.dumps(m) + "\n" for m in msgs).encode(), timeout=30)
    assert proc.returncode == 0, err
    replies = {r["id"]: r for r in map(json.loads, out.decode().splitlines())}  # every stdout line is protocol
    assert replies[1]["result"]["protocolVersion"] == "2025-11-25"
    call = replies[2]["result"]
    assert call["structuredContent"]["value"] == 1
    assert call["_meta"]["dcc-flow/output"] == [  # stdout's lines, then stderr's
        {"stream": "stdout", "text": "exporting 1"}, {"stream": "stdout", "text": "a C library writes to fd 1"},
        {"stream": "stderr", "text": "a warning on stderr"}]
    assert replies[3]["error"]["code"] == -32601  # lets mcp-go fall back to the initialize handshake
    assert "unknown tool 'nope'" in replies[4]["error"]["message"]
    assert b"plugin loaded" in err  # output outside a call goes to the real stderr


def test_a_bad_init_is_one_clear_line(tmp_path):
    proc = _worker(tmp_path, "--init", "no_colon")
    out, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 2 and b"MODULE:FUNCTION" in err
    proc = _worker(tmp_path, "--init", "%s:missing" % (tmp_path / "wk_tools.py"))
    out, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 2 and b"no function 'missing'" in err


def test_the_worker_runs_calls_one_at_a_time_on_the_main_thread():
    import io
    import json

    from dcc_flow._tools import ToolEntry
    from dcc_flow._worker import Worker

    seen = []

    def tool(i=0):
        seen.append((i, threading.current_thread() is threading.main_thread()))
        return i

    reqs = "".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                               "params": {"name": "t", "arguments": {"i": i}}}) + "\n" for i in range(5))
    out = io.BytesIO()
    worker = Worker({"t": ToolEntry("t", tool, "main", None, "")}, io.BytesIO(reqs.encode()), out)
    assert worker.serve() == 5
    assert seen == [(i, True) for i in range(5)]
    assert [json.loads(line)["id"] for line in out.getvalue().decode().splitlines()] == list(range(5))
