"""Engine.lineage, stale, cache_entries and purge_cache, and AttemptRecord.env/files (#36,
docs/guide/assets.md)."""
import datetime
import os
import pathlib

import pytest

import dcc_flow
from dcc_flow.errors import InvalidRequestError, NotFoundError, ReadOnlyError

SPEC = """
name: shot
inputs:
  shot: { type: string, default: sh010 }
steps:
  - id: assemble
    tool: usd__assemble
    args: { layers: [assets/chair.usda, assets/table.usda], out: "{{inputs.shot}}.usda" }
    cache: { version: "1" }
"""


@pytest.fixture
def studio(tmp_path, monkeypatch):
    """An engine on tmp_path/flow.db whose usd__assemble reports its files through reads=/writes=,
    in a folder with two layers."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "chair.usda").write_text("chair\n")
    (tmp_path / "assets" / "table.usda").write_text("table\n")
    engine = dcc_flow.Engine(db=str(tmp_path / "flow.db"), config={"env": {"dcc": "usd", "version": "25.11"}},
                             environment={"dcc": "usd", "version": "25.11"})
    calls = []

    @engine.tool(reads="layers", writes="out")
    def usd__assemble(layers, out):
        calls.append(out)
        with open(out, "w") as f:
            for layer in layers:
                with open(layer) as src:
                    f.write(src.read())
        return {"usd": out}

    with engine:
        yield engine, tmp_path, calls


def test_lineage_of_an_output_and_its_errors(studio):
    engine, folder, _ = studio
    run = engine.run(SPEC)
    node = engine.lineage("sh010.usda")  # relative: from the working folder
    assert node["path"] == str(folder / "sh010.usda") and node["now"] == "unchanged"
    made = node["made"]
    assert (made["run_id"], made["step_key"], made["attempt"], made["tool"]) == (run.run_id, "assemble", 1,
                                                                                  "usd__assemble")
    assert made["env"] == {"dcc": "usd", "version": "25.11"} and made["workflow"] == "shot"
    assert [i["path"] for i in made["inputs"]] == [str(folder / "assets" / n) for n in ("chair.usda", "table.usda")]
    assert all(i["hash"].startswith("blake3:") and "made" not in i for i in made["inputs"])
    assert engine.lineage(pathlib.Path("sh010.usda"), depth=1) == node  # a PathLike; depth 1 is enough here
    # An input is recorded too: its lineage is itself, with no writer.
    source = engine.lineage(folder / "assets" / "chair.usda")
    assert source["now"] == "unchanged" and "made" not in source

    with pytest.raises(NotFoundError, match="no recorded attempt read or wrote %s" % (folder / "nothing")):
        engine.lineage("nothing")
    for depth in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="depth must be"):
            engine.lineage("sh010.usda", depth=depth)
    with pytest.raises(TypeError, match="a path must be a str or an os.PathLike"):
        engine.lineage(7)
    with pytest.raises(ValueError, match="non-empty"):
        engine.lineage("")


def test_stale_takes_a_path_a_list_or_none(studio):
    engine, folder, _ = studio
    run = engine.run(SPEC)
    assert engine.stale() == [] and engine.stale(".") == [] and engine.stale([folder]) == []
    (folder / "assets" / "table.usda").write_text("table, fixed\n")
    want = [{"path": str(folder / "sh010.usda"), "reason": "input changed: %s" % (folder / "assets" / "table.usda"),
             "run_id": run.run_id, "step_key": "assemble", "attempt": 1}]
    assert engine.stale() == want and engine.stale("sh010.usda") == want
    assert engine.stale(["assets", str(folder / "elsewhere")]) == []
    os.remove("sh010.usda")
    assert engine.stale()[0]["reason"] == "deleted since it was made"


def test_attempts_carry_their_environment_and_files(studio):
    engine, folder, _ = studio
    step = engine.run(SPEC).step("assemble")
    (attempt,) = step.attempts
    assert attempt.env == {"dcc": "usd", "version": "25.11"}
    assert [(f["role"], f["path"], f["state"]) for f in attempt.files] == [
        ("read", str(folder / "assets" / "chair.usda"), "ok"), ("read", str(folder / "assets" / "table.usda"), "ok"),
        ("write", str(folder / "sh010.usda"), "ok")]
    assert all(len(f["hash"]) == len("blake3:") + 64 and f["size"] > 0 and f["mtime"] for f in attempt.files)
    cached = engine.run(SPEC).step("assemble")
    assert cached.cached and cached.attempts == ()


def test_cache_entries_filters_and_purge(studio):
    engine, folder, calls = studio
    first = engine.run(SPEC)
    second = engine.run(SPEC, {"shot": "sh020"})
    assert len(calls) == 2 and engine.run(SPEC).step("assemble").cached and len(calls) == 2
    entries = engine.cache_entries()
    assert [e["run_id"] for e in entries] == [second.run_id, first.run_id]  # newest first
    e = entries[1]
    assert (e["tool"], e["step_id"], e["workflow"], e["step_key"], e["attempt"]) == ("usd__assemble", "assemble",
                                                                                      "shot", "assemble", 1)
    assert e["parts"]["version"] == "1" and e["parts"]["env"] == {"dcc": "usd", "version": "25.11"}
    assert len(e["key"]) == 64 and "expires_at" not in e
    assert engine.cache_entries(run_id=first.run_id) == [e]
    assert engine.cache_entries(key=e["key"]) == [e]
    assert engine.cache_entries(tool="usd__assemble", workflow="shot", limit=1) == entries[:1]
    assert engine.cache_entries(tool="other") == [] and engine.cache_entries(workflow="other") == []
    # before: an age, seconds, a datetime, an RFC 3339 text or a date; out-of-range ends clamp.
    assert engine.cache_entries(before="1h") == [] and engine.cache_entries(before=3600) == []
    assert engine.cache_entries(before="0s") == entries
    assert engine.cache_entries(before=datetime.datetime.now()) == entries
    assert engine.cache_entries(before=datetime.datetime.now() - datetime.timedelta(days=1)) == []
    assert engine.cache_entries(before="2999-01-01") == entries and engine.cache_entries(before="1999-01-01") == []
    assert engine.cache_entries(before="2999-01-01 06:00") == entries
    assert engine.cache_entries(before="2999-01-01T06:00:00+02:00") == entries
    assert engine.cache_entries(before=datetime.datetime.max) == entries
    assert engine.cache_entries(before=datetime.datetime.min) == [] and engine.cache_entries(before=1e300) == []
    for bad in ("yesterday", -1, True, [1]):
        with pytest.raises(ValueError, match="before must be a datetime, an RFC 3339 time"):
            engine.cache_entries(before=bad)
    with pytest.raises(InvalidRequestError, match="month out of range"):
        engine.cache_entries(before="2026-13-01")
    with pytest.raises(ValueError, match="limit must be >= 0"):
        engine.cache_entries(limit=-1)
    with pytest.raises(TypeError, match="tool must be a str"):
        engine.cache_entries(tool=1)

    assert engine.purge_cache(tool="other") == 0
    assert engine.purge_cache(run_id=first.run_id) == 1
    assert engine.cache_entries() == entries[:1]
    assert not engine.run(SPEC).step("assemble").cached and len(calls) == 3  # its entry is gone: it ran again
    assert engine.purge_cache() == 2 and engine.cache_entries() == []


def test_a_read_only_engine_lists_but_does_not_purge(studio):
    engine, folder, _ = studio
    engine.run(SPEC)
    with dcc_flow.Engine(db=str(folder / "flow.db"), read_only=True) as beside:
        assert len(beside.cache_entries()) == 1
        assert beside.lineage("sh010.usda")["made"]["tool"] == "usd__assemble"
        with pytest.raises(ReadOnlyError, match="purge the cache from the engine that owns the database"):
            beside.purge_cache()
    assert len(engine.cache_entries()) == 1
