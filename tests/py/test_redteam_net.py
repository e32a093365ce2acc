"""Issue #26, items 16-20 (the network surfaces), through the Python API, the CLI and the soak.

Every server here listens on 127.0.0.1; every load loop is bounded in count and time.
"""
import importlib.util
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}}


def http(url, body=b"", headers=None, method="POST"):
    headers = dict(headers or {})
    headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers


def mcp_headers(**extra):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(extra)
    return h


def test_serve_caps_mcp_bodies_and_checks_origin():
    """mcp_max_body_bytes and allowed_origins reach the MCP server: a body over the cap is 413, a
    foreign Origin 403, an allowed one 200 with its CORS answer. Before: 200 for both."""
    with dcc_flow.Engine() as engine:
        url = engine.serve(mcp="http://127.0.0.1:0", scheduler=False, mcp_max_body_bytes=2048,
                           allowed_origins=["https://tools.studio.example"])["mcp_url"]
        big = dict(INIT, params=dict(INIT["params"], clientInfo={"name": "x" * 4096, "version": "1"}))
        code, text, _ = http(url, json.dumps(big).encode(), mcp_headers())
        assert code == 413 and "payload_too_large" in text and "mcp_max_body_bytes" in text, text
        code, text, _ = http(url, json.dumps(INIT).encode(), mcp_headers(Origin="http://evil.example"))
        assert code == 403 and "forbidden_origin" in text, text
        code, text, headers = http(url, json.dumps(INIT).encode(), mcp_headers(Origin="https://tools.studio.example"))
        assert code == 200 and headers.get("Access-Control-Allow-Origin") == "https://tools.studio.example", text
        code, text, _ = http(url, json.dumps(INIT).encode(), mcp_headers())
        assert code == 200 and '"serverInfo"' in text
        engine.stop_serving()


def test_serve_rejects_invalid_mcp_limits():
    with dcc_flow.Engine() as engine:
        with pytest.raises(dcc_flow.DccFlowError) as err:
            engine.serve(mcp="http://127.0.0.1:0", scheduler=False, mcp_max_body_bytes=10)
        assert "mcp_max_body_bytes" in str(err.value) and err.value.code == "invalid_request"
        with pytest.raises(dcc_flow.DccFlowError) as err:
            engine.serve(mcp="http://127.0.0.1:0", scheduler=False, allowed_origins=["evil.example"])
        assert "allowed_origins" in str(err.value)


def test_serve_refuses_unsigned_webhooks_off_loopback():
    """An unsigned webhook schedule is not served on a non-loopback address (the refusal comes
    before the listen: nothing binds 0.0.0.0 here). Before: served to the network."""
    with dcc_flow.Engine() as engine:
        engine.schedule("name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]", webhook="/push", id="on_push")
        with pytest.raises(dcc_flow.DccFlowError) as err:
            engine.serve(webhooks="0.0.0.0:0", scheduler=False)
        text = str(err.value)
        assert '"on_push"' in text and "secret_env" in text and "--allow-unsigned-webhooks" in text, text
        assert "webhooks_addr" not in engine.serve_status()
        # Loopback is fine, with or without the opt-in.
        addr = engine.serve(webhooks="127.0.0.1:0", scheduler=False, allow_unsigned_webhooks=True)["webhooks_addr"]
        code, text, _ = http("http://%s/push" % addr, b"{}", {"Content-Type": "application/json"})
        assert code == 202, text
        engine.stop_serving()


def test_timestamped_webhook_replay_is_a_duplicate(monkeypatch):
    """signature="timestamped": a captured request replayed with a new delivery id returns the
    first run instead of starting another; a signature outside tolerance_secs is refused."""
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    with dcc_flow.Engine() as engine:
        spec = engine.schedule("name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]", webhook="/push",
                               id="on_push", secret_env="HOOK_SECRET", signature="timestamped", tolerance_secs=60,
                               max_concurrent=0)
        assert spec.trigger.signature == "timestamped" and spec.trigger.tolerance_secs == 60
        listed = engine.schedules()[0]["trigger"]
        assert listed["signature"] == "timestamped" and listed["tolerance_secs"] == 60
        addr = engine.serve(webhooks="127.0.0.1:0", scheduler=False)["webhooks_addr"]
        body = b'{"n": 1}'
        sig = dcc_flow.timestamped_signature("s3cret", body)
        code, text, _ = http("http://%s/push" % addr, body, {"X-Dcc-Flow-Signature": sig, "X-GitHub-Delivery": "a"})
        assert code == 202, text
        first = json.loads(text)["run_id"]
        code, text, _ = http("http://%s/push" % addr, body, {"X-Dcc-Flow-Signature": sig, "X-GitHub-Delivery": "b"})
        assert code == 200 and json.loads(text)["duplicate"] is True and json.loads(text)["run_id"] == first, text
        old = dcc_flow.timestamped_signature("s3cret", body, timestamp=1_000_000_000)
        code, text, _ = http("http://%s/push" % addr, body, {"X-Dcc-Flow-Signature": old})
        assert code == 401 and json.loads(text)["error"] == "signature_expired", text
        code, text, _ = http("http://%s/push" % addr, body, {"X-Hub-Signature-256": "sha256=" + "0" * 64})
        assert code == 401 and "X-Dcc-Flow-Signature" in text
        engine.stop_serving()


def test_cli_serve_has_the_network_options():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-m", "dcc_flow", "serve", "--help"], env=env, capture_output=True,
                         text=True, timeout=60).stdout
    for flag in ("--mcp-max-body-bytes", "--allowed-origin", "--allow-unsigned-webhooks", "--mcp-max-sessions",
                 "--mcp-session-idle-secs"):
        assert flag in out


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak_net", os.path.join(ROOT, "scripts", "soak_net.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_net_soak(tmp_path):
    """A few seconds of scripts/soak_net.py: slowloris connections, a 1,000-request batch with
    malformed JSON-RPC, the dashboard's load, and probes that must be answered within 5 s; threads,
    goroutines and event subscriptions come back."""
    report = _soak_module().run_soak(duration=3.0, n_slowloris=60, batch=1000, probe_bound=5.0, settle=5.0,
                                     workdir=str(tmp_path), warmup=0.3)
    assert not report["probe_failures"] and report["probes"] >= 3, report
    assert report["after_threads"] <= report["thread_bound"], report
    assert report["after_rss_mib"] <= report["rss_bound_mib"], report
    counts = report["requests"]
    assert any(k.startswith("mcp malformed 400") for k in counts), counts
    assert counts.get("mcp malformed 403", 0) >= 0 and report["exit_code"] == 0, report
    assert not any(k.startswith("client error") for k in counts), counts
    # the dashboard under the same load: every answer an allowed one, its event streams gone after
    assert report["ui_requests"] > 0 and report["sse_streams_opened"] > 0 and not report["ui_failures"], report
    assert report["event_subscriptions_rest_peak_after"][2] == 0, report
    assert report["goroutines_rest_peak_after"][2] <= report["goroutine_bound"], report
