#!/usr/bin/env python3
"""vendor_intake, code-first: examples/vendor_intake.yaml written as Python.

``@task`` functions are the tools; the ``@workflow`` function is traced once, at import, into the
very same WorkflowSpec the YAML file gives (same canonical JSON, same spec hash)::

    python examples/vendor_intake_codefirst.py                 # run in a temporary folder
    python examples/vendor_intake_codefirst.py --root /tmp/vi  # keep the files there
    python examples/vendor_intake_codefirst.py --yaml          # print the compiled spec

The tools here are stand-ins that really read and write files under ``--root``: the vendor's
"SFTP" drop is ``<root>/sftp/<date>/*.ma`` (created with three fake scenes), and the "FBX export"
writes ``<root>/fbx/<name>.fbx``. The human gate is approved automatically by a thread playing the
supervisor. Outside a workflow the tasks are plain functions, so a test can call them directly::

    >>> export("/proj/drop/hero.ma")   # runs the export, no engine involved
"""

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import threading
from typing import Any, Dict, Optional

try:
    import dcc_flow
except ImportError:  # running from a source checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
    import dcc_flow

from dcc_flow import Engine, FlowContext, Retry, task, workflow

#: Where the fake tools read and write; ``main()`` sets it (or ``$VENDOR_INTAKE_ROOT``).
ROOT = os.environ.get("VENDOR_INTAKE_ROOT", "")


def _root() -> str:
    if not ROOT:
        raise RuntimeError("set vendor_intake_codefirst.ROOT (or $VENDOR_INTAKE_ROOT) to the working folder")
    return ROOT


# --- tools ----------------------------------------------------------------------------------


@task(name="vendor_intake__list_sftp")
def list_sftp(date: str) -> Dict[str, Any]:
    """List the vendor's Maya scenes of one drop day."""
    drop = os.path.join(_root(), "sftp", date)
    if not os.path.isdir(drop):
        raise FileNotFoundError("no vendor drop for %s in %s" % (date, drop))
    files = []
    for name in sorted(os.listdir(drop)):
        if name.endswith(".ma"):
            path = os.path.join(drop, name)
            files.append({"path": path, "bytes": os.path.getsize(path)})
    return {"files": files}


@task(
    name="maya__export_fbx",
    retries=2,
    retry_delay_seconds=Retry(retry_on=["transient", "timeout"]),
    timeout_seconds=300,
    idempotency_key="export_{scene}",
)
def export(scene: str) -> Dict[str, Any]:
    """Export a Maya scene to FBX (a stand-in: writes a small text file derived from the scene)."""
    with open(scene, "rb") as fh:
        data = fh.read()
    if not data.startswith(b"//Maya ASCII"):
        raise ValueError("%s is not a Maya ASCII scene" % scene)
    digest = hashlib.sha256(data).hexdigest()
    out_dir = os.path.join(_root(), "fbx")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, os.path.splitext(os.path.basename(scene))[0] + ".fbx")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("FBX 7.4 (dcc-flow example export)\nsource: %s\nsource_sha256: %s\n" % (scene, digest))
    return {"fbx": out, "source_sha256": digest, "file_refs": [{"path": out, "mime": "application/octet-stream"}]}


# --- the workflow ---------------------------------------------------------------------------


@workflow
def vendor_intake(ctx: FlowContext, date: str) -> None:
    """Import vendor Maya files, QC, export FBX, push to Unreal."""
    listing = list_sftp(date, step_id="list")
    with ctx.foreach(listing.files, concurrency=4) as file:
        export(scene=file.path)
    ctx.approve(ctx.template("Push the {} vendor drop to Unreal?", date), step_id="human_gate")


# --- running it -----------------------------------------------------------------------------


def make_fake_drop(root: str, date: str) -> None:
    """Write three small Maya ASCII scenes where list_sftp looks for the vendor drop."""
    drop = os.path.join(root, "sftp", date)
    os.makedirs(drop, exist_ok=True)
    for name in ("hero", "chair", "lamp"):
        with open(os.path.join(drop, name + ".ma"), "w", encoding="utf-8") as fh:
            fh.write('//Maya ASCII 2024 scene\ncreateNode transform -n "%s";\n' % name)


def run_intake(root: str, date: str, out: Any = sys.stdout) -> "dcc_flow.RunResult":
    """Run the workflow on an in-memory engine, approving the gate from a second thread."""
    global ROOT
    ROOT = root
    with Engine() as engine:
        run = engine.submit(vendor_intake, {"date": date})  # registers the tasks as tools

        def supervisor() -> None:
            for event in run.events(timeout=60):
                if event["type"] == "approve_requested":
                    print("approval requested for %s: approving" % event.get("step_key"), file=out)
                    run.approve("human_gate", True, reason="checked by the example", by="supervisor")
                    return

        gate = threading.Thread(target=supervisor, name="supervisor", daemon=True)
        gate.start()
        result = run.wait(timeout=120)
        gate.join(5)
    for step in result.steps:
        print("  %-22s %s" % (step.key, step.status.value), file=out)
    return result


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="working folder (default: a temporary one, removed afterwards)")
    parser.add_argument("--date", default="2026-03-08", help="the vendor drop day (default: %(default)s)")
    parser.add_argument("--yaml", action="store_true", help="print the compiled spec and exit")
    args = parser.parse_args(argv)
    if args.yaml:
        print(vendor_intake.to_yaml(), end="")
        return 0
    root = args.root or tempfile.mkdtemp(prefix="vendor_intake_")
    try:
        make_fake_drop(root, args.date)
        print("vendor_intake (spec %s…) in %s" % (vendor_intake.spec.spec_hash[:12], root))
        result = run_intake(root, args.date)
        exported = sorted(os.listdir(os.path.join(root, "fbx"))) if os.path.isdir(os.path.join(root, "fbx")) else []
        print("run %s %s; exported: %s" % (result.run_id, result.status.value, ", ".join(exported) or "nothing"))
        if not result.ok:
            print("error: %s" % (result.error,), file=sys.stderr)
        return 0 if result.ok else 1
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
