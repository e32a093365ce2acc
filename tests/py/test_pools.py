"""Worker pools (issue #18, docs/guide/pools.md): `remotes` entries with `workers` run N real
``dcc-flow worker`` processes, one call at a time each. No mocks: every test starts real
children (``sys.executable -m dcc_flow worker``)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process checks use POSIX signals")

TOOLS = textwrap.dedent('''
    import os, sys, time
    import dcc_flow

    HOARD = []

    def _log(event, **fields):
        fields.update(event=event, pid=os.getpid(), t=time.time(), out_dir=os.environ.get("DCC_FLOW_WORKER_OUTPUT_DIR"))
        with open(os.environ["POOL_LOG"], "a") as f:
            f.write(__import__("json").dumps(fields) + "\\n")

    def register(engine):
        @engine.tool(name="pl__nap")
        def nap(item=None, secs=0.5):
            start = time.time()
            _log("start", item=item)
            time.sleep(secs)
            _log("end", item=item)
            return {"item": item, "pid": os.getpid(), "start": start, "end": time.time()}

        @engine.tool(name="pl__crashy")
        def crashy(item=None):
            _log("call", item=item)
            mark = os.environ["POOL_LOG"] + ".crashed"
            if item == 3 and not os.path.exists(mark):
                open(mark, "w").close()
                sys.stderr.write("segfault in a DCC plug-in\\n")
                sys.stderr.flush()
                os._exit(1)
            return {"item": item, "pid": os.getpid()}

        @engine.tool(name="pl__pid")
        def pid():
            print("noise on stdout from", os.getpid())
            return {"pid": os.getpid()}

        @engine.tool(name="pl__hog")
        def hog(mb=0):
            HOARD.append(bytearray(mb << 20))  # touched: counts in the RSS
            for i in range(0, len(HOARD[-1]), 4096):
                HOARD[-1][i] = 1
            return {"pid": os.getpid()}

        @engine.tool(name="pl__polite")
        def polite(secs=30.0):
            _log("start")
            t = time.time()
            while time.time() - t < secs:
                if dcc_flow.current_call().cancelled:
                    _log("saw_cancel")
                    return {"cancelled": True}
                time.sleep(0.01)
            return {"cancelled": False}

        @engine.tool(name="pl__until")
        def until(item=None):
            _log("start", item=item)
            while item >= 2 and not os.path.exists(os.environ["POOL_MARKER"]):
                time.sleep(0.05)
            _log("end", item=item)
            return {"item": item}

        @engine.tool(name="pl__stubborn")
        def stubborn(secs=30.0):
            _log("start")
            time.sleep(secs)
            return {}
''')


@pytest.fixture()
def pool(tmp_path):
    """A function making a remotes entry of a pool of workers serving TOOLS; .log reads the
    tools' event log."""
    path = tmp_path / "pl_tools.py"
    path.write_text(TOOLS)
    log = tmp_path / "events.jsonl"

    def make(**fields):
        entry = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)],
                 "env": {"PYTHONPATH": PYTHON_DIR, "POOL_LOG": str(log)}}
        entry.update(fields)
        return entry

    def events():
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    make.events = events
    make.log = log
    return make


def foreach(tool, items, concurrency, retry=None, **args):
    step = {"id": "call", "dcc": "maya", "tool": tool, "args": dict(args, item="{{item}}")}
    if retry:
        step["retry"] = retry
    return {"steps": [{"id": "each", "kind": "foreach", "items": items, "concurrency": concurrency, "steps": [step]}]}


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purpose.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_eight_items_on_four_workers_run_four_at_a_time_on_four_pids(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=4)}}) as engine:
        engine.pools(warm=True)  # process start-up is not what this measures
        t0 = time.time()
        result = engine.run(foreach("pl__nap", list(range(8)), 8, secs=0.5))
        took = time.time() - t0
        assert result.status is WorkflowStatus.COMPLETED, result.error
        outs = [it["call"] for it in result.outputs["each"]]
        pids = {o["pid"] for o in outs}
        assert len(pids) == 4, pids
        # 4 at a time: the busiest instant has exactly 4 calls running, never 5.
        spans = [(o["start"], o["end"]) for o in outs]
        most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        assert most == 4, spans
        assert took < 3.0, "8 × 0.5 s on 4 workers took %.2f s (the goal is < 1.5 s on an idle machine)" % took
        steps = [s for s in engine.get_status(result.run_id, all_steps=True).steps if s.step_id == "call"]
        assert {s.worker for s in steps} == {"maya/%d" % p for p in pids}
        (info,) = engine.pools()
        assert info["name"] == "maya" and info["workers"] == 4 and info["lost"] == 0
        assert sorted(w["calls"] for w in info["running"]) == [2, 2, 2, 2]
        assert all(w["state"] == "idle" and w["rss_mb"] > 1 and w["uptime_secs"] > 0 for w in info["running"])


