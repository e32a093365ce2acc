"""Output of in-process tools (docs/reference/python/tool-calls.md "Output of in-process tools"): what a tool's thread
prints and logs becomes its step's lines, and the CLI's standard output stays its own."""

import io
import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

import dcc_flow
from conftest import PYTHON_DIR
from dcc_flow._cli import main


@pytest.fixture()
def engine():
    with dcc_flow.Engine() as eng:
        yield eng


def lines_of(step):
    return [(line["stream"], line.get("level"), line.get("logger"), line["text"]) for line in step.logs]


def test_print_stderr_and_logging_of_a_tool_are_its_steps_lines(engine):
    log = logging.getLogger("studio.export")

    @engine.tool()
    def chatty():
        print("hello from print")
        print("two\nlines")
        sys.stderr.write("careful\n")
        log.warning("disk %s", "slow")
        log.error("failed frame 7")
        logging.getLogger().critical("root speaks")
        print("no newline at the end", end="")
        return 1

    step = engine.run("steps: [{id: c, tool: chatty}]").step("c")
    assert lines_of(step) == [
        ("stdout", None, None, "hello from print"),
        ("stdout", None, None, "two"),
        ("stdout", None, None, "lines"),
        ("stderr", None, None, "careful"),
        ("log", "WARNING", "studio.export", "disk slow"),
        ("log", "ERROR", "studio.export", "failed frame 7"),
        ("log", "CRITICAL", "root", "root speaks"),
        ("stdout", None, None, "no newline at the end"),  # sent when the tool returned
    ]
    assert all(line["attempt"] == 1 for line in step.logs)


def test_step_log_events_carry_the_lines_before_the_step_ends(engine):
    @engine.tool()
    def talk():
        print("first")
        print("last", end="")

    run = engine.submit("steps: [{id: t, tool: talk}]")
    events = list(run.events(timeout=30))
    exit_seq = next(e["seq"] for e in events if e["type"] == "step_exit")
    logs = [e for e in events if e["type"] == "step_log"]
    assert [line["text"] for e in logs for line in e["detail"]["lines"]] == ["first", "last"]
    assert all(e["seq"] < exit_seq for e in logs)
    assert {line["stream"] for e in logs for line in e["detail"]["lines"]} == {"stdout"}


def test_a_tools_logging_records_go_to_the_step_instead_of_the_handlers(engine):
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger = logging.getLogger("studio.capture_test")
    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        @engine.tool()
        def quiet():
            logger.debug("in the tool")
            try:
                raise ValueError("bad frame")
            except ValueError:
                logger.exception("it failed")

        step = engine.run("steps: [{id: q, tool: quiet}]").step("q")
        logger.info("outside a tool")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert seen == ["outside a tool"]  # the tool's records were not printed twice
    assert [(line["level"], line["logger"]) for line in step.logs] == [("DEBUG", "studio.capture_test"),
                                                                          ("ERROR", "studio.capture_test")]
    assert step.logs[1]["text"].startswith("it failed\nTraceback (most recent call last):")
    assert "ValueError: bad frame" in step.logs[1]["text"]


def test_main_and_worker_lane_tools_printing_at_once_keep_their_own_lines(engine):
    both = threading.Barrier(2, timeout=20)
    n = 30  # 90 lines: within one send (100), however fast they come

    def body(tag):
        both.wait()  # the two tools run at the same time, on two threads
        for i in range(n):
            print("%s out %d" % (tag, i))
            sys.stderr.write("%s err %d\n" % (tag, i))
            logging.getLogger("studio." + tag).warning("%s log %d", tag, i)
            if i % 10 == 0:
                both.wait()  # and keep interleaving
        return threading.get_ident()

    engine.register_tool(lambda: body("main"), name="on_main")
    engine.register_tool(lambda: body("worker"), name="on_worker", thread="worker")
    engine.serve_tools(workers=1)
    result = engine.run("steps: [{id: both, kind: parallel, steps: [{id: m, tool: on_main}, {id: w, tool: on_worker}]}]",
                        timeout=60)
    assert result.ok, result.error
    assert result.step("m").output != result.step("w").output  # two threads
    for key, tag in (("m", "main"), ("w", "worker")):
        step = result.step(key)
        assert step.logs_dropped == 0
        expected = []
        for i in range(n):
            expected += [("stdout", None, None, "%s out %d" % (tag, i)),
                         ("stderr", None, None, "%s err %d" % (tag, i)),
                         ("log", "WARNING", "studio." + tag, "%s log %d" % (tag, i))]
        assert lines_of(step) == expected


