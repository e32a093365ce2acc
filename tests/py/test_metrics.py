"""Prometheus metrics (docs/operations/metrics.md): Engine.serve(metrics=...) and `dcc-flow serve --metrics`
answer GET /metrics in the text format, counting the runs made; off loopback needs a token."""

import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELLO = "name: hello\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]"
ENDED = 'dccflow_runs_ended_total{status="completed",workflow="hello"} 1'


def get(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_engine_serve_metrics_counts_a_run():
    with dcc_flow.Engine() as engine:
        info = engine.serve(metrics="127.0.0.1:0", scheduler=False)
        url = "http://%s/metrics" % info["metrics_addr"]
        assert engine.serve_status()["metrics_addr"] == info["metrics_addr"]
        status, body = get(url)
        assert status == 200 and "dccflow_runs_ended_total{" not in body  # nothing ran yet
        assert engine.run(HELLO).status.value == "completed"
        status, body = get(url)
        lines = body.splitlines()
        assert ENDED in lines, body
        assert 'dccflow_runs_started_total{workflow="hello"} 1' in lines
        assert 'dccflow_step_attempts_total{kind="tool",outcome="completed",tool="flow__echo"} 1' in lines
        assert 'dccflow_host_queue_depth{lane="main"} 0' in lines
        engine.stop_serving()
        with pytest.raises(OSError):
            get(url)


def test_sqlite_engine_exports_its_commit_latency(tmp_path):
    with dcc_flow.Engine(db=str(tmp_path / "flow.db")) as engine:
        info = engine.serve(metrics="127.0.0.1:0", scheduler=False)
        url = "http://%s/metrics" % info["metrics_addr"]
        assert engine.run(HELLO).status.value == "completed"
        counts = {}
        for line in get(url)[1].splitlines():
            name, _, value = line.partition(" ")
            if name in ("dccflow_db_commit_duration_seconds_count", "dccflow_db_commit_batches_count",
                        "dccflow_db_commit_duration_seconds_sum"):
                counts[name] = float(value)
        assert counts["dccflow_db_commit_duration_seconds_count"] >= 2, counts  # the run's start and end at least
        assert counts["dccflow_db_commit_batches_count"] == counts["dccflow_db_commit_duration_seconds_count"], counts
        assert counts["dccflow_db_commit_duration_seconds_sum"] > 0, counts


def test_metrics_off_loopback_needs_a_token():
    with dcc_flow.Engine() as engine:
        with pytest.raises(dcc_flow.InvalidRequestError, match="token"):
            engine.serve(metrics="0.0.0.0:0", scheduler=False)
        info = engine.serve(metrics="127.0.0.1:0", token="s3cret", scheduler=False)
        url = "http://%s/metrics" % info["metrics_addr"]
        with pytest.raises(urllib.error.HTTPError) as err:
            get(url)
        assert err.value.code == 401
        assert get(url, token="s3cret")[0] == 200


def test_cli_serve_metrics_after_a_webhook_run(tmp_path):
    (tmp_path / "wf").mkdir()
    (tmp_path / "wf" / "hello.yaml").write_text(HELLO)
    (tmp_path / "sched").mkdir()
    (tmp_path / "sched" / "hook.schedules.yaml").write_text(
        "schedules:\n  - {id: on_push, workflow: hello, trigger: {kind: webhook, path: /push}}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--workflows", "wf", "--schedules", "sched",
                             "--webhooks", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--db", ":memory:"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = b""
        deadline = time.monotonic() + 30
        while not line.endswith(b"\n") and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line += os.read(proc.stdout.fileno(), 4096)
        text = line.decode()
        assert "metrics on http://127.0.0.1:" in text, "no ready line within 30 s: %r" % text
        metrics_url = text.split("metrics on ")[1].split()[0].rstrip(";")
        hooks = text.split("webhooks on ")[1].split(";")[0].strip()
        req = urllib.request.Request(hooks + "/push", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 202
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline:
            body = get(metrics_url)[1]
            if ENDED in body.splitlines():
                break
            time.sleep(0.1)
        assert ENDED in body.splitlines(), body
        assert 'dccflow_schedule_fires_total{kind="fired",schedule="on_push"} 1' in body.splitlines()
        assert 'dccflow_webhook_deliveries_total{code="202",result="enqueued",schedule="on_push"} 1' in body.splitlines()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()


def test_mcp_http_address_answers_metrics_behind_its_token():
    with dcc_flow.Engine() as engine:
        mcp_url = engine.serve(mcp="http://127.0.0.1:0", token="s3cret", scheduler=False)["mcp_url"]
        assert engine.run(HELLO).status.value == "completed"
        url = mcp_url[: -len("/mcp")] + "/metrics"
        with pytest.raises(urllib.error.HTTPError) as err:
            get(url)
        assert err.value.code == 401
        status, body = get(url, token="s3cret")
        assert status == 200 and ENDED in body.splitlines(), body


def test_dashboard_address_answers_metrics_behind_its_token():
    # The issue asks for /metrics "on the same server" as the dashboard: serve(ui=) mounts it,
    # behind the dashboard's token rule.
    with dcc_flow.Engine() as engine:
        ui_url = engine.serve(ui="127.0.0.1:0", token="s3cret", scheduler=False)["ui_url"]
        assert engine.run(HELLO).status.value == "completed"
        url = ui_url.rstrip("/") + "/metrics"
        with pytest.raises(urllib.error.HTTPError) as err:
            get(url)
        assert err.value.code == 401
        status, body = get(url, token="s3cret")
        assert status == 200 and ENDED in body.splitlines(), body
