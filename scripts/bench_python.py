"""Python-side figures for `make bench` (docs/design/performance.md), printed as Markdown table rows.

- a Python tool step through the C ABI, sequential (goal ≤ 25 µs/step);
- the same with worker-lane tools on 4 threads;
- `import dcc_flow` + opening an in-memory engine, in a fresh interpreter (goal ≤ 60 ms).
"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dcc_flow  # noqa: E402

FOREACH = """
name: bench
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: %d
    steps: [{id: noop, tool: %s}]
"""


def per_step(engine, tool, n, concurrency):
    spec = FOREACH % (concurrency, tool)
    engine.run(spec, {"items": list(range(200))}).raise_for_status()  # warm up
    best = None
    for _ in range(3):
        t = time.perf_counter()
        engine.run(spec, {"items": list(range(n))}).raise_for_status()
        dt = (time.perf_counter() - t) / n
        best = dt if best is None else min(best, dt)
    return best


def main():
    n = int(os.environ.get("BENCH_STEPS", "5000"))
    rows = []
    with dcc_flow.Engine() as engine:
        engine.register_tool(lambda: None, name="noop_main")
        seq = per_step(engine, "noop_main", n, 1) * 1e6
        rows.append(("Python tool step through the C ABI, sequential (main lane, best of 3 × %d steps)" % n,
                     "%.1f µs/step" % seq, "≤ 25 µs/step", "ok" if seq <= 25 else "MISSED"))
        floor = float(os.environ.get("BENCH_FLOOR_US") or 0)  # bench.sh: the locked-thread handoff row
        if floor > 0:
            rows.append(("the same against its floor, the locked-thread handoff round trip measured in this run "
                         "(%.1f µs; load average %.1f)" % (floor, os.getloadavg()[0]),
                         "%.2f× the floor" % (seq / floor), "≤ 2×", "ok" if seq <= 2 * floor else "MISSED"))
    with dcc_flow.Engine() as engine:
        engine.register_tool(lambda: None, name="noop_worker", thread="worker")
        engine.serve_tools(workers=4)
        dt = per_step(engine, "noop_worker", n, 8)
        rows.append(("Python tool steps, 4 worker threads (foreach concurrency 8)",
                     "%.1f µs/step (%.0f steps/s)" % (dt * 1e6, 1 / dt), "—", ""))
    # Measured as an installed package runs: pip writes bytecode at install time, so compile it
    # first and let the interpreter use it (PYTHONDONTWRITEBYTECODE would recompile every time).
    import compileall

    compileall.compile_dir(os.path.join(ROOT, "python", "dcc_flow"), quiet=1)
    code = "import time; t=time.perf_counter(); import dcc_flow; e=dcc_flow.Engine(); e.close(); print(time.perf_counter()-t)"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times = [float(subprocess.check_output([sys.executable, "-c", code], env=env)) for _ in range(7)]
    med = statistics.median(times) * 1e3
    rows.append(("`import dcc_flow` + open in-memory engine (median of 7, bytecode cached)",
                 "%.1f ms" % med, "≤ 60 ms", "ok" if med <= 60 else "MISSED"))
    for row in rows:
        print("| %s | %s | %s | %s |" % row)


if __name__ == "__main__":
    main()
