"""`dcc-flow serve` with webhooks and MCP over HTTP at once (both doors in one serve_start)."""
import os
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serve_webhooks_and_mcp_together_gets_ready_and_stops(tmp_path):
    """The request that starts the webhook server and then the MCP server used to take the doors'
    lock twice (the first still held until the request ended): serve never printed its ready line
    and ignored SIGTERM."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--webhooks", "127.0.0.1:0",
                             "--mcp", "http://127.0.0.1:0", "--db", ":memory:"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = b""
        deadline = time.monotonic() + 30
        while not line.endswith(b"\n") and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line += os.read(proc.stdout.fileno(), 4096)
        text = line.decode()
        assert "webhooks on http://127.0.0.1:" in text and "MCP on http://127.0.0.1:" in text, (
            "no ready line within 30 s: %r" % text)
        time.sleep(0.5)  # serve installs its signal handlers just after the ready line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