def test_a_thread_the_tool_starts_is_not_captured(engine, capsys):
    @engine.tool()
    def spawn():
        t = threading.Thread(target=lambda: print("from a helper thread"))
        t.start()
        t.join()
        print("from the tool")

    step = engine.run("steps: [{id: s, tool: spawn}]").step("s")
    assert [line["text"] for line in step.logs] == ["from the tool"]
    assert "from a helper thread" in capsys.readouterr().out  # went to the real stdout


@pytest.mark.parametrize("lane", ["main", "worker"])
def test_what_a_cancelled_tool_prints_while_it_unwinds_reaches_the_console(engine, capsys, lane):
    # A cancel ends the step at once (its record is written then), while the tool unwinds on:
    # what it prints and logs after that is not taken by the engine, and goes to the process's
    # own streams instead of nowhere. After a timeout the engine waits for the tool to stop, and
    # those lines are on the record (and not printed twice).
    started = threading.Event()

    @engine.tool("spin", thread=lane)
    def spin():
        print("starting")
        started.set()
        try:
            while True:
                pass
        finally:
            print("cleaned up")
            logging.getLogger("studio.spin").warning("lock released")

    if lane == "worker":
        engine.serve_tools(workers=1)
    run = engine.submit("steps: [{id: s, tool: spin}]")

    def cancel():
        started.wait(10)
        run.cancel("test")

    t = threading.Thread(target=cancel)
    t.start()
    assert run.wait(timeout=30).status.value == "cancelled"
    t.join()
    deadline = time.monotonic() + 10
    out = err = ""
    while time.monotonic() < deadline and ("cleaned up" not in out or "lock released" not in err):
        captured = capsys.readouterr()
        out, err = out + captured.out, err + captured.err
        time.sleep(0.02)
    assert "cleaned up\n" in out and "lock released\n" in err, (out, err)
    assert [line["text"] for line in engine.get_status(run.run_id).steps[0].logs] == ["starting"]

    started.clear()
    timed = engine.run("steps: [{id: s, tool: spin, timeout_secs: 0.3}]")
    assert timed.status.value == "failed"
    assert [line["text"] for line in timed.step("s").logs] == ["starting", "cleaned up", "lock released"]
    captured = capsys.readouterr()
    assert "cleaned up" not in captured.out and "lock released" not in captured.err, captured


def test_a_hundred_thousand_lines_stay_bounded_and_are_counted(engine):
    n = 100000

    @engine.tool()
    def flood():
        for i in range(n):
            print("line %d" % i)
        sys.stdout.write("x" * 1000000)  # a megabyte without a newline: one line, cut
        return None

    result = engine.run("steps: [{id: f, tool: flood}]", timeout=120)
    step = result.step("f")
    assert len(step.logs) <= 1000
    assert len(step.logs) + step.logs_dropped == n + 1  # every line kept or counted
    assert step.logs[-1]["text"].startswith("x") and len(step.logs[-1]["text"].encode()) <= 4096
    assert step.logs[-1]["text"].endswith("…")
    assert step.logs[-2]["text"] == "line %d" % (n - 1)  # the newest lines are kept


def test_a_burst_of_prints_is_kept_whole_on_the_record_as_a_pool_workers(engine):
    """500 lines printed at once: the step record keeps all of them (a pool worker keeps 1,000 of a
    call's lines); the live step_log events carry at most 100 each and count the others."""

    @engine.tool()
    def listing():
        for i in range(500):
            print("file_%03d.ma" % i)

    run = engine.submit("steps: [{id: l, tool: listing}]")
    events = [ev for ev in run.events(timeout=30) if ev["type"] == "step_log"]
    step = engine.get_status(run.run_id, all_steps=True).step("l")
    assert [line["text"] for line in step.logs] == ["file_%03d.ma" % i for i in range(500)]
    assert step.logs_dropped == 0
    assert all(len(ev["detail"]["lines"]) <= 100 for ev in events)
    shown = sum(len(ev["detail"]["lines"]) for ev in events)
    assert shown + sum(ev["detail"].get("dropped", 0) for ev in events) == 500


