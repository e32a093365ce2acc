"""The command line turns the engine's tracing and other settings on (docs/reference/cli/conventions.md,
"Engine settings"; docs/guide/tracing.md): ``run``, ``resume``, ``serve`` and ``worker --db`` trace
when the standard OpenTelemetry variables ask for the OTLP export of traces, and take a JSON file of
engine settings with ``--config FILE`` (tracing, openlineage, env_allow, defaults, remotes, ...).

The commands run as subprocesses (the engine reads the variables of its process), against an OTLP
endpoint on 127.0.0.1 that counts the POSTs; the tool reports the traceparent it got."""

import argparse
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from conftest import PYTHON_DIR
from dcc_flow import _otel
from dcc_flow._cli import _engine
from dcc_flow._cli._base import CliError

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")

TOOLS = '''
import dcc_flow


def where():
    return {"traceparent": dcc_flow.current_call().traceparent}


def write(path):
    with open(path, "w") as f:
        f.write("made")
    dcc_flow.current_call().writes(path)
    return {"path": path}
'''

FLOW = "name: traced\nsteps:\n  - {id: a, tool: where}\n"


class _Sink(http.server.BaseHTTPRequestHandler):
    paths = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def sink():
    _Sink.paths = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture()
def work(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "flow.yaml").write_text(FLOW, encoding="utf-8")
    return tmp_path


def cli(work, *args, **env):
    """Run dcc-flow in work with the OTEL_* variables of this process removed and env added."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(PYTHONPATH=PYTHON_DIR, **env)
    environ.pop("DCC_FLOW_DB", None)
    environ.pop("DCC_FLOW_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(work), env=environ,
                          capture_output=True, text=True, encoding="utf-8", timeout=60)


def traceparent_of(proc):
    """The run id and the traceparent the tool of step a got, from run --json's lines."""
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]
    result = docs[-1]
    assert result["type"] == "result" and result["status"] == "completed", result
    return result["run_id"], result["outputs"]["a"]["traceparent"]


def trace_id(run_id):
    return hashlib.sha256(b"dcc-flow trace\x00" + run_id.encode()).hexdigest()[:32]


def test_the_otel_variables_turn_tracing_on(work, sink):
    proc = cli(work, "run", "flow.yaml", "--tools", "tools.py", "--json", "--db", ":memory:",
               OTEL_EXPORTER_OTLP_ENDPOINT=sink)
    run_id, tp = traceparent_of(proc)
    m = TRACEPARENT.match(tp or "")
    assert m and m.group(1) == trace_id(run_id), tp
    assert _Sink.paths and set(_Sink.paths) == {"/v1/traces"}, "the spans were not exported"


