"""dcc_flow on a PostgreSQL database (docs/operations/cluster.md): ``Engine(db="postgresql://…")`` and
``--db postgresql://…`` run and keep workflows there.

The tests start a throwaway PostgreSQL cluster (initdb + pg_ctl in a temporary folder, on a free
127.0.0.1 port, as the ``postgres`` user when run as root, fsync off), as the Go tests do
(internal/pgtest). Without initdb (and on Windows) they are skipped with a loud message, except
under CI=true on Linux, where they fail: CI installs postgresql (.ci/run)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import dcc_flow
from conftest import PYTHON_DIR, ROOT
from dcc_flow import Engine, WorkflowStatus

sys.path.insert(0, os.path.join(ROOT, "scripts", "soak"))
import soak_pg  # noqa: E402  (the cluster helper the cluster soak shares)

# One pytest-xdist worker runs this file (make test-py): one start of its throwaway PostgreSQL cluster, not one
# per worker, and no two of them loading the machine at once.
pytestmark = pytest.mark.xdist_group("test_postgres")


@pytest.fixture(scope="module")
def cluster():
    """(bin folder, port) of a running throwaway cluster, stopped and removed afterwards."""
    if soak_pg.bin_dir() is None:
        msg = "no PostgreSQL server binaries (initdb): install postgresql-15"
        if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
            pytest.fail(msg)
        sys.stderr.write("\n!!! SKIPPING the PostgreSQL tests: %s !!!\n" % msg)
        pytest.skip(msg)
    pg = soak_pg.Cluster()
    try:
        yield pg.bin, pg.port
    finally:
        pg.stop()


@pytest.fixture
def pg_url(cluster):
    """The URL of a new database of the cluster."""
    bin_dir, port = cluster
    name = "t" + uuid.uuid4().hex[:12]
    subprocess.run([os.path.join(bin_dir, "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name],
                   check=True, capture_output=True, timeout=60)
    return "postgresql://postgres@127.0.0.1:%d/%s?sslmode=disable" % (port, name)


def _within(timeout, read):
    """What read() returns if it returns within timeout seconds, else None (it goes on in a
    daemon thread: a read of a pipe cannot be interrupted)."""
    got = []
    reader = threading.Thread(target=lambda: got.append(read()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else None


def worker_banner(worker, prefix, *words, timeout=60):
    """The first line the ``dcc-flow worker`` process printed, which must start with prefix and
    contain words. A worker that prints nothing within timeout seconds (wedged at start, or gone)
    or prints something else is killed, and the test fails with the line and its stderr instead of
    hanging on readline (or on reading the stderr of a live worker)."""
    line = _within(timeout, worker.stdout.readline)
    if line and line.startswith(prefix) and all(w in line for w in words):
        return line
    running = worker.poll() is None
    worker.kill()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    err = _within(10, worker.stderr.read)  # its pool's processes may still hold the pipe
    if line is None:
        what = "printed no line within %d s%s" % (timeout, " (killed)" if running else "")
    else:
        what = "printed %r, want a line starting %r with %s" % (line, prefix, list(words))
    pytest.fail("the worker (exit %s) %s; its stderr: %s" % (worker.returncode, what, err), pytrace=False)


FLOW = """\
name: intake
steps:
  - id: per_file
    kind: foreach
    items: [1, 2, 3]
    steps: [{id: export, tool: export, args: {i: "{{item}}"}}]
  - {id: total, tool: flow__echo, args: {value: "{{per_file}}"}}
