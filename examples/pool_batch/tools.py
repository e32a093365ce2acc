"""A batch export on a pool of 4 worker processes: examples/pool_batch (docs/guide/pools.md).

Each ``.ma`` scene of a folder is "exported" to an ``.abc`` file by a worker process — in
production ``mayapy`` running ``dcc-flow worker``, 4 of them, each on its own main thread, one
scene at a time; in tests and on a laptop any Python stands in for ``mayapy``. The files:

- ``batch.yaml``: the workflow: list the scenes, then a ``foreach`` (concurrency 4) of
  ``tool_remote`` steps on the ``maya`` pool, retried on ``worker_lost``;
- ``remotes.json``: the pool: ``mayapy -m dcc_flow worker --tools examples/pool_batch/tools.py``,
  4 workers, recycled every 50 scenes;
- this module: the tools, for both sides (``dcc-flow run --tools`` registers
  ``batch__list_scenes`` in the engine's process, the workers serve ``batch__export``).

Run it from the repository root (with ``mayapy`` on PATH, or ``remotes.json``'s ``"mayapy"``
replaced by a Python that can import ``dcc_flow``)::

    dcc-flow run examples/pool_batch/batch.yaml --tools examples/pool_batch/tools.py \\
        --remotes examples/pool_batch/remotes.json --input folder=scenes --input out_dir=abc

``dcc-flow show last`` then names the worker (``on worker maya/PID``) of every export and the
lines each printed. tests/py/test_example_pool_batch.py runs exactly this, with
``sys.executable`` standing in for ``mayapy``.
"""

import hashlib
import os
import time
from typing import Any, Dict, List

__all__ = ["register", "list_scenes", "export"]

#: How long an export "works" (seconds): a stand-in for opening a scene and writing a cache.
WORK_SECS = float(os.environ.get("POOL_BATCH_WORK_SECS", "0.2"))


def list_scenes(folder: str) -> Dict[str, List[str]]:
    """The Maya ASCII scenes of ``folder``, sorted (absolute paths)."""
    folder = os.path.abspath(folder)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".ma"))
    return {"scenes": [os.path.join(folder, n) for n in names]}


def export(scene: str, out_dir: str) -> Dict[str, Any]:
    """Export ``scene`` to ``out_dir/<name>.abc`` (written to a temporary name, then renamed, so a
    retried export never leaves half a file)."""
    try:  # inside mayapy: the real thing would be cmds.file(scene, open=True) and cmds.AbcExport
        import maya.cmds  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    with open(scene, "rb") as f:
        data = f.read()
    if not data.startswith(b"//Maya ASCII"):
        raise ValueError("%s is not a Maya ASCII scene" % scene)
    print("opening", scene)
    time.sleep(WORK_SECS)
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(os.path.abspath(out_dir), os.path.splitext(os.path.basename(scene))[0] + ".abc")
    body = "ABC export of %s\nsource sha256 %s\nworker pid %d\n" % (scene, hashlib.sha256(data).hexdigest(),
                                                                   os.getpid())
    tmp = "%s.%d.tmp" % (out, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
    os.replace(tmp, out)
    print("wrote", out)
    return {"scene": scene, "abc": out, "bytes": len(body), "pid": os.getpid()}


def register(engine: Any) -> None:
    """Register the tools under the names batch.yaml uses."""
    engine.tool(name="batch__list_scenes")(list_scenes)
    engine.tool(name="batch__export")(export)
