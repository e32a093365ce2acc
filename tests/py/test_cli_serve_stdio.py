"""``dcc-flow serve --mcp stdio`` ends when its MCP client closes standard input: an MCP host that
stops its child (closing the pipe) does not leave it running. The process stops as on SIGTERM:
runs in flight become ``interrupted`` (resumable), and the exit code is 0."""

import json
import os
import subprocess
import sys
import textwrap
import time

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOOLS = textwrap.dedent("""
    import os, time

    def slow(marker):
        with open(marker, "w") as f:
            f.write("started")
        time.sleep(1.0)
        return {"slept": True}
""")


def serve(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    return subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--mcp", "stdio", "--tools", "tools.py",
                             "--db", "flow.db"], cwd=str(tmp_path), env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def request(proc, id, method, params):
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed stdout: " + proc.stderr.read()
        msg = json.loads(line)
        if msg.get("id") == id:  # skip notifications
            return msg


def initialize(proc):
    init = request(proc, 1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "pytest", "version": "1"}})
    assert init["result"]["serverInfo"]["name"] == "dcc-flow", init
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    proc.stdin.flush()


def wait_exit(proc):
    """Wait (a generous bound) for the process to end by itself; return its code and stderr."""
    try:
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, proc.stderr.read()


def test_serve_mcp_stdio_exits_when_stdin_closes(tmp_path):
    proc = serve(tmp_path)
    initialize(proc)
    proc.stdin.close()
    code, err = wait_exit(proc)
    assert code == 0, err
    assert "MCP stdio stream ended" in err, err


def test_serve_mcp_stdio_interrupts_the_run_in_flight_when_stdin_closes(tmp_path):
    proc = serve(tmp_path)
    initialize(proc)
    marker = tmp_path / "slow.started"
    spec = ("name: ship\nsteps:\n  - {id: render, tool: slow, args: {marker: %s}}\n"
            "  - {id: gate, kind: approve, prompt: ship it}\n" % json.dumps(str(marker)))
    started = request(proc, 2, "tools/call", {"name": "workflows_run", "arguments": {"spec": spec}})
    run_id = started["result"]["structuredContent"]["workflow_id"]
    deadline = time.monotonic() + 30
    while not marker.exists():  # the slow tool is running on the serve process's main thread
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    proc.stdin.close()
    code, err = wait_exit(proc)
    assert code == 0, err

    # The serve process marked the run itself (a read-only engine recovers nothing): interrupted
    # by its engine stopping, not left running for the next owner to find.
    with dcc_flow.Engine(db=tmp_path / "flow.db", read_only=True) as viewer:
        left = viewer.get_status(run_id)
    assert left.status is dcc_flow.WorkflowStatus.INTERRUPTED, (left, err)
    assert "engine stopped" in left.error["message"], left.error
    assert left.step("render").status is dcc_flow.StepStatus.COMPLETED

    with dcc_flow.Engine(db=tmp_path / "flow.db") as engine:
        again = []
        engine.register_tool(lambda marker: again.append(marker), name="slow")  # known, not called
        run = engine.resume(run_id)
        deadline = time.monotonic() + 30
        while run.status is not dcc_flow.WorkflowStatus.WAITING:
            assert time.monotonic() < deadline, run.result()
            time.sleep(0.02)
        run.approve("gate")
        result = run.wait(timeout=30)
    assert result.ok, result.error
    assert result.outputs["render"] == {"slept": True} and again == []  # the completed step is reused
