"""dcc-flow beside Dask, in one process, for `make bench` (docs/design/performance.md).

Two shapes of Python work, each function trivial so the scheduler's own cost is what is measured:

- a chain of N steps, each taking the previous output (dcc-flow: N sequential main-lane tool
  steps; Dask: N chained ``dask.delayed`` calls, synchronous scheduler); goal: dcc-flow at least
  2× faster;
- a fan-out of N independent calls (dcc-flow: a ``foreach`` over N items of a worker-lane tool on
  4 threads; Dask: N ``dask.delayed`` calls gathered by one, threaded scheduler with 4 workers);
  goal: dcc-flow at least 3× faster.

Best of 3 runs each, after a warm-up. Prints Markdown table rows. Dask is a benchmark-only
dependency: without it the rows say so and the script exits 0.
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dcc_flow  # noqa: E402

N = int(os.environ.get("BENCH_DASK_N", "2000"))
WORKERS = 4


def best_of(fn, runs=3):
    fn()  # warm up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def add_one(x):
    return x + 1


def chain_spec(n):
    steps = [{"id": "s0", "tool": "add_one", "args": {"x": 0}}]
    for i in range(1, n):
        steps.append({"id": "s%d" % i, "tool": "add_one", "args": {"x": "{{s%d}}" % (i - 1)}})
    return {"name": "chain", "steps": steps}


FANOUT = {"name": "fanout", "steps": [{"id": "each", "kind": "foreach", "items": "{{inputs.items}}",
                                        "concurrency": 2 * WORKERS,
                                        "steps": [{"id": "f", "tool": "add_one_w", "args": {"x": "{{item}}"}}]}]}


def dccflow_figures(n):
    with dcc_flow.Engine() as engine:
        engine.register_tool(add_one, name="add_one")
        engine.register_tool(add_one, name="add_one_w", thread="worker")
        engine.serve_tools(workers=WORKERS)
        spec = chain_spec(n)

        def chain():
            result = engine.run(spec)
            assert result.ok and result.outputs["s%d" % (n - 1)] == n, result.error

        items = list(range(n))

        def fanout():
            result = engine.run(FANOUT, {"items": items})
            assert result.ok and len(result.outputs["each"]) == n, result.error

        return best_of(chain), best_of(fanout)


def dask_figures(n):
    import dask

    def chain():
        x = 0
        for _ in range(n):
            x = dask.delayed(add_one, pure=False)(x)
        assert x.compute(scheduler="sync") == n

    def fanout():
        parts = [dask.delayed(add_one, pure=False)(i) for i in range(n)]
        out = dask.delayed(list)(parts).compute(scheduler="threads", num_workers=WORKERS)
        assert len(out) == n

    return best_of(chain), best_of(fanout)


def main():
    flow_chain, flow_fan = dccflow_figures(N)
    try:
        import dask
    except ImportError:
        print("| dcc-flow vs Dask | Dask is not installed (`make bench` installs it into .venv) | — | MISSED |")
        return
    dask_chain, dask_fan = dask_figures(N)
    rows = [
        ("%d-step chain of Python calls: dcc-flow main lane vs Dask %s synchronous" % (N, dask.__version__),
         flow_chain, dask_chain, 2.0),
        ("%d-item fan-out of Python calls, %d threads: dcc-flow foreach vs Dask threaded" % (N, WORKERS),
         flow_fan, dask_fan, 3.0),
    ]
    for name, ours, theirs, goal in rows:
        ratio = theirs / ours
        print("| %s | %.1f ms vs %.1f ms (%.1f µs vs %.1f µs per call): %.2f× | ≥ %.0f× | %s |" % (
            name, ours * 1e3, theirs * 1e3, ours / N * 1e6, theirs / N * 1e6, ratio, goal,
            "ok" if ratio >= goal else "MISSED"))


if __name__ == "__main__":
    main()
