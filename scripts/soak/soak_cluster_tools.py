"""The tool that only the cluster soak's workers host (``dcc-flow worker --db URL --tools
scripts/soak/soak_cluster_tools.py``, started by scripts/soak_cluster.py).

``soak__queue`` has the body of the soak tools (scripts/soak/soak_tools.py: it sleeps, may fail,
may be cancelled, and logs every call to ``$SOAK_CALL_LOG``). The ``dcc-flow serve`` engines of
the cluster soak do not host it, so each of its calls goes through the database's tool-call
queue to a worker (docs/operations/cluster.md, "The tool-call queue").
"""

import os
import sys
from typing import Any, Dict, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import soak_tools  # noqa: E402


def soak__queue(ms: int = 0, fail_times: int = 0, fail: bool = False, aware: bool = True,
                retry_ms: Optional[int] = None, key: str = "") -> Dict[str, Any]:
    """Soak tool hosted by the workers only: sleep, maybe fail, log the call."""
    return soak_tools._work(ms, fail_times, fail, aware, retry_ms, key)


def register(engine: Any) -> None:
    """Register ``soak__queue`` on the worker lane (``dcc-flow worker --tools`` calls this)."""
    engine.register_tool(soak__queue, name="soak__queue", thread="worker")
