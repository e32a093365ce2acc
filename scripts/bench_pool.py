"""Worker-pool figures for `make bench` (docs/pools.md, docs/performance.md), printed as Markdown
table rows. Real `dcc-flow worker` processes (`sys.executable -m dcc_flow worker`), warmed
before timing (start-up is a DCC's, not the pool's):

- pool call overhead per no-op call: a foreach of 2,000 no-op calls, concurrency 4, on 4 workers;
- the speed-up of a 64-item foreach of 50 ms tools (concurrency 64) on 4 workers over 1 (goal ≥ 3.5×).
"""
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dcc_flow  # noqa: E402

TOOLS = '''
import time

def bp__noop(item=None):
    return item

def bp__work(item=None, secs=0.05):
    time.sleep(secs)
    return item
'''

FOREACH = """
name: bench_pool
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: %d
    steps: [{id: call, kind: tool_remote, dcc: pool, tool: %s}]
"""


def engine_with(tools_path, workers):
    entry = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", tools_path],
             "env": {"PYTHONPATH": os.path.join(ROOT, "python")}, "workers": workers}
    engine = dcc_flow.Engine(config={"remotes": {"pool": entry}})
    engine.pools(warm=True)
    return engine


def timed(engine, spec, items):
    t = time.perf_counter()
    engine.run(spec, {"items": items}).raise_for_status()
    return time.perf_counter() - t


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench_pool_tools.py")
        with open(path, "w") as f:
            f.write(TOOLS)
        with engine_with(path, 4) as engine:
            spec = FOREACH % (4, "bp__noop")
            timed(engine, spec, list(range(200)))  # warm up
            n = 2000
            per_call = min(timed(engine, spec, list(range(n))) for _ in range(3)) / n
            work4 = min(timed(engine, FOREACH % (64, "bp__work"), list(range(64))) for _ in range(3))
        with engine_with(path, 1) as engine:
            work1 = min(timed(engine, FOREACH % (64, "bp__work"), list(range(64))) for _ in range(2))
    speedup = work1 / work4
    rows = [
        ("pool call overhead per no-op call (4 warm `dcc-flow worker` processes, foreach of 2,000, "
         "concurrency 4, best of 3)", "%.0f µs/call" % (per_call * 1e6), "—", ""),
        ("64-item foreach of 50 ms pool calls: 1 worker vs 4 (best of 2 and 3)",
         "%.2f s vs %.2f s: %.2f×" % (work1, work4, speedup), "≥ 3.5×", "ok" if speedup >= 3.5 else "MISSED"),
    ]
    for row in rows:
        print("| %s | %s | %s | %s |" % row)


if __name__ == "__main__":
    main()
