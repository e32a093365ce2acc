"""engine.serve(mcp=...): agents run workflows whose tools are Python functions, over MCP."""
import json
import urllib.request

import pytest

import dcc_flow


def post(url, body, session=None):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=20) as resp:
        text = resp.read().decode()
        sid = resp.headers.get("Mcp-Session-Id") or session
    if text.startswith("event:") or text.startswith("data:") or "\ndata:" in text:
        msgs = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
        text = json.dumps([m for m in msgs if "id" in m][-1])
    return (json.loads(text) if text.strip() else None), sid


def test_serve_mcp_http_runs_python_tools():
    with dcc_flow.Engine() as engine:
        seen = []

        @engine.tool(thread="worker")
        def export_fbx(scene):
            seen.append(scene)
            return {"fbx": scene.replace(".ma", ".fbx")}

        engine.serve_tools(workers=1)
        url = engine.serve(mcp="http://127.0.0.1:0", scheduler=False)["mcp_url"]
        init, sid = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}})
        assert init["result"]["serverInfo"]["name"] == "dcc-flow"
        post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        spec = "steps: [{id: e, tool: export_fbx, args: {scene: /shots/a.ma}}]"
        out, _ = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "workflows_run", "arguments": {"spec": spec, "wait_secs": 20}}}, sid)
        result = out["result"]["structuredContent"]
        assert result["status"] == "completed", out
        assert result["outputs"]["e"] == {"fbx": "/shots/a.fbx"}
        assert seen == ["/shots/a.ma"]
        engine.stop_serving()
    with dcc_flow.Engine() as other, pytest.raises(dcc_flow.DccFlowError, match="bearer token"):
        other.serve(mcp="http://0.0.0.0:0", scheduler=False)


SLOW_TOOLS = '''
import time
import dcc_flow

attempts = {}


def slow(i=0):
    time.sleep(0.2)
    return i


def flaky(i=0):
    call = dcc_flow.current_call()
    if call.attempt < 2:
        raise dcc_flow.Transient("try again")
    time.sleep(0.2)
    return i
'''


def test_cli_serve_mcp_runs_slow_and_retried_main_lane_tools(tmp_path):
    """dcc-flow serve left runs 'running' for good once a main-lane tool took longer than its
    100 ms poll or a step retried: the call it pulled at the deadline was dropped."""
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "slow_tools.py").write_text(SLOW_TOOLS)
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--mcp", "http://127.0.0.1:0",
                             "--tools", str(tmp_path / "slow_tools.py"), "--db", str(tmp_path / "flow.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert "MCP on " in line, line
        url = line.split("MCP on ")[1].strip()
        _, sid = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}})
        post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        spec = json.dumps({"steps": [
            {"id": "a", "tool": "slow", "args": {"i": 1}},
            {"id": "b", "tool": "flaky", "args": {"i": 2}, "retry": {"max_attempts": 3, "initial_delay_ms": 100}},
            {"id": "c", "tool": "slow", "args": {"i": 3}},
        ]})
        started = time.monotonic()
        out, _ = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "workflows_run", "arguments": {"spec": spec, "wait_secs": 15}}}, sid)
        result = out["result"]["structuredContent"]
        assert result["status"] == "completed", (result, time.monotonic() - started)
        assert result["outputs"] == {"a": 1, "b": 2, "c": 3}
    finally:
        proc.terminate()
        proc.wait(10)
