"""Variables set from Python after the library is loaded (``os.environ[...] = ...`` in a DCC's
startup script) are what the engine reads: Go's own copy of the environment is taken when the
library loads, so every place the engine reads a variable goes through the live C environment.
"""

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import dcc_flow

TOKEN_VAR = "DCC_FLOW_TEST_LIVE_TOKEN"
SECRET_VAR = "DCC_FLOW_TEST_LIVE_SECRET"


class _TokenMCP(BaseHTTPRequestHandler):
    """Just enough of an MCP server over streamable HTTP (initialize, tools/call) for one tool,
    ``import_asset``, behind a bearer token. Every Authorization header it sees is recorded."""

    token = ""
    seen = []  # type: list

    def log_message(self, *args):  # quiet
        pass

    def _reply(self, status, doc=None):
        body = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        if doc is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "s1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        auth = self.headers.get("Authorization", "")
        self.seen.append(auth)
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if auth != "Bearer " + self.token:
            return self._reply(401, {"error": "unauthorized"})
        if "id" not in msg:  # a notification
            return self._reply(202)
        if msg["method"] == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "unreal-stand-in", "version": "1"}}
        elif msg["method"] == "tools/call":
            out = {"imported": msg["params"]["arguments"]["path"]}
            result = {"content": [{"type": "text", "text": json.dumps(out)}], "structuredContent": out}
        else:
            result = {}
        self._reply(200, {"jsonrpc": "2.0", "id": msg["id"], "result": result})

    def do_DELETE(self):
        self._reply(200)


@pytest.fixture
def token_server():
    handler = type("Handler", (_TokenMCP,), {"token": "s3cret", "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/mcp" % server.server_address[1], handler.seen
    server.shutdown()
    server.server_close()


def test_remote_token_env_set_after_the_library_loaded(monkeypatch, token_server):
    url, seen = token_server
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    config = {"remotes": {"unreal": {"url": url, "token_env": TOKEN_VAR, "timeout_secs": 30}}}
    with dcc_flow.Engine(config=config) as engine:  # the library is loaded, the engine open
        monkeypatch.setenv(TOKEN_VAR, "s3cret")  # os.environ[...] = ..., as a startup script does
        result = engine.run("steps: [{id: push, kind: tool_remote, dcc: unreal, tool: import_asset,"
                            " args: {path: /fbx/hero.fbx}}]")
    assert result.ok, result.error
    assert result.outputs["push"] == {"imported": "/fbx/hero.fbx"}
    assert seen and set(seen) == {"Bearer s3cret"}


def test_webhook_secret_env_set_after_the_library_loaded(monkeypatch):
    monkeypatch.delenv(SECRET_VAR, raising=False)
    with dcc_flow.Engine() as engine:
        monkeypatch.setenv(SECRET_VAR, "It's a Secret to Everybody")
        engine.schedule("name: on_drop\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]",
                        webhook="/hooks/drop", secret_env=SECRET_VAR, id="on_drop")
        assert not engine.schedules()[0].get("secret_missing")
        addr = engine.serve(webhooks="127.0.0.1:0")["webhooks_addr"]
        body = b'{"file": "/drops/a.ma"}'
        signature = "sha256=" + dcc_flow.hmac_sha256_hex("It's a Secret to Everybody", body)
        req = urllib.request.Request("http://%s/hooks/drop" % addr, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "X-Hub-Signature-256": signature})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, doc = resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            status, doc = err.code, json.loads(err.read())
        assert status == 202, doc
        assert engine.get_status(doc["run_id"]).run_id == doc["run_id"]
        engine.stop_serving()
