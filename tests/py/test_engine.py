"""dcc_flow.Engine: workflows whose tools are Python functions, driven through the C ABI."""
import getpass
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dcc_flow
from dcc_flow import Engine, StepStatus, WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INTAKE = """
name: intake
inputs:
  date: {type: string, required: true}
steps:
  - id: list
    tool: list_files
    args: {date: "{{inputs.date}}"}
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    concurrency: 4
    steps:
      - id: export
        tool: export_fbx
        args: {scene: "{{file}}"}
        retry: {max_attempts: 3, initial_delay_ms: 1, max_delay_ms: 5}
  - id: gate
    kind: approve
    prompt: "push {{inputs.date}}?"
"""


@pytest.fixture
def engine():
    with Engine() as eng:
        yield eng


def test_run_returns_outputs_and_runs_main_tools_on_the_calling_thread(engine):
    threads = []

    @engine.tool()
    def list_files(date):
        threads.append(threading.get_ident())
        return {"files": ["%s/%d.ma" % (date, i) for i in range(5)]}

    @engine.tool(name="export_fbx")
    def export(scene):
        threads.append(threading.get_ident())
        return {"fbx": scene.replace(".ma", ".fbx")}

    spec = INTAKE.replace(
        """  - id: gate
    kind: approve
    prompt: "push {{inputs.date}}?"
""",
        "",
    )
    result = engine.run(spec, {"date": "2026-11-22"})
    assert result.status is WorkflowStatus.COMPLETED and result.ok
    assert result.outputs["list"]["files"][0] == "2026-11-22/0.ma"
    assert [o["export"]["fbx"] for o in result.outputs["per_file"]][4] == "2026-11-22/4.fbx"
    assert set(threads) == {threading.get_ident()}
    assert result.raise_for_status() is result


def test_worker_lane_tools_run_on_the_pool(engine):
    seen = set()

    @engine.tool(thread="worker")
    def work(i):
        seen.add(threading.current_thread().name)
        time.sleep(0.01)
        return i * 2

    engine.serve_tools(workers=3)
    spec = """
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 6
    steps: [{id: w, tool: work, args: {i: "{{item}}"}}]
"""
    result = engine.run(spec, {"items": list(range(12))})
    assert result.ok, result.error
    assert [o["w"] for o in result.outputs["each"]] == [i * 2 for i in range(12)]
    assert seen and all(name.startswith("dcc_flow-worker-") for name in seen)


def test_exceptions_become_step_errors_with_kind_and_traceback(engine):
    @engine.tool()
    def broken(path):
        raise FileNotFoundError("no such scene: %s" % path)

    result = engine.run("steps: [{id: b, tool: broken, args: {path: /x.ma}}]")
    assert result.status is WorkflowStatus.FAILED
    step = result.step("b")
    assert step.status is StepStatus.FAILED
    assert step.error["kind"] == "not_found"
    assert "no such scene: /x.ma" in step.error["message"]
    assert "Traceback" in step.error["trace"] and "FileNotFoundError" in step.error["trace"]
    # The traceback starts at the tool's frame; the dispatcher's frame is noise for the reader.
    assert "in broken" in step.error["trace"] and "_tools.py" not in step.error["trace"]
    with pytest.raises(dcc_flow.RunFailedError, match="b"):
        result.raise_for_status()

    called_wrongly = engine.run("steps: [{id: b, tool: broken, args: {pth: /x.ma}}]").step("b")
    assert "unexpected keyword argument 'pth'" in called_wrongly.error["trace"]


@pytest.mark.parametrize(
    "exc, kind",
    [
        (TimeoutError("t"), "timeout"),
        (ConnectionError("c"), "transient"),
        (ValueError("v"), "invalid_input"),
        (TypeError("t"), "invalid_input"),
        (PermissionError("p"), "permission"),
        (dcc_flow.Transient("flaky share"), "transient"),
        (dcc_flow.Fatal("corrupt"), "fatal"),
        (dcc_flow.ToolError("disk full", kind="disk_full"), "disk_full"),
        (RuntimeError("r"), "error"),
    ],
)
def test_exception_kinds(engine, exc, kind):
    @engine.tool()
    def t():
        raise exc

    result = engine.run("steps: [{id: s, tool: t}]")
    assert result.step("s").error["kind"] == kind


def test_transient_failures_are_retried(engine):
    calls = []

    @engine.tool()
    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise dcc_flow.Transient("license server busy")
        return "ok"

    spec = "steps: [{id: f, tool: flaky, retry: {max_attempts: 5, initial_delay_ms: 1, max_delay_ms: 2}}]"
    result = engine.run(spec)
    assert result.ok and result.outputs["f"] == "ok"
    assert len(calls) == 3 and result.step("f").attempt == 3
    # The run record's field is "attempts" (docs/reference/c-abi/README.md), the one StepRecord reads.
    (raw,) = [s for s in result.raw["steps"] if s["key"] == "f"]
    assert raw["attempts"] == 3 and "attempt" not in raw


