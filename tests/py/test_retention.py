"""Retention (docs/operations/running.md, "Retention") and the schedules' fire history, from Python and the CLI:
Engine.prune / prunable_runs / purge_expired / retention_status / schedule_fires, serve's
retention, `dcc-flow prune` and `dcc-flow schedules --history`."""

import json
import os
import sqlite3
import time
import urllib.request

import pytest

import dcc_flow
from dcc_flow.__main__ import main

ECHO = "name: ok\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]"
GATED = "name: gated\nsteps: [{id: gate, kind: approve, prompt: ship}]"


def finished_runs(engine, n):
    ids = [engine.run(ECHO).run_id for _ in range(n)]
    time.sleep(0.02)  # the wall clock moves past the last finish (prune "0" = finished before now)
    return ids


def test_prune_dry_run_limit_ages_and_progress():
    with dcc_flow.Engine() as engine:
        ids = finished_runs(engine, 3)
        gated = engine.submit(GATED)
        deadline = time.monotonic() + 10
        while engine.get_status(gated.run_id).status.value != "waiting":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        listed = engine.prunable_runs("0")
        assert [r["run_id"] for r in listed] == ids  # earliest finished first, the waiting run not among them
        assert all(r["status"] == "completed" and r["name"] == "ok" and r["finished_at"] for r in listed)
        assert [r["run_id"] for r in engine.prunable_runs(0, limit=2)] == ids[:2]
        assert engine.prune("30d") == 0
        assert engine.prune(0, dry_run=True) == 3 and len(engine.runs()) == 4
        seen = []
        assert engine.prune("0", progress=lambda done, total: seen.append((done, total)), batch=2) == 3
        assert seen == [(0, 3), (2, 3), (3, 3)]
        assert [r.run_id for r in engine.runs()] == [gated.run_id]  # a run waiting for approval stays
        with pytest.raises(dcc_flow.InvalidRequestError, match="would prune nothing"):
            engine.prune("forever")
        with pytest.raises(dcc_flow.InvalidRequestError, match="30d"):
            engine.prune("a month")
        with pytest.raises(dcc_flow.InvalidRequestError, match="not a finished status"):
            engine.prune(0, statuses="waiting")
        with pytest.raises(ValueError):
            engine.prune(-1)
        with pytest.raises(ValueError):
            engine.prune(0, limit=-1)
        engine.cancel(gated.run_id)


def test_purge_expired_deletes_idempotency_entries_past_their_ttl():
    spec = ("name: cached\nsteps: [{id: a, tool: flow__echo, args: {value: 1}, idempotency_key: k, "
            "idempotency_scope: global, idempotency_ttl_secs: 1}]")
    with dcc_flow.Engine() as engine:
        engine.run(spec)
        assert engine.purge_expired() == 0
        time.sleep(1.05)
        assert engine.purge_expired() == 1
        assert engine.purge_expired() == 0


