"""dcc-flow beside Dask, interleaved, for `make bench` (docs/design/performance.md).

Two shapes of Python work, each function trivial so the scheduler's own cost is what is measured:

- a chain of N steps, each taking the previous output (dcc-flow: N sequential main-lane tool
  steps; Dask: N chained ``dask.delayed`` calls, synchronous scheduler); goal: dcc-flow at least
  2× faster;
- a fan-out of N independent calls (dcc-flow: a ``foreach`` over N items of a worker-lane tool on
  4 threads; Dask: N ``dask.delayed`` calls gathered by one, threaded scheduler with 4 workers);
  goal: dcc-flow at least 3× faster.

Each Dask is a *peer*: a Python that has it installed (``BENCH_DASK_PYTHONS``, paths separated by
``os.pathsep``; by default ``BENCH_PYTHON``, else this interpreter). ``make bench`` gives two: the
current Dask release and the oldest one in a supported Linux distribution (Debian 12's
python3-dask 2022.12.1), each in its own venv, since two Dasks cannot share one process. dcc-flow
runs in this process, each peer in a child process of its own that waits for orders on stdin, and
the runs are interleaved (dcc-flow, peer 1, peer 2, dcc-flow, ...) so that a machine whose load
swings by half during the benchmark slows every side alike. Best of ``BENCH_DASK_ROUNDS`` (5)
rounds each, after a warm-up. Prints Markdown table rows, with the load average at the start and
the end. A peer without Dask gives a row that says so, and the script still exits 0.

Each side's turn is two runs of the shape back to back: the first after the other sides' turns
(*cold*), the second right after it (*warm*). The goals are the warm runs' ratios; the cold ones
are printed beside them. On the development VM any process runs 2–3× slower for its first 10–40
ms after a pause (a plain Go loop of map lookups and JSON: 11 ms back to back, 25–35 ms after
0.3 s of sleep; docs/design/performance.md, "The fan-out, warm and cold"), so in an interleaved
run that pause adds a fixed cost to every side, and the faster side's ratio shrinks most: the
warm pair measures the schedulers, the cold one what a first run after a pause costs.
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(os.environ.get("BENCH_DASK_N", "2000"))
ROUNDS = int(os.environ.get("BENCH_DASK_ROUNDS", "5"))
WORKERS = 4


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


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def dask_shapes(n):
    """The two shapes as Dask runs them: {"chain": fn, "fanout": fn}."""
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

    return {"chain": chain, "fanout": fanout}


def turn(fn):
    """One side's turn: (cold, warm) seconds of two runs of fn back to back."""
    cold = timed(fn)
    return cold, timed(fn)


def peer_main():
    """A peer's child process: prints Dask's version (or "-"), then for each shape name read on
    stdin runs its turn (two runs) and prints the two times in seconds."""
    try:
        import dask
    except ImportError:
        print("-", flush=True)
        return
    print(dask.__version__, flush=True)
    shapes = dask_shapes(N)
    for line in sys.stdin:
        print("%r %r" % turn(shapes[line.strip()]), flush=True)


class Peer:
    """A Dask in a child process (its own Python): ``run(shape)`` times one run there."""

    def __init__(self, python):
        self.python = python
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--peer"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, universal_newlines=True,
                                     env=dict(os.environ, BENCH_DASK_N=str(N)))
        self.version = self.proc.stdout.readline().strip()
        if self.version in ("", "-"):
            self.version = None
            self.close()

    def run(self, shape):
        """(cold, warm) seconds of a turn of shape there."""
        self.proc.stdin.write(shape + "\n")
        self.proc.stdin.flush()
        cold, warm = self.proc.stdout.readline().split()
        return float(cold), float(warm)

    def close(self):
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def main():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import dcc_flow

    pythons = [p for p in os.environ.get("BENCH_DASK_PYTHONS", os.environ.get("BENCH_PYTHON", sys.executable))
               .split(os.pathsep) if p]
    peers = [Peer(p) for p in pythons]
    for p in peers:
        if p.version is None:
            print("| dcc-flow vs Dask | Dask is not installed in %s (`make bench` installs it into .venv-bench) "
                  "| — | MISSED |" % p.python)
    peers = [p for p in peers if p.version is not None]
    load_start = os.getloadavg()
    with dcc_flow.Engine() as engine:
        engine.register_tool(add_one, name="add_one")
        engine.register_tool(add_one, name="add_one_w", thread="worker")
        engine.serve_tools(workers=WORKERS)
        spec = chain_spec(N)
        items = list(range(N))

        def chain():
            result = engine.run(spec)
            assert result.ok and result.outputs["s%d" % (N - 1)] == N, result.error

        def fanout():
            result = engine.run(FANOUT, {"items": items})
            assert result.ok and len(result.outputs["each"]) == N, result.error

        ours = {"chain": chain, "fanout": fanout}
        best = {}  # (side, shape) -> seconds; side None = dcc-flow
        for shape in ("chain", "fanout"):  # warm-ups, not counted
            ours[shape]()
            for p in peers:
                p.run(shape)
        for _ in range(ROUNDS):
            for shape in ("chain", "fanout"):
                for side in [None] + list(range(len(peers))):
                    times = turn(ours[shape]) if side is None else peers[side].run(shape)
                    for key, dt in zip(((side, shape, "cold"), (side, shape, "warm")), times):
                        best[key] = min(best.get(key, dt), dt)
    load_end = os.getloadavg()
    for p in peers:
        p.close()
    load = "load average %.1f at the start, %.1f at the end" % (load_start[0], load_end[0])
    goals = {"chain": 2.0, "fanout": 3.0}
    names = {
        "chain": "%d-step chain of Python calls: dcc-flow main lane vs Dask %s synchronous",
        "fanout": "%d-item fan-out of Python calls, %d threads: dcc-flow foreach vs Dask %s threaded",
    }
    for shape in ("chain", "fanout"):
        for i, p in enumerate(peers):
            ours_s, theirs_s = best[(None, shape, "warm")], best[(i, shape, "warm")]
            ratio = theirs_s / ours_s
            cold_ours, cold_theirs = best[(None, shape, "cold")], best[(i, shape, "cold")]
            name = names[shape] % ((N, p.version) if shape == "chain" else (N, WORKERS, p.version))
            print("| %s (interleaved, best of %d warm runs; %s) | %.1f ms vs %.1f ms (%.1f µs vs %.1f µs per call): "
                  "%.2f×; cold %.1f vs %.1f µs: %.2f× | ≥ %.0f× | %s |"
                  % (name, ROUNDS, load, ours_s * 1e3, theirs_s * 1e3, ours_s / N * 1e6, theirs_s / N * 1e6, ratio,
                     cold_ours / N * 1e6, cold_theirs / N * 1e6, cold_theirs / cold_ours, goals[shape],
                     "ok" if ratio >= goals[shape] else "MISSED"))


if __name__ == "__main__":
    if sys.argv[1:] == ["--peer"]:
        peer_main()
    else:
        main()
