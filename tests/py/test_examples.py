"""Every example of examples/ runs, with the commands its comments and the README give."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def env_for(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DCC_FLOW_DB=str(tmp_path / "flow.db"),
               VENDOR_INTAKE_ROOT=str(tmp_path / "intake"))
    return env


def dcc_flow_argv(command_line):
    """A documented `dcc-flow ...` line as an argv that runs this checkout's package."""
    argv = shlex.split(re.sub(r"\\+\n\s*", " ", command_line))
    assert argv[0] == "dcc-flow", command_line
    return [sys.executable, "-m", "dcc_flow"] + argv[1:]


def commented_command(path, after):
    """The command in the comment block of path that follows the line containing `after`."""
    with open(path, encoding="utf-8") as f:
        lines = [line[1:].strip() if line.startswith("#") else None for line in f]
    start = next(i for i, line in enumerate(lines) if line is not None and after in line)
    cmd = []
    for line in lines[start + 1:]:
        if line is None or (not line and cmd):
            break
        if line:
            cmd.append(line.rstrip("\\").strip())
            if not line.endswith("\\"):
                break
    return " ".join(cmd)


def test_vendor_intake_yaml_with_its_tools_writes_the_exports(tmp_path):
    with open(os.path.join(EXAMPLES, "vendor_intake_tools.py"), encoding="utf-8") as f:
        doc = f.read()
    line = re.search(r"^\s+(dcc-flow run .*?--approve-all)$", doc, re.M | re.S).group(1)
    proc = subprocess.run(dcc_flow_argv(line), cwd=ROOT, env=env_for(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["status"] == "completed"
    fbx = sorted(os.listdir(tmp_path / "intake" / "fbx"))
    assert fbx == ["chair.fbx", "hero.fbx", "lamp.fbx"]
    hero = (tmp_path / "intake" / "fbx" / "hero.fbx").read_text()
    assert hero.startswith("FBX 7.4") and "hero.ma" in hero
    assert [it["export"]["fbx"] for it in result["outputs"]["per_file"]] == \
        [str(tmp_path / "intake" / "fbx" / n) for n in fbx]


def test_nightly_schedule_lists_with_its_next_fire(tmp_path):
    proc = subprocess.run(dcc_flow_argv("dcc-flow schedules examples/schedules --workflows examples"), cwd=ROOT,
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "nightly_intake" in proc.stdout and "America/New_York" in proc.stdout


def read_line(proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line:
            return line
        if proc.poll() is not None:
            break
    raise AssertionError("no output from %s: %s" % (proc.args, proc.stderr.read() if proc.stderr else ""))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (.ci/run installs it)")
def test_webhook_example_with_its_curl_line_and_an_approval(tmp_path):
    path = os.path.join(EXAMPLES, "webhooks", "upload.schedules.yaml")
    serve_line = commented_command(path, "Serve it with").replace("127.0.0.1:8787", "127.0.0.1:0")
    env = env_for(tmp_path)
    server = subprocess.Popen(dcc_flow_argv(serve_line), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        first = read_line(server)
        addr = re.search(r"webhooks on http://(127\.0\.0\.1:\d+)", first).group(1)
        curl = commented_command(path, "and fire it").replace("127.0.0.1:8787", addr)
        assert curl.startswith("curl ")
        answer = json.loads(subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=30,
                                           check=True).stdout)
        assert answer["status"] == "enqueued"
        run_id = answer["run_id"]
        again = json.loads(subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=30,
                                          check=True).stdout)
        assert again["run_id"] == run_id and again["duplicate"] is True

        # The server logs the run; its approval is answered from "another terminal".
        lines = [read_line(server)]
        while "waits for approval of human_gate" not in lines[-1]:
            lines.append(read_line(server))
        assert "dcc-flow approve %s human_gate" % run_id in lines[-1]
        approve = subprocess.run(dcc_flow_argv("dcc-flow approve %s human_gate" % run_id), cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=60)
        assert approve.returncode == 0, approve.stderr
        while " completed " not in lines[-1]:
            lines.append(read_line(server))
        assert run_id in lines[-1]
        assert sorted(os.listdir(tmp_path / "intake" / "fbx")) == ["chair.fbx", "hero.fbx", "lamp.fbx"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode == 0, server.stderr.read()


def test_mcp_client_configuration_starts_a_working_server(tmp_path):
    """The MCP snippet, launched as a client would: initialize, list tools, run, approve."""
    with open(os.path.join(EXAMPLES, "mcp", "claude_desktop_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    server = config["mcpServers"]["dcc-flow"]
    args = list(server["args"])
    args[args.index("--db") + 1] = str(tmp_path / "mcp.db")
    env = dict(env_for(tmp_path), **{k: str(tmp_path / "intake") for k in server["env"]})
    proc = subprocess.Popen(dcc_flow_argv(" ".join([server["command"]] + [shlex.quote(a) for a in args])), cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids = iter(range(1, 1000))

    def rpc(method, params=None):
        msg = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params or {}}
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        while True:
            reply = json.loads(read_line(proc))
            if reply.get("id") == msg["id"]:
                assert "error" not in reply, reply
                return reply["result"]

    def tool(name, **arguments):
        result = rpc("tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        return result["structuredContent"]

    try:
        rpc("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                           "clientInfo": {"name": "examples-test", "version": "1"}})
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        proc.stdin.flush()
        names = {t["name"] for t in rpc("tools/list")["tools"]}
        assert {"workflows_run", "workflows_get_status", "workflows_approve"} <= names
        started = tool("workflows_run", workflow="vendor_intake", inputs={"date": "2026-11-22"})
        run_id = started["workflow_id"]
        deadline = time.time() + 60
        status = tool("workflows_get_status", workflow_id=run_id)
        while status["status"] != "waiting" and time.time() < deadline:
            time.sleep(0.05)
            status = tool("workflows_get_status", workflow_id=run_id)
        assert status["status"] == "waiting", status
        tool("workflows_approve", workflow_id=run_id, step="human_gate", approved=True)
        while status["status"] != "completed" and time.time() < deadline:
            time.sleep(0.05)
            status = tool("workflows_get_status", workflow_id=run_id)
        assert status["status"] == "completed", status
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait(timeout=30)
