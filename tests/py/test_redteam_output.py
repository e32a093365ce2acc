"""Names and messages that forge log lines (issue #33 item 6): a workflow name is checked at parse
time (code ``invalid_name``), and every human output of the CLI escapes what a terminal would act
on — an escape sequence that clears the screen or retitles the window, a carriage return, a bell —
and keeps one-line fields (names, error messages, reasons, output lines) on one line."""

import io
import json
import re

import pytest

from dcc_flow import ValidationError, WorkflowSpec
from dcc_flow._cli._base import Context, plain, terminal_safe
from dcc_flow._cli.run import Progress
from dcc_flow._cli.serve import log_run_event
from test_cli import run_cli

FORGED = "boom\x1b[2J\x1b]0;owned\x07\r\n12:00:00 run r1 completed (3/3 steps)\u2028\u202e"
# What must never reach a terminal raw: ESC, BEL, CR, the separators and a bidi override.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("name", ["a\nb", "x\x1b]0;t\x07", "n\x00", "../../etc", "a\\b", "n" * 65, " a", "a\u202e",
                                  "a\x85"])
def test_workflow_names_are_checked_at_parse(name):
    with pytest.raises(ValidationError) as err:
        WorkflowSpec.from_json({"name": name, "steps": [{"id": "a", "tool": "t"}]})
    assert err.value.problems[0].code == "invalid_name", err.value.problems


@pytest.mark.parametrize("name", ["vendor_intake", "Customer Feedback Analysis Pipeline", "é", "n" * 64, "",
                                  "nightly 03:00 (shots 1-9)"])
def test_plain_names_stay_valid(name):
    assert WorkflowSpec.from_json({"name": name, "steps": [{"id": "a", "tool": "t"}]}).name == name


def test_escapes_are_visible_and_json_stays_json():
    assert plain(FORGED) == ("boom\\u001b[2J\\u001b]0;owned\\u0007\\u000d\\u000a12:00:00 run r1 completed "
                             "(3/3 steps)\\u2028\\u202e")
    assert terminal_safe("a\n\tb\x1b") == "a\n\tb\\u001b"
    doc = json.dumps({"m": "\x85\u2028\x7f"}, ensure_ascii=False)
    assert json.loads(terminal_safe(doc)) == {"m": "\x85\u2028\x7f"}


def test_show_status_and_run_escape_a_tools_message(tmp_path):
    (tmp_path / "tools_evil.py").write_text(
        "def evil():\n    print(%r)\n    raise RuntimeError(%r)\n" % (FORGED, FORGED), encoding="utf-8")
    (tmp_path / "evil.yaml").write_text("name: evil\nsteps:\n  - { id: a, tool: evil }\n", encoding="utf-8")
    db = str(tmp_path / "ev.db")
    ran = run_cli("run", "evil.yaml", "--tools", "tools_evil.py", "--db", db, cwd=str(tmp_path))
    assert ran.returncode == 1, ran.stderr
    for line in ran.stdout.splitlines():
        json.loads(line)  # JSON lines stay JSON
    outputs = [ran.stdout, ran.stderr]
    for command in ("show", "status", "runs"):
        got = run_cli(command, *(["last"] if command != "runs" else []), "--db", db)
        assert got.returncode in (0, 1), got.stderr
        outputs += [got.stdout, got.stderr]
    for text in outputs:
        assert not RAW.search(text), repr(text)
        # The forged line never starts a line of its own (a traceback's lines are prefixed "| ").
        assert not re.search(r"(?m)^\s*12:00:00 run r1 completed", text), text
    assert "\\u001b[2J" in outputs[2]  # show: visible, not acted on


def test_serve_log_line_of_a_forged_pause_reason():
    out = io.StringIO()
    ev = {"type": "run_paused", "run_id": "r1", "detail": {"by": "agent\x1b[2J", "reason": FORGED}}
    log_run_event(None, ev, out)
    text = out.getvalue()
    assert text.count("\n") == 1 and not RAW.search(text), repr(text)


def test_progress_notes_of_a_tools_output_on_a_terminal():
    out = io.StringIO()
    progress = Progress(Context("dcc-flow run", out, io.StringIO()), "r1", "flow\x1b]0;x\x07", True)
    progress.event({"type": "step_log", "run_id": "r1", "step_key": "a",
                    "detail": {"lines": [{"stream": "stdout", "text": FORGED}]}})
    text = out.getvalue().replace("\r", "")  # the progress line's own carriage returns
    assert not RAW.search(text), repr(text)
    assert not re.search(r"(?m)^12:00:00", text)


def test_cli_log_warnings_are_escaped(capsys):
    """A warning on the dcc_flow logger (an outage quoting the server's words) reaches the
    terminal escaped when the command line shows it (no logging configured)."""
    import logging

    from dcc_flow import _cli

    logger = logging.getLogger("dcc_flow")
    saved_root, saved = logging.getLogger().handlers[:], logger.handlers[:]
    logging.getLogger().handlers, logger.handlers = [], []
    try:
        _cli._install_log_handler()
        _cli._install_log_handler()  # once, however many commands run in one process
        assert logger.handlers == [_cli._LOG_HANDLER]
        logger.warning("events unavailable: %s", FORGED)
    finally:
        logging.getLogger().handlers, logger.handlers = saved_root, saved
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not RAW.search(err.replace("\n", "")), repr(err)
