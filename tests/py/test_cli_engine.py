"""The engine commands of the dcc-flow CLI, run as subprocesses against one file database."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "examples", "vendor_intake.yaml")


def cli(*args, cwd, timeout=60, check=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    proc = subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def studio(tmp_path):
    (tmp_path / "tools.py").write_text(textwrap.dedent("""
        import os
        import dcc_flow

        def vendor_intake__list_sftp(date):
            return {"files": [{"path": "%s/%d.ma" % (date, i)} for i in range(4)]}

        def maya__export_fbx(scene):
            if scene.endswith("2.ma") and not os.path.exists("fixed"):
                raise dcc_flow.Fatal("corrupt scene " + scene)
            return {"fbx": scene[:-3] + ".fbx"}
    """))
    return tmp_path


WARNING = "dcc-flow run: warning: per_file (foreach, concurrency 4): its tool maya__export_fbx runs in this process"


def test_run_status_runs_show_resume_across_processes(studio):
    failed = cli("run", SPEC, "--tools", "tools.py", "--input", "date=2026-11-22", "--approve-all", cwd=studio)
    assert failed.returncode == 1, failed.stderr
    lines = [json.loads(line) for line in failed.stdout.splitlines()]
    result = lines[-1]
    assert result["type"] == "result" and result["status"] == "failed"
    assert any(ev.get("type") == "step_enter" for ev in lines[:-1])
    # The foreach of concurrency 4 runs its plain-function tool one call at a time: one warning says so.
    assert failed.stderr.startswith(WARNING) and failed.stderr.count(WARNING) == 1
    assert "corrupt scene" in failed.stderr and failed.stderr.count("\n") == 2
    run_id = result["run_id"]
    assert (studio / ".dcc-flow" / "flow.db").exists()

    table = cli("runs", cwd=studio, check=0).stdout
    assert run_id in table and "failed" in table and "vendor_intake" in table
    show = cli("show", run_id, cwd=studio, check=0).stdout
    assert "per_file[2].export" in show and "corrupt scene" in show and "Traceback" in show
    assert cli("status", run_id, cwd=studio).returncode == 1

    (studio / "fixed").write_text("")
    # Without --tools the resume names the tools it lacks and the option that gives them.
    bare = cli("resume", run_id, "--approve-all", cwd=studio, check=1)
    assert bare.stderr == ("dcc-flow resume: error: workflow vendor_intake uses unknown tools: maya__export_fbx, "
                           "vendor_intake__list_sftp (add --tools MODULE)\n"), bare.stderr
    resumed = cli("resume", run_id, "--tools", "tools.py", "--approve-all", cwd=studio)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout.splitlines()[-1])
    assert result["run_id"] == run_id and result["status"] == "completed"
    assert result["outputs"]["per_file"][2] == {"export": {"fbx": "2026-11-22/2.fbx"}}
    entered = [json.loads(line).get("step_key") for line in resumed.stdout.splitlines()
               if json.loads(line).get("type") == "step_enter"]
    # What completed in the first run is reused; the failed iteration runs again, and so do
    # iterations the abort cancelled (which ones depends on the order the calls ran in).
    completed_before = {ev["step_key"] for ev in lines[:-1]
                        if ev.get("type") == "step_exit" and ev.get("status") == "completed"}
    assert "list" in completed_before and "per_file[2].export" in entered
    assert not completed_before & set(entered), completed_before & set(entered)
    assert cli("status", run_id, cwd=studio).returncode == 0


def test_run_completes_with_exit_code_zero_and_json_outputs(studio):
    proc = cli("run", SPEC, "--tools", "tools.py", "--input", "date=2026-11-23", "--approve-all",
               "--db", ":memory:", cwd=studio)
    (studio / "fixed").write_text("")
    proc = cli("run", SPEC, "--tools", "tools.py", "--input", "date=2026-11-23", "--approve-all",
               "--db", ":memory:", cwd=studio)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["status"] == "completed"
    assert result["outputs"]["per_file"][3] == {"export": {"fbx": "2026-11-23/3.fbx"}}
    assert result["outputs"]["human_gate"]["approved"] is True


@pytest.mark.parametrize("args, code, message", [
    (["run", "missing.yaml"], 1, "missing.yaml: no such file"),
    (["run", SPEC, "--input", "novalue"], 2, "use --input key=value"),
    # vendor_intake has an approve step: in memory it needs --approve-all (test_cli_everyday.py)
    (["run", SPEC, "--db", ":memory:", "--approve-all"], 1, 'input "date" is required (string) and was not given'),
    (["run", SPEC, "--input", "date=x", "--db", ":memory:", "--approve-all"], 1,
     "workflow vendor_intake uses unknown tools: maya__export_fbx, vendor_intake__list_sftp"),
    (["run", SPEC, "--tools", "nope.py", "--db", ":memory:"], 1, "nope.py: no such file"),
    (["status", "r000", "--db", ":memory:"], 1, 'no run with id "r000"'),
    (["show", "r000", "--db", ":memory:"], 1, 'no run with id "r000"'),
    (["approve", "r000", "gate", "--db", ":memory:"], 1, "r000"),
    (["resume", "r000", "--db", ":memory:"], 1, 'no run with id "r000"'),
    (["schedules", "nowhere"], 1, "nowhere: no such folder"),
    (["cancel", "r000", "--db", ":memory:"], 1, 'no run with id "r000"'),
    (["show", "last", "--db", ":memory:"], 1, "'last' names the newest run, and the database has no runs"),
    (["run", SPEC, "--inputs-json", "nope.json", "--db", ":memory:"], 1, "--inputs-json nope.json: No such file"),
    (["runs", "--status", "bogus", "--db", ":memory:"], 2, "argument --status: invalid choice: 'bogus'"),
    (["run", "broken.yaml", "--db", ":memory:"], 1, "broken.yaml: invalid spec (1 error); nothing was run"),
])
def test_bad_input_is_one_clear_line(studio, args, code, message):
    (studio / "broken.yaml").write_text("steps: [\n")
    proc = cli(*args, cwd=studio)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert message in proc.stderr
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1 + ("broken.yaml" in args), lines


def test_run_of_an_invalid_spec_lists_every_problem_like_validate_and_runs_nothing(studio):
    (studio / "bad.yaml").write_text("name: bad\nsteps:\n  - id: a\n    tol: maya__export_fbx\n  - id: a\n    tool: x\n")
    proc = cli("run", "bad.yaml", "--tools", "tools.py", cwd=studio)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        'bad.yaml:3:5: missing_field: steps[0] (id "a"): missing field `kind`; add `kind: tool | tool_remote | '
        'foreach | parallel | branch | approve`, or `tool: <name>` for a tool call',
        'bad.yaml:4:5: unknown_field: steps[0] (id "a"): unknown field "tol"; did you mean "tool"?',
        'bad.yaml:5:9: duplicate_step_id: steps[1] (id "a"): duplicate step id "a" (first declared at line 3); '
        'step ids must be unique across the whole spec',
        "dcc-flow run: error: bad.yaml: invalid spec (3 errors); nothing was run",
    ]
    assert cli("runs", "--json", cwd=studio, check=0).stdout.strip() == "[]"


def run_in_pty(args, cwd):
    """Run the CLI with stdout and stderr on a pseudo-terminal; return (exit code, what it wrote)."""
    import pty

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow"] + list(args), cwd=str(cwd), env=env,
                            stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    return proc.returncode, out.decode()


def screen(text):
    """What a terminal shows after text: each line as its last carriage-return redraw left it."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        visible = ""
        for part in line.split("\r"):
            visible = part + visible[len(part):]
        lines.append(visible.rstrip())
    return [line for line in lines if line]


