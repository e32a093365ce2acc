"""examples/blender_intake.yaml with its tools against the real bpy: the exports exist and
re-import into an empty scene with the object count QC saw, thumbnails are Cycles PNGs of the
asked size, QC refuses an open mesh, and the documented `dcc-flow run` line works. Skips, naming
bpy, where no bpy wheel exists for this Python (tests/py/_real_dcc.py)."""
import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import threading

import pytest

import dcc_flow
from _real_dcc import real_module
from dcc_flow import WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
SPEC_PATH = os.path.join(EXAMPLES, "blender_intake.yaml")


@pytest.fixture(scope="module")
def bpy():
    return real_module("bpy")


@pytest.fixture(scope="module")
def tools(bpy):
    spec = importlib.util.spec_from_file_location("blender_intake_tools", os.path.join(EXAMPLES, "blender_intake_tools.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spec_text():
    with open(SPEC_PATH, encoding="utf-8") as f:
        return f.read()


def run_approving(engine, inputs):
    run = engine.submit(spec_text(), inputs)
    for event in run.events():  # drives the main-lane (bpy) calls on this thread
        if event["type"] == "approve_requested":
            run.approve(event["step_key"], reason="thumbnails look right", by="test")
            break
    return run.wait(timeout=300)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def reimported_meshes(bpy, path):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    if path.endswith(".fbx"):
        bpy.ops.import_scene.fbx(filepath=path)
    elif path.endswith(".glb"):
        bpy.ops.import_scene.gltf(filepath=path)
    else:
        bpy.ops.wm.usd_import(filepath=path)
    return sorted(o.name for o in bpy.data.objects if o.type == "MESH")


def test_blender_intake_exports_reimport_with_the_same_objects(bpy, tools, tmp_path):
    out = str(tmp_path / "intake")
    main_calls = []
    with dcc_flow.Engine(str(tmp_path / "flow.db")) as engine:
        tools.register(engine)
        for name in ("blender__build_asset", "blender__qc", "blender__export", "blender__thumbnail"):
            fn = engine.tools[name]

            def traced(*args, __fn=fn, **kwargs):
                main_calls.append(threading.get_ident())
                return __fn(*args, **kwargs)

            engine.register_tool(traced, name=name)  # the same lane: main, the default
        engine.serve_tools(workers=2)  # intake__manifest runs there; the bpy tools stay on this thread
        result = run_approving(engine, {"out": out})
    assert result.status is WorkflowStatus.COMPLETED, result.error
    assert set(main_calls) == {threading.get_ident()} and len(main_calls) == 3 * (1 + 1 + 3 + 1)
    assert result.outputs["review"]["approved"] is True
    per_asset = result.outputs["per_asset"]
    assert [a["qc"]["asset"] for a in per_asset] == ["crate", "barrel", "lamp_post"]
    for item in per_asset:
        asset, objects = item["qc"]["asset"], item["qc"]["objects"]
        assert objects == len(tools.ASSETS[asset]) and 0 < item["qc"]["polygons"] <= 5000
        exports = {e["export"]["format"]: e["export"]["path"] for e in item["exports"]}
        assert sorted(exports) == ["fbx", "gltf", "usd"]
        expected = sorted("%s_%s" % (asset, part[1]) for part in tools.ASSETS[asset])
        for fmt, path in exports.items():
            assert os.path.getsize(path) > 0, path
            names = reimported_meshes(bpy, path)
            assert len(names) == objects, (fmt, names)
            if fmt != "usd":  # USD import names meshes by prim path, the others keep the object names
                assert names == expected, (fmt, names)
        assert png_size(item["thumbnail"]["path"]) == (64, 64)
    with open(result.outputs["manifest"]["path"], encoding="utf-8") as f:
        manifest = json.load(f)
    assert [a["asset"] for a in manifest["assets"]] == ["crate", "barrel", "lamp_post"]
    assert result.outputs["manifest"]["files"] == 3 * 4


def test_qc_refuses_an_open_mesh_and_the_run_stops_there(bpy, tools, tmp_path):
    with dcc_flow.Engine() as engine:
        tools.register(engine)
        result = engine.run(spec_text(), {"out": str(tmp_path), "assets": ["crate", "billboard"]})
    assert result.status is WorkflowStatus.FAILED
    error = result.error
    assert error["step_key"] == "per_asset[1].qc" and error["kind"] == "qc"
    assert "billboard failed QC" in error["message"] and "non-manifold edges" in error["message"]
    assert "in qc" in error["trace"]
    assert os.path.exists(os.path.join(str(tmp_path), "crate", "crate_thumb.png"))  # the first asset went through
    assert not os.path.exists(os.path.join(str(tmp_path), "billboard", "billboard.fbx"))


def test_the_documented_command_line_runs_the_example(bpy, tmp_path):
    with open(os.path.join(EXAMPLES, "blender_intake_tools.py"), encoding="utf-8") as f:
        doc = f.read()
    line = re.search(r"^\s+(dcc-flow run examples/blender_intake\.yaml .*?--approve-all)$", doc, re.M | re.S).group(1)
    argv = [sys.executable, "-m", "dcc_flow"] + re.sub(r"\\+\n\s*", " ", line).split()[1:]
    argv = [a.replace("/tmp/blender_intake", str(tmp_path / "cli")) for a in argv]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DCC_FLOW_DB=str(tmp_path / "flow.db"))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["status"] == "completed"
    assert sorted(os.listdir(tmp_path / "cli" / "crate")) == [
        "crate.blend", "crate.fbx", "crate.glb", "crate.usdc", "crate_thumb.png"]
