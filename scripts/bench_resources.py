#!/usr/bin/env python3
"""The proof of scarce-resource limits across engines (docs/guide/resources.md, "The proof"), for
`make bench` and `make bench-resources`, printed as Markdown table rows.

A throwaway PostgreSQL cluster (scripts/soak/soak_pg.py, as the cluster soak's), then three
`dcc-flow run --db postgresql://… --resource bench_lic=3 --lease-secs 1 --worker-threads 4`
processes, each running a 60-item foreach (concurrency 4) of 100 ms calls that each hold one
unit of ``bench_lic``. A sampler from outside the engines — a ``psql`` process of its own
(soak_pg's Session), asked every ~10 ms — reads ``resource_slots`` and counts the units of live
engines only (a row counts while its engine's heartbeat is at most its lease old: the rule of
migrations/0014_resource_slots.sql), and the step instances completed and in flight.

1. **Never over the limit**: the most units held at once, over every sample of both phases
   (must be at most 3).
2. **Busy**: of the time work waited for a unit (an item started, not finished, holding none:
   more items in flight than units held), the share with all 3 units held (goal at least 90%).
3. **A SIGKILLed holder**: three new engines; once the first holds units a third of the way in
   it is SIGKILLed (its process group); the time until no unit of it counts any more (must be
   within its lease + 1 s), and until the other engines hold all 3 units again. The rest of the
   phase (the survivors finish their runs, one of them takes the killed run over) is sampled
   for (1).

Exit status 1 when an invariant fails — more than 3 units held at once, or the killed engine's
units counted past its lease + 1 s — or the proof could not run; else 0, also when the busy
share misses its goal (a performance goal: its row says MISSED). With no PostgreSQL on the
machine the rows say SKIPPED (status 0, 1 when CI=true). Every process it starts is in a
session of its own, stopped at the end (also on an error or a signal), and SIGKILLed by
soak_pg's reaper should this driver die. About 25 s. ``--verbose`` also prints the stretches of
50 ms or more with a unit free while work waited.

Usage: python scripts/bench_resources.py [--verbose] [--keep] [--fault]
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "soak"))

import soak_pg  # noqa: E402

RESOURCE = "bench_lic"
LIMIT = 3
ENGINES = 3
ITEMS = 60
CALL_MS = 100
CONCURRENCY = 4  # each engine's foreach wants more than the limit: work waits in every engine
LEASE = 1.0
SAMPLE_EVERY = 0.010
BUSY_GOAL = 0.90
PHASE_MAX = 45.0  # a phase that has not ended by then is a failure (the runs take ~7 s)

TOOLS = '''"""The tool of scripts/bench_resources.py: hold the step's unit for ms milliseconds."""
import time


def bench__hold(ms=100, item=None):
    time.sleep(ms / 1000.0)
    return item


def register(engine):
    engine.register_tool(bench__hold, name="bench__hold", thread="worker")
