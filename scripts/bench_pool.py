"""Worker-pool figures for `make bench` (docs/guide/pools.md, docs/design/performance.md), printed as Markdown
table rows. Real `dcc-flow worker` processes (`sys.executable -m dcc_flow worker`), warmed
before timing (start-up is a DCC's, not the pool's):

- pool call overhead per no-op call: a foreach of 2,000 no-op calls, concurrency 4, on 4 workers;
- the speed-up of a 64-item foreach of 50 ms tools (concurrency 64) on 4 workers over 1 (goal ≥ 3.5×);
- plain Python tools (docs/reference/cli/run.md, "Concurrency"): 16 calls of a 0.5 s tool in a foreach of
  concurrency 4, `dcc-flow run --tools --workers 4` against the same command without it (the
  tool then runs in the CLI's process, one call at a time), whole commands, cold (Python, the CLI
  and the four worker processes start inside the time); and the same with
  `Engine(tools=[...], workers=4)` once its workers are warm, against the in-process engine
  (goal ≥ 3.5× for both).
"""
import datetime
import json
import logging
import os
import subprocess
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


def bp__nap(item=None):
    time.sleep(0.5)
    return item
'''

NAPS = """
name: bench_workers
inputs:
  items: {type: array}
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 4
    steps: [{id: nap, tool: bp__nap, args: {item: "{{item}}"}}]
"""

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
        workers_rows = plain_tool_rows(tmp, path)
    speedup = work1 / work4
    rows = [
        ("pool call overhead per no-op call (4 warm `dcc-flow worker` processes, foreach of 2,000, "
         "concurrency 4, best of 3)", "%.0f µs/call" % (per_call * 1e6), "—", ""),
        ("64-item foreach of 50 ms pool calls: 1 worker vs 4 (best of 2 and 3)",
         "%.2f s vs %.2f s: %.2f×" % (work1, work4, speedup), "≥ 3.5×", "ok" if speedup >= 3.5 else "MISSED"),
    ]
    rows.extend(workers_rows)
    for row in rows:
        print("| %s | %s | %s | %s |" % row)


def _seconds(rfc3339):
    """An event's time as seconds since the epoch (Python 3.7-3.10 take at most 6 fraction digits)."""
    head, _, rest = rfc3339.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat("%s.%s+00:00" % (head, (rest or "0")[:6].ljust(6, "0"))).timestamp()


def plain_tool_rows(tmp, tools_path):
    """16 calls of a 0.5 s plain function, foreach concurrency 4: with 4 worker processes vs in-process."""
    spec_path = os.path.join(tmp, "bench_workers.yaml")
    with open(spec_path, "w") as f:
        f.write(NAPS)
    items = list(range(16))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))

    def command(*extra):
        """The whole command's time, and its run's: from workflow_started to workflow_terminal."""
        argv = [sys.executable, "-m", "dcc_flow", "run", spec_path, "--tools", tools_path, "--db", ":memory:",
                "--input", "items=%s" % items, "--json"] + list(extra)
        t = time.perf_counter()
        out = subprocess.run(argv, env=env, cwd=tmp, check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL).stdout
        took = time.perf_counter() - t
        times = {}
        for line in out.decode("utf-8").splitlines():
            ev = json.loads(line)
            if ev.get("type") in ("workflow_started", "workflow_terminal"):
                times[ev["type"]] = _seconds(ev["time"])
        return took, times["workflow_terminal"] - times["workflow_started"]

    # Installed packages run from bytecode (pip compiles it); this checkout may have none, and
    # PYTHONDONTWRITEBYTECODE would make each worker compile the package again.
    import compileall

    compileall.compile_dir(os.path.join(ROOT, "python", "dcc_flow"), quiet=1)
    serial_cli, serial_run = command()
    workers = [command("--workers", "4") for _ in range(3)]
    workers_cli, workers_run = min(w[0] for w in workers), min(w[1] for w in workers)
    quiet = logging.getLogger("dcc_flow")
    level, quiet.level = quiet.level, logging.ERROR  # its warning that the foreach runs one call at a time
    try:
        with dcc_flow.Engine(tools=[tools_path]) as engine:
            serial = timed(engine, NAPS, items)
    finally:
        quiet.setLevel(level)
    with dcc_flow.Engine(tools=[tools_path], workers=4) as engine:
        engine.pools(warm=True)
        warm = min(timed(engine, NAPS, items) for _ in range(3))
    cold, cold_cli, hot = serial_run / workers_run, serial_cli / workers_cli, serial / warm
    return [
        ("16 calls of a 0.5 s plain Python tool, foreach concurrency 4: `dcc-flow run --tools` vs `--workers 4`, "
         "cold (the 4 worker processes start in the run's time), the run from start to end (and the whole "
         "command, Python and the CLI starting too); best of 3",
         "%.2f s vs %.2f s: %.2f× (commands %.2f s vs %.2f s: %.2f×)" % (
             serial_run, workers_run, cold, serial_cli, workers_cli, cold_cli),
         "≥ 3.5×", "ok" if cold >= 3.5 else "MISSED"),
        ("the same run in `Engine(tools=[...])` vs `Engine(tools=[...], workers=4)` with its workers warm (best of 3)",
         "%.2f s vs %.2f s: %.2f×" % (serial, warm, hot), "≥ 3.5×", "ok" if hot >= 3.5 else "MISSED"),
    ]


if __name__ == "__main__":
    main()
