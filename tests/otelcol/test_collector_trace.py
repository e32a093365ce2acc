"""A run's trace as a real OpenTelemetry Collector receives it (issue #38, docs/guide/tracing.md).

``dccflow-otelcol`` (tests/otelcol: the collector's OTLP receiver and file exporter, built from
their Go modules by ``make otelcol``) listens on 127.0.0.1 and writes every trace request it
decodes as a line of OTLP JSON. An engine with ``tracing`` on runs a workflow with an in-process
tool and a pool worker's tool; the file must hold the tree run → attempt → call, and under the
pool call the span the tool made itself with the OpenTelemetry Python SDK, when the worker's
Python has it (``make test-otelcol`` makes build/otel-venv with opentelemetry-sdk and the OTLP
HTTP exporter; DCCFLOW_OTEL_PYTHON names another). Run by ``make test-otelcol`` (part of
``make test-long``): building the collector takes minutes on a cold cache.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dcc_flow  # noqa: E402
from dcc_flow import WorkflowStatus  # noqa: E402

COLLECTOR = os.environ.get("DCCFLOW_OTELCOL") or os.path.join(ROOT, "build", "otelcol", "dccflow-otelcol")
OTEL_PYTHON = os.environ.get("DCCFLOW_OTEL_PYTHON") or os.path.join(ROOT, "build", "otel-venv", "bin", "python")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def collector(tmp_path):
    assert os.path.exists(COLLECTOR), "no collector at %s: run make otelcol" % COLLECTOR
    port = _free_port()
    out = tmp_path / "traces.jsonl"
    env = dict(os.environ, OTELCOL_PORT=str(port), OTELCOL_OUT=str(out))
    with open(tmp_path / "collector.log", "w") as log:
        proc = subprocess.Popen([COLLECTOR, "--config", os.path.join(HERE, "collector.yaml")], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_listening(proc, port, tmp_path / "collector.log")
            yield _Collector("http://127.0.0.1:%d" % port, out)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_listening(proc, port, log):
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail("the collector did not start: %s" % log.read_text())
            time.sleep(0.05)


class _Collector:
    def __init__(self, endpoint, out):
        self.endpoint = endpoint
        self.out = out

    def spans(self, want, timeout=20.0):
        """The spans written so far, once there are at least ``want`` (the exporter flushes
        every 100 ms), each with ``attrs`` and its resource's ``service``."""
        end = time.time() + timeout
        while True:
            got = []
            if self.out.exists():
                text = self.out.read_text()
                for line in text[:text.rfind("\n") + 1].splitlines():  # whole lines: one may be half written
                    if line.strip():
                        got.extend(_spans_of(json.loads(line)))
            if len(got) >= want or time.time() > end:
                return got
            time.sleep(0.1)


def _spans_of(request):
    for rs in request.get("resourceSpans", []):
        res = {a["key"]: _value(a["value"]) for a in rs.get("resource", {}).get("attributes", [])}
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                sp["attrs"] = {a["key"]: _value(a["value"]) for a in sp.get("attributes", [])}
                sp["service"] = res.get("service.name")
                yield sp


def _value(v):
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    return v


def _has_otel_sdk(python):
    if not os.path.exists(python):
        return False
    code = "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


# The pool's tool ``tr__export`` opens its own span with the OpenTelemetry Python SDK when the
# worker's Python has it, with no set-up code: the worker set up the export from OTEL_*, and the
# call's span is the current context while the tool runs (dcc_flow/_otel.py).
POOL_TOOLS = textwrap.dedent('''
    import dcc_flow

    def register(engine):
        @engine.tool(name="tr__export")
        def export(scene="a.ma"):
            tp = dcc_flow.current_call().traceparent
            try:
                from opentelemetry import trace
            except ImportError:
                return {"traceparent": tp, "sdk": False}
            with trace.get_tracer("studio.tools").start_as_current_span("scene open") as span:
                span.set_attribute("scene", scene)
            trace.get_tracer_provider().force_flush()  # the test reads the collector's file next
            return {"traceparent": tp, "sdk": True}
''')

SPEC = """
name: traced_intake
steps:
  - {id: list, tool: tr__list}
  - {id: export, tool: tr__export, args: {scene: "{{list.scene}}"}}
"""


def test_the_collector_receives_run_attempt_call_and_the_tools_own_span(collector, tmp_path):
    tools = tmp_path / "tr_tools.py"
    tools.write_text(POOL_TOOLS)
    python = OTEL_PYTHON if _has_otel_sdk(OTEL_PYTHON) else sys.executable
    sdk = python != sys.executable
    worker_env = {"PYTHONPATH": os.path.join(ROOT, "python"), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
                  "OTEL_SERVICE_NAME": "maya-worker"}
    pool = {"command": [python, "-m", "dcc_flow", "worker", "--tools", str(tools)], "env": worker_env, "workers": 1}
    config = {"remotes": {"maya": pool}, "tool_pools": {"tr__export": "maya"},
              "tracing": {"enabled": True, "endpoint": collector.endpoint, "service_name": "dcc-flow-test"}}
    with dcc_flow.Engine(config=config) as engine:
        @engine.tool(name="tr__list")
        def list_scenes():
            return {"scene": "sh010.ma", "traceparent": dcc_flow.current_call().traceparent}

        result = engine.run(SPEC)
        assert result.status is WorkflowStatus.COMPLETED, result.error
    run_id = result.run_id
    assert result.outputs["export"]["sdk"] is sdk

    want = 5 + (1 if sdk else 0)  # the run, two attempts, two calls (+ the tool's span)
    spans = collector.spans(want)
    by_id = {s["spanId"]: s for s in spans}
    assert len(by_id) == want, sorted(s["name"] for s in spans)
    (run,) = [s for s in spans if s["name"] == "run traced_intake"]
    assert run["attrs"]["cicd.pipeline.run.id"] == run_id
    assert run["attrs"]["cicd.pipeline.result"] == "success"
    assert "parentSpanId" not in run or not run["parentSpanId"]
    assert run["service"] == "dcc-flow-test"
    assert {s["traceId"] for s in spans} == {run["traceId"]}, "one trace"

    for step, tool in (("list", "tr__list"), ("export", "tr__export")):
        (attempt,) = [s for s in spans if s["name"] == step]
        assert attempt["parentSpanId"] == run["spanId"]
        assert attempt["attrs"]["cicd.pipeline.task.run.result"] == "success"
        assert attempt["attrs"]["dcc_flow.step.key"] == step
        (call,) = [s for s in spans if s.get("parentSpanId") == attempt["spanId"]]
        assert call["name"] == "execute_tool " + tool
        assert call["kind"] == 3  # SPAN_KIND_CLIENT
        assert call["attrs"]["gen_ai.tool.name"] == tool
        tp = result.outputs[step]["traceparent"]
        assert tp == "00-%s-%s-01" % (call["traceId"], call["spanId"]), (step, tp)
        if step == "export":
            assert call["attrs"]["cicd.worker.id"].startswith("maya/")
            if sdk:
                (own,) = [s for s in spans if s.get("parentSpanId") == call["spanId"]]
                assert own["name"] == "scene open"
                assert own["attrs"]["scene"] == "sh010.ma"
                assert own["service"] == "maya-worker"
    if not sdk:
        pytest.skip("checked run → attempt → call; the tool's own span needs opentelemetry-sdk and "
                    "opentelemetry-exporter-otlp-proto-http in the worker's Python (%s has neither: "
                    "make test-otelcol makes build/otel-venv)" % python)