def test_a_worker_that_dies_mid_call_is_replaced_and_the_retry_runs_on_a_new_pid(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=2)}}) as engine:
        result = engine.run(foreach("pl__crashy", list(range(6)), 6,
                                    retry={"max_attempts": 2, "initial_delay_ms": 1, "max_delay_ms": 2}))
        assert result.status is WorkflowStatus.COMPLETED, result.error
        calls = [e for e in pool.events() if e["event"] == "call"]
        by_item = {}
        for c in calls:
            by_item.setdefault(c["item"], []).append(c["pid"])
        assert sorted(by_item) == list(range(6))
        assert all(len(p) == 1 for i, p in by_item.items() if i != 3), by_item  # nothing else ran twice
        assert len(by_item[3]) == 2 and by_item[3][0] != by_item[3][1], by_item[3]  # the retry: a new pid
        steps = {s.key: s for s in engine.get_status(result.run_id, all_steps=True).steps}
        crashed = [s for s in steps.values() if s.step_id == "call" and s.attempt == 2]
        assert len(crashed) == 1 and crashed[0].worker == "maya/%d" % by_item[3][1]
        retried = [e for e in engine.events(run_id=result.run_id, until_terminal=True, timeout=5)
                   if e["type"] == "step_retry"]
        assert len(retried) == 1, retried
        assert retried[0]["detail"]["error"]["kind"] == "worker_lost"
        assert retried[0]["detail"]["worker"] == "maya/%d" % by_item[3][0]
        assert engine.pools()[0]["lost"] == 1


def test_without_a_retry_policy_the_run_fails_worker_lost_with_a_clear_message(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=2)}}) as engine:
        result = engine.run(foreach("pl__crashy", [3], 1))
        assert result.status is WorkflowStatus.FAILED
        (step,) = [s for s in engine.get_status(result.run_id, all_steps=True).steps if s.step_id == "call"]
        assert step.error["kind"] == "worker_lost"
        msg = step.error["message"]
        # What the tool printed during the call is captured in-process, so it dies with the process:
        # the message has the exit status (docs/guide/pools.md).
        assert "worker pid %s was lost during the call" % step.worker.split("/")[1] in msg, msg
        assert "the process exited (exit status 1)" in msg, msg


def test_workers_are_recycled_after_n_calls(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=1, recycle_after_calls=2)}}) as engine:
        result = engine.run({"steps": [{"id": "p%d" % i, "dcc": "maya", "tool": "pl__pid"} for i in range(5)]})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        pids = [result.outputs["p%d" % i]["pid"] for i in range(5)]
        assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4], pids
        assert not alive(pids[0])


def test_a_worker_over_max_rss_mb_is_recycled_between_calls(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=1, max_rss_mb=150)}}) as engine:
        result = engine.run({"steps": [
            {"id": "small", "dcc": "maya", "tool": "pl__hog", "args": {"mb": 1}},
            {"id": "same", "dcc": "maya", "tool": "pl__hog", "args": {"mb": 1}},
            {"id": "big", "dcc": "maya", "tool": "pl__hog", "args": {"mb": 200}},
            {"id": "after", "dcc": "maya", "tool": "pl__pid"},
        ]})
        assert result.status is WorkflowStatus.COMPLETED, result.error
        o = result.outputs
        assert o["small"]["pid"] == o["same"]["pid"] == o["big"]["pid"]  # under the limit: kept
        assert o["after"]["pid"] != o["big"]["pid"]  # over it after "big": replaced before "after"


