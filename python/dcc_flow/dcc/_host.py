"""Importing a DCC's own Python module (``bpy``, ``maya.cmds``, ``hou``, ``unreal``) for an adapter,
with an error that says where that module comes from.

The adapters import it lazily (never at ``dcc_flow`` import time). Outside the DCC the import fails;
``host_module`` turns that ``ModuleNotFoundError`` into an ``ImportError`` (the kind the Qt adapter
raises without a binding) naming the adapter, the module, and how to get it, with the original
error as its ``__cause__``.
"""

import importlib
from typing import Any, Dict

__all__ = ["host_module", "WHERE"]

#: Where each DCC module is found: the message's advice.
WHERE: Dict[str, str] = {
    "bpy": "run it inside Blender (its Python console, a script of the Text Editor, or "
           "blender --background --python SCRIPT.py), or install Blender as a Python module: "
           "pip install bpy==5.0.1 (Python 3.11 only: each bpy release is built for one Python version)",
    "maya.cmds": "run it inside Maya, or with mayapy, Maya's Python (mayapy SCRIPT.py): maya.cmds ships with Maya",
    "hou": "run it inside Houdini, or with hython, Houdini's Python (hython SCRIPT.py): hou ships with Houdini",
    "unreal": "run it inside the Unreal Editor with the Python Editor Script Plugin enabled (or "
              "UnrealEditor-Cmd PROJECT -run=pythonscript -script=SCRIPT.py): unreal ships with the editor",
}

#: The DCC each module belongs to.
_DCC: Dict[str, str] = {"bpy": "Blender", "maya.cmds": "Maya", "hou": "Houdini", "unreal": "Unreal"}


def host_module(name: str, adapter: str) -> Any:
    """``importlib.import_module(name)``; when that fails, an ``ImportError`` such as
    ``dcc_flow.dcc.blender needs Blender's bpy module, which this Python cannot import (No module
    named 'bpy'): run it inside Blender (...), or ... pip install bpy==5.0.1 (Python 3.11 only ...)``.
    ``adapter`` is the adapter's module name (``blender``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError("dcc_flow.dcc.%s needs %s's %s module, which this Python cannot import (%s): %s"
                          % (adapter, _DCC[name], name, exc, WHERE[name]), name=name) from exc