def test_tty_progress_display(studio):
    (studio / "fixed").write_text("")
    code, text = run_in_pty(["run", SPEC, "--tools", "tools.py", "--input", "date=2026-11-24", "--approve-all",
                             "--db", ":memory:"], studio)
    assert code == 0, text
    assert "\r" in text, "no line redrawn in place"
    draws = [d for d in text.split("\r") if d.strip()]
    assert any("per_file: " in d and " running" in d for d in draws), draws  # foreach counts while it runs
    assert any(d.startswith("vendor_intake r") and "/7 steps · " in d for d in draws), draws
    assert "{" not in text  # a progress line, not JSON lines
    # When it ends the progress line is wiped and only the summary stays on screen (below the
    # warning that the foreach's tool runs one call at a time).
    assert screen(text)[0].startswith(WARNING)
    assert screen(text)[1:] == [screen(text)[-1]]
    assert re.fullmatch(r"run r\w+ completed in \d+(ms|\.\ds): 7 steps completed", screen(text)[-1])


def test_tty_progress_says_how_to_approve_and_why_a_run_stopped(studio):
    (studio / "fixed").write_text("")
    # A database file: `dcc-flow approve` in another terminal reaches the run (in memory nothing
    # could, and the run is refused: test_cli_everyday.py).
    code, text = run_in_pty(["run", SPEC, "--tools", "tools.py", "--input", "date=2026-11-24", "--timeout", "1.5",
                             "--db", "flow.db"], studio)
    assert code == 3, text
    warning, *shown = screen(text)
    assert warning.startswith(WARNING)
    assert len(shown) == 3, shown
    run_id = shown[0].split()[6]
    assert shown[0] == ("human_gate waits for approval: dcc-flow approve %s human_gate   (or --deny --reason TEXT)"
                        % run_id)
    assert re.fullmatch(r"run %s cancelled in 1\.\ds: 6 completed, 1 cancelled" % run_id, shown[1]), shown
    assert shown[2] == ("dcc-flow run: error: cancelled: timed out after 1.5s "
                        "(the steps: dcc-flow show %s)" % run_id)
    assert any("waiting for approval of human_gate · 1.0s" in d for d in text.split("\r")), "the clock ticks"