@pytest.mark.parametrize("env", [
    {},  # nothing asks for export
    {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "SINK"},
    {"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "SINK/v1/traces"},
], ids=["unset", "exporter-none", "sdk-disabled"])
def test_without_the_variables_asking_there_is_no_trace(work, sink, env):
    env = {k: v.replace("SINK", sink) for k, v in env.items()}
    _run_id, tp = traceparent_of(cli(work, "run", "flow.yaml", "--tools", "tools.py", "--json", "--db", ":memory:",
                                     **env))
    assert tp is None
    assert _Sink.paths == []


def test_config_file_tracing_wins_over_the_variables(work, sink):
    (work / "on.json").write_text(json.dumps({"tracing": {"enabled": True, "endpoint": sink}}), encoding="utf-8")
    _run_id, tp = traceparent_of(cli(work, "run", "flow.yaml", "--tools", "tools.py", "--json", "--db", ":memory:",
                                     "--config", "on.json"))
    assert TRACEPARENT.match(tp or ""), tp
    assert _Sink.paths
    _Sink.paths[:] = []
    (work / "off.json").write_text(json.dumps({"tracing": {"enabled": False}}), encoding="utf-8")
    _run_id, tp = traceparent_of(cli(work, "run", "flow.yaml", "--tools", "tools.py", "--json", "--db", ":memory:",
                                     "--config", "off.json", OTEL_EXPORTER_OTLP_ENDPOINT=sink))
    assert tp is None and _Sink.paths == []


def test_config_file_turns_openlineage_on(work):
    (work / "lineage.json").write_text(json.dumps({"openlineage": {"file": "lineage.jsonl"}}), encoding="utf-8")
    (work / "write.yaml").write_text("name: made\nsteps:\n  - {id: w, tool: write, args: {path: out.txt}}\n",
                                     encoding="utf-8")
    proc = cli(work, "run", "write.yaml", "--tools", "tools.py", "--json", "--db", ":memory:",
               "--config", "lineage.json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in (work / "lineage.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert events[1]["job"]["name"] == "made.w"
    assert [d["name"] for d in events[1]["outputs"]] == [str(work / "out.txt")]


def test_a_bad_otel_variable_is_one_line_saying_why_dcc_flow_traces(work, sink):
    proc = cli(work, "run", "flow.yaml", "--tools", "tools.py", "--db", ":memory:",
               OTEL_EXPORTER_OTLP_ENDPOINT=sink, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("dcc-flow run: error: invalid engine config: tracing: OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\"")
    assert line.endswith("(dcc-flow traces because OTEL_EXPORTER_OTLP_ENDPOINT is set; OTEL_TRACES_EXPORTER=none "
                         "turns its tracing off)")


@pytest.mark.parametrize("content,message", [
    ("{not json", "--config bad.json: not JSON: "),
    ("[1, 2]", "--config bad.json: expected a JSON object of engine settings"),
    ('{"db": "other.db"}', "--config bad.json: 'db' is not taken from the file; give it with --db PATH"),
    ('{"tracing": {"enabled": true, "endpoint": "ftp://x"}}',
     "invalid engine config: tracing.endpoint: must be an http:// or https:// URL"),
    ('{"tracng": {}}', "tracng"),
])
def test_a_bad_config_file_is_one_line(work, content, message):
    (work / "bad.json").write_text(content, encoding="utf-8")
    proc = cli(work, "run", "flow.yaml", "--tools", "tools.py", "--db", ":memory:", "--config", "bad.json")
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("dcc-flow run: error: ") and message in line, line


def test_a_missing_config_file_is_named(work):
    proc = cli(work, "resume", "last", "--db", ":memory:", "--config", "nowhere.json")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["dcc-flow resume: error: --config nowhere.json: No such file or directory"]


def test_worker_over_stdio_takes_no_config(work):
    (work / "c.json").write_text("{}", encoding="utf-8")
    proc = cli(work, "worker", "--tools", "tools.py", "--config", "c.json")
    assert proc.returncode == 2
    assert "--config needs --db postgresql://" in proc.stderr


# --- engine_config, without a process ---------------------------------------------------------


def _args(**kw):
    base = {"config": None, "remotes": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_engine_config_merges_the_file_the_options_and_workers(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"env_allow": ["STUDIO_*"], "lease_secs": 30, "remotes": {"maya": {"command": ["m"]}},
                                "tool_pools": {"maya__*": "maya"}}), encoding="utf-8")
    added = {"lease_secs": 5, "remotes": {"tools": {"command": ["w"]}},
             "tool_pools": {"maya__export": "tools", "other": "tools"}}
    cfg, by_env = _engine.engine_config(_args(config=str(path)), added, environ={})
    assert not by_env
    assert cfg == {"env_allow": ["STUDIO_*"], "lease_secs": 5,  # the option wins
                   "remotes": {"maya": {"command": ["m"]}, "tools": {"command": ["w"]}},
                   # the file's pattern keeps the tool it routes
                   "tool_pools": {"maya__*": "maya", "other": "tools"}}
    # --remotes FILE replaces the file's remotes; a pool --workers adds under a name it has is an error naming it
    remotes = tmp_path / "r.json"
    remotes.write_text(json.dumps({"tools": {"command": ["x"]}}), encoding="utf-8")
    with pytest.raises(CliError, match=r"^--remotes .*r\.json: remote 'tools' clashes"):
        _engine.engine_config(_args(config=str(path), remotes=str(remotes)), added, environ={})
    path.write_text(json.dumps({"remotes": {"tools": {"command": ["x"]}}}), encoding="utf-8")
    with pytest.raises(CliError, match=r"^--config .*c\.json: remote 'tools' clashes"):
        _engine.engine_config(_args(config=str(path)), added, environ={})


def test_engine_config_traces_when_the_environment_asks():
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert _engine.engine_config(_args(), environ=on) == ({"tracing": {"enabled": True}}, True)
    assert _engine.engine_config(_args(), env_tracing=False, environ=on) == ({}, False)  # a dry run
    assert _engine.engine_config(_args(), environ={}) == ({}, False)


@pytest.mark.parametrize("env,asked", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "console, OTLP"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "True"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "1"}, True),  # only "true" is true
])
def test_export_asked_follows_the_opentelemetry_variables(env, asked):
    endpoint, why_not = _otel.export_asked(env)
    assert bool(endpoint) is asked and bool(why_not) is not asked, (endpoint, why_not)


def test_worker_db_serves_the_remotes_of_its_config_file(work):
    # Checked before the database is reached: a config with no remotes and no --tools serves nothing.
    (work / "empty.json").write_text(json.dumps({"defaults": {"timeout_secs": 60}}), encoding="utf-8")
    proc = cli(work, "worker", "--db", "postgresql://nobody@127.0.0.1:1/none", "--config", "empty.json")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "dcc-flow worker: error: --config empty.json names no remote: give the tools to serve with --tools MODULE, "
        "or the pools to run in the file's remotes or with --remotes FILE"]


def test_unpause_takes_the_config_file_too(work):
    (work / "bad.json").write_text("[]", encoding="utf-8")
    proc = cli(work, "unpause", "last", "--db", ":memory:", "--config", "bad.json")
    assert proc.returncode == 1
    assert proc.stderr.startswith("dcc-flow unpause: error: --config bad.json: expected a JSON object of engine settings")
