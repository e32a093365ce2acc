"""The soak's own checks (scripts/soak/soak_checks.py) on synthetic logs: each check catches what it
must (a duplicate, a lost result, a call after a cancel, a webhook that started two runs, a hung
run, stale progress, a leak) and excuses what it must (the kill window, retries of failed
attempts, runs resumed after failure).

Plain functions and asserts: pytest runs them, and so does `python tests/py/test_soak_checks.py`."""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "soak"))

import soak_checks as sc  # noqa: E402

R = "r01run"
STEPS = {"prepare", "export", "check"}
MS = 1000000  # the helpers take times in milliseconds; the records hold nanoseconds


def call(gen, cid, step, att, start, end, out="ok", run=R, c0=False, c1=False):
    return sc.Call(gen=gen, pid=100 + gen, call_id=cid, tool="soak__main", run=run, step=step, attempt=att,
                   start=start * MS, end=end * MS, outcome=out, c0=c0, c1=c1)


def ev(seq, t, typ, step="", status="", att=0, run=R, detail=None, completed=0, total=0):
    return sc.Event(seq=seq, run=run, time=t * MS, type=typ, step=step, status=status, attempt=att, detail=detail or {},
                    completed=completed, total=total)


def exit_ok(seq, t, step, att, **kw):
    return ev(seq, t, "step_exit", step, "completed", att, **kw)


ONE_GEN = [sc.Generation(1, 101, 0, 1000 * MS, "stopped")]
KILLED = [sc.Generation(1, 101, 0, 22 * MS, "killed"), sc.Generation(2, 102, 30 * MS, 1000 * MS, "stopped")]


def test_a_step_run_again_after_its_commit_is_a_duplicate():
    calls = [call(1, 1, "prepare", 1, 10, 20), call(1, 2, "prepare", 1, 30, 40)]
    events = [ev(1, 5, "step_enter", "prepare", "running", 1), exit_ok(2, 25, "prepare", 1),
              exit_ok(3, 45, "prepare", 1)]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert len(rep.duplicates) == 1 and "ran again after that" in rep.duplicates[0], rep.duplicates
    assert rep.committed == 2 and not rep.kill_window and not rep.lost and not rep.phantoms


def test_a_kill_between_return_and_commit_is_the_kill_window_not_a_duplicate():
    # gen 1 returned ok at 20 and was SIGKILLed at 22, before committing; resumed in gen 2.
    calls = [call(1, 1, "prepare", 1, 10, 20), call(2, 1, "prepare", 1, 40, 50)]
    events = [ev(1, 5, "step_enter", "prepare", "running", 1), ev(2, 31, "interrupted"),
              ev(3, 35, "workflow_resumed", status="running"), exit_ok(4, 55, "prepare", 1)]
    rep = sc.classify_calls(calls, events, KILLED, STEPS)
    assert rep.duplicates == [] and rep.lost == [] and rep.phantoms == []
    assert len(rep.kill_window) == 1 and "SIGKILLed 2 ms later before the commit" in rep.kill_window[0]
    assert "ran again in gen 2" in rep.kill_window[0]


def test_a_kill_after_the_commit_then_a_rerun_is_a_duplicate():
    calls = [call(1, 1, "prepare", 1, 10, 18), call(2, 1, "prepare", 1, 40, 50)]
    events = [exit_ok(1, 19, "prepare", 1), exit_ok(2, 55, "prepare", 1)]
    rep = sc.classify_calls(calls, events, KILLED, STEPS)
    assert len(rep.duplicates) == 1 and not rep.kill_window


def test_two_successes_of_one_attempt_are_a_duplicate():
    # Two successes, neither excused: recorded once, and one more that nothing explains.
    calls = [call(1, 1, "prepare", 1, 10, 12), call(1, 2, "prepare", 1, 11, 13)]
    events = [exit_ok(1, 14, "prepare", 1)]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert len(rep.duplicates) == 1 and "returned ok 2 times" in rep.duplicates[0], rep.duplicates
    assert len(rep.lost) == 1


def test_a_retry_after_a_timeout_is_not_a_duplicate():
    # Attempt 1 ran past its timeout (step_retry to attempt 2 at 50), returned ok late; attempt 2 won.
    calls = [call(1, 1, "export", 1, 10, 60), call(1, 2, "export", 2, 52, 58)]
    events = [ev(1, 50, "step_retry", "export", "retrying", 2), exit_ok(2, 59, "export", 2)]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert rep.duplicates == [] and rep.lost == [] and rep.dropped == 1 and rep.committed == 1