def test_schedules_and_serve_with_webhooks(studio):
    listed = cli("schedules", os.path.join(ROOT, "examples", "schedules"), "--workflows",
                 os.path.join(ROOT, "examples"), "--db", ":memory:", cwd=studio, check=0).stdout
    header, row = listed.splitlines()
    assert header.split() == ["SCHEDULE", "WORKFLOW", "TRIGGER", "NEXT", "FIRE", "(UTC)", "LAST", "FIRE"]
    assert row.startswith("nightly_intake") and "cron 0 0 3 * * * America/New_York +120s jitter" in row
    assert " 20" in row and "(in " in row and row.endswith("never")

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--workflows", os.path.join(ROOT, "examples"),
                             "--webhooks", "127.0.0.1:0", "--tools", "tools.py", "--db", ":memory:"],
                            cwd=str(studio), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert "serving" in first and "webhooks on http://127.0.0.1:" in first, first + proc.stderr.read()
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()


def test_serve_says_when_a_schedule_fire_starts_no_run(studio):
    # A fire whose run cannot start (an input of the wrong type) makes no run, so no run event:
    # serve prints a line for it from the fire history.
    (studio / "flows").mkdir()
    (studio / "flows" / "cleanup.yaml").write_text(
        "name: cleanup\ninputs:\n  scope: {type: string}\nsteps:\n  - {id: s, tool: flow__echo}\n")
    (studio / "sched").mkdir()
    (studio / "sched" / "c.schedules.yaml").write_text(
        "schedules:\n  - id: every_sec\n    workflow: cleanup\n    inputs: {scope: true}\n"
        "    trigger: {kind: interval, every: 1s}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--workflows", "flows", "--schedules", "sched",
                             "--db", "serve.db"],
                            cwd=str(studio), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert "serving 1 workflow(s), 1 schedule(s)" in first, first + proc.stderr.read()
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        line = ""  # the first failed fire, within a fire and a read (1 s + 2 s)
        if sel.select(timeout=15):
            line = proc.stdout.readline()
        assert "schedule every_sec: fire failed, no run started (start_failed): " in line, line
        assert 'input "scope" must be of type string' in line and "dcc-flow schedules --history" in line, line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()