def test_a_carriage_return_starts_the_line_over(engine):
    @engine.tool()
    def bar():
        for pct in (10, 50, 100):
            sys.stderr.write("\rexporting %d%%" % pct)
        sys.stderr.write("\n")
        print("windows line\r")

    step = engine.run("steps: [{id: b, tool: bar}]").step("b")
    assert [line["text"] for line in step.logs] == ["exporting 100%", "windows line"]


def test_the_proxy_forwards_everything_else_and_copes_with_a_replaced_stdout(engine):
    @engine.tool()
    def hello():
        print("captured")

    engine.run("steps: [{id: h, tool: hello}]")  # installs the capture
    assert type(sys.stdout).__name__ == "_StdProxy"
    target = sys.stdout._target
    assert sys.stdout.encoding == target.encoding
    assert sys.stdout.isatty() == target.isatty()
    saved = sys.stdout
    mine = io.StringIO()
    sys.stdout = mine  # someone replaces sys.stdout after us (a DCC's script editor)
    try:
        step = engine.run("steps: [{id: h, tool: hello}]").step("h")
        print("outside a tool")
        assert sys.stdout._target is mine  # wrapped in turn
    finally:
        sys.stdout = saved
    assert [line["text"] for line in step.logs] == ["captured"]
    assert mine.getvalue() == "outside a tool\n"


def test_a_pool_workers_execute_captures_nothing_itself():
    from dcc_flow._tools import ToolEntry, execute

    sent = []
    entry = ToolEntry("p", lambda: print("to the fds"), "main", None, "")
    execute(entry, {"call_id": 1, "tool": "p"}, lambda _c: False, lambda *a: sent.append(a), capture=False)
    assert sent == []  # a worker's output is read from its file descriptors (docs/guide/pools.md)


def test_the_packages_own_records_are_not_captured(engine, caplog):
    @engine.tool()
    def own():
        logging.getLogger("dcc_flow.test").warning("the package speaks")
        logging.getLogger("dcc_flowish").warning("a studio module")

    with caplog.at_level(logging.WARNING):
        step = engine.run("steps: [{id: o, tool: own}]").step("o")
    assert [line["text"] for line in step.logs] == ["a studio module"]
    assert "the package speaks" in caplog.text


NOISY = "name: noisy\nsteps:\n  - id: talk\n    tool: talk\n"
PRINT_TOOLS = '''
import logging, os, sys, threading


def talk():
    print("hello from print")
    sys.stderr.write("to stderr\\n")
    logging.getLogger("studio").warning("a warning")
    t = threading.Thread(target=lambda: print("from a thread"))
    t.start()
    t.join()
    os.write(1, b"raw fd 1\\n")
    print("no newline", end="")
    return {"ok": True}
'''


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("DCC_FLOW_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + list(args), capture_output=True, text=True,
                          encoding="utf-8", env=env, cwd=str(cwd), timeout=60)


