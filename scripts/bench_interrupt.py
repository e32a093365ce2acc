"""Interruption figures for `make bench` (docs/design/performance.md;
docs/reference/python/tools.md "Timeouts and cancel"), printed as Markdown table rows:

- a pure-Python tool with `timeout_secs: 0.5`: from the tool's start to the moment it stopped
  (its `finally:` ran), goal ≤ 0.6 s;
- a pure-Python tool cancelled: from `cancel()` returning to the tool stopped, goal ≤ 0.1 s;
- a tool blocked in C (`time.sleep(30)`) with `timeout_secs: 1`: from the tool's start to the
  run's terminal event, goal ≤ 1 s + the interrupt grace (2 s by default),
  + 50 ms for the writes of the step's and the run's end.

Each is the worst of ROUNDS runs (and the median), on a tool running on the driving thread
(main lane), as `dcc-flow run --tools` runs them.
"""
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import dcc_flow  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_INTERRUPT_ROUNDS", "10"))


def spin(secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        pass


def timeout_stop():
    spans = []
    with dcc_flow.Engine() as engine:

        @engine.tool("spin")
        def tool():
            start = time.monotonic()
            try:
                spin(30)
            finally:
                spans.append(time.monotonic() - start)

        for _ in range(ROUNDS):
            engine.run("steps: [{id: s, tool: spin, timeout_secs: 0.5}]")
    return spans


def cancel_stop():
    lags = []
    with dcc_flow.Engine() as engine:
        stopped = []
        running = threading.Event()

        @engine.tool("spin")
        def tool():
            running.set()
            try:
                spin(30)
            finally:
                stopped.append(time.monotonic())

        for _ in range(ROUNDS):
            running.clear()
            del stopped[:]
            run = engine.submit("steps: [{id: s, tool: spin}]")
            returned = []

            def cancel(run=run, returned=returned):
                running.wait(10)
                time.sleep(0.05)
                run.cancel("bench")
                returned.append(time.monotonic())

            t = threading.Thread(target=cancel)
            t.start()
            run.wait(timeout=30)
            t.join()
            lags.append(stopped[0] - returned[0])
    return lags


def blocked_terminal():
    took = []
    with dcc_flow.Engine() as engine:
        started = []

        @engine.tool("nap", thread="worker")
        def nap():
            started.append(time.monotonic())
            time.sleep(30)

        engine.serve_tools(workers=ROUNDS)  # the napping threads are abandoned, one per round
        for _ in range(ROUNDS):
            del started[:]
            run = engine.submit("steps: [{id: s, tool: nap, timeout_secs: 1}]")
            for _ev in engine.events(run_id=run.run_id, until_terminal=True):
                pass
            took.append(time.monotonic() - started[0])
    return took


def row(what, values, unit_scale, unit, goal, limit):
    worst, med = max(values), statistics.median(values)
    verdict = "ok" if worst <= limit else "MISSED"
    print("| %s (worst of %d, median) | %.0f %s (%.0f %s) | %s | %s |" % (
        what, len(values), worst * unit_scale, unit, med * unit_scale, unit, goal, verdict))


def main():
    row("In-process tool looping in Python, `timeout_secs: 0.5`: its start → it stopped (interrupted)",
        timeout_stop(), 1e3, "ms", "≤ 600 ms", 0.6)
    row("In-process tool looping in Python, cancelled: `cancel()` returned → it stopped", cancel_stop(), 1e3, "ms",
        "≤ 100 ms", 0.1)
    row("In-process tool blocked in C (`time.sleep`), `timeout_secs: 1`: its start → the run's terminal event "
        "(abandoned after the 2 s interrupt grace)", blocked_terminal(), 1e3, "ms",
        "≤ 3,050 ms (1 s + the grace, + 50 ms to write the end)", 3.05)


if __name__ == "__main__":
    main()
