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


def _read_until(stream, needle, timeout=30.0):
    """Bytes of stream until needle appears (or timeout, or EOF)."""
    data = b""
    deadline = time.monotonic() + timeout
    while needle not in data and time.monotonic() < deadline:
        if select.select([stream], [], [], 0.5)[0]:
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            data += chunk
    return data.decode()


def test_serve_ui_prints_its_url_and_serves_the_dashboard(tmp_path):
    """`dcc-flow serve --ui 127.0.0.1:0` prints `ui: URL` on stderr; the page and the API answer."""
    import json
    import urllib.request
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--ui", "127.0.0.1:0", "--db", ":memory:"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = _read_until(proc.stderr, b"\n")
        urls = [ln[4:].strip() for ln in err.splitlines() if ln.startswith("ui: ")]
        assert urls and urls[0].startswith("http://127.0.0.1:") and urls[0].endswith("/"), err
        with urllib.request.urlopen(urls[0], timeout=10) as res:
            page = res.read().decode()
            assert res.headers["Content-Security-Policy"] == "default-src 'self'"
        assert 'data-testid="runs-table"' not in page and 'src="app.js"' in page
        with urllib.request.urlopen(urls[0] + "api/runs", timeout=10) as res:
            assert json.loads(res.read()) == {"runs": [], "next_cursor": ""}
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()


def test_serve_ui_off_loopback_needs_a_token(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCCFLOW_TOKEN", None)  # serve takes the token from it when no flag gives one
    res = subprocess.run([sys.executable, "-m", "dcc_flow", "serve", "--ui", "0.0.0.0:0", "--db", ":memory:"],
                         cwd=str(tmp_path), env=env, capture_output=True, timeout=60)
    assert res.returncode == 1 and b"--token" in res.stderr, res.stderr
    empty = tmp_path / "token"
    empty.write_text("\n")
    res = subprocess.run([sys.executable, "-m", "dcc_flow", "serve", "--ui", "0.0.0.0:0", "--token-file", str(empty),
                          "--db", ":memory:"], cwd=str(tmp_path), env=env, capture_output=True, timeout=60)
    assert res.returncode == 1 and b"is empty" in res.stderr, res.stderr


def test_engine_serve_ui_with_a_token(tmp_path):
    import urllib.error
    import urllib.request

    from dcc_flow import Engine
    with Engine() as engine:
        info = engine.serve(ui="127.0.0.1:0", token="s3cret", scheduler=False)
        url = info["ui_url"]
        assert engine.serve_status()["ui_url"] == url
        try:
            urllib.request.urlopen(url + "api/runs", timeout=10)
            raise AssertionError("no 401 without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        req = urllib.request.Request(url + "api/runs", headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(req, timeout=10) as res:
            assert res.status == 200
        engine.stop_serving()
