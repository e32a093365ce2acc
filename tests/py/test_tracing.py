"""Traces (issue #38, docs/guide/tracing.md): with ``tracing`` on, every tool call gets the W3C
``traceparent`` of its span — in-process tools through ``current_call().traceparent``, pool
workers through the tools/call request's ``_meta`` — in the run's trace, whose id the engine
derives from the run id. The spans reach an OTLP/HTTP endpoint (here a stdlib server that only
counts the POSTs; tests/otelcol checks them with a real collector, in make test-long)."""

import hashlib
import http.server
import os
import re
import sys
import textwrap
import threading

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


def trace_id(run_id):
    """The trace id of a run started on its own (engine/internal/tracing/ids.go)."""
    return hashlib.sha256(b"dcc-flow trace\x00" + run_id.encode()).hexdigest()[:32]


class _Sink(http.server.BaseHTTPRequestHandler):
    posts = []  # (path, content type, body length)

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).posts.append((self.path, self.headers.get("Content-Type"), len(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def sink():
    _Sink.posts = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _seen_tool(engine, seen):
    @engine.tool(name="tr__where")
    def where():
        call = dcc_flow.current_call()
        seen.append(call.traceparent)
        return {"traceparent": call.traceparent}


def test_an_in_process_tool_gets_the_traceparent_of_its_call(sink):
    seen = []
    endpoint = "http://127.0.0.1:%d" % sink.server_address[1]
    with dcc_flow.Engine(config={"tracing": {"enabled": True, "endpoint": endpoint}}) as engine:
        _seen_tool(engine, seen)
        result = engine.run("steps: [{id: a, tool: tr__where}, {id: b, tool: tr__where}]")
        assert result.status is WorkflowStatus.COMPLETED, result.error
    assert len(seen) == 2
    ids = [TRACEPARENT.match(tp or "") for tp in seen]
    assert all(ids), seen
    assert {m.group(1) for m in ids} == {trace_id(result.run_id)}
    assert ids[0].group(2) != ids[1].group(2), "two calls, two spans"
    # Closing the engine exported the spans: OTLP protobuf POSTed to /v1/traces.
    assert _Sink.posts, "no export"
    assert all(path == "/v1/traces" and ctype == "application/x-protobuf" and n > 0 for path, ctype, n in _Sink.posts)


def test_without_tracing_there_is_no_traceparent():
    seen = []
    with dcc_flow.Engine() as engine:
        _seen_tool(engine, seen)
        assert engine.run("steps: [{id: a, tool: tr__where}]").status is WorkflowStatus.COMPLETED
    assert seen == [None]


POOL_TOOLS = textwrap.dedent('''
    import dcc_flow

    def register(engine):
        @engine.tool(name="trp__where")
        def where():
            return {"traceparent": dcc_flow.current_call().traceparent}
''')


@pytest.mark.skipif(sys.platform == "win32", reason="pool workers are POSIX processes here")
def test_a_pool_worker_gets_the_traceparent_through_the_call(tmp_path, sink):
    path = tmp_path / "trp_tools.py"
    path.write_text(POOL_TOOLS)
    python_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python")
    pool = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)],
            "env": {"PYTHONPATH": python_dir}, "workers": 1}
    endpoint = "http://127.0.0.1:%d" % sink.server_address[1]
    with dcc_flow.Engine(config={"remotes": {"maya": pool}, "tool_pools": {"trp__*": "maya"},
                                 "tracing": {"enabled": True, "endpoint": endpoint}}) as engine:
        result = engine.run("steps: [{id: a, tool: trp__where}]")
        assert result.status is WorkflowStatus.COMPLETED, result.error
    m = TRACEPARENT.match(result.outputs["a"]["traceparent"] or "")
    assert m, result.outputs
    assert m.group(1) == trace_id(result.run_id)


def test_worker_export_setup_says_why_it_did_nothing():
    from dcc_flow import _otel

    assert _otel.setup_export({}).startswith("not set up: no OTEL_EXPORTER_OTLP_ENDPOINT")
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert _otel.setup_export(dict(on, OTEL_SDK_DISABLED="true")) == "not set up: OTEL_SDK_DISABLED is true"
    assert _otel.setup_export(dict(on, OTEL_TRACES_EXPORTER="none")) == "not set up: OTEL_TRACES_EXPORTER is 'none'"
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        # This venv has no OpenTelemetry SDK (dcc_flow never requires it): the worker says so.
        assert "pip install opentelemetry-sdk" in _otel.setup_export(on)
    # Without OpenTelemetry imported by the process, a call's context costs a lookup, no import.
    assert _otel.enter("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") is None or \
        "opentelemetry.context" in sys.modules
    assert _otel.enter(None) is None
