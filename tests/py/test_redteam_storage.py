"""Storage faults (issue #26 items 6-10): a full disk, a corrupted database, a deleted lock file,
a lock inherited by fork() children, a read-only share. Each fault is real: a file size limit
(RLIMIT_FSIZE) for the full disk, bytes overwritten in the file, a process that has really
forked or dropped its privileges."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")

posix_only = pytest.mark.skipif(os.name != "posix", reason="the fault is simulated with POSIX process limits")


def _child(code, *args, timeout=30, **kw):
    """Run ``code`` in a fresh Python with dcc_flow importable; return its last stdout line as JSON."""
    script = "import sys\nsys.path.insert(0, %r)\n" % PYTHON_DIR + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FULL_DISK = """
import json, resource, signal, time
import dcc_flow
from dcc_flow import _ffi

eng = dcc_flow.Engine(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG

def export(scene):
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # from now on the disk is full
    return {"fbx": scene + ".fbx"}

eng.register_tool(export)
pulls = [0]
real = _ffi.call_encoded

def counting(name, *args):
    if name == "dccflow_calls_next":
        pulls[0] += 1
    return real(name, *args)

_ffi.call_encoded = counting
SPEC = "steps: [{id: export, tool: export, args: {scene: a}}, {id: after, tool: flow__echo, args: {v: 1}, depends_on: [export]}]"
t = time.monotonic()
res = eng.run(SPEC)
out = {"status": res.status.value, "terminal": res.terminal, "error": res.error,
       "secs": time.monotonic() - t, "pulls": pulls[0]}
try:
    eng.submit("steps: [{id: a, tool: flow__echo, args: {v: 1}}]")
    out["submit"] = "accepted"
except dcc_flow.DccFlowError as exc:
    out["submit"] = [type(exc).__name__, exc.code, str(exc)]
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is back
out["after"] = eng.run("steps: [{id: a, tool: flow__echo, args: {v: 1}}]").status.value
out["first_now"] = eng.get_status(res.run_id).status.value
eng.close()
with dcc_flow.Engine(sys.argv[1], read_only=True) as again:  # what the database shows
    out["first_steps"] = [[s.key, s.status.value] for s in again.get_status(res.run_id).steps]
print(json.dumps(out))
"""


@posix_only
def test_full_disk_ends_the_run(tmp_path):
    out = _child(FULL_DISK, tmp_path / "runs.db", timeout=20)
    # run() returned: the run ended, failed with a storage error, without spinning.
    assert out["terminal"] and out["status"] == "failed", out
    assert out["error"]["kind"] == "storage", out
    assert out["secs"] < 5, out
    assert out["pulls"] < 40, out  # calls_next blocked; it does not return at once in a loop
    # While the disk is full a submit fails cleanly, with code storage.
    assert out["submit"][:2] == ["StorageError", "storage"], out
    # Space back: runs work again, and the first run's end has been written.
    assert out["after"] == "completed", out
    assert out["first_now"] == "failed", out
    # Its step ended with it (written with the run's end once space was back), not left running.
    assert all(status != "running" for _, status in out["first_steps"]), out


BIG_OUTPUT_OVER_THE_LIMIT = """
import json, resource, signal
import dcc_flow

eng = dcc_flow.Engine(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

def big():
    resource.setrlimit(resource.RLIMIT_FSIZE, (1500 * 1024, hard))  # room for 1.5 MB more, not 3
    return {"blob": "x" * (3 << 20)}

eng.register_tool(big)
res = eng.run("steps: [{id: a, tool: big}, {id: b, tool: flow__echo, depends_on: [a]}]")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
eng.close()
with dcc_flow.Engine(sys.argv[1], read_only=True) as again:  # what the database shows
    st = again.get_status(res.run_id)
print(json.dumps({"status": res.status.value, "error": res.error, "stored": st.status.value,
                  "steps": [[s.key, s.status.value] for s in st.steps]}))
"""


@posix_only
def test_a_write_past_the_file_size_limit_says_why(tmp_path):
    # SQLite rolls the whole transaction back on the failed write, its savepoint too: the error is
    # the write's own, not "no such savepoint".
    out = _child(BIG_OUTPUT_OVER_THE_LIMIT, tmp_path / "runs.db", timeout=30)
    assert out["status"] == "failed" and out["error"]["kind"] == "storage", out
    message = out["error"]["message"]
    assert "savepoint" not in message, message
    assert "writing step a of run" in message and "free disk space" in message, message
    # The step whose terminal row did not fit ends with the run, failed: not left running.
    assert out["stored"] == "failed" and out["steps"] == [["a", "failed"]], out


def _corrupt_table(path, table):
    """Overwrite the root page of ``table`` in the (checkpointed) database at ``path`` with garbage."""
    import sqlite3

    con = sqlite3.connect(str(path))
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(str(path), "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_corrupted_database_is_a_storage_error(tmp_path):
    import dcc_flow

    db = tmp_path / "runs.db"
    with dcc_flow.Engine(db) as eng:
        for i in range(3):
            assert eng.run("steps: [{id: a, tool: flow__echo, args: {v: %d}}]" % i).ok
    _corrupt_table(db, "workflows")
    with pytest.raises(dcc_flow.StorageError) as info:
        dcc_flow.Engine(db)
    assert info.value.code == "storage"
    assert "corrupted" in str(info.value) and str(db) in str(info.value)


FORKED_OWNER = """
import json, os, time
import dcc_flow

eng = dcc_flow.Engine(sys.argv[1])
child = os.fork()
if child == 0:  # a worker forked without exec (multiprocessing's fork start method does this)
    os.write(1, (json.dumps({"ready": os.getpid()}) + "\\n").encode())  # the at-fork handlers have run
    time.sleep(30)
    os._exit(0)
os.write(1, (json.dumps({"child": child}) + "\\n").encode())  # one write: the lines do not interleave
time.sleep(30)
"""


@posix_only
def test_fork_child_does_not_keep_the_database_locked(tmp_path):
    import signal

    import dcc_flow

    db = tmp_path / "runs.db"
    script = "import sys\nsys.path.insert(0, %r)\n" % PYTHON_DIR + textwrap.dedent(FORKED_OWNER)
    owner = subprocess.Popen([sys.executable, "-c", script, str(db)], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        lines = [json.loads(owner.stdout.readline()) for _ in range(2)]  # the owner's and the child's, in any order
        child = next(line["child"] for line in lines if "child" in line)
        assert {"ready": child} in lines
        owner.kill()  # the owner dies; its fork child lives on
        owner.wait()
        os.kill(child, 0)  # still running
        with dcc_flow.Engine(db) as eng:  # the database is free
            assert eng.run("steps: [{id: a, tool: flow__echo, args: {v: 1}}]").ok
    finally:
        owner.kill()
        owner.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass


READ_ONLY_VIEWER = """
import json, os
import dcc_flow
from dcc_flow import _ffi

_ffi._load()  # load the library while root (nobody cannot read /root)
os.setgid(65534)
os.setuid(65534)  # nobody: the share is read-only for this process
out = {}
try:
    with open(sys.argv[1], "ab"):
        out["writable"] = True
except OSError:
    out["writable"] = False
try:
    with dcc_flow.Engine(sys.argv[1], read_only=True) as eng:
        runs = eng.runs()
        out["runs"] = [r.status.value for r in runs]
        out["outputs"] = eng.get_status(runs[0].run_id).outputs
except dcc_flow.DccFlowError as exc:
    out["error"] = [type(exc).__name__, exc.code, str(exc)]
print(json.dumps(out))
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to drop to nobody (a read-only share is simulated by permissions)")
def test_read_only_engine_on_a_read_only_share(tmp_path):
    import shutil
    import tempfile

    import dcc_flow

    db = tmp_path / "runs.db"
    with dcc_flow.Engine(db) as eng:
        eng.run("steps: [{id: a, tool: flow__echo, args: {v: 7}}]")
    share = tempfile.mkdtemp(prefix="dccflow-ro-")
    try:
        shutil.copy(str(db), os.path.join(share, "runs.db"))
        assert not os.path.exists(str(db) + "-wal")  # closed: everything is in the file
        os.chmod(os.path.join(share, "runs.db"), 0o444)
        os.chmod(share, 0o555)
        out = _child(READ_ONLY_VIEWER, os.path.join(share, "runs.db"), timeout=20)
    finally:
        os.chmod(share, 0o755)
        shutil.rmtree(share)
    assert out["writable"] is False, out  # the process really cannot write the share
    assert out.get("runs") == ["completed"], out
    assert out["outputs"] == {"a": {"v": 7}}, out


def test_a_completed_run_whose_end_was_not_recorded_is_not_ok():
    from dcc_flow import RunFailedError
    from dcc_flow._results import RunResult

    result = RunResult({"run_id": "r1", "status": "completed",
                        "error": {"kind": "storage", "message": "the database still shows the run as running"}})
    assert not result.ok
    with pytest.raises(RunFailedError, match="still shows the run as running"):
        result.raise_for_status()
    assert RunResult({"run_id": "r2", "status": "completed"}).ok