def test_failed_fires_are_printed_once_in_any_record_order_and_after_a_failed_read():
    import io
    import threading

    from dcc_flow._cli.serve import log_failed_fires
    from dcc_flow.errors import DccFlowError

    def fire(sid, at, kind="failed"):
        return {"schedule_id": sid, "kind": kind, "reason": "start_failed", "message": "bad input",
                "fired_at": "2026-11-30T08:00:%06.3fZ" % at, "scheduled_at": "2026-11-30T08:00:%06.3fZ" % at}

    reads = [
        [fire("b", 5.0, kind="fired"), fire("old", 0.5)],   # newest first; "old" fired before the server
        [fire("a", 4.0), fire("b", 5.0, kind="fired"), fire("old", 0.5)],  # a slow failure recorded late
        DccFlowError("database away", code="storage"),
        [fire("c", 5.0), fire("a", 4.0), fire("b", 5.0, kind="fired")],   # c: the same second as b
        [fire("c", 5.0), fire("a", 4.0)],
    ]
    stop = threading.Event()

    class Fake:
        def schedule_fires(self, limit):
            if not reads:
                stop.set()
                return []
            got = reads.pop(0)
            if isinstance(got, Exception):
                raise got
            return got

    out = io.StringIO()
    import calendar

    since = calendar.timegm((2026, 11, 30, 8, 0, 1))
    log_failed_fires(Fake(), stop, out, since, every=0.001)
    printed = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert printed == [
        "schedule a: fire failed, no run started (start_failed): bad input; see dcc-flow schedules --history",
        "schedule c: fire failed, no run started (start_failed): bad input; see dcc-flow schedules --history",
    ], printed


def test_approve_and_runs_from_another_terminal_reach_the_owning_process(studio):
    """A `dcc-flow run` waiting for an approval owns the database: `runs` and `show` read it
    beside it, `approve` is carried out by it, and a second `run` on it is one clear line."""
    (studio / "fixed").write_text("")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    owner = subprocess.Popen([sys.executable, "-m", "dcc_flow", "run", SPEC, "--tools", "tools.py", "--input",
                              "date=2026-11-25"], cwd=str(studio), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        run_id = None
        for line in owner.stdout:
            ev = json.loads(line)
            if ev.get("type") == "approve_requested":
                run_id = ev["run_id"]
                break
        assert run_id, owner.stderr.read()

        table = cli("runs", cwd=studio, check=0).stdout
        assert run_id in table and "waiting" in table
        assert "human_gate" in cli("show", run_id, cwd=studio, check=0).stdout
        second = cli("run", SPEC, "--tools", "tools.py", "--input", "date=x", cwd=studio)
        assert second.returncode == 1 and "is in use by pid %d" % owner.pid in second.stderr
        assert second.stderr.count("\n") == 1

        wrong = cli("approve", run_id, "no_such_gate", cwd=studio)
        assert wrong.returncode == 1 and "human_gate" in wrong.stderr, wrong.stderr
        approved = cli("approve", run_id, "human_gate", "--reason", "looks right", "--by", "supervisor",
                       cwd=studio, check=0)
        assert "approved human_gate" in approved.stdout
        out, err = owner.communicate(timeout=60)
        assert owner.returncode == 0, err
        result = json.loads(out.splitlines()[-1])
        assert result["status"] == "completed"
        assert result["outputs"]["human_gate"]["reason"] == "looks right"
        assert result["outputs"]["human_gate"]["by"] == "supervisor"
    finally:
        owner.kill()
        owner.wait()
    # The owner is gone: the next command owns the database again.
    assert cli("status", run_id, cwd=studio).returncode == 0


def test_engine_on_a_database_another_engine_owns(tmp_path):
    import dcc_flow

    db = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=db) as owner:
        run = owner.submit({"name": "gated", "steps": [{"id": "gate", "kind": "approve"}]})
        with pytest.raises(dcc_flow.DatabaseLockedError) as info:
            dcc_flow.Engine(db=db)
        assert "pid %d" % os.getpid() in str(info.value) and info.value.details["holder"]
        with dcc_flow.Engine(db=db, read_only=True) as beside:
            assert [r.run_id for r in beside.runs()] == [run.run_id]
            with pytest.raises(dcc_flow.ReadOnlyError, match="read-only"):
                beside.submit({"name": "x", "steps": [{"id": "a", "tool": "flow__echo"}]})
            beside.approve(run.run_id, "gate", True, reason="ok")
        assert run.wait(timeout=10).ok


