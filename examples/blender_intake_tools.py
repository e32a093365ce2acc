"""The tools of examples/blender_intake.yaml: a real Blender pipeline with the ``bpy`` module.

``pip install bpy==5.0.1`` (Python 3.11; ``make venv`` puts it in .venv) gives Blender as a Python
module, headless: ``bpy.app.background`` is True, so ``dcc_flow.dcc.blender.install`` registers
nothing and ``engine.run()`` / ``run.wait()`` run the tools on the calling thread, the one that
imported ``bpy``. Inside an interactive Blender the same tools run from the adapter's timer::

    import dcc_flow, blender_intake_tools
    from dcc_flow.dcc import blender as flow_blender

    engine = dcc_flow.Engine()
    blender_intake_tools.register(engine)
    pump = flow_blender.install(engine)          # bpy.app.timers; nothing in --background
    run = engine.submit(open("blender_intake.yaml").read(), {"out": "/tmp/intake"})

Or from a shell, with the Python that has ``bpy`` (without it, importing this module raises an
``ImportError`` saying how to get it, so ``dcc-flow run`` stops before the run starts)::

    dcc-flow run examples/blender_intake.yaml --tools examples/blender_intake_tools.py \\
        --input out=/tmp/blender_intake --approve-all

**Every tool that touches bpy is on the main lane** (the default of ``register_tool``): Blender's
data and operators are not thread-safe, and a ``bpy`` call from a worker thread can crash the
process. Only ``intake__manifest``, which reads files and hashes them, is on the worker lane.

Each tool opens the ``.blend`` it is given (``open_mainfile``), so tools do not depend on the
scene another tool left behind, and a failing one (a missing file: ``RuntimeError: Error: Cannot
read file "<path>"``) fails its own step only.
"""

import hashlib
import importlib.util
import json
import math
import os
import re
import sys
from typing import Any, Dict, List

import dcc_flow

# Without bpy every tool would fail at its first call, after the run started: fail here, when
# `dcc-flow run --tools` (or your script) imports this module, with what to install. (bpy itself is
# imported by the tools, on the main lane.)
if importlib.util.find_spec("bpy") is None:
    raise ImportError("the Blender tour needs Blender's bpy module, which this Python (%d.%d) cannot import: "
                      "pip install bpy==5.0.1 on Python 3.11 (make venv does), or run it with Blender's own "
                      "Python" % sys.version_info[:2], name="bpy")

__all__ = ["register", "build_asset", "qc", "export", "thumbnail", "manifest", "NAME_RULE", "ASSETS"]

#: Object names: lower case, digits and underscores, starting with the asset's name.
NAME_RULE = re.compile(r"^[a-z][a-z0-9_]*$")

#: What build_asset makes of each asset name: a list of (primitive, name suffix, location, scale).
#: "billboard" is a single open plane: QC refuses it (non-manifold edges).
ASSETS: Dict[str, List[Any]] = {
    "crate": [("cube", "body", (0, 0, 1), (1, 1, 1)), ("cube", "lid", (0, 0, 2.1), (1.05, 1.05, 0.1))],
    "barrel": [("cylinder", "body", (0, 0, 1), (0.8, 0.8, 1)), ("torus", "hoop_top", (0, 0, 1.6), (0.85, 0.85, 0.85)),
               ("torus", "hoop_bottom", (0, 0, 0.4), (0.85, 0.85, 0.85))],
    "lamp_post": [("cylinder", "pole", (0, 0, 2), (0.1, 0.1, 2)), ("uv_sphere", "bulb", (0, 0, 4.3), (0.4, 0.4, 0.4)),
                  ("cylinder", "base", (0, 0, 0.1), (0.5, 0.5, 0.1))],
    "billboard": [("plane", "board", (0, 0, 2), (2, 1, 1))],
}


class QCFailed(dcc_flow.ToolError):
    """An asset broke a QC rule: kind ``qc`` (not retried unless a retry policy names it)."""

    kind = "qc"


def _bpy() -> Any:
    import bpy  # imported by the tools, on the main lane (the thread that imported bpy first)

    return bpy


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _open(blend: str) -> Any:
    bpy = _bpy()
    bpy.ops.wm.open_mainfile(filepath=blend)  # RuntimeError naming the path when it is missing
    return bpy


