"""dcc-flow lineage, stale, cache and show's files (#36, docs/reference/cli/assets.md), in-process
on one SQLite file: a shot assembled from two layers (cache: true) and rendered."""
import json
import os
import re
import textwrap

import pytest

import dcc_flow
from dcc_flow._cli import cache as cache_cli
from dcc_flow._cli import main

SPEC = textwrap.dedent("""
    name: shot
    inputs:
      shot: { type: string, default: sh010 }
    steps:
      - id: assemble
        tool: usd__assemble
        args: { layers: [assets/chair.usda, assets/table.usda], out: "{{inputs.shot}}.usda" }
        reads: "assets/*.usda"
        writes: "{{inputs.shot}}.usda"
        cache: true
      - id: render
        tool: usd__render
        args: { scene: "{{inputs.shot}}.usda", out: "{{inputs.shot}}.exr" }
        depends_on: [assemble]
""")

TOOLS = textwrap.dedent('''
    import dcc_flow

    dcc_flow.set_environment(dcc="usd", version="25.11", plugins={"hdStorm": "0.1"})


    def usd__assemble(layers, out):
        with open(out, "w") as f:
            for layer in layers:
                with open(layer) as src:
                    f.write(src.read())
        return {"usd": out}


    def usd__render(scene, out):
        call = dcc_flow.current_call()
        call.reads(scene)
        with open(scene) as src, open(out, "w") as f:
            f.write("pixels of " + src.read())
        call.writes(out)
        return {"exr": out}
''')

RUN_ID = re.compile(r"\br[0-9a-f]{28}\b")


def cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def shot(tmp_path, monkeypatch, capsys):
    """A folder with the shot spec, its tools and two layers, run twice: the first run assembles
    (a cache miss), the second is served from the cache. Returns (folder, first run, second run)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DCC_FLOW_DB", str(tmp_path / "flow.db"))
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "chair.usda").write_text('def "chair" {}\n')
    (tmp_path / "assets" / "table.usda").write_text('def "table" {}\n')
    (tmp_path / "shot.yaml").write_text(SPEC)
    (tmp_path / "asset_tools.py").write_text(TOOLS)
    runs = []
    try:
        for _ in range(2):
            code, out, err = cli(capsys, "run", "shot.yaml", "--tools", "asset_tools.py", "--json")
            assert code == 0, err
            runs.append(json.loads(out.splitlines()[-1])["run_id"])
        yield tmp_path, runs[0], runs[1]
    finally:
        dcc_flow.set_environment()  # the tools module set the process's environment


def test_the_second_run_is_served_from_the_cache_and_show_says_from_where(shot, capsys):
    folder, first, second = shot
    code, out, _ = cli(capsys, "show", second)
    assert code == 0
    assert re.search(r"^  assemble +completed +\S+ cached$", out, flags=re.M), out
    assert "      from the cache: run %s, step assemble, attempt 1\n" % first in out
    code, out, _ = cli(capsys, "show", first, "assemble")
    assert code == 0
    chair = os.path.join(str(folder), "assets", "chair.usda")
    assert re.search(r"^           env  usd 25\.11, hdStorm 0\.1$", out, flags=re.M), out
    assert re.search(r"^           read  ok +[0-9a-f]{12}  %s$" % re.escape(chair), out, flags=re.M), out
    assert re.search(r"^           write ok +[0-9a-f]{12}  %s$" % re.escape(os.path.join(str(folder), "sh010.usda")),
                     out, flags=re.M), out
    # The default timeline is as it was: no files, no environment.
    code, out, _ = cli(capsys, "show", first)
    assert "read" not in out and "env" not in out and "from the cache" not in out


def test_stale_exits_1_naming_what_changed_and_0_when_nothing_is(shot, capsys):
    folder, first, second = shot
    code, out, err = cli(capsys, "stale")
    assert (code, out, err) == (0, "nothing stale among the recorded outputs\n", "")
    code, out, _ = cli(capsys, "stale", "assets", "sh010.exr")
    assert (code, out) == (0, "nothing stale under assets, sh010.exr\n")

    chair = os.path.join(str(folder), "assets", "chair.usda")
    with open(chair, "a") as f:
        f.write('def "leg" {}\n')
    code, out, _ = cli(capsys, "stale", ".")
    usda, exr = os.path.join(str(folder), "sh010.usda"), os.path.join(str(folder), "sh010.exr")
    assert code == 1
    assert out.splitlines() == [
        "%s: made from stale %s; made by run %s, step render, attempt 1" % (exr, usda, second),
        "%s: input changed: %s; made by run %s, step assemble, attempt 1" % (usda, chair, first),
        "2 stale outputs under .",
    ]
    code, out, _ = cli(capsys, "stale", "--json", "sh010.usda")
    assert code == 1
    assert json.loads(out) == [{"path": usda, "reason": "input changed: " + chair, "run_id": first,
                                "step_key": "assemble", "attempt": 1}]
    # A path with no recorded output under it: nothing stale, and a warning when it does not exist.
    code, out, err = cli(capsys, "stale", "no/such/folder")
    assert (code, out) == (0, "nothing stale under no/such/folder\n")
    assert "warning: no/such/folder does not exist" in err


def test_lineage_text_json_and_mermaid(shot, capsys):
    folder, first, second = shot
    exr = os.path.join(str(folder), "sh010.exr")
    code, out, err = cli(capsys, "lineage", "sh010.exr")
    assert code == 0, err
    lines = out.splitlines()
    assert re.match(r"^%s  unchanged  [0-9a-f]{12}$" % re.escape(exr), lines[0]), lines
    assert lines[1].startswith("│  written by usd__render, attempt 1 (completed), 20")
    assert lines[2] == "│  run %s (shot), step render" % second
    assert lines[3] == '│  args {"out": "sh010.exr", "scene": "sh010.usda"}'
    assert lines[4] == "│  env  usd 25.11, hdStorm 0.1"
    assert re.match(r"^└─ .*sh010\.usda  unchanged  [0-9a-f]{12}$", lines[5])
    assert lines[7] == "   │  run %s (shot), step assemble" % first
    assert re.match(r"^   ├─ .*chair\.usda  unchanged  [0-9a-f]{12}  \(source: no recorded step wrote it\)$", lines[-2])
    assert lines[-1].startswith("   └─ ") and "table.usda" in lines[-1]

    # Depth 1: the layout's writer is cut, and says so.
    code, out, _ = cli(capsys, "lineage", "sh010.exr", "--depth", "1")
    assert code == 0 and "(--depth cut: its writer is not shown; raise --depth above 1)" in out
    assert "usd__assemble" not in out

    code, out, _ = cli(capsys, "lineage", exr, "--format", "json")
    doc = json.loads(out)
    assert doc["path"] == exr and doc["now"] == "unchanged" and doc["hash"].startswith("blake3:")
    assert doc["made"]["tool"] == "usd__render" and doc["made"]["env"]["dcc"] == "usd"
    assert [i["path"] for i in doc["made"]["inputs"][0]["made"]["inputs"]] == [
        os.path.join(str(folder), "assets", n) for n in ("chair.usda", "table.usda")]

    (folder / "assets" / "table.usda").write_text("changed\n")
    code, out, _ = cli(capsys, "lineage", "sh010.exr", "--format", "mermaid")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "flowchart LR"
    assert 'a0("usd__render #35;1<br/>run %s<br/>step render<br/>usd 25.11, hdStorm 0.1")' % second in out
    assert "    a0 --> f0" in lines and "    f1 --> a0" in lines and "    a1 --> f1" in lines
    table = next(line.split("[")[0].strip() for line in lines if "table.usda<br/>" in line)
    chair = next(line.split("[")[0].strip() for line in lines if "chair.usda<br/>" in line)
    assert "    class %s changed" % table in lines and "    class %s source" % chair in lines
    # The layout and the render made from it are stale: orange, with the reason in their label.
    assert "    class f0,f1 stale" in lines and "    classDef stale fill:#fed,stroke:#d70" in lines
    assert "<br/>stale: input changed: %s\"]" % (folder / "assets" / "table.usda") in out
    assert '"' not in out.replace('["', "").replace('"]', "").replace('("', "").replace('")', "")
    code, out, _ = cli(capsys, "lineage", "sh010.exr")
    lines = out.splitlines()
    assert lines[0].endswith("  STALE: made from stale %s" % (folder / "sh010.usda"))
    assert lines[5].endswith("  STALE: input changed: %s" % (folder / "assets" / "table.usda"))
    assert lines[-1].endswith("table.usda  CHANGED since it was read  %s  (source: no recorded step wrote it)"
                              % lines[-1].split()[-7])


def test_lineage_errors_are_one_line(shot, capsys):
    folder, _, _ = shot
    code, out, err = cli(capsys, "lineage", "nothing.usda")
    missing = os.path.join(str(folder), "nothing.usda")
    assert code == 1 and out == ""
    assert err.startswith("dcc-flow lineage: error: no recorded attempt read or wrote %s: only the files" % missing)
    assert err.count("\n") == 1
    code, _, err = cli(capsys, "lineage", "sh010.exr", "--depth", "-1")
    assert code == 2 and "'-1' is not a depth; give a whole number >= 0" in err
    code, _, err = cli(capsys, "lineage", "sh010.exr", "--depth", "two")
    assert code == 2 and "'two' is not a depth" in err
    code, _, err = cli(capsys, "lineage", "sh010.exr", "--format", "svg")
    assert code == 2 and "invalid choice: 'svg'" in err
    # A database that does not exist says so.
    code, _, err = cli(capsys, "lineage", "sh010.exr", "--db", str(folder / "other.db"))
    assert code == 1 and "the database %s does not exist" % (folder / "other.db") in err


def test_cache_list_explain_and_purge(shot, capsys, monkeypatch):
    folder, first, second = shot
    code, out, _ = cli(capsys, "cache", "list")
    rows = out.splitlines()
    assert code == 0 and rows[0].split() == ["KEY", "TOOL", "WORKFLOW", "RUN", "STEP", "CREATED", "EXPIRES"]
    assert len(rows) == 2 and rows[1].split()[1:5] == ["usd__assemble", "shot", first, "assemble"]
    assert rows[1].endswith("never")
    code, out, _ = cli(capsys, "cache", "list", "--json", "--tool", "usd__assemble")
    (entry,) = json.loads(out)
    assert entry["parts"]["tool"] == "usd__assemble" and entry["run_id"] == first
    assert cli(capsys, "cache", "list", "--tool", "nope")[1].splitlines()[-1] == "(no cache entries)"
    assert cli(capsys, "cache", "list", "--older-than", "1h")[1].splitlines()[-1] == "(no cache entries)"
    assert len(cli(capsys, "cache", "list", "--before", "2999-01-01")[1].splitlines()) == 2

    # The hit: where from, and the parts of the key.
    code, out, _ = cli(capsys, "cache", "explain", second, "assemble")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "run %s (shot), step assemble: cache hit, served from run %s, step assemble, attempt 1" % (
        second, first)
    assert lines[1] == "key " + entry["key"]
    assert lines[2:5] == ["made of:", "  tool     usd__assemble",
                          '  args     {"layers": ["assets/chair.usda", "assets/table.usda"], "out": "sh010.usda"}']
    assert lines[5] == "  reads    %s, %s" % (folder / "assets" / "chair.usda", folder / "assets" / "table.usda")
    # The environment the tool's process reported (set_environment) is shown, not part of the key.
    assert lines[6] == ("the attempt it was served from ran with usd 25.11, hdStorm 0.1: what its process reported, "
                        "which is not part of the key")
    code, out, _ = cli(capsys, "cache", "explain", second, "assemble", "--json")
    assert json.loads(out)["from"] == {"run_id": first, "step_key": "assemble", "attempt": 1,
                                       "env": {"dcc": "usd", "version": "25.11", "plugins": {"hdStorm": "0.1"}}}
    # The first run's miss.
    code, out, _ = cli(capsys, "cache", "explain", first, "assemble")
    assert out.splitlines()[0].endswith("cache miss, it ran: no earlier run with this key")
    assert "this run's attempt 1 left the entry" in out

    # Another shot: a miss whose key differs in its arguments from the entry before.
    code, out, err = cli(capsys, "run", "shot.yaml", "--tools", "asset_tools.py", "--input", "shot=sh020", "--json")
    third = json.loads(out.splitlines()[-1])["run_id"]
    code, out, _ = cli(capsys, "cache", "explain", "last", "assemble")
    assert code == 0
    assert "cache miss, it ran: no earlier run with this key (arguments changed since run %s)" % first in out
    assert "the entry before, of run %s" % first in out and "differs in: arguments" in out
    assert '  args     was {"layers": ["assets/chair.usda", "assets/table.usda"], "out": "sh010.usda"}' in out
    assert '           now {"layers": ["assets/chair.usda", "assets/table.usda"], "out": "sh020.usda"}' in out
    code, out, _ = cli(capsys, "cache", "explain", third, "assemble", "--json")
    doc = json.loads(out)
    assert doc["hit"] is False and doc["changed"] == ["arguments"] and doc["previous"]["run_id"] == first

    # An input changed: the miss names it.
    (folder / "assets" / "chair.usda").write_text("changed\n")
    cli(capsys, "run", "shot.yaml", "--tools", "asset_tools.py", "--json")
    code, out, _ = cli(capsys, "cache", "explain", "last", "assemble")
    assert "cache miss, it ran: input changed: %s" % (folder / "assets" / "chair.usda") in out

    # A new file matching the declared glob: the miss names it, and explain shows the reads before.
    (folder / "assets" / "lamp.usda").write_text('def "lamp" {}\n')
    cli(capsys, "run", "shot.yaml", "--tools", "asset_tools.py", "--json")
    code, out, _ = cli(capsys, "cache", "explain", "last", "assemble")
    assert "cache miss, it ran: input added: %s (declared inputs changed since run " % (
        folder / "assets" / "lamp.usda") in out
    assert "differs in: declared inputs" in out
    assert "  reads    was %s, %s" % (folder / "assets" / "chair.usda", folder / "assets" / "table.usda") in out
    (folder / "assets" / "lamp.usda").unlink()

    # Errors: a step without cache:, an unknown step, options of another action.
    code, _, err = cli(capsys, "cache", "explain", first, "render")
    assert code == 1 and "step render of run %s made no cache lookup (completed)" % first in err
    code, _, err = cli(capsys, "cache", "explain", first, "nope")
    assert code == 1 and "run %s has no step instance nope" % first in err
    assert cli(capsys, "cache", "explain", first)[0] == 2
    code, _, err = cli(capsys, "cache", "list", "--yes")
    assert code == 2 and "cache list does not take --yes" in err
    code, _, err = cli(capsys, "cache", "purge", first)
    assert code == 2 and "for the entries of a run: --run RUN" in err
    code, _, err = cli(capsys, "cache", "purge", "--before", "30d")
    assert code == 2 and "is an age: use --older-than 30d" in err
    assert cli(capsys, "cache", "list", "--older-than", "soon")[0] == 2
    code, _, err = cli(capsys, "cache", "purge", "--limit", "50")
    assert code == 2 and "cache purge does not take --limit" in err
    code, _, err = cli(capsys, "cache", "purge", "--yes", "--db", str(folder / "other.db"))
    assert code == 1 and "nothing to purge: the database %s does not exist" % (folder / "other.db") in err
    assert not (folder / "other.db").exists()

    # Purge: asks on a terminal, and a no purges nothing.
    monkeypatch.setattr(cache_cli, "_interactive", lambda ctx: True)
    monkeypatch.setattr("builtins.input", lambda: "n")
    code, out, err = cli(capsys, "cache", "purge", "--run", first)
    assert code == 1 and out == "purge 1 cache entry of run %s? [y/N] " % first
    assert "nothing purged (not confirmed)" in err
    monkeypatch.setattr("builtins.input", lambda: "y")
    code, out, _ = cli(capsys, "cache", "purge", "--run", first)
    assert code == 0 and out.endswith("purged 1 cache entry of run %s: the steps they stood for run again next "
                                      "time\n" % first)
    monkeypatch.setattr(cache_cli, "_interactive", lambda ctx: False)
    code, out, _ = cli(capsys, "cache", "purge", "--json")
    assert (code, json.loads(out)) == (0, {"purged": 3})
    assert cli(capsys, "cache", "list")[1].splitlines()[-1] == "(no cache entries)"
    # The hit's entry is gone: explain says so; the next run assembles again.
    code, out, _ = cli(capsys, "cache", "explain", second, "assemble")
    assert code == 0 and "the entry it was served from is gone (purged since)" in out


def test_show_lists_the_first_20_files_of_an_attempt(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "frames").mkdir()
    for i in range(23):
        (tmp_path / "frames" / ("f%02d.exr" % i)).write_text(str(i))
    (tmp_path / "frames.yaml").write_text("name: frames\nsteps:\n  - {id: check, tool: flow__echo, reads: 'frames/*.exr'}\n")
    code, out, err = cli(capsys, "run", "frames.yaml", "--db", "flow.db", "--json")
    assert code == 0, err
    code, out, _ = cli(capsys, "show", "last", "check", "--db", "flow.db")
    lines = out.splitlines()
    files = [line for line in lines if line.startswith("           read  ok ")]
    assert len(files) == 20 and files[0].endswith("f00.exr") and files[-1].endswith("f19.exr")
    assert lines[-1] == "           … 3 more files"


FAILING_TOOLS = textwrap.dedent('''
    import os


    def usd__build(out):
        if os.path.exists("broken"):
            raise RuntimeError("the layer is broken")
        if out != "skip.usda":
            with open(out, "w") as f:
                f.write("built")
        return {"usd": out}
''')


def test_cache_explain_of_a_miss_that_left_no_entry(tmp_path, monkeypatch, capsys):
    """A miss whose call failed, and one whose declared output was never written: explain says
    why the step ran, what its key was made of (kept with the lookup: there is no entry to read
    them from), and why no entry was left."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DCC_FLOW_DB", str(tmp_path / "flow.db"))
    (tmp_path / "in.usda").write_text("#usda 1.0\n")
    (tmp_path / "tools.py").write_text(FAILING_TOOLS)
    (tmp_path / "build.yaml").write_text(textwrap.dedent("""
        name: build
        inputs: { out: { type: string, default: out.usda } }
        steps:
          - id: build
            tool: usd__build
            args: { out: "{{inputs.out}}" }
            reads: in.usda
            writes: "{{inputs.out}}"
            cache: { version: "2" }
    """))
    (tmp_path / "broken").write_text("")
    code, out, err = cli(capsys, "run", "build.yaml", "--tools", "tools.py", "--json")
    assert code == 1, err
    code, out, _ = cli(capsys, "cache", "explain", "last", "build")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].endswith("step build: cache miss, it ran: no earlier run with this key"), out
    assert lines[2:6] == ["made of:", "  tool     usd__build", "  version  2", '  args     {"out": "out.usda"}'], out
    assert lines[6] == "  reads    %s" % (tmp_path / "in.usda")
    assert lines[7] == ("it failed (error: RuntimeError: the layer is broken), so it left no entry under this key: "
                        "the next run with this key calls it again")
    code, out, _ = cli(capsys, "cache", "explain", "last", "build", "--json")
    doc = json.loads(out)
    assert doc["status"] == "failed" and doc["entry"] is None and doc["reason"] == "no earlier run with this key"
    assert doc["error"] == {"kind": "error", "message": "RuntimeError: the layer is broken"}
    assert doc["parts"] == {"tool": "usd__build", "version": "2", "args": {"out": "out.usda"},
                            "reads": [str(tmp_path / "in.usda")]}

    # Completed, but its declared output was never written: no entry either, and explain names it.
    (tmp_path / "broken").unlink()
    code, out, err = cli(capsys, "run", "build.yaml", "--tools", "tools.py", "--input", "out=skip.usda", "--json")
    assert code == 0, err
    code, out, _ = cli(capsys, "cache", "explain", "last", "build")
    assert out.splitlines()[-1] == (
        "it completed but left no entry: its write %s was missing when the attempt ended (an attempt's files must "
        "all be hashed for a later run to check them)" % (tmp_path / "skip.usda")), out
    # The same key again: the failed run left nothing to stand in for it.
    code, out, err = cli(capsys, "run", "build.yaml", "--tools", "tools.py", "--json")
    assert code == 0, err
    code, out, _ = cli(capsys, "cache", "explain", "last", "build")
    assert "cache miss, it ran: no earlier run with this key" in out
    assert "this run's attempt 1 left the entry" in out