def _wait_for(pred, secs=15.0, what="condition"):
    deadline = time.time() + secs
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def test_cancelling_a_pool_call_reaches_the_worker_which_then_serves_the_next_call(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=1)}}) as engine:
        run = engine.submit({"steps": [{"id": "w", "dcc": "maya", "tool": "pl__polite"}]})
        _wait_for(lambda: any(e["event"] == "start" for e in pool.events()), what="the call to start")
        run.cancel()
        assert run.wait(timeout=10).status is WorkflowStatus.CANCELLED
        _wait_for(lambda: any(e["event"] == "saw_cancel" for e in pool.events()), what="the worker to see the cancel")
        first = [e for e in pool.events() if e["event"] == "start"][0]["pid"]
        after = engine.run({"steps": [{"id": "p", "dcc": "maya", "tool": "pl__pid"}]})
        assert after.outputs["p"]["pid"] == first
        assert engine.pools()[0]["lost"] == 0


def test_a_worker_that_ignores_cancellation_is_killed_after_kill_after_secs(pool):
    with dcc_flow.Engine(config={"remotes": {"maya": pool(workers=1, kill_after_secs=0.5)}}) as engine:
        run = engine.submit({"steps": [{"id": "w", "dcc": "maya", "tool": "pl__stubborn"}]})
        _wait_for(lambda: any(e["event"] == "start" for e in pool.events()), what="the call to start")
        stuck = pool.events()[0]["pid"]
        t0 = time.time()
        run.cancel()
        assert run.wait(timeout=10).status is WorkflowStatus.CANCELLED
        assert time.time() - t0 < 2, "the cancel waited for the worker"
        _wait_for(lambda: not alive(stuck), secs=10, what="the stubborn worker to be killed")
        assert engine.pools()[0]["lost"] == 1
        after = engine.run({"steps": [{"id": "p", "dcc": "maya", "tool": "pl__pid"}]})
        assert after.status is WorkflowStatus.COMPLETED and after.outputs["p"]["pid"] != stuck


def test_a_worker_that_never_answers_initialize_fails_after_start_timeout_secs(pool):
    entry = pool(workers=1, start_timeout_secs=1)
    entry["command"] = [sys.executable, "-c", "import sys, time; sys.stderr.write('loading 900 plugins\\n'); "
                        "sys.stderr.flush(); time.sleep(60)"]
    with dcc_flow.Engine(config={"remotes": {"maya": entry}}) as engine:
        t0 = time.time()
        result = engine.run({"steps": [{"id": "p", "dcc": "maya", "tool": "pl__pid"}]})
        assert time.time() - t0 < 10
        assert result.status is WorkflowStatus.FAILED
        msg = result.steps[0].error["message"] if result.steps else result.error["message"]
        assert "no answer to initialize within 1s" in msg and "loading 900 plugins" in msg and "time.sleep(60)" in msg, msg


def test_a_worker_that_exits_at_start_is_a_clear_error_naming_the_command_and_its_stderr(pool):
    entry = pool(workers=2)
    entry["command"] = [sys.executable, "-m", "dcc_flow", "worker", "--tools", "studio_no_such_tools_module"]
    with dcc_flow.Engine(config={"remotes": {"maya": entry}}) as engine:
        with pytest.raises(dcc_flow.WorkerStartError) as exc:
            engine.pools(warm=True)
        assert exc.value.code == "worker_start"
        msg = str(exc.value)
        assert "studio_no_such_tools_module" in msg and "starting worker `" in msg and "-m dcc_flow worker" in msg, msg
        result = engine.run({"steps": [{"id": "p", "dcc": "maya", "tool": "pl__pid"}]})
        assert result.status is WorkflowStatus.FAILED
        assert "studio_no_such_tools_module" in result.error["message"]


def test_invalid_pool_fields_are_config_errors_naming_field_and_range(pool):
    with pytest.raises(dcc_flow.DccFlowError) as exc:
        dcc_flow.Engine(config={"remotes": {"maya": pool(workers=1000, kill_after_secs=-1)}})
    msg = str(exc.value)
    assert "remotes.maya.workers: must be 0 or 1 to 256; got 1000" in msg and "remotes.maya.kill_after_secs" in msg


