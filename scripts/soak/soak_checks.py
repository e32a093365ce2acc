"""The checks of the soak test (scripts/soak.py): pure functions over plain records, so that
tests/py/test_soak_checks.py can feed them synthetic logs and prove that they catch what they
must (a duplicate, a call after a cancel, a webhook that started two runs, a hung run).

Sources:

- the tools' call log (scripts/soak/soak_tools.py): one ``start`` and one ``end`` line per call,
  with the server generation, run id, step key, attempt and outcome, written before the tool
  returns (so before the engine can commit anything about it);
- the server generations the driver started: pid, when each started, when it ended and how
  (SIGKILLed by the driver, died by itself, or stopped at the end);
- the database: the runs, the step instances, the events (each with the wall-clock time it was
  written, the same clock as the log) and the webhook fires;
- what the driver did and was answered: cancels, resumes, webhook deliveries, RSS samples.

Times are Unix nanoseconds (``time.time_ns()`` in Python, ``time.Now()`` in Go: one clock).
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

NS = 1_000_000_000

TERMINAL = ("completed", "failed", "cancelled", "interrupted")


@dataclass
class Call:
    """One tool call from the call log."""

    gen: int
    pid: int
    call_id: int
    tool: str
    run: str
    step: str
    attempt: int
    start: int
    end: Optional[int] = None
    outcome: Optional[str] = None  # ok, transient, fatal, cancelled; None: no end line
    c0: bool = False  # current_call().cancelled when the tool started
    c1: bool = False  # ... when it ended
    key: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def where(self) -> str:
        return "gen %d call %d attempt %d" % (self.gen, self.call_id, self.attempt)


@dataclass
class Generation:
    """One server process."""

    gen: int
    pid: int
    start: int
    end: Optional[int] = None  # None: still running when the records were taken
    how: str = "running"  # "killed" (SIGKILL by the driver), "died" (exited by itself), "stopped", "running"

    @property
    def crashed(self) -> bool:
        """The process ended without a chance to commit what it had in hand."""
        return self.how in ("killed", "died")


@dataclass
class Event:
    """One row of workflow_events."""

    seq: int
    run: str
    time: int
    type: str
    step: str = ""
    status: str = ""
    attempt: int = 0
    detail: Dict[str, Any] = field(default_factory=dict)
    completed: int = 0
    total: int = 0


def parse_call_log(lines: Iterable[str]) -> Tuple[List[Call], List[str]]:
    """The calls of the log, in start order, and the problems found reading it (a line that is
    not JSON, an end without a start, two starts of one call)."""
    calls: Dict[Tuple[int, int], Call] = {}
    problems: List[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            key = (int(rec["gen"]), int(rec["call"]))
            ev = rec["ev"]
        except (ValueError, KeyError, TypeError):
            problems.append("call log line %d is not a log record: %r" % (n, line[:120]))
            continue
        if ev == "start":
            if key in calls:
                problems.append("call log line %d: call %d of gen %d started twice" % (n, key[1], key[0]))
                continue
            calls[key] = Call(gen=key[0], pid=int(rec.get("pid", 0)), call_id=key[1], tool=str(rec.get("tool", "")),
                              run=str(rec.get("run", "")), step=str(rec.get("step", "")),
                              attempt=int(rec.get("att", 0)), start=int(rec["t"]), c0=bool(rec.get("c0")),
                              key=str(rec.get("key", "")))
        elif ev == "end":
            c = calls.get(key)
            if c is None or c.end is not None:
                problems.append("call log line %d: end of call %d of gen %d without its start" % (n, key[1], key[0]))
                continue
            c.end, c.outcome, c.c1 = int(rec["t"]), str(rec.get("out")), bool(rec.get("c1"))
        else:
            problems.append("call log line %d: unknown record %r" % (n, ev))
    return sorted(calls.values(), key=lambda c: (c.start, c.gen, c.call_id)), problems


def gen_at(gens: Sequence[Generation], t: int) -> Optional[int]:
    """The generation that was alive at time t (generations never overlap: the driver waits
    for a process to be gone before it starts the next)."""
    for g in gens:
        if g.start <= t and (g.end is None or t <= g.end):
            return g.gen
    return None


def step_id_of(key: str) -> str:
    """``fan[2].export`` → ``export``; ``prepare`` → ``prepare``."""
    return re.sub(r"\[\d+\]$", "", key.rsplit(".", 1)[-1])


# -- duplicates ---------------------------------------------------------------------------------

@dataclass
class DuplicateReport:
    """What ``classify_calls`` found. Lists hold one readable line per finding."""

    instances: int = 0  # tool step instances with at least one call
    calls: int = 0
    successes: int = 0
    committed: int = 0  # successes recorded by a completed step_exit
    dropped: int = 0  # successes whose attempt had already ended (timeout, cancel, run ended)
    kill_window: List[str] = field(default_factory=list)  # excused re-executions (see classify_calls)
    kill_window_unrepeated: int = 0  # successes lost to a kill whose step never ran again
    duplicates: List[str] = field(default_factory=list)  # violations
    lost: List[str] = field(default_factory=list)  # violations
    phantoms: List[str] = field(default_factory=list)  # violations


def _ms(t: int) -> str:
    return "%.3f" % (t / 1e9)


def classify_calls(calls: Sequence[Call], events: Sequence[Event], gens: Sequence[Generation],
                   tool_steps: Set[str]) -> DuplicateReport:
    """Find the step instances whose tool ran twice, with the rule below.

    Per step instance (run id, step key) of a soak tool step (its step id is in ``tool_steps``):

    - A *success* is a call whose end line says ``ok``. A *commit* is a ``step_exit`` event with
      status ``completed`` that is not a cache hit. A commit *records* the success of the same
      generation and attempt that ended last before it (the generation that wrote an event is the
      one alive at its time). A commit that records no success is a *phantom* (violation: the
      database says a tool returned when no call of it did).
    - A success that no commit records is *dropped* when its attempt had ended otherwise before it
      could count, in its generation and after it started: a ``step_retry`` to the next attempt, a
      ``step_exit`` of the same attempt that is not ``completed``, a ``workflow_terminal`` of the run
      that is not ``completed``, or the tool itself saw ``cancelled`` when it ended. That is a retry
      of a failed attempt or a run resumed after failure: never a duplicate.
    - Otherwise, when its generation was SIGKILLed (or died), it is in the *kill window*: the tool
      returned, and the process died before the step's completion could be committed. Resuming the
      run runs it again; that re-execution is reported separately and is not a violation.
    - Otherwise it is *lost* (violation): the engine had the result, its process lived on, and
      nothing about the attempt was ever written.

    The instance is a *duplicate* (violation) when a call of it (any outcome) started after the
    instance's completion was committed (a commit, or a cache hit), or when it has two successes
    that are neither dropped nor in the kill window (two recorded, or one lost and one more).
    """
    rep = DuplicateReport()
    by_inst: Dict[Tuple[str, str], List[Call]] = {}
    for c in calls:
        if step_id_of(c.step) in tool_steps:
            by_inst.setdefault((c.run, c.step), []).append(c)
    gen_of_event: Dict[int, Optional[int]] = {e.seq: gen_at(gens, e.time) for e in events}
    gens_by_id = {g.gen: g for g in gens}
    ev_by_run: Dict[str, List[Event]] = {}
    for e in events:
        ev_by_run.setdefault(e.run, []).append(e)

    recorded: Set[Tuple[int, int]] = set()
    completed_at: Dict[Tuple[str, str], Event] = {}  # first completion (commit or cache hit)
    for e in sorted(events, key=lambda e: e.seq):
        if e.type != "step_exit" or e.status != "completed" or step_id_of(e.step) not in tool_steps:
            continue
        inst = (e.run, e.step)
        completed_at.setdefault(inst, e)
        if e.detail.get("cached"):
            continue
        eg = gen_of_event[e.seq]
        cands = [c for c in by_inst.get(inst, ()) if c.ok and c.gen == eg and c.attempt == e.attempt
                 and c.end is not None and c.end <= e.time and (c.gen, c.call_id) not in recorded]
        if not cands:
            rep.phantoms.append("%s %s: completed at %s (event %d, gen %s, attempt %d) but no call of that attempt "
                                "returned ok before it" % (e.run, e.step, _ms(e.time), e.seq, eg, e.attempt))
            continue
        best = max(cands, key=lambda c: c.end or 0)
        recorded.add((best.gen, best.call_id))

    for inst, cs in sorted(by_inst.items()):
        rep.instances += 1
        rep.calls += len(cs)
        counted: List[Tuple[Call, str]] = []  # successes that count: recorded or lost
        window: List[Call] = []
        for c in cs:
            if not c.ok:
                continue
            rep.successes += 1
            if (c.gen, c.call_id) in recorded:
                rep.committed += 1
                counted.append((c, "committed"))
            elif _attempt_ended(c, ev_by_run.get(c.run, ()), gen_of_event):
                rep.dropped += 1
            elif gens_by_id.get(c.gen) is not None and gens_by_id[c.gen].crashed:
                window.append(c)
            else:
                counted.append((c, "lost"))
                rep.lost.append("%s %s: returned ok at %s (%s) and nothing was written about that attempt, though "
                                "its server lived on" % (inst[0], inst[1], _ms(c.end or 0), c.where()))
        for w in window:
            later = [c for c in cs if c.start > (w.end or 0)]
            if later:
                g = gens_by_id[w.gen]
                rep.kill_window.append("%s %s: returned ok at %s (%s), gen %d %s %.0f ms later before the commit; "
                                       "ran again in gen %d" % (inst[0], inst[1], _ms(w.end or 0), w.where(), w.gen,
                                                                "SIGKILLed" if g.how == "killed" else "died",
                                                                ((g.end or 0) - (w.end or 0)) / 1e6, later[0].gen))
            else:
                rep.kill_window_unrepeated += 1
        done = completed_at.get(inst)
        after = [c for c in cs if done is not None and c.start > done.time]
        if done is not None and after:
            rep.duplicates.append("%s %s: completed at %s (event %d%s) and its tool ran again after that: %s" % (
                inst[0], inst[1], _ms(done.time), done.seq, ", cache hit" if done.detail.get("cached") else "",
                "; ".join("%s started %s, %s%s" % (c.where(), _ms(c.start), c.outcome or "no end",
                                                  " (already cancelled when it started)" if c.c0 else "")
                          for c in after[:3])))
        elif len(counted) >= 2:
            rep.duplicates.append("%s %s: its tool returned ok %d times, none excused: %s" % (
                inst[0], inst[1], len(counted),
                "; ".join("%s ended %s (%s)" % (c.where(), _ms(c.end or 0), how) for c, how in counted[:4])))
    return rep


def _attempt_ended(c: Call, run_events: Iterable[Event], gen_of_event: Dict[int, Optional[int]]) -> bool:
    """True when the engine ended c's attempt otherwise (see classify_calls), in c's generation."""
    if c.c1:
        return True
    for e in run_events:
        if e.time < c.start or gen_of_event.get(e.seq) != c.gen:
            continue
        if e.step == c.step and e.type == "step_retry" and e.attempt == c.attempt + 1:
            return True
        if e.step == c.step and e.type == "step_exit" and e.status != "completed" and e.attempt == c.attempt:
            return True
        if e.type == "workflow_terminal" and e.status != "completed":
            return True
    return False


# -- cancels --------------------------------------------------------------------------------------

@dataclass
class Cancel:
    """A workflows_cancel the driver sent and was answered."""

    run: str
    returned: int  # when the answer arrived
    status: str = ""


def check_cancels(calls: Sequence[Call], cancels: Sequence[Cancel], resumes: Dict[str, List[int]]) -> List[str]:
    """Once a cancel has returned, no call of the run starts (docs/reference/python/tools.md, "What cancel
    guarantees") until the run is resumed: every call of a cancelled run that started after the
    cancel's answer and before the next resume the driver sent is a violation. ``resumes`` maps a
    run id to the times the driver sent workflows_resume for it."""
    out: List[str] = []
    by_run: Dict[str, List[Call]] = {}
    for c in calls:
        by_run.setdefault(c.run, []).append(c)
    for k in cancels:
        nxt = min((t for t in resumes.get(k.run, ()) if t > k.returned), default=None)
        late = [c for c in by_run.get(k.run, ()) if c.start > k.returned and (nxt is None or c.start < nxt)]
        if late:
            out.append("%s: cancel returned at %s (%s), then %d call(s) started: %s" % (
                k.run, _ms(k.returned), k.status or "?", len(late),
                "; ".join("%s %s +%.0f ms%s" % (c.step, c.where(), (c.start - k.returned) / 1e6,
                                                 " (cancelled already when it started)" if c.c0 else "")
                          for c in late[:3])))
    return out


# -- webhooks -------------------------------------------------------------------------------------

@dataclass
class Delivery:
    """One webhook POST the driver sent."""

    delivery_id: str
    signed: bool  # with the right signature
    sent: int
    status: Optional[int] = None  # None: no answer (the server was killed or down)
    run_id: str = ""
    duplicate: bool = False
    gen: int = 0
    malformed: bool = False  # a signed body that is not JSON: to be refused 400 (scripts/soak_cluster.py)

    @property
    def refusal(self) -> Optional[int]:
        """The status that must refuse this post (401 bad signature, 400 malformed), or None."""
        return 401 if not self.signed else 400 if self.malformed else None


def check_webhooks(deliveries: Sequence[Delivery], runs_by_delivery: Dict[str, List[str]]) -> List[str]:
    """No delivery id started two runs; a bad signature (or a malformed body) started none and was
    answered 401 (400); the answers for one delivery id all name the run the database has for it
    (an answer that accepted it naming no run, the database has one). ``runs_by_delivery`` is
    what the database holds: delivery id → ids of the runs whose trigger carries it."""
    out: List[str] = []
    by_id: Dict[str, List[Delivery]] = {}
    for d in deliveries:
        by_id.setdefault(d.delivery_id, []).append(d)
    for did, posts in sorted(by_id.items()):
        runs = runs_by_delivery.get(did, [])
        history = ", ".join("%s%s %s%s" % ("signed" if p.signed else "BAD SIG", " gen %d" % p.gen if p.gen else "",
                                           p.status if p.status is not None else "no answer",
                                           " " + p.run_id if p.run_id else "") for p in posts)
        if len(runs) > 1:
            out.append("delivery %s started %d runs (%s); posts: %s" % (did, len(runs), ", ".join(runs), history))
        if all(p.refusal is not None for p in posts):
            if runs:
                kinds = sorted({"bad signatures" if not p.signed else "malformed bodies" for p in posts})
                out.append("delivery %s had only %s and started %s" % (did, " and ".join(kinds), ", ".join(runs)))
            for want, what in ((401, "bad signature"), (400, "malformed body")):
                wrong = [p for p in posts if p.refusal == want and p.status is not None and p.status != want]
                if wrong:
                    out.append("delivery %s with a %s was answered %s, not %d" % (
                        did, what, ", ".join(str(p.status) for p in wrong), want))
            continue
        for p in posts:
            if p.status in (200, 202) and (p.run_id not in runs if p.run_id else not runs):
                out.append("delivery %s was answered %d with run %s, but the database has %s for it" % (
                    did, p.status, p.run_id or "(none named)", ", ".join(runs) or "no run"))
    return out


# -- runs at the end ------------------------------------------------------------------------------

def check_idle_runs(runs: Dict[str, Dict[str, Any]], steps: Dict[str, List[Dict[str, Any]]],
                    calls: Sequence[Call], gen: int, idle_secs: float) -> List[str]:
    """Every run is terminal once the server has been idle ``idle_secs``: a run still ``running``
    (or ``pending``) is hung, one still ``waiting`` holds an approval the driver did not answer
    (it answers them all). Each finding names the run, its workflow, its unfinished step
    instances and what the last call of each did in the current generation ``gen``."""
    out: List[str] = []
    last: Dict[Tuple[str, str], Call] = {}
    for call in calls:
        if call.gen == gen:
            last[(call.run, call.step)] = call
    for rid, r in sorted(runs.items()):
        if r["status"] in TERMINAL:
            continue
        what = "hung" if r["status"] in ("running", "pending") else "left waiting"
        parts = []
        for s in steps.get(rid, []):
            if s["status"] in ("completed", "skipped", "failed", "cancelled", "interrupted"):
                continue
            desc = "%s %s attempt %s" % (s["key"], s["status"], s.get("attempt", 0))
            if s.get("kind") in ("tool", None) and s["status"] in ("running", "retrying"):
                c = last.get((rid, s["key"]))
                if c is None:
                    desc += " (no call of it started in gen %d)" % gen
                elif c.end is None:
                    desc += " (call %d started %s and never ended)" % (c.call_id, _ms(c.start))
                else:
                    desc += " (call %d attempt %d ended %s at %s)" % (c.call_id, c.attempt, c.outcome, _ms(c.end))
            parts.append(desc)
        out.append("%s run %s (%s) is %s after %.0f s idle: %s" % (
            what, rid, r.get("name", ""), r["status"], idle_secs, "; ".join(parts) or "no unfinished step"))
    return out


def check_resumed(resumed: Iterable[str], runs: Dict[str, Dict[str, Any]]) -> List[str]:
    """Every run the driver resumed ended terminal."""
    return ["resumed run %s is %s at the end" % (rid, runs[rid]["status"] if rid in runs else "missing")
            for rid in sorted(set(resumed)) if rid not in runs or runs[rid]["status"] not in TERMINAL]


FINISHED_STEP = ("completed", "failed", "cancelled", "skipped", "interrupted")


def check_progress(runs: Dict[str, Dict[str, Any]], steps: Dict[str, List[Dict[str, Any]]],
                   last_events: Dict[str, Event]) -> List[str]:
    """A terminal run's stored progress is what it committed: ``completed`` is the number of its
    step instances in a finished status (every instance of a terminal run is finished), ``total``
    is at least that, and both are the progress of its last event."""
    out = []
    for rid, r in sorted(runs.items()):
        if r["status"] not in TERMINAL:
            continue
        rows = steps.get(rid, [])
        finished = sum(1 for s in rows if s["status"] in FINISHED_STEP)
        e = last_events.get(rid)
        problems = []
        if r["completed"] != finished:
            problems.append("%d step instances finished" % finished)
        if r["total"] < r["completed"] or r["total"] < finished:
            problems.append("a total under the finished count")
        if e is not None and (r["completed"], r["total"]) != (e.completed, e.total):
            problems.append("its last event (%s, seq %d) says %d/%d" % (e.type, e.seq, e.completed, e.total))
        if problems:
            out.append("run %s (%s, %s) stores progress %d/%d, but %s" % (
                rid, r.get("name", ""), r["status"], r["completed"], r["total"], "; ".join(problems)))
    return out


# -- memory ---------------------------------------------------------------------------------------

@dataclass
class RssSample:
    t: float  # seconds since the soak started
    gen: int
    rss_kb: int
    runs: int  # runs the driver had started so far (all generations)


@dataclass
class RssReport:
    gen: int = 0
    start: float = 0.0  # the measure, in soak seconds: first and last sample used
    end: float = 0.0
    warm_kb: int = 0  # median RSS of the first samples of the measure
    last_kb: int = 0  # median RSS of the last samples
    growth_kb: int = 0  # last_kb - warm_kb
    runs: int = 0  # runs started inside the measure
    per_run_bytes: float = 0.0
    total_runs: int = 0
    projected_kb: Optional[int] = None  # per-run growth × every run of the soak
    note: str = ""


def _median(xs: Sequence[int]) -> int:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0


def rss_growth(samples: Sequence[RssSample], gen: int, start: float, end: float, total_runs: int,
               window: int = 5, min_secs: float = 60.0) -> RssReport:
    """RSS growth of generation ``gen`` between ``start`` and ``end`` (soak seconds): the median
    of its first ``window`` samples in that span against the median of its last ``window``
    (medians, so that one sample taken at a GC peak does not decide). The growth per run started
    in between, times every run the soak started, is the projection over the whole soak (kills
    replace the process, so no one process lives through it); it is made when the span is at
    least ``min_secs`` long (a shorter one, as in the 60 s soak, says too little per run)."""
    rep = RssReport(gen=gen, start=start, end=end, total_runs=total_runs)
    xs = [s for s in samples if s.gen == gen and start <= s.t <= end]
    if len(xs) < 2 * window:
        rep.note = "too few samples to measure (%d)" % len(xs)
        return rep
    head, tail = xs[:window], xs[-window:]
    rep.start, rep.end = head[0].t, tail[-1].t
    rep.warm_kb, rep.last_kb = _median([s.rss_kb for s in head]), _median([s.rss_kb for s in tail])
    rep.growth_kb = rep.last_kb - rep.warm_kb
    rep.runs = _median([s.runs for s in tail]) - _median([s.runs for s in head])
    if rep.runs > 0:
        rep.per_run_bytes = rep.growth_kb * 1024.0 / rep.runs
    if rep.end - rep.start >= min_secs and rep.runs > 0:
        rep.projected_kb = int(max(0.0, rep.per_run_bytes) * total_runs / 1024.0)
    else:
        rep.note = "no projection: a %.0f s measure (< %.0f s)" % (rep.end - rep.start, min_secs)
    return rep
