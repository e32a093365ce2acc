"""Hostile input to the attempt records (docs/reference/limits.md "Attempts"): a 10 MB argument, text that
is not valid Unicode, terminal escapes in an argument shown by ``dcc-flow show``, a step retried
thousands of times. Each gets a bounded record or a clear error, never a failed run."""

import os
import subprocess
import sys

import pytest

import dcc_flow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = ("name: hostile\ninputs: {p: {type: string}}\n"
        "steps: [{id: s, tool: flow__fail, args: {times: 0, path: '{{inputs.p}}'}}]\n")


@pytest.fixture
def engine(tmp_path):
    with dcc_flow.Engine(db=str(tmp_path / "flow.db")) as eng:
        yield eng


def test_a_10_mb_argument_is_recorded_as_a_marked_preview(engine):
    result = engine.run(SPEC, {"p": "é" * (5 << 20)})
    assert result.ok, result.error
    args = result.step("s").args
    assert args["_truncated"] is True and args["bytes"] > 10 << 20
    assert args["preview"].startswith('{"path":"éé') and len(args["preview"].encode()) <= 1024
    assert result.step("s").attempts[0].args == args


def test_text_that_is_not_unicode_is_a_clear_error_or_kept_escaped(engine):
    name = os.fsdecode(b"/shots/sh\xff010.ma")  # a file name that is not UTF-8, as Python decodes it
    with pytest.raises(ValueError, match="not valid Unicode"):
        engine.run(SPEC, {"p": name})
    result = engine.run(SPEC, {"p": "nul\x00 and \x1b[2J escape"})
    assert result.ok and result.step("s").args == {"times": 0, "path": "nul\x00 and \x1b[2J escape"}


def test_show_escapes_what_a_terminal_acts_on(engine, tmp_path):
    result = engine.run(SPEC, {"p": "\x1b]0;owned\x07\x1b[2J\nsecond line"})
    engine.close()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCC_FLOW_DB", None)
    proc = subprocess.run([sys.executable, "-m", "dcc_flow", "show", result.run_id, "s", "--db", str(tmp_path / "flow.db")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    args_lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("args ")]
    assert len(args_lines) == 1 and "second line" in args_lines[0]  # one line, the break escaped


def test_a_step_retried_3000_times_keeps_110_attempts(engine):
    spec = ("steps: [{id: s, tool: flow__fail, args: {times: 100000, kind: transient},"
            " retry: {max_attempts: 3000, initial_delay_ms: 0, max_delay_ms: 0}}]\n")
    result = engine.run(spec)
    step = result.step("s")
    assert result.status is dcc_flow.WorkflowStatus.FAILED and step.attempt == 3000
    assert len(step.attempts) == 110 and step.attempts_dropped == 2890
    assert [a.attempt for a in step.attempts[9:11]] == [10, 2901] and step.attempts[-1].attempt == 3000