def page_stats(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return {k: con.execute("PRAGMA %s" % k).fetchone()[0] for k in ("page_count", "freelist_count", "page_size")}
    finally:
        con.close()


def test_database_size_before_and_after_prune(tmp_path, capsys):
    """What a prune gives back on a database file, measured. SQLite moves the freed pages to the
    file's free list (reused by the next runs); the file shrinks only with a VACUUM."""
    db = str(tmp_path / "flow.db")
    spec = ("name: big\nsteps:\n  - {id: a, tool: flow__echo, args: {value: \"%s\"}}\n"
            "  - {id: b, tool: flow__echo, args: {value: \"{{a.value}}\"}}\n" % ("x" * 2000))
    with dcc_flow.Engine(db=db) as engine:
        for _ in range(300):
            engine.run(spec)
    before, size_before = page_stats(db), os.path.getsize(db)
    with dcc_flow.Engine(db=db) as engine:
        time.sleep(0.02)
        assert engine.prune(0) == 300
    after, size_after = page_stats(db), os.path.getsize(db)
    con = sqlite3.connect(db)
    con.execute("VACUUM")
    con.close()
    size_vacuumed = os.path.getsize(db)
    with capsys.disabled():
        print("\n300 runs: file %d KiB, %d pages, %d free; after prune: file %d KiB, %d free pages; after VACUUM: %d KiB"
              % (size_before >> 10, before["page_count"], before["freelist_count"], size_after >> 10,
                 after["freelist_count"], size_vacuumed >> 10))
    assert after["freelist_count"] - before["freelist_count"] > before["page_count"] // 2
    assert size_vacuumed < size_before // 2


def test_serve_applies_a_retention_and_reports_it():
    with dcc_flow.Engine() as engine:
        assert engine.retention_status() is None
        info = engine.serve()
        assert info["retention"]["keep_secs"] == 30 * 86400 and info["retention"]["every_secs"] == 3600
        deadline = time.monotonic() + 10
        while not (engine.retention_status() or {}).get("last_pass"):
            assert time.monotonic() < deadline, engine.retention_status()
            time.sleep(0.01)
        status = engine.retention_status()
        assert status["pruned"] == 0 and status["next_pass"] and "error" not in status
        assert engine.serve(retention="14d")["retention"]["keep_secs"] == 14 * 86400
        assert engine.serve(retention=3600)["retention"]["keep_secs"] == 3600
        assert engine.serve(retention="forever")["retention"]["keep_secs"] == 0
        with pytest.raises(dcc_flow.InvalidRequestError, match="retention"):
            engine.serve(retention="a month")
        engine.stop_serving()
        assert engine.retention_status() is None


def post(addr, path, body):
    req = urllib.request.Request("http://%s%s" % (addr, path), data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def fire_webhook(db, times):
    """A database whose schedule ``upload`` fired ``times`` times; returns the run ids, oldest first."""
    ids = []
    with dcc_flow.Engine(db=db) as engine:
        engine.register_workflow(ECHO.replace("name: ok", "name: hook"))
        engine.schedule("hook", webhook="/webhooks/upload", id="upload", max_concurrent=0)
        addr = engine.serve(webhooks="127.0.0.1:0", retention="forever")["webhooks_addr"]
        for i in range(times):
            ids.append(post(addr, "/webhooks/upload", {"n": i})["run_id"])
        for run_id in ids:
            dcc_flow.Run(engine, run_id).wait(timeout=10)
        engine.stop_serving()
    return ids


def test_schedule_fires_newest_first_and_kept_in_the_database(tmp_path):
    db = str(tmp_path / "flow.db")
    ids = fire_webhook(db, 3)
    with dcc_flow.Engine(db=db) as engine:
        fires = engine.schedule_fires("upload", limit=2)
        assert [f["run_id"] for f in fires] == ids[:0:-1]  # the two newest, newest first
        assert all(f["schedule_id"] == "upload" and f["kind"] == "fired" and f["origin"] == "webhook" for f in fires)
        assert len(engine.schedule_fires()) == 3 and len(engine.schedule_fires(limit=0)) == 3
        assert engine.schedule_fires("nope") == []
        with pytest.raises(ValueError):
            engine.schedule_fires("upload", limit=-1)


# --- the command line -----------------------------------------------------------------------------


def test_cli_prune_dry_run_then_prune(tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as engine:
        ids = finished_runs(engine, 3)
        engine.run("name: bad\nsteps: [{id: a, tool: flow__fail, args: {kind: fatal}}]")
        time.sleep(0.02)
    assert main(["prune", "--older-than", "30d", "--db", db]) == 0
    assert capsys.readouterr().out == ("pruned 0 finished runs that ended more than 30d ago; "
                                       "purged 0 expired idempotency entries\n")
    assert main(["prune", "--older-than", "0", "--status", "completed", "--dry-run", "--db", db]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["RUN", "WORKFLOW", "STATUS", "FINISHED", "(UTC)"]
    assert [line.split()[0] for line in out[1:4]] == ids and all(" completed " in line for line in out[1:4])
    assert out[4] == "dry run: 3 runs would be pruned (ended before now); nothing was deleted"
    assert main(["prune", "--older-than", "0", "--status", "completed", "--limit", "2", "--json", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out) == {"pruned": 2, "purged": 0}
    assert main(["prune", "--older-than", "0", "--dry-run", "--json", "--db", db]) == 0
    left = json.loads(capsys.readouterr().out)
    assert left["pruned"] == 2 and [r["status"] for r in left["runs"]] == ["completed", "failed"]
    assert left["runs"][0]["run_id"] == ids[2]
    assert main(["prune", "--older-than", "a month", "--db", db]) == 2
    assert "not an age" in capsys.readouterr().err
    assert main(["prune", "--older-than", "1d", "--status", "running", "--db", db]) == 2


def test_cli_schedules_history(tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    ids = fire_webhook(db, 2)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "upload.schedules.yaml").write_text(
        "schedules:\n  - id: upload\n    workflow: hook\n    trigger: {kind: webhook, path: /webhooks/upload}\n")
    assert main(["schedules", str(hooks), "--history", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "upload: 2 fires" in out
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert [line.split()[3] for line in lines] == ids[::-1] and all(" fired " in line for line in lines)
    assert "(webhook)" in lines[0]
    assert main(["schedules", "--history", "--limit", "1", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "upload: 1 fire\n" in out and ids[1] in out and ids[0] not in out
    assert main(["schedules", "--history", "--json", "--db", db]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["run_id"] for f in doc[0]["fires"]] == ids[::-1] and doc[0]["id"] == "upload"
    assert main(["schedules", str(hooks), "--history", "--json", "--db", db]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["last_fire"]["run_id"] == ids[1] and len(listed[0]["fires"]) == 2
    assert main(["schedules", "--db", db]) == 2
    assert "--history" in capsys.readouterr().err
    empty = str(tmp_path / "empty.db")
    assert main(["schedules", "--history", "--db", empty]) == 0
    assert "(no fires recorded)" in capsys.readouterr().out


def test_cli_prune_draws_a_progress_line_on_a_terminal(tmp_path, capsys, monkeypatch):
    from dcc_flow._cli._base import Context

    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as engine:
        finished_runs(engine, 5)
    monkeypatch.setattr(Context, "out_is_tty", property(lambda self: True))
    assert main(["prune", "--older-than", "0", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "\rpruning 0/5 runs (0%)" in out and "\rpruning 5/5 runs (100%)" in out
    assert out.endswith("\rpruned 5 finished runs that ended before now; purged 0 expired idempotency entries\n")


def serve(db, cwd, *args):
    """`dcc-flow serve --db DB ARGS` started; returns the process and its ready line."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python"))
    env.pop("DCC_FLOW_DB", None)
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--db", db] + list(args),
                            cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline()


def stop(proc):
    import signal

    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()


def test_cli_prune_beside_a_serving_owner(tmp_path, capsys):
    """A dry run works beside the `serve` that owns the database; deleting needs to own it."""
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as engine:
        ids = finished_runs(engine, 2)
    proc, first = serve(db, tmp_path, "--retention", "forever")
    try:
        assert "ended runs kept forever" in first, first
        assert main(["prune", "--older-than", "0", "--dry-run", "--db", db]) == 0
        out = capsys.readouterr().out
        assert all(run_id in out for run_id in ids) and "dry run: 2 runs would be pruned" in out
        assert main(["prune", "--older-than", "0", "--db", db]) == 1
        err = capsys.readouterr().err
        assert "is in use by" in err and err.count("\n") == 1
        assert "to prune, stop that process (a serve prunes by its own --retention)" in err, err
        assert "to start runs" not in err, err
    finally:
        stop(proc)


def test_cli_serve_applies_its_retention_at_start(tmp_path):
    """`dcc-flow serve --retention AGE` prunes at start (and hourly) what ended more than AGE
    ago, and says so in its ready line. (A run waiting for an approval is never pruned: the
    tests above; here every run of the database has ended.)"""
    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as engine:
        finished_runs(engine, 3)
    proc, first = serve(db, tmp_path, "--retention", "50ms")
    try:
        assert "serving 0 workflow(s)" in first and "ended runs kept 0.05s" in first, first
        deadline = time.monotonic() + 20
        with dcc_flow.Engine(db=db, read_only=True) as viewer:
            while viewer.runs():
                assert time.monotonic() < deadline, [r.status for r in viewer.runs()]
                time.sleep(0.05)
    finally:
        stop(proc)
