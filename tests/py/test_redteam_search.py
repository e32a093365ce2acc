"""Run search (docs/reference/cli/inspecting.md "runs"): ``dcc-flow runs`` and ``Engine.runs`` filter by input value,
tool, step status, error kind, worker, error text and time, combined, newest first, paged; and
hostile filters — SQL LIKE metacharacters and quotes in every text filter, a malformed time, an
unknown status or error kind, a huge value — get a clear usage error or an exact (empty) answer,
never a slow or failed query."""

import datetime
import time

import pytest

import dcc_flow
from test_cli import assert_one_error_line, call

FLAKY = ("name: flaky\ninputs: {shot: {type: string}, frame: {type: integer, default: 7}}\n"
         "steps: [{id: push, tool: flow__fail, args: {times: 1, kind: transient, shot: '{{inputs.shot}}'},"
         " retry: {max_attempts: 2, initial_delay_ms: 1}}]\n")
BROKEN = ("name: broken\ninputs: {shot: {type: string}}\n"
          "steps: [{id: push, tool: flow__fail, args: {times: 5, kind: timeout}}]\n")


@pytest.fixture
def db(tmp_path):
    """A database of four runs, oldest first: flaky sh010, flaky 50%_off\\, broken sh010, flaky sh020."""
    path = str(tmp_path / "flow.db")
    with dcc_flow.Engine(db=path) as eng:
        ids = [eng.run(FLAKY, {"shot": "sh010"}).run_id, eng.run(FLAKY, {"shot": "50%_off\\"}).run_id,
               eng.run(BROKEN, {"shot": "sh010"}).run_id, eng.run(FLAKY, {"shot": "sh020", "frame": 8}).run_id]
    return path, ids


def listed(capsys, path, *args):
    code, out, err = call(capsys, "runs", "--json", "--db", path, *args)
    assert code == 0, err
    import json
    return [r["run_id"] for r in json.loads(out)]


def test_each_filter_and_their_combination(db, capsys):
    path, (a, pct, broken, b) = db
    assert listed(capsys, path, "--input", "shot=sh010") == [broken, a]
    assert listed(capsys, path, "--input", "shot=sh010", "--input", "frame=7") == [a]  # the default is an input too
    assert listed(capsys, path, "--input", "frame=8") == [b]
    assert listed(capsys, path, "--tool", "flow__fail", "--limit", "2") == [b, broken]
    assert listed(capsys, path, "--step-status", "failed") == [broken]
    assert listed(capsys, path, "--error-kind", "transient") == [b, pct, a]  # an earlier attempt's error
    assert listed(capsys, path, "--error-kind", "timeout", "--input", "shot=sh010") == [broken]
    assert listed(capsys, path, "--error-text", "FAILURE 1 OF 1") == [b, pct, a]
    assert listed(capsys, path, "--since", "1h") == [b, broken, pct, a]
    assert listed(capsys, path, "--until", "1h") == []
    assert listed(capsys, path, "--since", "2020-01-01T00:00:00Z", "--until", "2261-01-01T00:00:00+02:00",
                  "--status", "failed") == [broken]


def test_paging_with_the_printed_cursor(db, capsys):
    path, (a, pct, broken, b) = db
    code, out, err = call(capsys, "runs", "--limit", "3", "--db", path)
    assert code == 0, err
    last = out.strip().splitlines()[-1]
    assert last.startswith("(more: --cursor ") and [b, broken, pct] == [line.split()[0] for line in out.splitlines()[1:4]]
    cursor = last[len("(more: --cursor "):-1]
    assert listed(capsys, path, "--limit", "3", "--cursor", cursor) == [a]
    with dcc_flow.Engine(db=path) as eng:
        page = eng.runs(limit=2, inputs={"shot": "sh010"})
        assert [r.run_id for r in page] == [broken, a] and page.next_cursor is None
        page = eng.runs(limit=1, tool="flow__fail")
        assert [r.run_id for r in page] == [b] and page.next_cursor
        assert [r.run_id for r in eng.runs(limit=5, tool="flow__fail", cursor=page.next_cursor)] == [broken, pct, a]
        assert [r.run_id for r in eng.runs(inputs={"frame": 8})] == [b]  # an int is searched as its text
        hour = datetime.timedelta(hours=1)
        assert [r.run_id for r in eng.runs(since=datetime.datetime.now() - hour, until=datetime.datetime.now(datetime.timezone.utc) + hour,
                                           step_status=["failed", "skipped"])] == [broken]  # naive: local time
        assert eng.runs(until=datetime.datetime.now() - hour) == []