def build_asset(name: str, out: str) -> Dict[str, Any]:
    """Build the asset ``name`` (a key of ASSETS) in an empty scene, save ``<out>/<name>/<name>.blend``."""
    if name not in ASSETS:
        raise ValueError("unknown asset %r: one of %s" % (name, ", ".join(sorted(ASSETS))))
    bpy = _bpy()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    add = {"cube": bpy.ops.mesh.primitive_cube_add, "cylinder": bpy.ops.mesh.primitive_cylinder_add,
           "torus": bpy.ops.mesh.primitive_torus_add, "uv_sphere": bpy.ops.mesh.primitive_uv_sphere_add,
           "plane": bpy.ops.mesh.primitive_plane_add}
    for primitive, suffix, location, scale in ASSETS[name]:
        add[primitive](location=location)
        obj = bpy.context.active_object
        obj.scale = scale
        obj.name = obj.data.name = "%s_%s" % (name, suffix)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    blend = os.path.join(folder, name + ".blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend)
    return {"blend": blend, "objects": len(bpy.data.objects), "sha256": _sha256(blend)}


def qc(blend: str, asset: str, max_polys: int, max_objects: int = 20) -> Dict[str, Any]:
    """Check an asset scene: object count, polygon budget, naming rule, manifold meshes (bmesh)."""
    import bmesh

    bpy = _open(blend)
    meshes = [o for o in bpy.data.objects if o.type == "MESH"]
    problems = []
    if not meshes or len(meshes) > max_objects:
        problems.append("%d mesh objects (1 to %d allowed)" % (len(meshes), max_objects))
    polys = sum(len(o.data.polygons) for o in meshes)
    if polys > max_polys:
        problems.append("%d polygons over the budget of %d" % (polys, max_polys))
    for o in meshes:
        if not NAME_RULE.match(o.name) or not o.name.startswith(asset + "_"):
            problems.append("object %r breaks the naming rule (%s_<part>, lower case)" % (o.name, asset))
        bm = bmesh.new()
        try:
            bm.from_mesh(o.data)
            open_edges = sum(1 for e in bm.edges if not e.is_manifold)
        finally:
            bm.free()
        if open_edges:
            problems.append("object %r has %d non-manifold edges" % (o.name, open_edges))
    if problems:
        raise QCFailed("%s failed QC: %s" % (asset, "; ".join(problems)))
    return {"asset": asset, "objects": len(meshes), "polygons": polys}


def export(blend: str, format: str) -> Dict[str, Any]:
    """Export the scene of ``blend`` beside it as FBX, glTF (.glb) or USD (.usdc)."""
    bpy = _open(blend)
    base = os.path.splitext(blend)[0]
    if format == "fbx":
        path = base + ".fbx"
        bpy.ops.export_scene.fbx(filepath=path)
    elif format == "gltf":
        path = base + ".glb"
        bpy.ops.export_scene.gltf(filepath=path)
    elif format == "usd":
        path = base + ".usdc"
        bpy.ops.wm.usd_export(filepath=path)
    else:
        raise ValueError("format must be fbx, gltf or usd; got %r" % (format,))
    return {"format": format, "path": path, "bytes": os.path.getsize(path)}


def thumbnail(blend: str, size: int = 64, samples: int = 4) -> Dict[str, Any]:
    """Render a ``size``×``size`` Cycles CPU thumbnail (``samples`` samples) beside ``blend``."""
    bpy = _open(blend)
    scene = bpy.context.scene
    cam = bpy.data.objects.new("thumb_camera", bpy.data.cameras.new("thumb_camera"))
    scene.collection.objects.link(cam)
    cam.location = (9.0, -9.0, 7.0)
    cam.rotation_euler = (math.radians(63), 0.0, math.radians(45))
    scene.camera = cam
    sun = bpy.data.objects.new("thumb_sun", bpy.data.lights.new("thumb_sun", type="SUN"))
    scene.collection.objects.link(sun)
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = samples
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    path = os.path.splitext(blend)[0] + "_thumb.png"
    scene.render.filepath = path
    bpy.ops.render.render(write_still=True)
    return {"path": path, "size": size}


def manifest(out: str, assets: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Write ``<out>/manifest.json``: every export and thumbnail with its size and SHA-256 (no bpy)."""
    entries = []
    for item in assets:
        files = [e["export"]["path"] for e in item["exports"]] + [item["thumbnail"]["path"]]
        entries.append({"asset": item["qc"]["asset"], "polygons": item["qc"]["polygons"],
                        "files": [{"path": p, "bytes": os.path.getsize(p), "sha256": _sha256(p)} for p in files]})
    path = os.path.join(out, "manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"assets": entries}, f, indent=2)
    return {"path": path, "assets": len(entries), "files": sum(len(e["files"]) for e in entries)}


def register(engine: Any) -> None:
    """Register the tools of blender_intake.yaml with ``engine`` (``dcc-flow ... --tools`` calls it)."""
    engine.register_tool(build_asset, name="blender__build_asset")  # main lane: bpy
    engine.register_tool(qc, name="blender__qc")
    engine.register_tool(export, name="blender__export")
    engine.register_tool(thumbnail, name="blender__thumbnail")
    engine.register_tool(manifest, name="intake__manifest", thread="worker")  # files only