ENGINE_CHILD = textwrap.dedent('''
    import json, sys, dcc_flow
    entry, db = json.loads(sys.argv[1]), sys.argv[2]
    engine = dcc_flow.Engine(db=db, config={"remotes": {"maya": entry}})
    run = engine.submit(SPEC)
    print(run.run_id, flush=True)
    sys.stdin.read()  # until killed
''')

# Items 0 and 1 finish at once; 2 to 5 run until the marker file exists (that is, until resumed).
RESUMABLE = {"steps": [{"id": "each", "kind": "foreach", "items": list(range(6)), "concurrency": 6, "steps": [
    {"id": "call", "dcc": "maya", "tool": "pl__until", "args": {"item": "{{item}}"}}]}]}


def test_sigkill_of_the_engine_leaves_no_worker_processes_and_resume_finishes_the_run(pool, tmp_path):
    entry = pool(workers=4)
    marker = tmp_path / "resumed"
    entry["env"]["POOL_MARKER"] = str(marker)
    db = str(tmp_path / "flow.db")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    code = ENGINE_CHILD.replace("SPEC", repr(RESUMABLE))
    child = subprocess.Popen([sys.executable, "-c", code, json.dumps(entry), db], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        run_id = child.stdout.readline().decode().strip()
        # 2 fast items done, and 4 slow ones running on the 4 workers.
        _wait_for(lambda: len([e for e in pool.events() if e["event"] == "start"]) == 6, secs=30,
                  what="6 pool calls to start")
        _wait_for(lambda: len([e for e in pool.events() if e["event"] == "end"]) == 2, secs=30,
                  what="the 2 fast calls to end")
        pids = {e["pid"] for e in pool.events() if e["event"] == "start"}
        assert len(pids) == 4 and all(alive(p) for p in pids)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        _wait_for(lambda: not any(alive(p) for p in pids), secs=15, what="the workers to exit")
        # Their output directories went with them (the engine that made them is gone).
        out_dirs = {e["out_dir"] for e in pool.events() if e["event"] == "start"}
        assert len(out_dirs) == 4 and all(d and not os.path.exists(d) for d in out_dirs), out_dirs
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    marker.write_text("")
    with dcc_flow.Engine(db=db, config={"remotes": {"maya": entry}}) as engine:
        result = engine.resume(run_id).wait(timeout=60)
        assert result.status is WorkflowStatus.COMPLETED, result.error
    starts = {}
    for e in pool.events():
        if e["event"] == "start":
            starts[e["item"]] = starts.get(e["item"], 0) + 1
    assert starts == {0: 1, 1: 1, 2: 2, 3: 2, 4: 2, 5: 2}, starts  # the completed items did not run again


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DB", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_runs_on_a_pool_from_a_remotes_file_and_show_names_the_worker(pool, tmp_path):
    (tmp_path / "remotes.json").write_text(json.dumps({"remotes": {"maya": pool(workers=2)}}))
    (tmp_path / "flow.yaml").write_text(textwrap.dedent("""
        name: pooled
        steps:
          - {id: p, kind: tool_remote, dcc: maya, tool: pl__pid}
    """))
    ran = _cli("run", "flow.yaml", "--remotes", "remotes.json", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.splitlines()[-1])
    pid = result["outputs"]["p"]["pid"]
    show = _cli("show", result["run_id"], cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert "on worker maya/%d" % pid in show.stdout, show.stdout

    listed = _cli("pools", "--remotes", "remotes.json", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith("maya: 2 workers max, "), listed
    warm = _cli("pools", "--remotes", "remotes.json", "--warm", "--json", cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    (info,) = json.loads(warm.stdout)
    assert info["started"] == 2 and [w["state"] for w in info["running"]] == ["idle", "idle"]

    bad = dict(pool(workers=1), command=[sys.executable, "-c", "import sys; sys.exit('no licence for mayapy')"])
    (tmp_path / "bad.json").write_text(json.dumps({"maya": bad}))
    failed = _cli("pools", "--remotes", "bad.json", "--warm", cwd=tmp_path)
    assert failed.returncode == 1 and "no licence for mayapy" in failed.stderr, failed
    broken = _cli("run", "flow.yaml", "--remotes", "missing.json", cwd=tmp_path)
    assert broken.returncode == 1 and "--remotes missing.json" in broken.stderr, broken.stderr


ROUTED = {"name": "routed", "steps": [{"id": "by_field", "tool": "pl__pid", "pool": "maya"},
                                      {"id": "by_map", "tool": "pl__pid"}]}


def test_the_same_spec_runs_in_process_in_tests_and_on_a_pool_in_production(pool):
    with dcc_flow.Engine() as tests:
        @tests.tool(name="pl__pid")
        def local_pid():
            return {"pid": os.getpid()}

        result = tests.run(ROUTED)
        assert result.status is WorkflowStatus.COMPLETED, result.error
        assert result.outputs["by_field"]["pid"] == result.outputs["by_map"]["pid"] == os.getpid()
        assert all(s.worker == "" for s in result.steps)

    config = {"remotes": {"maya": pool(workers=2)}, "tool_pools": {"pl__*": "maya"}}
    with dcc_flow.Engine(config=config) as prod:
        result = prod.run(ROUTED)
        assert result.status is WorkflowStatus.COMPLETED, result.error
        for key in ("by_field", "by_map"):
            pid = result.outputs[key]["pid"]
            assert pid != os.getpid()
            (step,) = [s for s in result.steps if s.key == key]
            assert step.worker == "maya/%d" % pid


def test_a_pool_s_workers_hold_its_resources_while_they_live(pool):
    """A pool's ``resources`` are what each worker process holds while it lives (a licence a DCC
    process checks out when it starts; docs/guide/resources.md): with one licence, one worker of
    four starts, serves every call in turn, and holds the licence while idle; close gives it back."""
    config = {"resources": {"houdini": {"limit": 1}}, "remotes": {"maya": pool(workers=4, resources={"houdini": 1})}}
    with dcc_flow.Engine(config=config) as engine:
        result = engine.run(foreach("pl__nap", list(range(4)), 4, secs=0.1))
        assert result.status is WorkflowStatus.COMPLETED, result.error
        outs = [it["call"] for it in result.outputs["each"]]
        assert len({o["pid"] for o in outs}) == 1, "more than one worker ran with one licence: %s" % outs
        spans = sorted((o["start"], o["end"]) for o in outs)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
        (houdini,) = engine.resources()
        assert houdini["in_use"] == 1, houdini  # the idle worker still holds it
        (holder,) = houdini["holders"]
        assert holder["step_key"] == "pool maya worker 1" and holder["run_id"] == "" and holder["amount"] == 1, holder
        assert houdini["queue"] == [], houdini  # the starts that waited for it gave up: no call needs them
        (info,) = engine.pools()
        assert len(info["running"]) == 1, info


def test_a_pool_s_resources_are_checked_against_the_engine_s(pool):
    for resources, config_resources, message in [
        ({"houdinni": 1}, {"houdini": {"limit": 2}}, 'remotes.maya.resources.houdinni: the engine does not declare "houdinni": did you mean "houdini"?'),
        ({"houdini": 3}, {"houdini": {"limit": 2}}, "remotes.maya.resources.houdini: must be 1 to the engine's limit of \"houdini\", 2; got 3"),
        ({"houdini": 1}, None, "remotes.maya.resources.houdini: the engine declares no resources"),
    ]:
        config = {"remotes": {"maya": pool(workers=2, resources=resources)}}
        if config_resources:
            config["resources"] = config_resources
        with pytest.raises(dcc_flow.errors.InvalidRequestError) as err:
            dcc_flow.Engine(config=config)
        assert message in str(err.value), str(err.value)
    single = pool()  # one shared child, not a pool
    single["resources"] = {"houdini": 1}
    with pytest.raises(dcc_flow.errors.InvalidRequestError) as err:
        dcc_flow.Engine(config={"resources": {"houdini": {"limit": 1}}, "remotes": {"maya": single}})
    assert "remotes.maya.resources: applies to pools of processes" in str(err.value)