'''

SPEC = """name: %(name)s
steps:
  - id: items
    kind: foreach
    items: %(items)s
    concurrency: %(conc)d
    steps:
      - id: hold
        tool: bench__hold
        args: { ms: %(ms)d, item: "{{item}}" }
        resources: { %(res)s: 1 }
"""

# One sample: the units each live engine (by pid) holds of RESOURCE, the units of rows whose
# engine is past its lease (not counted), and the `hold` step instances completed of the
# phase's workflow and those started but not finished (running, or waiting for their unit). One
# round trip, one line: "pid:n,pid:n|stale|completed|in flight".
SAMPLE_SQL = (
    "SELECT coalesce((SELECT string_agg(pid || ':' || n, ',') FROM (SELECT e.pid, sum(s.amount) AS n "
    "FROM resource_slots s JOIN engines e ON e.id = s.engine_id WHERE s.resource = '%(res)s' AND "
    "e.heartbeat_at + make_interval(secs => e.lease_secs) >= now() GROUP BY e.pid) x), '') || '|' || "
    "(SELECT coalesce(sum(s.amount), 0) FROM resource_slots s WHERE s.resource = '%(res)s' AND NOT EXISTS "
    "(SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) "
    ">= now())) || '|' || (SELECT count(*) FROM workflow_steps st JOIN workflows w ON w.id = st.run_id "
    "WHERE w.name = '%(wf)s' AND st.step_id = 'hold' AND st.status = 'completed') || '|' || (SELECT count(*) "
    "FROM workflow_steps st JOIN workflows w ON w.id = st.run_id WHERE w.name = '%(wf)s' AND st.step_id = 'hold' "
    "AND st.status NOT IN ('completed', 'failed', 'cancelled', 'skipped', 'interrupted'));")


class Sample:
    __slots__ = ("t", "by_pid", "stale", "done", "flight")

    def __init__(self, t: float, by_pid: Dict[int, int], stale: int, done: int, flight: int) -> None:
        self.t, self.by_pid, self.stale, self.done, self.flight = t, by_pid, stale, done, flight

    @property
    def held(self) -> int:
        return sum(self.by_pid.values())


class Sampler(threading.Thread):
    """Samples every SAMPLE_EVERY s (from its own psql) until stopped; the phase's workflow name
    can be switched between phases."""

    def __init__(self, pg: soak_pg.Cluster) -> None:
        super().__init__(daemon=True)
        self.psql = pg.session()
        self.workflow = ""
        self.samples: List[Sample] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            nxt = time.monotonic()
            while not self.stop.is_set():
                wf = self.workflow
                t0 = time.monotonic()
                line = self.psql.ask(SAMPLE_SQL % {"res": RESOURCE, "wf": wf})
                t1 = time.monotonic()
                pids, stale, done, flight = line.split("|")
                by_pid = {int(p): int(n) for p, n in (kv.split(":") for kv in pids.split(",") if kv)}
                with self.lock:
                    self.samples.append(Sample((t0 + t1) / 2, by_pid, int(stale), int(done), int(flight)))
                nxt = max(nxt + SAMPLE_EVERY, time.monotonic())
                self.stop.wait(nxt - time.monotonic())
        except BaseException as exc:  # the main thread reports it
            self.error = exc

    def since(self, t: float) -> List[Sample]:
        with self.lock:
            return [s for s in self.samples if s.t >= t]

    def last(self) -> Optional[Sample]:
        with self.lock:
            return self.samples[-1] if self.samples else None


class Bench:
    def __init__(self, args: argparse.Namespace, pg: soak_pg.Cluster, workdir: str) -> None:
        self.args, self.pg, self.workdir = args, pg, workdir
        self.procs: List[subprocess.Popen[bytes]] = []
        self.tools = os.path.join(workdir, "bench_resources_tools.py")
        with open(self.tools, "w") as f:
            f.write(TOOLS)
        self.sampler = Sampler(pg)

    def log(self, msg: str) -> None:
        if self.args.verbose:
            print("[bench-resources] " + msg, file=sys.stderr, flush=True)

    def spec(self, name: str) -> str:
        path = os.path.join(self.workdir, name + ".yaml")
        with open(path, "w") as f:
            f.write(SPEC % {"name": name, "items": list(range(ITEMS)), "conc": CONCURRENCY, "ms": CALL_MS,
                            "res": RESOURCE})
        return path

    def start(self, spec: str, n: int) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONUNBUFFERED="1")
        env.pop("DCC_FLOW_DB", None)
        with holding(), open(os.path.join(self.workdir, "engine-%d.log" % n), "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dcc_flow", "run", spec, "--db", self.pg.url, "--tools", self.tools,
                 "--resource", "%s=%d" % (RESOURCE, LIMIT + (1 if n == 2 and self.args.fault else 0)),
                 "--lease-secs", str(LEASE), "--worker-threads", "4", "--json"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=self.workdir,
                start_new_session=True)
            self.procs.append(proc)
            self.pg.adopt(proc.pid)  # the reaper SIGKILLs its group should this driver die
        return proc

    def reap(self, proc: subprocess.Popen[bytes], timeout: float) -> Optional[int]:
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.pg.release(proc.pid)
        return rc

    def stop_all(self) -> None:
        """SIGKILL every process group still running and wait for it."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs:
            self.reap(p, 10.0)

    def phase_busy(self) -> Tuple[List[Sample], float, float, float]:
        """Phase 1: three engines, no fault. Returns its samples, the busy share of the time work
        waited, that time, and the phase's wall time (start of the engines to the last exit)."""
        spec = self.spec("bench_res")
        self.sampler.workflow = "bench_res"
        t0 = time.monotonic()
        procs = [self.start(spec, i) for i in range(ENGINES)]
        deadline = t0 + PHASE_MAX
        while not self.pg.query("SELECT 1 AS ok WHERE to_regclass('resource_slots') IS NOT NULL AND "
                                "to_regclass('workflow_steps') IS NOT NULL"):  # the first engine migrates
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("no engine created the database's tables; engine 0's output: %s" % self.tail(0))
            time.sleep(0.02)
        self.sampler.start()
        for i, p in enumerate(procs):
            rc = self.reap(p, max(0.1, deadline - time.monotonic()))
            if rc != 0:
                raise RuntimeError("engine %d (pid %d) %s; its output: %s" % (
                    i, p.pid, "did not finish within %.0f s" % PHASE_MAX if rc is None else "exited %d" % rc,
                    self.tail(i)))
        wall = time.monotonic() - t0
        time.sleep(0.05)
        samples = self.sampler.since(t0)
        total = ENGINES * ITEMS
        busy = waited = 0.0
        for a, b in zip(samples, samples[1:]):
            if a.flight > a.held:  # an item started, not finished, holding no unit: work waits
                waited += b.t - a.t
                if a.held >= LIMIT:
                    busy += b.t - a.t
        if self.args.verbose:  # the stretches of 50 ms or more with a unit free while work waited
            gap: List[Sample] = []
            for a in samples:
                if a.flight > a.held and a.held < LIMIT:
                    gap.append(a)
                    continue
                if gap and a.t - gap[0].t >= 0.05:
                    self.log("free while work waits: %.2f s at +%.2f s, held %s, in flight %d" % (
                        a.t - gap[0].t, gap[0].t - t0, sorted({str(g.by_pid) for g in gap}), gap[0].flight))
                gap = []
        if not samples or samples[-1].done != total:
            raise RuntimeError("phase 1: %d of %d items completed by the end" % (samples[-1].done if samples else 0,
                                                                                 total))
        return samples, busy / waited if waited else 0.0, waited, wall

    def phase_kill(self) -> Tuple[List[Sample], float, float, int]:
        """Phase 2: three new engines; the first is SIGKILLed while it holds units with items left.
        Returns the phase's samples, the time from the kill until no unit of the killed engine
        counts, until the others hold all the units again, and the units it held."""
        spec = self.spec("bench_res_kill")
        self.sampler.workflow = "bench_res_kill"
        t0 = time.monotonic()
        procs = [self.start(spec, ENGINES + i) for i in range(ENGINES)]
        victim = procs[0]
        deadline = t0 + PHASE_MAX
        held = 0
        while True:  # a third of the work done, and the victim holding units
            if time.monotonic() > deadline:
                raise RuntimeError("phase 2: the first engine never held a unit a third of the way in")
            if victim.poll() is not None:
                raise RuntimeError("phase 2: the engine to kill exited %s first; its output: %s" % (
                    victim.returncode, self.tail(ENGINES)))
            s = self.sampler.last()
            if s is not None and s.done >= ENGINES * ITEMS // 3 and s.by_pid.get(victim.pid, 0) > 0:
                held = s.by_pid[victim.pid]
                break
            time.sleep(0.002)
        os.killpg(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        self.reap(victim, 10.0)
        self.log("SIGKILLed pid %d holding %d unit(s)" % (victim.pid, held))
        freed = taken = -1.0
        seen = killed
        while time.monotonic() < killed + 20 and taken < 0:
            time.sleep(0.05)
            for s in self.sampler.since(seen):  # in order, each sample once
                seen = s.t + 1e-9
                if freed < 0 and s.by_pid.get(victim.pid, 0) == 0:
                    freed = s.t - killed
                if freed >= 0 and taken < 0 and s.held >= LIMIT:  # the victim's units no longer count
                    taken = s.t - killed
        for i, p in enumerate(procs[1:], 1):  # the survivors finish (one of them takes the killed run over)
            rc = self.reap(p, max(0.1, deadline - time.monotonic()))
            if rc != 0:
                raise RuntimeError("phase 2: engine %d (pid %d) %s; its output: %s" % (
                    ENGINES + i, p.pid, "did not finish within %.0f s" % PHASE_MAX if rc is None else
                    "exited %d" % rc, self.tail(ENGINES + i)))
        time.sleep(0.05)
        return self.sampler.since(t0), freed, taken, held

    def tail(self, n: int) -> str:
        try:
            with open(os.path.join(self.workdir, "engine-%d.log" % n), errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-5:]) or "-"
        except OSError:
            return "-"


_held = [0, 0]  # processes being started; a stop signal that came meanwhile


def on_signal(signum: int, frame: Optional[FrameType]) -> None:
    """SIGTERM, SIGHUP, SIGINT: main's finally stops what was started (once a process being
    started is recorded)."""
    if _held[0]:
        _held[1] = signum
        return
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1
        if not _held[0] and _held[1]:
            raise SystemExit(128 + _held[1])


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="say what the driver does on stderr")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (the engines' logs)")
    parser.add_argument("--fault", action="store_true", help="to check the check: the third engine of the first "
                        "phase declares a limit of %d, so that the units held may pass %d (the run must then fail)"
                        % (LIMIT + 1, LIMIT))
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    what = ("resource limit across 3 `dcc-flow run` engines on one PostgreSQL (limit %d, each a %d-item foreach "
            "of %d ms calls holding 1 unit)" % (LIMIT, ITEMS, CALL_MS))
    try:
        found = soak_pg.bin_dir()
        if found is not None and not os.path.exists(os.path.join(found, "psql")) and not shutil.which("psql"):
            raise soak_pg.NoServer("no psql: install postgresql-client-15")
        pg = soak_pg.Cluster()
    except soak_pg.NoServer as exc:
        print("| %s: SKIPPED (%s) | — | — | |" % (what, exc))
        return 1 if os.environ.get("CI") == "true" else 0
    workdir = tempfile.mkdtemp(prefix="dcc-flow-bench-resources-")
    bench: Optional[Bench] = None
    try:
        bench = Bench(args, pg, workdir)
        s1, busy, waited, wall = bench.phase_busy()
        bench.log("phase 1: %d samples, %.2f s wall" % (len(s1), wall))
        s2, freed, taken, held = bench.phase_kill()
        bench.sampler.stop.set()
        bench.sampler.join(5)
        if bench.sampler.error is not None:
            raise RuntimeError("the sampler failed: %s" % bench.sampler.error)
    finally:
        if bench is not None:
            bench.sampler.stop.set()
            if bench.sampler.is_alive():
                bench.sampler.join(5)
            bench.stop_all()
            bench.sampler.psql.close()
        pg.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    load = os.getloadavg()[0]
    every = s1 + s2
    top = max(s.held for s in every)
    gaps = sorted(b.t - a.t for a, b in zip(every, every[1:]))
    p50 = gaps[len(gaps) // 2] * 1000 if gaps else 0.0
    p99 = gaps[int(len(gaps) * 0.99)] * 1000 if gaps else 0.0
    free_goal = LEASE + 1.0
    ok_top, ok_busy, ok_free = top <= LIMIT, busy >= BUSY_GOAL, 0 <= freed <= free_goal
    rows = [
        ("%s: most units held at once, sampled from outside (a psql process, every %.0f ms: %d samples, interval "
         "p50 %.1f ms, p99 %.1f ms), units of live engines only" % (what, SAMPLE_EVERY * 1000, len(every), p50, p99),
         "%d" % top, "≤ %d" % LIMIT, verdict(ok_top)),
        ("the same: share of the time work waited (an item started, not finished, holding no unit: %.2f s of the "
         "%.2f s the three runs took) with all %d units held (load average %.1f)" % (waited, wall, LIMIT, load),
         "%.1f%%" % (busy * 100), "≥ %.0f%%" % (BUSY_GOAL * 100), verdict(ok_busy)),
        ("the same, one engine SIGKILLed mid-run holding %d unit(s) (lease %.0f s): until none of its units counts "
         "(and until the other engines hold all %d again)" % (held, LEASE, LIMIT),
         "%.2f s (%s)" % (freed, "%.2f s" % taken if taken >= 0 else "never within 20 s"),
         "≤ lease + 1 s = %.0f s" % free_goal, verdict(ok_free)),
    ]
    for row in rows:
        print("| %s | %s | %s | %s |" % row)
    print("(load average %.1f on %d CPUs while measured)" % (load, os.cpu_count() or 0), file=sys.stderr)
    return 0 if ok_top and ok_free else 1


if __name__ == "__main__":
    sys.exit(main())
