"""The tools of examples/usd_shot.yaml: a shot assembled from asset layers with Pixar's USD
(``pip install usd-core``; ``make venv`` puts it in .venv), every step cached on the content of
the files it reads (docs/guide/assets.md)::

    dcc-flow run examples/usd_shot.yaml --tools examples/usd_shot_tools.py \\
        --input assets=examples/usd_assets --input out=/tmp/usd_shot --db /tmp/usd_shot/flow.db

Each tool says which files it read and wrote (``current_call().reads`` / ``.writes``): the
engine hashes them with the attempt, so the next run skips a step whose inputs are unchanged, and
``dcc-flow stale`` names what an edited asset layer makes out of date.

- ``usd__publish_asset`` checks an asset layer (it opens as a stage with a default prim) and
  writes it as binary ``.usdc`` into ``out/assets``;
- ``usd__assemble_shot`` writes ``out/shots/<shot>.usda``: a layer that references the published
  assets the shot uses, each under ``/World/<asset>`` with its own translation;
- ``usd__flatten_shot`` opens that layer, composes it (the references are read through USD's own
  resolver: every layer the stage used is reported as read) and writes the flattened stage,
  ``out/shots/<shot>.flat.usdc``, with the number of prims it holds.

The tools run on the worker lane: ``pxr`` is thread-safe for separate stages, and no DCC UI is
involved.
"""

import os
import sys
from typing import Any, Dict, List

import dcc_flow

try:
    from pxr import Gf, Sdf, Usd, UsdGeom
except ImportError as e:  # fail when --tools imports this module, before the run starts
    raise ImportError("the USD example needs Pixar's USD for this Python (%d.%d): pip install usd-core "
                      "(make venv does)" % sys.version_info[:2], name="pxr") from e

__all__ = ["register", "publish_asset", "assemble_shot", "flatten_shot"]


def _out_dir(out: str, sub: str) -> str:
    path = os.path.join(os.path.abspath(out), sub)
    os.makedirs(path, exist_ok=True)
    return path


def _open(path: str) -> Any:
    """Open the stage of the layer at path, read again from disk: USD keeps the layers it opened
    in a process-wide registry, and a tool of a long-lived process (a worker, a DCC session) would
    otherwise compose what a file held when the process first read it."""
    stage = Usd.Stage.Open(path)
    if stage is None:
        raise ValueError("%s is not a USD layer USD can open" % path)
    stage.Reload()
    return stage


def publish_asset(layer: str, out: str) -> Dict[str, Any]:
    """Check the asset layer and write it as ``out/assets/<name>.usdc``."""
    call = dcc_flow.current_call()
    layer = os.path.abspath(layer)
    if call is not None:
        call.reads(layer)
    stage = _open(layer)
    prim = stage.GetDefaultPrim()
    if not prim:
        raise ValueError("%s has no defaultPrim: an asset layer names the prim a shot references" % layer)
    name = os.path.splitext(os.path.basename(layer))[0]
    target = os.path.join(_out_dir(out, "assets"), name + ".usdc")
    stage.GetRootLayer().Export(target)
    if call is not None:
        call.writes(target)
    return {"asset": name, "usdc": target, "prim": str(prim.GetPath())}


def assemble_shot(shot: str, assets: List[str], out: str) -> Dict[str, Any]:
    """Write ``out/shots/<shot>.usda`` referencing the published assets it uses
    (``out/assets/<asset>.usdc``, each opened to find its default prim), one per
    ``/World/<asset>``, spaced along X."""
    call = dcc_flow.current_call()
    target = os.path.join(_out_dir(out, "shots"), shot + ".usda")
    # Authored in the layer at its own path, so that the references, relative to it, resolve.
    layer = Sdf.Layer.FindOrOpen(target) if os.path.exists(target) else None
    if layer is not None:
        layer.Clear()
    else:
        layer = Sdf.Layer.CreateNew(target)
    stage = Usd.Stage.Open(layer)
    world = UsdGeom.Xform.Define(stage, "/World")
    stage.SetDefaultPrim(world.GetPrim())
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.y)
    for i, name in enumerate(sorted(assets)):
        usdc = os.path.join(_out_dir(out, "assets"), name + ".usdc")
        if call is not None:
            call.reads(usdc)
        published = _open(usdc)
        if not published.GetDefaultPrim():
            raise ValueError("shot %s uses asset %r, whose published layer %s is missing or has no defaultPrim: "
                             "publish it first" % (shot, name, usdc))
        xform = UsdGeom.Xform.Define(stage, "/World/" + name)
        xform.AddTranslateOp().Set(Gf.Vec3d(2.0 * i, 0.0, 0.0))
        xform.GetPrim().GetReferences().AddReference(os.path.relpath(usdc, os.path.dirname(target)))
    layer.Save()
    if call is not None:
        call.writes(target)
    return {"shot": shot, "usda": target, "assets": sorted(assets)}


def flatten_shot(usda: str) -> Dict[str, Any]:
    """Compose the shot layer and write the flattened stage beside it (``<shot>.flat.usdc``)."""
    call = dcc_flow.current_call()
    stage = _open(usda)
    used = sorted(layer.realPath for layer in stage.GetUsedLayers() if layer.realPath)
    if call is not None:
        call.reads(*used)
    target = os.path.splitext(usda)[0] + ".flat.usdc"
    stage.Flatten().Export(target)
    flat = _open(target)
    prims = sum(1 for _ in flat.Traverse())
    if call is not None:
        call.writes(target)
    return {"flat": target, "prims": prims, "layers": len(used)}


def register(engine: Any) -> None:
    """Register the tools of usd_shot.yaml with ``engine`` (``dcc-flow ... --tools`` calls it)."""
    engine.register_tool(publish_asset, name="usd__publish_asset", thread="worker")
    engine.register_tool(assemble_shot, name="usd__assemble_shot", thread="worker")
    engine.register_tool(flatten_shot, name="usd__flatten_shot", thread="worker")