def test_schedule_problems_name_their_file(studio):
    """A folder of schedules with a bad one: each problem names its file, line and column, as
    validate does for specs, for schedules and for serve; nothing is loaded or served."""
    folder = studio / "schedules"
    folder.mkdir()
    (folder / "a.schedules.yaml").write_text(
        "schedules:\n  - { id: ok, workflow: vendor_intake, trigger: { kind: interval, every: 1h } }\n")
    (folder / "b.schedules.yaml").write_text(
        "schedules:\n  - id: nightly\n    workflow: vendor_intak\n    trigger: { kind: interval, every: 1h }\n")
    examples = os.path.join(ROOT, "examples")
    for args in (["schedules", str(folder), "--workflows", examples],
                 ["serve", "--schedules", str(folder), "--workflows", examples]):
        proc = cli(*args, "--db", ":memory:", cwd=studio, check=1)
        assert proc.stdout == ""
        first, last = proc.stderr.splitlines()
        assert first.startswith("%s:3:15: unknown_workflow: " % (folder / "b.schedules.yaml")), first
        assert '"vendor_intak"' in first
        assert last == "dcc-flow %s: error: %s: invalid schedules (1 error); nothing was loaded" % (args[0], folder)


def test_status_marks_a_cut_output(studio):
    (studio / "long.yaml").write_text("steps:\n  - { id: big, tool: studio__big }\n")
    (studio / "long_tools.py").write_text("def studio__big():\n    return {'text': 'x' * 500}\n")
    cli("run", "long.yaml", "--tools", "long_tools.py", cwd=studio, check=0)
    out = cli("status", "last", cwd=studio, check=0).stdout.splitlines()
    assert out[1] == 'output big: {"text": "%s…' % ("x" * (199 - len('{"text": "'))), out


def test_resume_of_a_completed_run_names_the_option(studio):
    (studio / "hello.yaml").write_text("steps:\n  - { id: greet, tool: studio__greet }\n")
    (studio / "hello_tools.py").write_text("def studio__greet():\n    return {'greeting': 'hello'}\n")
    cli("run", "hello.yaml", "--tools", "hello_tools.py", cwd=studio, check=0)
    proc = cli("resume", "last", "--tools", "hello_tools.py", cwd=studio, check=1)
    assert proc.stderr.endswith("completed; name the steps to run again with --force STEP\n"), proc.stderr
    assert "force_steps" not in proc.stderr
    cli("resume", "last", "--tools", "hello_tools.py", "--force", "greet", cwd=studio, check=0)


def test_a_positional_after_an_option_is_taken(studio):
    # argparse alone fills positionals only from the words before the first option.
    (studio / "hello.yaml").write_text("steps:\n  - { id: greet, tool: studio__greet }\n")
    (studio / "hello_tools.py").write_text("def studio__greet():\n    return {'greeting': 'hello'}\n")
    cli("run", "hello.yaml", "--tools", "hello_tools.py", "--db", "f.db", cwd=studio, check=0)
    after = cli("show", "last", "--db", "f.db", "greet", cwd=studio, check=0).stdout
    assert after == cli("show", "last", "greet", "--db", "f.db", cwd=studio, check=0).stdout
    assert "greet  completed" in after and "attempt 1" in after
    extra = cli("show", "last", "--db", "f.db", "greet", "more", cwd=studio, check=2)
    assert "unrecognized arguments: more" in extra.stderr


def test_on_failure_steps_show_in_run_and_show(tmp_path):
    (tmp_path / "nightly.yaml").write_text(textwrap.dedent("""
        name: nightly
        steps:
          - {id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}
        on_failure:
          - id: alert
            tool: flow__echo
            args: {text: "{{run.error.step_key}}: {{run.error.message}}"}
    """))
    failed = cli("run", "nightly.yaml", cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    lines = [json.loads(line) for line in failed.stdout.splitlines()]
    result = lines[-1]
    assert result["status"] == "failed" and result["error"]["step_key"] == "export"
    assert [ev["type"] for ev in lines if ev.get("type") == "on_failure_started"] == ["on_failure_started"]
    assert result["outputs"]["alert"] == {"text": "export: corrupt scene"}
    show = cli("show", result["run_id"], cwd=tmp_path, check=0).stdout
    assert re.search(r"on_failure\.alert\s+completed", show), show
