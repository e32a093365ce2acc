"""examples/pool_batch runs as its docstring says, on a real pool of 4 ``dcc-flow worker``
processes, with ``sys.executable`` standing in for ``mayapy`` (issue #18, item 5)."""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "pool_batch")
SCENES = 12


def _cli(argv, env, timeout=180):
    return subprocess.run([sys.executable, "-m", "dcc_flow"] + argv, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_pool_batch_example_exports_every_scene_on_several_workers(tmp_path):
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for i in range(SCENES):
        (scenes / ("shot%02d.ma" % i)).write_text("//Maya ASCII 2025 scene\ncreateNode transform -n \"shot%02d\";\n" % i)
    (scenes / "notes.txt").write_text("not a scene")

    with open(os.path.join(EXAMPLE, "remotes.json"), encoding="utf-8") as f:
        remotes = json.load(f)
    maya = remotes["remotes"]["maya"]
    assert maya["command"][0] == "mayapy" and maya["workers"] == 4
    maya["command"][0] = sys.executable  # the stand-in for mayapy
    maya["env"] = {"PYTHONPATH": os.path.join(ROOT, "python")}
    (tmp_path / "remotes.json").write_text(json.dumps(remotes))

    with open(os.path.join(EXAMPLE, "tools.py"), encoding="utf-8") as f:
        doc = f.read()
    line = re.search(r"^\s+(dcc-flow run examples/pool_batch/.*?--input out_dir=abc)$", doc, re.M | re.S).group(1)
    argv = shlex.split(re.sub(r"\\+\n\s*", " ", line))[1:]
    argv[argv.index("examples/pool_batch/remotes.json")] = str(tmp_path / "remotes.json")
    argv[argv.index("folder=scenes")] = "folder=%s" % scenes
    argv[argv.index("out_dir=abc")] = "out_dir=%s" % (tmp_path / "abc")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DCC_FLOW_DB=str(tmp_path / "flow.db"))

    ran = _cli(argv + ["--json"], env)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.splitlines()[-1])
    assert result["status"] == "completed", result
    exports = [it["export"] for it in result["outputs"]["per_scene"]]
    assert [os.path.basename(e["abc"]) for e in exports] == ["shot%02d.abc" % i for i in range(SCENES)]
    assert sorted(os.listdir(tmp_path / "abc")) == ["shot%02d.abc" % i for i in range(SCENES)]  # no temp files left
    for e in exports:
        body = (tmp_path / "abc" / os.path.basename(e["abc"])).read_text()
        source = scenes / (os.path.basename(e["abc"])[:-4] + ".ma")
        assert body == "ABC export of %s\nsource sha256 %s\nworker pid %d\n" % (
            source, hashlib.sha256(source.read_bytes()).hexdigest(), e["pid"])
    pids = {e["pid"] for e in exports}
    assert 2 <= len(pids) <= 4, pids  # several of the pool's 4 workers, never more
    assert os.getpid() not in pids

    show = _cli(["show", result["run_id"]], env)
    assert show.returncode == 0, show.stderr
    for pid in pids:
        assert "on worker maya/%d" % pid in show.stdout
    assert "      out| wrote %s\n" % (tmp_path / "abc" / "shot00.abc") in show.stdout, show.stdout
