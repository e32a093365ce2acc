"""examples/usd_shot.yaml with its tools against the real Pixar USD (usd-core): asset layers are
published, shots assembled from the assets they use and flattened; a second run is served from the
cache; after an asset layer changes, the stale outputs are the ones made from it — the asset's
published layer and the shot that uses it, not the other shot — and the next run rebuilds exactly
those (docs/guide/assets.md). Skips, naming usd-core, where no wheel exists for this Python."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from _real_dcc import real_module
from dcc_flow import Engine, WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
SPEC_PATH = os.path.join(EXAMPLES, "usd_shot.yaml")


@pytest.fixture(scope="module")
def pxr():
    return real_module("pxr")


@pytest.fixture(scope="module")
def tools(pxr):
    spec = importlib.util.spec_from_file_location("usd_shot_tools", os.path.join(EXAMPLES, "usd_shot_tools.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec():
    with open(SPEC_PATH, encoding="utf-8") as f:
        return f.read()


def _ran(engine, run_id):
    """The tool steps of the run that called their tool (not served from the cache)."""
    status = engine.get_status(run_id, all_steps=True)
    return sorted(s.key for s in status.steps if s.kind == "tool" and not s.cached)


def test_a_changed_asset_layer_rebuilds_only_what_depends_on_it(tmp_path, tools, pxr):
    assets = str(tmp_path / "assets")
    shutil.copytree(os.path.join(EXAMPLES, "usd_assets"), assets)
    out = str(tmp_path / "out")
    inputs = {"assets": assets, "out": out}
    with Engine(db=str(tmp_path / "flow.db"), environment={"dcc": "usd", "version": "%d.%d" % pxr.Usd.GetVersion()[1:]}) as engine:
        tools.register(engine)
        first = engine.run(_spec(), inputs)
        assert first.status is WorkflowStatus.COMPLETED, first.error
        assert len(_ran(engine, first.run_id)) == 7  # 3 publishes, 2 assembles, 2 flattens
        flat = pxr.Usd.Stage.Open(os.path.join(out, "shots", "sh010.flat.usdc"))
        assert flat.GetPrimAtPath("/World/chair/geo").GetTypeName() == "Cube"
        assert flat.GetPrimAtPath("/World/table/geo") and not flat.GetPrimAtPath("/World/lamp")

        second = engine.run(_spec(), inputs)
        assert second.status is WorkflowStatus.COMPLETED and _ran(engine, second.run_id) == []
        assert engine._call("dccflow_files_stale", {"paths": [out]})["stale"] == []

        # The chair gets taller: its published layer and the shot that uses it are stale.
        stage = pxr.Usd.Stage.Open(os.path.join(assets, "chair.usda"))
        pxr.UsdGeom.Cube(stage.GetPrimAtPath("/chair/geo")).GetSizeAttr().Set(0.8)
        stage.GetRootLayer().Save()
        stale = {os.path.relpath(s["path"], out): s["reason"]
                 for s in engine._call("dccflow_files_stale", {"paths": [out]})["stale"]}
        assert stale == {
            os.path.join("assets", "chair.usdc"): "input changed: " + os.path.join(assets, "chair.usda"),
            os.path.join("shots", "sh010.usda"): "made from stale " + os.path.join(out, "assets", "chair.usdc"),
            os.path.join("shots", "sh010.flat.usdc"): "made from stale " + os.path.join(out, "assets", "chair.usdc"),
        }, stale

        third = engine.run(_spec(), inputs)
        assert third.status is WorkflowStatus.COMPLETED, third.error
        assert _ran(engine, third.run_id) == ["per_shot[0].assemble", "per_shot[0].flatten", "publish[0].usdc"]
        assert engine._call("dccflow_files_stale", {"paths": [out]})["stale"] == []
        flat = tools._open(os.path.join(out, "shots", "sh010.flat.usdc"))  # read again, not USD's cached layer
        assert flat.GetPrimAtPath("/World/chair/geo").GetAttribute("size").Get() == pytest.approx(0.8)


def test_the_documented_command_line_runs_the_example(tmp_path, pxr):
    assets = str(tmp_path / "assets")
    shutil.copytree(os.path.join(EXAMPLES, "usd_assets"), assets)
    cmd = [sys.executable, "-m", "dcc_flow", "run", SPEC_PATH, "--tools", os.path.join(EXAMPLES, "usd_shot_tools.py"),
           "--input", "assets=" + assets, "--input", "out=" + str(tmp_path / "out"), "--worker-threads", "4",
           "--db", str(tmp_path / "flow.db")]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
    assert os.path.exists(str(tmp_path / "out" / "shots" / "sh020.flat.usdc"))
