"""The tools of examples/vendor_intake.yaml, for ``dcc-flow run --tools`` and ``dcc-flow serve --tools``.

They are the ``@task`` functions of examples/vendor_intake_codefirst.py — stand-ins for the
studio's SFTP and Maya tools that really read and write files — registered under the tool names
the YAML spec uses. The working folder is ``$VENDOR_INTAKE_ROOT``, else ``.dcc-flow/vendor_intake``
in the current directory::

    dcc-flow run examples/vendor_intake.yaml --tools examples/vendor_intake_tools.py \\
        --input date=2026-11-22 --approve-all

Like a vendor who has just uploaded, the stand-in SFTP creates a drop day the first time it is
listed: ``<root>/sftp/<date>/{hero,chair,lamp}.ma``. The exports land in ``<root>/fbx/``.
"""

import os
import sys
from typing import Any, Dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vendor_intake_codefirst as intake  # noqa: E402 - the example folder is not a package

__all__ = ["register", "list_sftp"]


def list_sftp(date: str) -> Dict[str, Any]:
    """List the vendor's Maya scenes of one drop day (creating the fake drop on first use)."""
    if not os.path.isdir(os.path.join(intake.ROOT, "sftp", date)):
        intake.make_fake_drop(intake.ROOT, date)
    result: Dict[str, Any] = intake.list_sftp(date)
    return result


def register(engine: Any) -> None:
    """Register the tools of vendor_intake.yaml with ``engine`` (``dcc-flow ... --tools`` calls it)."""
    intake.ROOT = os.path.abspath(os.environ.get("VENDOR_INTAKE_ROOT") or os.path.join(".dcc-flow", "vendor_intake"))
    engine.register_tool(list_sftp, name=intake.list_sftp.name)
    engine.register_tool(intake.export, name=intake.export.name, thread="worker", max_concurrent=4)
