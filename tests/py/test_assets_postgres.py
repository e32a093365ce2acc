"""The content cache, lineage and staleness across engines sharing a PostgreSQL database (#36,
docs/guide/assets.md "Caching"): what one engine ran, another is served from, traces and purges.

A throwaway PostgreSQL cluster as tests/py/test_postgres.py starts one (skipped without initdb,
except under CI=true on Linux)."""

import os
import subprocess
import sys
import uuid

import pytest

import dcc_flow
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts", "soak"))
import soak_pg  # noqa: E402  (the cluster helper the cluster soak shares)

pytestmark = pytest.mark.xdist_group("test_postgres")

SPEC = """
name: shot
steps:
  - id: per_shot
    kind: foreach
    items: [sh010, sh020]
    as: shot
    steps:
      - id: assemble
        tool: usd__assemble
        args: { layers: [assets/chair.usda], out: "{{shot}}.usda" }
        reads: "assets/*.usda"
        cache: true
"""


@pytest.fixture(scope="module")
def pg_url():
    if soak_pg.bin_dir() is None:
        msg = "no PostgreSQL server binaries (initdb): install postgresql-15"
        if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
            pytest.fail(msg)
        sys.stderr.write("\n!!! SKIPPING the PostgreSQL asset tests: %s !!!\n" % msg)
        pytest.skip(msg)
    pg = soak_pg.Cluster()
    try:
        name = "t" + uuid.uuid4().hex[:12]
        subprocess.run([os.path.join(pg.bin, "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                        name], check=True, capture_output=True, timeout=60)
        yield "postgresql://postgres@127.0.0.1:%d/%s?sslmode=disable" % (pg.port, name)
    finally:
        pg.stop()


def engine_on(url, calls):
    engine = dcc_flow.Engine(db=url, config={"env": {"dcc": "usd", "version": "25.11"}})

    @engine.tool(reads="layers", writes="out")
    def usd__assemble(layers, out):
        calls.append(out)
        with open(out, "w") as f:
            for layer in layers:
                with open(layer) as src:
                    f.write(src.read())
        return {"usd": out}

    return engine


def test_a_second_engine_is_served_from_the_first_engines_cache(pg_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "chair.usda").write_text("chair\n")
    first_calls, second_calls = [], []
    with engine_on(pg_url, first_calls) as first, engine_on(pg_url, second_calls) as second:
        made = first.run(SPEC).raise_for_status()
        assert len(first_calls) == 2
        served = second.run(SPEC).raise_for_status()
        assert second_calls == []  # both items from the first engine's entries
        steps = second.get_status(served.run_id, all_steps=True).steps
        assert [s.key for s in steps if s.cached] == ["per_shot[0].assemble", "per_shot[1].assemble"]

        node = second.lineage("sh020.usda")
        assert (node["made"]["run_id"], node["made"]["step_key"]) == (made.run_id, "per_shot[1].assemble")
        assert [e["run_id"] for e in second.cache_entries(tool="usd__assemble")] == [made.run_id] * 2
        (tmp_path / "assets" / "chair.usda").write_text("chair, fixed\n")
        assert sorted(s["path"] for s in first.stale()) == [str(tmp_path / "sh010.usda"), str(tmp_path / "sh020.usda")]

        second.run(SPEC).raise_for_status()  # the input changed: the second engine runs both
        assert len(second_calls) == 2 and first.stale() == []
        assert second.purge_cache(run_id=made.run_id) == 2
        assert {e["run_id"] for e in first.cache_entries()} != {made.run_id}