def test_a_tool_sees_the_lane_of_its_call(engine):
    lanes = []

    @engine.tool()
    def on_main():
        lanes.append(("on_main", dcc_flow.current_call().lane))

    @engine.tool(thread="worker")
    def on_worker():
        lanes.append(("on_worker", dcc_flow.current_call().lane))

    assert engine.run("steps: [{id: a, tool: on_main}, {id: b, tool: on_worker}]").ok
    assert lanes == [("on_main", "main"), ("on_worker", "worker")]


def test_timed_out_tool_sees_cancelled_and_its_late_result_is_dropped(engine):
    observed = []

    @engine.tool()
    def slow():
        call = dcc_flow.current_call()
        assert call is not None and call.step_key == "s"
        deadline = time.monotonic() + 5
        try:
            while time.monotonic() < deadline and not call.cancelled:
                time.sleep(0.01)
        finally:  # the watchdog may interrupt the loop (ToolInterrupted) before it sees cancelled
            observed.append(call.cancelled)
        return "too late"

    result = engine.run("steps: [{id: s, tool: slow, timeout_secs: 0.2}]")
    assert result.status is WorkflowStatus.FAILED
    assert result.step("s").error["kind"] == "timeout"
    assert observed == [True]
    assert dcc_flow.current_call() is None


def test_cancel_from_another_thread(engine):
    started = threading.Event()

    @engine.tool()
    def long():
        started.set()
        while not dcc_flow.current_call().cancelled:
            time.sleep(0.005)

    run = engine.submit("steps: [{id: l, tool: long}]")
    threading.Thread(target=lambda: (started.wait(5), run.cancel("operator"))).start()
    result = run.wait(timeout=10)
    assert result.status is WorkflowStatus.CANCELLED


def test_approval_granted_from_another_thread(engine):
    @engine.tool()
    def list_files(date):
        return {"files": ["a.ma"]}

    @engine.tool()
    def export_fbx(scene):
        return scene

    run = engine.submit(INTAKE, {"date": "2026-11-22"})

    def approver():
        for ev in run.events(timeout=10):
            if ev["type"] == "approve_requested":
                run.approve("gate", True, reason="looks good", by="sup")
                return

    t = threading.Thread(target=approver)
    t.start()
    result = run.wait(timeout=20)
    t.join(5)
    assert result.ok, result.error
    assert result.outputs["gate"]["approved"] is True
    assert result.outputs["gate"]["by"] == "sup" and result.outputs["gate"]["reason"] == "looks good"


@pytest.mark.parametrize("user_env, expected", [("lead_td", "lead_td"), (None, getpass.getuser())])
def test_approval_by_defaults_to_dcc_flow_user_then_the_login_name(engine, monkeypatch, user_env, expected):
    if user_env is None:
        monkeypatch.delenv("DCC_FLOW_USER", raising=False)
    else:
        monkeypatch.setenv("DCC_FLOW_USER", user_env)
    run = engine.submit("steps: [{id: gate, kind: approve}]")
    for ev in run.events(timeout=10):
        if ev["type"] == "approve_requested":
            run.approve("gate")
            break
    assert run.wait(timeout=10).outputs["gate"]["by"] == expected


def test_non_serialisable_result_is_a_clear_step_error(engine):
    @engine.tool()
    def bad():
        return object()

    result = engine.run("steps: [{id: b, tool: bad}]")
    err = result.step("b").error
    assert err["kind"] == "invalid_output" and "not JSON-serialisable" in err["message"]


def test_unknown_tool_fails_before_start(engine):
    with pytest.raises(dcc_flow.DccFlowError) as info:
        engine.run("steps: [{id: a, tool: nowhere}]")
    assert info.value.code == "unknown_tool" and "nowhere" in str(info.value)


def test_bad_inputs_are_rejected_naming_the_input(engine):
    @engine.tool()
    def list_files(date):
        return {}

    @engine.tool()
    def export_fbx(scene):
        return {}

    with pytest.raises(dcc_flow.DccFlowError, match="date"):
        engine.submit(INTAKE, {})


def test_engine_after_close_raises():
    eng = Engine()
    eng.close()
    eng.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        eng.run("steps: [{id: a, tool: flow__echo}]")
    with pytest.raises(dcc_flow.EngineClosedError) as info:
        eng.runs()
    assert info.value.code == "closed"


