"""Hostile file names in dcc-flow lineage, stale, cache and show (#36): a path holding a line break,
an escape sequence, quotes or Mermaid syntax prints as one escaped line, never as terminal control
or as another line, and the Mermaid drawing stays one node per file."""
import json
import os
import sys

import pytest

import dcc_flow
from dcc_flow._cli import main

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="these names are not valid on Windows")

EVIL = 'sh010\n"];x-->y;%%\x1b[2J\u202e.usda'


@pytest.fixture
def evil(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "flow.db")
    with open(EVIL, "w") as f:
        f.write("layer\n")
    with dcc_flow.Engine(db=db) as engine:
        @engine.tool(reads="src", writes="out")
        def copy(src, out):
            with open(src) as a, open(out, "w") as b:
                b.write(a.read())
            return {"out": out}

        spec = {"name": "evil", "steps": [{"id": "copy", "tool": "copy", "args": {"src": EVIL, "out": EVIL + ".out"},
                                           "cache": True}]}
        run_id = engine.run(spec).raise_for_status().run_id  # the attempt that read and wrote
        assert engine.run(spec).step("copy").cached
    with open(EVIL, "a") as f:
        f.write("changed\n")
    return db, run_id


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_hostile_names_print_escaped_on_one_line(evil, capsys):
    db, run_id = evil
    for args, code, lines in ((("lineage", EVIL + ".out"), 0, 5), (("stale",), 1, 2),
                              (("show", run_id, "--attempts"), 0, 6)):
        got, out, err = run(capsys, *(args + ("--db", db)))
        assert got == code, err
        assert "\x1b" not in out and "\u202e" not in out and "\\u001b[2J" in out, out
        assert len(out.splitlines()) == lines, out
    got, out, err = run(capsys, "cache", "explain", "last", "copy", "--db", db)
    assert got == 0, err
    assert "\x1b" not in out and "\\u001b[2J" in out


def test_hostile_names_stay_inside_their_mermaid_nodes(evil, capsys):
    db, _ = evil
    code, out, err = run(capsys, "lineage", EVIL + ".out", "--format", "mermaid", "--db", db)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "flowchart LR" and all(line.startswith("    ") for line in lines[1:])
    nodes = [line for line in lines if line.startswith("    f") and "[" in line]
    assert len(nodes) == 2 and all(line.count('"') == 2 for line in nodes), nodes
    assert "-->" not in "".join(n.split("[", 1)[1] for n in nodes)  # the name's own arrow is escaped
    assert "\x1b" not in out and "\n" not in "".join(nodes)


def test_the_json_formats_keep_the_name_as_it_is(evil, capsys):
    db, _ = evil
    code, out, _ = run(capsys, "lineage", EVIL + ".out", "--format", "json", "--db", db)
    assert code == 0 and json.loads(out)["path"] == os.path.abspath(EVIL + ".out")
    code, out, _ = run(capsys, "stale", "--json", "--db", db)
    assert code == 1 and [s["path"] for s in json.loads(out)] == [os.path.abspath(EVIL + ".out")]
