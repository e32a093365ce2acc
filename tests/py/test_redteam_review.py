"""Review of issue #33 (round 3): human outputs of the CLI that still printed a tool's or a
webhook caller's text raw. Every such field goes through ``plain`` (docs/operations/running.md,
"Security"): a progress message, a logger name, a fire's message or reason."""

import io
import re

from dcc_flow._cli._base import Context
from dcc_flow._cli.schedules import last_fire, print_history
from test_cli import run_cli

FORGED = "boom\x1b[2J\r\n12:00:00 run r1 completed (3/3 steps)\u2028"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
FORGED_LINE = re.compile(r"(?m)^\s*12:00:00 run r1 completed")


def test_show_and_status_escape_a_tools_progress_message_and_logger_name(tmp_path):
    # The step's progress message and the name of the logger of a logged record are the tool's
    # text, as much as its output lines: `show` printed both raw, `status` the progress.
    (tmp_path / "tools_evil.py").write_text(
        "import logging, threading\n"
        "from dcc_flow import current_call\n"
        "def evil():\n"
        "    current_call().progress(1, 2, %r)\n"
        "    logging.getLogger(%r).warning('hello')\n"
        "    raise RuntimeError('failed')\n" % (FORGED, FORGED), encoding="utf-8")
    (tmp_path / "evil.yaml").write_text("name: evil\nsteps:\n  - { id: a, tool: evil }\n", encoding="utf-8")
    db = str(tmp_path / "ev.db")
    ran = run_cli("run", "evil.yaml", "--tools", "tools_evil.py", "--db", db, cwd=str(tmp_path))
    assert ran.returncode == 1, ran.stderr
    shown = run_cli("show", "last", "--db", db)
    assert shown.returncode in (0, 1), shown.stderr
    assert "progress 1/2 boom" in shown.stdout, shown.stdout  # the progress is there, escaped
    assert "\\u001b[2J" in shown.stdout
    for text in (shown.stdout, shown.stderr):
        assert not RAW.search(text), repr(text)
        assert not FORGED_LINE.search(text), text


def test_status_escapes_a_running_steps_progress_message():
    from dcc_flow._cli import status as status_cli

    class Step:
        status = type("S", (), {"value": "running", "is_terminal": False})()
        key = "a"
        progress = {"done": 1, "total": 2, "message": FORGED}
        waiting = None  # StepRecord.waiting: a running step waits for nothing

    class Result:
        run_id, name, error, parent_run_id, children, outputs, terminal = "r1", "evil", None, "", [], {}, False
        status = type("S", (), {"value": "running"})()
        progress = (0, 1)
        steps = [Step()]
        raw: dict = {}

    class Engine:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get_status(self, run_id):
            return Result()

    out = io.StringIO()
    args = type("A", (), {"run_id": "r1", "json": False})()
    orig_open, orig_resolve = status_cli.open_engine, status_cli.resolve_run
    status_cli.open_engine = lambda *a, **k: Engine()
    status_cli.resolve_run = lambda engine, run_id, *rest: run_id
    try:
        status_cli.COMMAND.run(args, Context("dcc-flow status", out, io.StringIO()))
    finally:
        status_cli.open_engine, status_cli.resolve_run = orig_open, orig_resolve
    text = out.getvalue()
    assert "running a: 1/2 boom" in text, text
    assert not RAW.search(text) and not FORGED_LINE.search(text), repr(text)


def test_schedule_history_and_table_escape_a_fires_message():
    # A webhook fire that failed to start records the start error, which can quote what the
    # caller sent; `schedules --history` printed it raw.
    fire = {"fired_at": "2026-11-23T10:55:16Z", "kind": "failed", "origin": "webhook", "reason": "start_failed" + FORGED,
            "message": FORGED, "schedule_id": "hook"}
    out = io.StringIO()
    print_history(Context("dcc-flow schedules", out, io.StringIO()), "hook\x1b]0;t\x07", [fire])
    text = out.getvalue()
    assert text.count("\n") == 3, repr(text)  # blank line, header, one fire
    assert not RAW.search(text) and not FORGED_LINE.search(text), repr(text)
    assert not RAW.search(last_fire({"last_fire": fire})), last_fire({"last_fire": fire})


def test_prune_dry_run_escapes_run_names():
    # A run recorded before the name rule (or by an older engine) keeps its name in the database.
    from dcc_flow._cli.prune import PruneCommand

    out = io.StringIO()
    args = type("A", (), {"json": False, "older_than": "30d"})()
    runs = [{"run_id": "r1", "name": FORGED, "status": "completed", "finished_at": "2026-11-23T10:55:16Z"}]
    PruneCommand.report_dry_run(Context("dcc-flow prune", out, io.StringIO()), args, runs)
    text = out.getvalue()
    assert text.count("\n") == 3 and not RAW.search(text) and not FORGED_LINE.search(text), repr(text)


def test_worker_db_usage_error_does_not_echo_a_password(tmp_path):
    # `dcc-flow worker --db` wants a postgresql:// URL: a libpq keyword string (or a mistyped
    # URL) was echoed whole in the usage error, password included, onto a terminal or a log.
    (tmp_path / "tools_w.py").write_text("def t():\n    return 1\n", encoding="utf-8")
    for db in ("host=db.studio password=hunter2secret", "postgress://flow:hunter2secret@db/flow"):
        got = run_cli("worker", "--tools", "tools_w.py", "--db", db, cwd=str(tmp_path))
        assert got.returncode == 2, got.stderr
        assert "postgresql://" in got.stderr
        assert "hunter2secret" not in got.stderr + got.stdout, got.stderr