def test_cli_stdout_is_only_json_lines_while_a_tool_prints(tmp_path):
    (tmp_path / "noisy.yaml").write_text(NOISY)
    (tmp_path / "printtools.py").write_text(PRINT_TOOLS)
    proc = cli("run", "noisy.yaml", "--tools", "printtools.py", "--db", "pr.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]  # every line is JSON
    assert docs[-1]["type"] == "result" and docs[-1]["status"] == "completed"
    logged = [line for d in docs if d["type"] == "step_log" for line in d["detail"]["lines"]]
    assert [(line["stream"], line["text"]) for line in logged] == [
        ("stdout", "hello from print"), ("stderr", "to stderr"), ("log", "a warning"), ("stdout", "no newline")]
    # What the capture cannot route went to stderr, not into the JSON lines.
    assert "from a thread" in proc.stderr and "raw fd 1" in proc.stderr
    show = cli("show", "last", "--db", "pr.db", cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert show.stdout.splitlines()[2:] == ["      out| hello from print", "      err| to stderr",
                                            "      log WARNING studio| a warning", "      out| no newline"]


def test_cli_in_process_keeps_stray_output_off_stdout(tmp_path, monkeypatch, capsys):
    (tmp_path / "noisy.yaml").write_text(NOISY)
    (tmp_path / "printtools.py").write_text(PRINT_TOOLS.replace('os.write(1, b"raw fd 1\\n")', "pass"))
    monkeypatch.chdir(tmp_path)
    before = sys.stdout
    assert main(["run", "noisy.yaml", "--tools", "printtools.py", "--db", ":memory:"]) == 0
    out, err = capsys.readouterr()
    assert all(json.loads(line) for line in out.splitlines())
    assert "from a thread" in err  # capsys has no file descriptors: sys.stdout pointed at stderr
    assert sys.stdout is before  # put back


def test_own_stdout_moves_fd_1_to_stderr_and_back(tmp_path):
    code = r'''
import os, sys
sys.path.insert(0, %r)
from dcc_flow._cli._base import Context
ctx = Context("t")
with ctx.own_stdout():
    ctx.print("mine")
    print("stray print")
    os.write(1, b"stray fd\n")
ctx.print("after")
print("print after")
''' % PYTHON_DIR
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["mine", "after", "print after"]
    assert sorted(proc.stderr.splitlines()) == ["stray fd", "stray print"]  # (stderr is buffered before 3.9)


def test_output_written_while_a_report_is_sent_does_not_deadlock():
    from dcc_flow._tools import ToolEntry, execute

    class Loud:
        def __repr__(self):  # runs while the report is encoded, on the tool's thread
            print("printed by a repr")
            logging.getLogger("studio").warning("logged by a repr")
            return "Loud()"

    sent = []

    def send(call_id, progress, logs, dropped):
        sent.append(json.dumps(logs, default=repr))

    def tool():
        dcc_flow.current_call().log("with a loud field", obj=Loud())
        print("after it")

    entry = ToolEntry("loud", tool, "main", None, "")
    done = []
    t = threading.Thread(target=lambda: done.append(execute(entry, {"call_id": 1, "tool": "loud"},
                                                             lambda _c: False, send)), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the tool deadlocked on its own report"
    text = "".join(sent)
    for line in ("with a loud field", "printed by a repr", "logged by a repr", "after it"):
        assert line in text


class MayaOutput:
    """A DCC's own sys.stdout: not an io object, no fileno, a method of its own."""

    def __init__(self):
        self.text = []

    def write(self, text):
        self.text.append(text)

    def flush(self):
        pass

    def echo_to_script_editor(self):
        return "echo"


def test_a_dcc_stream_is_wrapped_and_keeps_its_own_attributes(engine, monkeypatch):
    maya = MayaOutput()
    monkeypatch.setattr(sys, "stdout", maya)

    @engine.tool()
    def in_maya():
        print("captured in maya")

    step = engine.run("steps: [{id: m, tool: in_maya}]").step("m")
    print("to the script editor")
    assert sys.stdout is not maya and sys.stdout.echo_to_script_editor() == "echo"
    with pytest.raises(AttributeError):
        sys.stdout.fileno  # noqa: B018 - what the DCC's object lacks, the proxy lacks
    assert [line["text"] for line in step.logs] == ["captured in maya"]
    assert "".join(maya.text) == "to the script editor\n"


def test_show_prefixes_every_line_of_a_logged_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "t.db")
    with dcc_flow.Engine(db=db) as eng:
        @eng.tool()
        def fails_softly():
            try:
                {}["frame"]
            except KeyError:
                logging.getLogger("studio.export").exception("frame missing")
            sys.stderr.write("stderr line\n")

        assert eng.run("steps: [{id: f, tool: fails_softly}]").ok
    assert main(["show", "last", "--db", db]) == 0
    out = capsys.readouterr().out.splitlines()
    logged = [line for line in out if line.startswith("      log ERROR studio.export| ")]
    assert logged[0] == "      log ERROR studio.export| frame missing"
    assert logged[1] == "      log ERROR studio.export| Traceback (most recent call last):"
    assert logged[-1] == "      log ERROR studio.export| KeyError: 'frame'"
    assert out[-1] == "      err| stderr line"


def test_write_through_escapes_what_the_console_cannot_encode(monkeypatch):
    from dcc_flow import _capture

    raw = io.BytesIO()
    console = io.TextIOWrapper(raw, encoding="cp1252", errors="strict")
    monkeypatch.setattr(sys, "stderr", console)
    _capture.write_through([{"message": "naïve ✓ done", "stream": "stderr"}, {"message": "log line"}])
    assert raw.getvalue().decode("cp1252") == "naïve \\u2713 done\nlog line\n"