"""


def test_engine_runs_and_keeps_a_workflow_on_postgres(pg_url):
    with Engine(db=pg_url) as eng:
        @eng.tool()
        def export(i):
            return i * 10

        result = eng.run(FLOW)
        assert result.ok, result.error
        assert result.outputs["total"]["value"] == [{"export": 10}, {"export": 20}, {"export": 30}]
        run_id = result.run_id

    # Another engine (a new process would do the same) finds the run and its steps there.
    with Engine(db=pg_url) as eng:
        (stored,) = eng.runs()
        assert stored.run_id == run_id and stored.status is WorkflowStatus.COMPLETED
        keys = [s.key for s in eng.get_status(run_id, all_steps=True).steps]
        assert "per_file[2].export" in keys and "total" in keys

    # The CLI takes the URL as --db.
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    out = subprocess.run([sys.executable, "-m", "dcc_flow", "runs", "--db", pg_url], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert run_id in out.stdout and "completed" in out.stdout


def test_many_engines_share_the_database_and_the_password_never_shows(pg_url):
    with Engine(db=pg_url, lease_secs=2) as first:
        with Engine(db=pg_url, lease_secs=2) as second:  # no one-owner lock on PostgreSQL
            result = second.run(FLOW.replace("tool: export", "tool: flow__echo").replace('args: {i: "{{item}}"}', 'args: {value: "{{item}}"}'))
            assert result.ok, result.error
            assert [r.run_id for r in first.runs()] == [result.run_id]
        with Engine(db=pg_url, read_only=True) as viewer:
            assert len(viewer.runs()) == 1
    with pytest.raises(dcc_flow.DccFlowError) as info:
        Engine(db=pg_url, lease_secs=0.01)
    assert info.value.code == "invalid_request" and "lease_secs" in str(info.value)
    bad = "postgresql://flow:s3cret@127.0.0.1:1/flow?connect_timeout=2"
    with pytest.raises(dcc_flow.DccFlowError) as info:
        Engine(db=bad)
    assert info.value.code == "storage" and "s3cret" not in str(info.value)


def test_worker_command_serves_queued_calls_from_the_database(pg_url, tmp_path):
    """``dcc-flow worker --db URL --tools MODULE``: an engine that does not host ``export`` runs a
    workflow calling it; the calls go through the database's tool-call queue to the worker process,
    which runs them (its pid in the output); SIGTERM stops it cleanly (docs/operations/cluster.md)."""
    tools = tmp_path / "farm_tools.py"
    tools.write_text("import os\n\ndef export(i):\n    return {'v': i * 10, 'pid': os.getpid()}\n")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    worker = subprocess.Popen([sys.executable, "-m", "dcc_flow", "worker", "--db", pg_url, "--tools", str(tools),
                               "--lease-secs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT)
    try:
        worker_banner(worker, "worker serving 1 tool(s)", "export")
        with Engine(db=pg_url, lease_secs=1) as eng:  # hosts no export
            result = eng.run(FLOW, timeout=30)
            assert result.ok, result.error
            values = result.outputs["total"]["value"]
            assert [v["export"]["v"] for v in values] == [10, 20, 30]
            assert {v["export"]["pid"] for v in values} == {worker.pid}
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            rc = worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    assert rc == 0, worker.stderr.read()


def test_worker_command_runs_its_pool_for_engines_without_it(pg_url, tmp_path):
    """``dcc-flow worker --db URL --remotes FILE``: a farm node has the ``maya`` pool (processes
    of ``dcc_flow worker --tools``), the orchestrating engine has none; its ``pool: maya`` step
    and its ``tool_remote`` step go through the database's tool-call queue to the worker
    process, which runs them on its pool; the step records name the worker engine and the pool
    worker, and keep what the tool printed there (docs/operations/cluster.md, "Pools and remotes on other
    engines")."""
    tools = tmp_path / "maya_tools.py"
    tools.write_text("import os\n\ndef export(i):\n    print('exporting', i)\n"
                     "    return {'v': i * 10, 'pid': os.getpid()}\n")
    remotes = tmp_path / "farm_pools.json"
    remotes.write_text(json.dumps({"remotes": {"maya": {
        "command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(tools)],
        "env": {"PYTHONPATH": PYTHON_DIR}, "workers": 2}}}))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    flow = """\
name: farm
steps:
  - {id: pooled, tool: export, pool: maya, args: {i: 1}}
  - {id: remote, kind: tool_remote, dcc: maya, tool: export, args: {i: 2}}
"""
    with Engine(db=pg_url, lease_secs=1) as eng:  # no pool maya, no tool export
        with pytest.raises(dcc_flow.DccFlowError) as info:
            eng.run(flow, timeout=30)
        assert info.value.code == "unknown_tool", info.value
        assert 'step remote: remote "maya"' in str(info.value), info.value
    worker = subprocess.Popen([sys.executable, "-m", "dcc_flow", "worker", "--db", pg_url, "--remotes", str(remotes),
                               "--lease-secs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT)
    try:
        worker_banner(worker, "worker serving 0 tool(s) and 1 remote(s)", "remotes maya")
        with Engine(db=pg_url, lease_secs=1) as eng:
            result = eng.run(flow, timeout=60)
            assert result.ok, result.error
            pids = {result.outputs[s]["pid"] for s in ("pooled", "remote")}
            assert [result.outputs[s]["v"] for s in ("pooled", "remote")] == [10, 20]
            assert worker.pid not in pids and os.getpid() not in pids  # the pool's processes ran them
            for step in eng.get_status(result.run_id, all_steps=True).steps:
                engine_id, _, pool_worker = step.worker.partition("/")
                assert engine_id.split("-")[-2] == str(worker.pid), step.worker
                assert pool_worker.startswith("maya/"), step.worker
                assert int(pool_worker.split("/")[1]) in pids, step.worker
                # What the tool printed on the farm's worker is on the step record, as for a local pool.
                assert [(line["stream"], line["text"]) for line in step.logs] == [
                    ("stdout", "exporting %d" % {"pooled": 1, "remote": 2}[step.key])], step.logs
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            rc = worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    assert rc == 0, worker.stderr.read()


def test_worker_command_remotes_needs_db(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    out = subprocess.run([sys.executable, "-m", "dcc_flow", "worker", "--remotes", str(tmp_path / "r.json")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "--remotes needs --db" in out.stderr, out


def test_queued_call_progress_and_logs_reach_the_orchestrator(pg_url, tmp_path):
    """A tool run by a ``dcc-flow worker --db`` process reports progress and logs lines with
    ``current_call()``: the engine that orchestrates the run gets them as ``step_progress`` and
    ``step_log`` events, in order and before the step's ``step_exit``, and on its step record
    (``progress``, ``logs``), as for a call it ran itself (docs/operations/cluster.md)."""
    tools = tmp_path / "cache_tools.py"
    tools.write_text(
        "import time\n"
        "import dcc_flow\n\n"
        "def cache(frames):\n"
        "    call = dcc_flow.current_call()\n"
        "    for frame in range(1, frames + 1):\n"
        "        call.progress(frame, frames, 'caching frames')\n"
        "        call.log('cached', frame=frame)\n"
        "        time.sleep(0.4)\n"
        "    return {'frames': frames}\n")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    worker = subprocess.Popen([sys.executable, "-m", "dcc_flow", "worker", "--db", pg_url, "--tools", str(tools),
                               "--lease-secs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=ROOT)
    try:
        worker_banner(worker, "worker serving 1 tool(s)", "cache")
        with Engine(db=pg_url, lease_secs=1) as eng:  # hosts no cache
            result = eng.run("name: relay\nsteps: [{id: cache, tool: cache, args: {frames: 4}}]", timeout=30)
            assert result.ok, result.error
            events = [e for e in eng.events(run_id=result.run_id, timeout=0) if e.get("step_key") == "cache"]
            types = [e["type"] for e in events]
            exit_at = types.index("step_exit")
            assert "step_progress" not in types[exit_at:] and "step_log" not in types[exit_at:], types
            fields = [line["fields"] for e in events if e["type"] == "step_log" for line in e["detail"]["lines"]]
            assert fields == [{"frame": 1}, {"frame": 2}, {"frame": 3}, {"frame": 4}]
            # In order, up to the last; not necessarily each value: the tool pauses longer than the
            # relay's interval, so each report is usually its own event, but reports the relay
            # reads together (a slow wake-up on a busy machine) pass on the latest progress only
            # (docs/reference/limits.md).
            dones = [e["detail"]["done"] for e in events if e["type"] == "step_progress"]
            assert dones and dones[-1] == 4 and all(a < b for a, b in zip(dones, dones[1:])), dones
            step = result.step("cache")
            assert step.progress == {"done": 4, "total": 4, "message": "caching frames", "attempt": 1}
            assert [(line["stream"], line["text"], line["fields"]) for line in step.logs] == \
                [("log", "cached", {"frame": f}) for f in (1, 2, 3, 4)]
            assert step.worker  # the id of the worker engine that ran it from the queue
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            rc = worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    assert rc == 0, worker.stderr.read()


GATED = """\
name: cli_gated
steps:
  - {id: prep, tool: flow__echo, args: {value: shot010}}
  - {id: gate, kind: approve, prompt: "publish {{prep.value}}?", depends_on: [prep]}
  - {id: publish, tool: publish, args: {shot: "{{prep.value}}"}, depends_on: [gate]}
"""


def test_cli_status_approve_and_cancel_a_run_another_engine_holds(pg_url):
    """``dcc-flow status|approve|cancel RUN --db postgresql://…`` from another process, on a run
    that an engine of this process holds (docs/operations/cluster.md, "Control from any engine"): the CLI's
    engine never ran the run, so it reads the run from the database and files the approval and
    the cancel for the holder, which carries them out. The URL has a password (the throwaway
    cluster trusts every login, so it is not checked): no output of the CLI shows it."""
    password = "pw-" + uuid.uuid4().hex[:10]
    url = pg_url.replace("postgres@", "postgres:%s@" % password, 1)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    env.pop("DCC_FLOW_DB", None)
    outputs = []

    def cli(*args, db=url):
        out = subprocess.run([sys.executable, "-m", "dcc_flow", *args, "--db", db], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=120)
        outputs.append(out)
        return out

    def waiting(eng, run):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = eng.get_status(run.run_id)
            if status.status is WorkflowStatus.WAITING:
                return
            assert not status.terminal, status.raw
            time.sleep(0.05)
        pytest.fail("run %s never waited for its approval: %s" % (run.run_id, eng.get_status(run.run_id).raw))

    with Engine(db=pg_url, lease_secs=3) as eng:
        published = []

        @eng.tool()
        def publish(shot):
            published.append(shot)
            return {"shot": shot, "pid": os.getpid()}

        # A run waiting on this process's engine: the CLI shows it waiting, with its open approval.
        run = eng.submit(GATED)
        waiting(eng, run)
        out = cli("status", run.run_id)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("run %s (cli_gated): waiting, 1/3 steps" % run.run_id), out.stdout
        out = cli("status", run.run_id, "--json")
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)
        assert shown["status"] == "waiting", shown
        assert [(a["step_key"], a["prompt"]) for a in shown.get("approvals") or []] == [("gate", "publish shot010?")], shown
        # A refusal of the holder comes back to the CLI: a step with no open approval.
        out = cli("approve", run.run_id, "nope")
        assert out.returncode == 1, out
        assert 'no open approval for step "nope"; open approvals: gate' in out.stderr, out.stderr
        # The approval: the holder carries it out, and the run completes here.
        out = cli("approve", run.run_id, "gate", "--by", "cli-on-another-host", "--reason", "looks right")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "approved gate of run %s" % run.run_id, out.stdout
        result = run.wait(timeout=60)
        assert result.ok, result.raw
        assert published == ["shot010"]
        assert result.outputs["publish"] == {"shot": "shot010", "pid": os.getpid()}
        resolved = [e for e in eng.events(run_id=run.run_id, timeout=0) if e["type"] == "approve_resolved"]
        assert len(resolved) == 1 and resolved[0]["detail"].get("by") == "cli-on-another-host", resolved
        assert not [e for e in eng.events(run_id=run.run_id, timeout=0) if e["type"] == "interrupted"]
        out = cli("status", run.run_id)
        assert out.returncode == 0 and "completed, 3/3 steps" in out.stdout, out

        # Another run waiting here, cancelled from the CLI: it ends cancelled, with the reason.
        other = eng.submit(GATED)
        waiting(eng, other)
        out = cli("cancel", other.run_id, "--reason", "wrong drop")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "run %s: cancelled" % other.run_id, out.stdout
        result = other.wait(timeout=30)
        assert result.status is WorkflowStatus.CANCELLED, result.raw
        assert "wrong drop" in (result.error or {}).get("message", ""), result.error
        assert published == ["shot010"]  # the cancelled run never reached publish
        out = cli("status", other.run_id)
        assert out.returncode == 3 and "cancelled" in out.stdout, out

    # An error that names the database (this one does not exist) shows the URL without its password.
    missing = url.rsplit("/", 1)[0] + "/nosuchdb?sslmode=disable"
    out = cli("status", run.run_id, db=missing)
    assert out.returncode == 1 and "postgres:xxxxx@127.0.0.1" in out.stderr and "nosuchdb" in out.stderr, out
    for out in outputs:
        assert password not in out.stdout and password not in out.stderr, out