def test_a_run_resumed_after_failure_reruns_only_what_did_not_complete():
    calls = [call(1, 1, "prepare", 1, 10, 20), call(1, 2, "check", 1, 21, 30, out="fatal"),
             call(1, 3, "check", 1, 50, 60)]
    events = [exit_ok(1, 21, "prepare", 1), ev(2, 31, "step_exit", "check", "failed", 1),
              ev(3, 32, "workflow_terminal", status="failed"), ev(4, 40, "workflow_resumed", status="running"),
              exit_ok(5, 61, "check", 1)]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert rep.duplicates == [] and rep.lost == [] and rep.phantoms == [] and rep.committed == 2
    # ... and one that reruns a completed step is caught:
    calls.append(call(1, 4, "prepare", 1, 45, 48))
    rep = sc.classify_calls(calls, events + [exit_ok(6, 49, "prepare", 1)], ONE_GEN, STEPS)
    assert len(rep.duplicates) == 1 and rep.duplicates[0].startswith(R + " prepare:"), rep.duplicates


def test_a_cancelled_run_drops_the_late_result():
    calls = [call(1, 1, "check", 1, 10, 40)]
    events = [ev(1, 20, "workflow_terminal", status="cancelled")]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert rep.dropped == 1 and not rep.lost and not rep.duplicates


def test_a_result_nothing_recorded_in_a_live_server_is_lost():
    rep = sc.classify_calls([call(1, 1, "prepare", 1, 10, 20)], [], ONE_GEN, STEPS)
    assert len(rep.lost) == 1 and "nothing was written" in rep.lost[0]


def test_a_commit_without_a_successful_call_is_a_phantom():
    calls = [call(1, 1, "prepare", 1, 10, 20, out="transient")]
    rep = sc.classify_calls(calls, [exit_ok(1, 25, "prepare", 1)], ONE_GEN, STEPS)
    assert len(rep.phantoms) == 1
    # cache hits and steps of other tools are no phantoms
    cached = exit_ok(2, 30, "export", 0, detail={"cached": True})
    other = exit_ok(3, 31, "echo", 1)
    assert sc.classify_calls([], [cached, other], ONE_GEN, STEPS).phantoms == []


def test_a_call_after_a_cache_hit_is_a_duplicate():
    calls = [call(1, 1, "export", 1, 40, 50)]
    events = [exit_ok(1, 30, "export", 0, detail={"cached": True}), exit_ok(2, 51, "export", 1)]
    rep = sc.classify_calls(calls, events, ONE_GEN, STEPS)
    assert len(rep.duplicates) == 1 and "cache hit" in rep.duplicates[0]


def test_no_call_starts_after_a_cancel_returned_until_a_resume():
    calls = [call(1, 1, "check", 1, 90, 95), call(1, 2, "check", 1, 150, 160)]
    cancels = [sc.Cancel(R, 100 * MS, "cancelled")]
    out = sc.check_cancels(calls, cancels, {})
    assert len(out) == 1 and "1 call(s) started" in out[0] and "+50 ms" in out[0], out
    assert sc.check_cancels(calls, cancels, {R: [120 * MS]}) == []


def test_webhooks_one_run_per_delivery_and_none_for_a_bad_signature():
    ok = [sc.Delivery("d1", True, 1, 202, "rA"), sc.Delivery("d1", True, 2, 200, "rA", duplicate=True),
          sc.Delivery("bad1", False, 3, 401)]
    assert sc.check_webhooks(ok, {"d1": ["rA"]}) == []
    two = sc.check_webhooks(ok, {"d1": ["rA", "rB"]})
    assert len(two) == 1 and "started 2 runs" in two[0]
    started = sc.check_webhooks(ok, {"d1": ["rA"], "bad1": ["rX"]})
    assert len(started) == 1 and "only bad signatures" in started[0]
    accepted = sc.check_webhooks([sc.Delivery("bad2", False, 4, 202, "rY")], {})
    assert len(accepted) == 1 and "not 401" in accepted[0]
    unanswered = [sc.Delivery("d2", True, 5, None), sc.Delivery("d2", True, 6, 202, "rC")]
    assert sc.check_webhooks(unanswered, {"d2": ["rC"]}) == []
    wrong = sc.check_webhooks([sc.Delivery("d3", True, 7, 202, "rD")], {"d3": ["rE"]})
    assert len(wrong) == 1 and "database has rE" in wrong[0]


