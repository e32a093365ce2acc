"""Red-team regressions of issue #26, items 11-13: resource limits on untrusted specs.

11. chained ``..*`` JSONPath over a tool output fails the step (``limit_exceeded``), fast;
12. a foreach over more than ``max_foreach_items`` items fails the step, with a memory estimate;
13. a 60 MB tool output through a main-lane Python tool no longer costs ~20x its size in RSS.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import dcc_flow
from conftest import PYTHON_DIR
from dcc_flow import InvalidRequestError

CHAINED = """\
name: chained
steps:
  - { id: scene, tool: scene__tree }
  - id: each
    kind: foreach
    items: "$.scene..*..*..*..*..*..*"
    steps: [{ id: s, tool: flow__echo }]
"""

FOREACH = """\
name: many
inputs: { items: { type: array } }
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    steps: [{ id: s, tool: flow__echo, args: { v: "{{item}}" } }]
"""


def _tree(depth):
    if depth == 1:
        return {"leaf": True}
    return {"l": _tree(depth - 1), "r": _tree(depth - 1)}


def _limit_failure(result, key):
    assert result.status.value == "failed", result
    step = result.step(key)
    assert step.status.value == "failed"
    assert step.error is not None and step.error["kind"] == "limit_exceeded", step.error
    return step.error["message"]


def test_redteam_chained_descendants_fail_the_step_not_the_process():
    with dcc_flow.Engine() as engine:
        engine.register_tool(lambda: _tree(12), name="scene__tree")
        start = time.monotonic()
        result = engine.run(CHAINED, timeout=60)
        message = _limit_failure(result, "each")
        assert time.monotonic() - start < 10
        for part in ("foreach each", "$.scene..*..*..*..*..*..*", "more than 1,000,000 nodes", "jsonpath_max_results"):
            assert part in message
        # The engine goes on.
        assert engine.run("steps: [{ id: e, tool: flow__echo, args: { a: 1 } }]").ok


def test_redteam_jsonpath_limits_come_from_the_config():
    spec = "name: f\ninputs: { files: { type: array } }\nsteps:\n" \
           "  - { id: each, kind: foreach, items: \"$.files[*]\", steps: [{ id: s, tool: flow__echo }] }\n"
    with dcc_flow.Engine(config={"jsonpath_max_results": 5, "jsonpath_max_work": 1000}) as engine:
        assert engine.run(spec, {"files": list(range(5))}).ok
        message = _limit_failure(engine.run(spec, {"files": list(range(6))}), "each")
        assert "more than 5 nodes" in message and "raise jsonpath_max_results" in message
    with pytest.raises(InvalidRequestError, match="jsonpath_max_work"):
        dcc_flow.Engine(config={"jsonpath_max_work": -1})


def test_redteam_foreach_item_cap():
    with dcc_flow.Engine() as engine:
        start = time.monotonic()
        message = _limit_failure(engine.run(FOREACH, {"items": list(range(100001))}), "each")
        assert time.monotonic() - start < 10
        for part in ("100,001 items", "limit of 100,000", "max_foreach_items", "about 146 MB", "up to 10,000,000"):
            assert part in message, message
        assert engine.run(FOREACH, {"items": [1, 2]}).ok
    with dcc_flow.Engine(config={"max_foreach_items": 2}) as engine:
        assert engine.run(FOREACH, {"items": [1, 2]}).ok
        assert "3 items, more than the limit of 2" in _limit_failure(engine.run(FOREACH, {"items": [1, 2, 3]}), "each")
    with pytest.raises(InvalidRequestError, match="max_foreach_items"):
        dcc_flow.Engine(config={"max_foreach_items": 10_000_001})


# Item 13: run in a fresh interpreter so that ru_maxrss measures this run alone.
_BIG_OUTPUT = textwrap.dedent("""\
    import gc, json, resource, sys
    sys.path.insert(0, sys.argv[1])
    import dcc_flow

    def payload():
        # About 56 MB of JSON: 600,000 distinct 96-character lines (a log, a listing).
        return {"lines": ["%08d" % i + "x" * 88 for i in range(600000)]}

    with dcc_flow.Engine() as engine:
        engine.register_tool(payload, name="scene__listing")
        engine.run("steps: [{ id: warm, tool: flow__echo }]")
        gc.collect()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = engine.run("steps: [{ id: big, tool: scene__listing }]")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert result.ok and len(result.outputs["big"]["lines"]) == 600000
        assert result.step("big").output is result.outputs["big"]
        size = len(json.dumps(result.outputs["big"], separators=(",", ":")))
    print(json.dumps({"payload": size, "growth": (peak - base) * 1024}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_redteam_big_tool_output_peak_rss():
    out = subprocess.run([sys.executable, "-c", _BIG_OUTPUT, PYTHON_DIR], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    ratio = figures["growth"] / figures["payload"]
    # Was 18-21x (1.0-1.2 GB for 56 MB); 6.0x now, of which the tool's own value and the run's
    # result, as Python objects, are about 1.6x each. The bound is generous.
    assert ratio < 8, "peak RSS grew by %.1fx the %d MB payload" % (ratio, figures["payload"] >> 20)