def test_puller_cleanup_swallows_only_a_closed_engine(engine, monkeypatch):
    """Closing the pullers of ended threads stops quietly when the engine closed, and lets every
    other failure through (it caught every RuntimeError: a fork in the child, a bug)."""

    def failing(exc):
        def call(name, payload=None, source=None):
            raise exc

        return call

    driver = engine._driver
    driver.dead_pullers.append(12345)
    monkeypatch.setattr(driver, "host_call", failing(dcc_flow.EngineClosedError("closed")))
    driver.close_dead_pullers()  # quiet
    driver.dead_pullers.append(12345)
    monkeypatch.setattr(driver, "host_call", failing(RuntimeError("the library was loaded before a fork")))
    with pytest.raises(RuntimeError, match="fork"):
        driver.close_dead_pullers()


def test_runs_and_get_status(engine):
    result = engine.run("name: echo\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
    assert engine.get_status(result.run_id).status is WorkflowStatus.COMPLETED
    listed = engine.runs(status="completed", name="echo")
    assert [r.run_id for r in listed] == [result.run_id]
    with pytest.raises(dcc_flow.DccFlowError) as info:
        engine.get_status("nope")
    assert info.value.code == "not_found"


@pytest.mark.parametrize("persisted", [False, True], ids=["in-memory", "sqlite"])
def test_prune_deletes_finished_runs_by_age_and_status(tmp_path, persisted):
    import datetime

    with Engine(db=tmp_path / "flow.db" if persisted else None) as eng:
        done = [eng.run("name: ok\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]") for _ in range(3)]
        failed = eng.run("name: bad\nsteps: [{id: a, tool: flow__fail, args: {kind: error, message: no}}]")
        gated = eng.submit("name: gated\nsteps: [{id: gate, kind: approve, prompt: ship}]")
        deadline = time.monotonic() + 20
        while gated.status is not WorkflowStatus.WAITING and time.monotonic() < deadline:
            time.sleep(0.01)

        assert eng.prune(3600) == 0  # nothing finished an hour ago
        with pytest.raises(ValueError, match="statuses"):
            eng.prune(0, statuses=["running"])  # a run still going is never pruned
        with pytest.raises(ValueError):
            eng.prune(-1)
        assert eng.prune(0, statuses="failed") == 1
        with pytest.raises(dcc_flow.DccFlowError) as info:
            eng.get_status(failed.run_id)
        assert info.value.code == "not_found"
        soon = datetime.datetime.now() + datetime.timedelta(minutes=1)
        assert eng.prune(soon) == len(done)
        assert [r.run_id for r in eng.runs()] == [gated.run_id]
        gated.approve("gate")
        assert gated.wait(timeout=10).ok


def test_on_event_callbacks_run_on_a_package_thread(engine):
    got = []
    done = threading.Event()

    def cb(ev):
        got.append((ev["type"], threading.current_thread().name))
        if ev["type"] == "workflow_terminal":
            done.set()

    engine.on_event(cb)
    engine.run("steps: [{id: a, tool: flow__echo, args: {value: 1}}]")
    assert done.wait(10)
    assert got[0][0] == "workflow_started"
    assert {name for _, name in got} == {"dcc_flow-events"}


def test_ctrl_c_cancels_the_run_and_raises_keyboard_interrupt(tmp_path):
    script = tmp_path / "ctrlc.py"
    script.write_text(
        textwrap.dedent(
            """
            import signal, sys, time
            # Ctrl-C raises KeyboardInterrupt, as in a terminal, even when the tests were started
            # with SIGINT ignored (by a shell's `&` without job control, nohup, some CI runners):
            # an ignored signal stays ignored across exec, and Python then installs no handler.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, %r)
            import dcc_flow
            eng = dcc_flow.Engine()
            run = eng.submit("steps: [{id: s, tool: flow__sleep, args: {ms: 60000}}]")
            print("ready", flush=True)
            try:
                run.wait()
            except KeyboardInterrupt:
                t = time.monotonic()
                res = eng.get_status(run.run_id)
                while not res.terminal and time.monotonic() - t < 5:
                    res = eng.get_status(run.run_id)
                print("interrupted", res.status.value, flush=True)
            """
            % os.path.join(ROOT, "python")
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().strip()
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    assert line == "interrupted cancelled"
    assert elapsed < 5


def test_env_set_after_library_load_is_visible(engine, monkeypatch):
    # Go keeps a copy of the environment taken at load time; the engine reads the live one.
    monkeypatch.setenv("DCC_FLOW_TEST_SHOW", "sq010_sh0200")
    result = engine.run("steps: [{id: e, tool: flow__echo, args: {value: '{{env.DCC_FLOW_TEST_SHOW}}'}}]")
    assert result.outputs["e"] == {"value": "sq010_sh0200"}


def test_run_and_step_transitions_are_logged(engine, caplog):
    import logging

    @engine.tool()
    def touch(i):
        return i

    with caplog.at_level(logging.INFO, logger="dcc_flow"):
        result = engine.run("name: logged\nsteps: [{id: t, tool: touch, args: {i: 1}}]")
    messages = [r.getMessage() for r in caplog.records if r.name == "dcc_flow"]
    assert any("workflow_started" in m for m in messages), messages
    assert any("step_exit t completed" in m for m in messages), messages
    assert any("workflow_terminal" in m and "completed" in m for m in messages), messages
    assert all(result.run_id in m for m in messages)


def test_resume_reruns_only_what_did_not_complete(engine):
    calls = []
    state = {"broken": True}

    @engine.tool()
    def export(i):
        calls.append(i)
        if i == 2 and state["broken"]:
            raise dcc_flow.Fatal("corrupt scene")
        return i

    spec = dcc_flow.WorkflowSpec.from_yaml_str(
        "steps:\n  - {id: each, kind: foreach, items: [0, 1, 2, 3], on_any_fail: continue,"
        " steps: [{id: export, tool: export, args: {i: '{{item}}'}}]}\n"
    )
    first = engine.run(spec)
    assert first.status is WorkflowStatus.FAILED
    with pytest.raises(dcc_flow.DccFlowError) as info:
        engine.resume(first.run_id, expected_spec_hash="0" * 64)
    assert info.value.code == "spec_changed"
    state["broken"] = False
    run = engine.resume(first.run_id, expected_spec_hash=spec.spec_hash)
    result = run.wait(timeout=10)
    assert result.ok and result.outputs["each"] == [{"export": i} for i in range(4)]
    assert sorted(calls) == [0, 1, 2, 2, 3]
    with pytest.raises(dcc_flow.DccFlowError) as info:
        engine.resume(first.run_id)
    assert info.value.code == "not_resumable"


def test_resume_after_a_python_process_is_killed_mid_run(tmp_path):
    db = tmp_path / "flow.db"
    log = tmp_path / "calls.log"
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(
            """
            import sys, time
            sys.path.insert(0, %r)
            import dcc_flow
            eng = dcc_flow.Engine(db=%r)

            @eng.tool()
            def export(i):
                with open(%r, "a") as f:
                    f.write("%%d\\n" %% i)
                print("called", i, file=sys.__stdout__, flush=True)  # print() alone: the step's line
                time.sleep(0.01)
                return i

            eng.run("name: crashy\\nsteps: [{id: each, kind: foreach, items: '{{inputs.items}}',"
                    " steps: [{id: export, tool: export, args: {i: '{{item}}'}}]}]", {"items": list(range(100))})
            """
            % (os.path.join(ROOT, "python"), str(db), str(log))
        )
    )
    proc = subprocess.Popen([sys.executable, str(child)], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "called 40":
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()

    with Engine(db=db) as eng:
        (interrupted,) = eng.runs(status="interrupted")
        steps = eng.get_status(interrupted.run_id, all_steps=True).steps
        committed = {int(s.key[len("each["):s.key.index("]")]) for s in steps
                     if s.key.endswith(".export") and s.status is StepStatus.COMPLETED}
        # Its progress is what the killed process committed (its step left running is now
        # interrupted, and counts as finished), not what the run row said when it started.
        finished = sum(1 for s in steps if s.status.is_terminal)
        assert interrupted.progress == (finished, 101) and finished >= len(committed), (interrupted.progress, finished)
        before = [int(x) for x in log.read_text().split()]
        again = []

        @eng.tool()
        def export(i):
            again.append(i)
            return i

        result = eng.resume(interrupted.run_id).wait(timeout=60)
        assert result.ok, result.error
        assert result.outputs["each"] == [{"export": i} for i in range(100)]
        assert len(committed) >= 30, committed
        assert not committed & set(again), "steps committed before the kill ran again"
        assert committed | set(again) == set(range(100))
        assert set(before) >= committed


def test_a_missing_iteration_step_says_where_the_iterations_are(engine):
    engine.register_tool(lambda x: {"x": x}, name="each")
    result = engine.run("steps: [{id: per, kind: foreach, items: [1, 2], steps: [{id: e, tool: each, args: {x: '{{item}}'}}]}]")
    assert result.step("per").status.value == "completed"
    with pytest.raises(KeyError) as err:
        result.step("per[0].e")
    assert "engine.get_status(%r, all_steps=True)" % result.run_id in str(err.value)
    assert engine.get_status(result.run_id, all_steps=True).step("per[0].e").output == {"x": 1}
    with pytest.raises(KeyError) as err:
        result.step("nope")
    assert "all_steps" not in str(err.value)
    with pytest.raises(KeyError) as err:
        engine.get_status(result.run_id, all_steps=True).step("per[5].e")
    assert "all_steps" not in str(err.value)  # it is such a result: no iteration 5