def test_a_hung_run_is_named_with_its_step_and_its_last_call():
    runs = {R: {"name": "soak_pipeline", "status": "running"}, "r2": {"name": "soak_ping", "status": "completed"},
            "r3": {"name": "soak_pipeline", "status": "waiting"}}
    steps = {R: [{"key": "prepare", "status": "completed", "attempt": 1, "kind": "tool"},
                 {"key": "fan[0].check", "status": "running", "attempt": 1, "kind": "tool"},
                 {"key": "fan[1].check", "status": "running", "attempt": 2, "kind": "tool"}],
             "r3": [{"key": "gate", "status": "waiting_approval", "attempt": 0, "kind": "approve"}]}
    calls = [call(3, 7, "fan[1].check", 2, 10, 20)]
    out = sc.check_idle_runs(runs, steps, calls, gen=3, idle_secs=5)
    assert len(out) == 2
    assert out[0].startswith("hung run r01run (soak_pipeline) is running")
    assert "fan[0].check running attempt 1 (no call of it started in gen 3)" in out[0]
    assert "fan[1].check running attempt 2 (call 7 attempt 2 ended ok" in out[0]
    assert out[1].startswith("left waiting run r3") and "gate waiting_approval" in out[1]
    assert sc.check_resumed([R, "r2"], runs) == ["resumed run r01run is running at the end"]


def test_stale_progress_of_a_terminal_run():
    runs = {R: {"name": "soak_pipeline", "status": "completed", "completed": 9, "total": 9}}
    rows = [{"status": "completed"}] * 19
    last = {R: ev(9, 99, "workflow_terminal", status="completed", completed=9, total=9)}
    out = sc.check_progress(runs, {R: rows}, last)
    assert len(out) == 1 and "19 step instances finished" in out[0]
    assert sc.check_progress(runs, {R: rows[:9]}, last) == []


def test_call_log_round_trip_and_damage():
    lines = [json.dumps({"ev": "start", "gen": 2, "pid": 9, "call": 4, "tool": "soak__main", "run": R,
                         "step": "fan[2].export", "att": 1, "t": 10, "c0": False, "key": "k"}),
             json.dumps({"ev": "end", "gen": 2, "pid": 9, "call": 4, "t": 20, "out": "ok", "c1": False}),
             '{"ev": "start", "gen": 2, "ca',
             json.dumps({"ev": "end", "gen": 2, "call": 5, "t": 30, "out": "ok"})]
    calls, problems = sc.parse_call_log(lines)
    assert len(calls) == 1 and calls[0].ok and calls[0].step == "fan[2].export" and calls[0].end == 20
    assert len(problems) == 2 and "not a log record" in problems[0] and "without its start" in problems[1]
    assert sc.step_id_of("fan[2].export") == "export" and sc.step_id_of("outer[1].inner[0]") == "inner"


def _samples(per_run_bytes, noise_kb=0):
    out = []
    for i in range(600):  # 300 s, one sample every 0.5 s, 25 runs a second
        t = 300 + i * 0.5
        runs = int(t * 25)
        wobble = noise_kb if i % 7 == 0 else 0
        out.append(sc.RssSample(t, 5, 60000 + int(runs * per_run_bytes / 1024) + wobble, runs))
    return out


def test_rss_projection_catches_a_small_leak_per_run():
    # 1.6 KB per run never released: 5.9 MB over the 156 s measure (under 10 MB), but over the
    # 15,000 runs of a 10-minute soak it is 23 MB.
    leak = sc.rss_growth(_samples(1600), gen=5, start=384, end=540, total_runs=15000)
    assert leak.growth_kb < 10 * 1024 and leak.projected_kb is not None and leak.projected_kb > 10 * 1024
    flat = sc.rss_growth(_samples(0, noise_kb=3000), gen=5, start=384, end=540, total_runs=15000)
    assert flat.growth_kb == 0 and flat.projected_kb == 0
    short = sc.rss_growth(_samples(1600), gen=5, start=384, end=400, total_runs=1500)
    assert short.projected_kb is None and "no projection" in short.note


if __name__ == "__main__":
    for _name, _fn in sorted(globals().items()):
        if _name.startswith("test_") and callable(_fn):
            _fn()
            print("ok", _name)