@pytest.mark.parametrize("text", ["%", "\\", "%%", "_%_", "fail_re", "f%e", "'", "' OR 1=1 --", "\"; DROP TABLE workflows; --",
                                  "[a-z]*", "*", "?"])
def test_metacharacters_are_literal_in_every_text_filter(db, capsys, text):
    path, (_a, pct, _broken, _b) = db
    for option in ("--tool", "--worker", "--error-text"):
        assert listed(capsys, path, option, text) == [], option
    assert listed(capsys, path, "--input", "shot=" + text) == []
    assert listed(capsys, path, "--input", text + "=sh010") == []
    assert listed(capsys, path, "--input", "shot=50%_off\\") == [pct]  # matched as written, nothing else


def test_an_underscore_is_an_underscore(db, capsys):
    path, (a, pct, broken, b) = db
    assert listed(capsys, path, "--error-text", "flow__fail") == [b, broken, pct, a]
    assert listed(capsys, path, "--error-text", "fail_re") == []  # as a LIKE wildcard it would match failure


@pytest.mark.parametrize("args, says", [
    (["--since", "yesterday"], "argument --since: 'yesterday' is not a time"),
    (["--since", "2026-13-01T00:00:00Z"], "RFC 3339"),
    (["--until", "2026-13-01"], "RFC 3339"),
    (["--since=-2h"], "an age such as"),
    (["--since", "0d"], "an age such as"),
    (["--since", "1h", "--until", "2h"], "the time range is empty"),
    (["--until", "2999-01-01T00:00:00Z"], "out of range"),
    (["--step-status", "done"], "'pending', 'running', 'retrying', 'waiting_approval', 'waiting_resources', 'completed'"),
    (["--error-kind", "timout"], "'timeout', 'transient', 'error'"),
    (["--status", "done"], "invalid choice"),
    (["--input", "shot"], "--input KEY=VALUE"),
    (["--input", "=x"], "--input KEY=VALUE"),
    (["--input", "shot=a", "--input", "shot=b"], "--input shot is given twice"),
    (["--cursor", "not-a-cursor"], "next_cursor"),
    (["--limit", "-1"], "--limit -1"),
])
def test_a_bad_filter_is_a_usage_error_naming_the_fix(db, capsys, args, says):
    path, _ = db
    code, out, err = call(capsys, "runs", "--db", path, *args)
    assert code == 2 and out == "", (out, err)
    assert_one_error_line(err, prog="dcc-flow runs")
    assert any(s in err for s in says.split("|")), err


def test_a_huge_filter_value_is_refused_at_once(db, capsys):
    path, _ = db
    for option in ("--error-text", "--tool", "--worker"):
        start = time.monotonic()
        code, _out, err = call(capsys, "runs", "--db", path, option, "x" * (10 << 20))
        assert code == 2 and "at most 256" in err and len(err) < 400, (option, err[:300])
        assert time.monotonic() - start < 5
    code, _out, err = call(capsys, "runs", "--db", path, "--input", "shot=" + "é" * 257)
    assert code == 2 and "at most 256" in err and "not indexed" in err
    assert listed(capsys, path, "--input", "shot=" + "é" * 256) == []  # at the bound: searched
    with dcc_flow.Engine(db=path) as eng:
        with pytest.raises(dcc_flow.InvalidRequestError, match="17 input conditions: at most 16"):
            eng.runs(inputs={"k%d" % i: "v" for i in range(17)})
        with pytest.raises(dcc_flow.InvalidRequestError, match="NUL"):
            eng.runs(error_text="a\x00b")
        with pytest.raises(dcc_flow.InvalidRequestError, match="step status \"done\" is not a step status; use one of pending"):
            eng.runs(step_status="done")
        with pytest.raises(dcc_flow.InvalidRequestError, match="error kind \"timout\" is not an error kind; use one of timeout"):
            eng.runs(error_kind="timout")
        with pytest.raises(dcc_flow.InvalidRequestError, match="an age such as"):
            eng.runs(since="yesterday")
        with pytest.raises(TypeError, match="str, int or bool"):
            eng.runs(inputs={"scale": 1.5})
