"""The smaller defects of issue #33 item 7 that live in the Python door: connection strings that
leaked a password or became a file, and ``prune`` arguments that raised raw errors or were taken."""

import datetime
import math
import os

import pytest

import dcc_flow
from dcc_flow import DccFlowError
from test_cli import run_cli

SECRET = "hunter2secret"


@pytest.mark.parametrize("db", [
    "host=127.0.0.1 password=%s dbname=x" % SECRET,
    "postgresql:// host=127.0.0.1 password=%s" % SECRET,
    "postgresql://u:%s@[bad/x" % SECRET,
])
def test_connection_strings_never_show_the_password_nor_become_files(db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DccFlowError) as err:
        dcc_flow.Engine(db)
    assert err.value.code == "invalid_request"
    assert SECRET not in str(err.value)
    for command in ("runs", "run"):
        got = run_cli(command, *(["x.yaml"] if command == "run" else []), "--db", db, cwd=str(tmp_path))
        assert got.returncode != 0
        assert SECRET not in got.stdout + got.stderr, got.stderr
    assert os.listdir(str(tmp_path)) == []


def test_a_file_named_like_a_keyword_is_written_with_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dcc_flow.Engine("./host=x").close()
    assert "host=x" in os.listdir(str(tmp_path))


@pytest.fixture()
def engine_with_runs():
    eng = dcc_flow.Engine()
    eng.register_tool(lambda: {}, name="t")
    for _ in range(3):
        eng.run({"name": "w", "steps": [{"id": "a", "tool": "t"}]})
    yield eng
    eng.close()


@pytest.mark.parametrize("older_than", [math.inf, -math.inf, math.nan, -1, True, None, [1]])
def test_prune_refuses_ages_that_are_not_one(engine_with_runs, older_than):
    with pytest.raises(ValueError, match="older_than must be a finite number of seconds"):
        engine_with_runs.prune(older_than)


@pytest.mark.parametrize("kw", [{"batch": -5}, {"batch": 0}, {"batch": 1.5}, {"batch": "2"}, {"limit": 1.5},
                                {"limit": -1}, {"limit": True}])
def test_prune_refuses_bad_counts(engine_with_runs, kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        engine_with_runs.prune("30d", **kw)
    with pytest.raises(ValueError):
        engine_with_runs.prune("30d", progress=lambda done, total: None, **kw)


def test_prune_edges_of_time(engine_with_runs):
    eng = engine_with_runs
    # Ages longer than a Go duration holds, and the first day of year 1, are older than every run.
    for older_than in (1e30, 10 ** 40, datetime.datetime(1, 1, 1), datetime.datetime.min,
                       datetime.datetime(1, 1, 2, tzinfo=datetime.timezone.utc)):
        assert eng.prune(older_than, dry_run=True) == 0, older_than
        assert eng.prune(older_than) == 0, older_than
    assert eng.prune(datetime.datetime.max, dry_run=True) == 3
    assert eng.prune(datetime.datetime.max, limit=1.0) == 1
    assert eng.prune(0, batch=2.0, progress=lambda done, total: None) == 2
