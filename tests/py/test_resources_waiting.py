"""A step waiting for scarce resources is visibly waiting (docs/guide/resources.md, "Waiting,
visibly"): its own status, waiting_resources, with what it waits for and its place, in
Engine.get_status, `dcc-flow status` and `dcc-flow show`; it runs once it holds its units."""

import threading
import time

from dcc_flow import Engine, StepStatus, WorkflowStatus
from dcc_flow._cli import main

SPEC = """
name: licensed
steps:
  - id: cook
    tool: cook
    args: {}
    resources: {houdini: 1}
"""


def _until(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.005)


def test_a_step_waiting_for_its_resources_is_waiting_resources(tmp_path, capsys):
    db = str(tmp_path / "flow.db")
    started, release = threading.Event(), threading.Event()
    calls = []

    def cook():
        calls.append(1)
        started.set()
        assert release.wait(30)
        return {"ok": True}

    with Engine(db=db, config={"resources": {"houdini": {"limit": 1}}}) as engine:
        engine.register_tool(cook)
        first = engine.submit(SPEC)
        results = []
        driver = threading.Thread(target=lambda: results.append(first.wait(timeout=60)))  # runs cook
        driver.start()
        assert started.wait(30)
        waiters = []
        for _ in range(3):  # each queues behind the ones before it
            waiters.append(engine.submit(SPEC))
            n = len(waiters)
            _until("waiter %d to queue" % n, lambda n=n: len(engine.resources()[0]["queue"]) == n)
        for w in waiters:  # each step's record is written just after it queues
            _until("the waiter's record", lambda w=w: engine.get_status(w.run_id).steps[0].status
                   is StepStatus.WAITING_RESOURCES)

        for i, w in enumerate(waiters):
            status = engine.get_status(w.run_id)
            assert status.status is WorkflowStatus.RUNNING  # the run is running; its step waits
            (step,) = status.steps
            assert step.status is StepStatus.WAITING_RESOURCES and not step.status.is_terminal
            assert step.waiting["resources"] == {"houdini": 1}
            assert (step.waiting["place"], step.waiting["of"]) == (i + 1, 3)  # the queue now
            assert step.waiting["since"] and not step.waiting.get("other_engines")
            assert step.progress["message"] == "waiting for houdini ×1: %s of 3 in this engine's queue" % (
                ["1st", "2nd", "3rd"][i])
            assert step.attempts[-1].status is StepStatus.WAITING_RESOURCES  # its call not made

        # Another process (the CLI beside the engine) reads the records as written when each
        # wait started: the second waiter was then 2nd of 2.
        capsys.readouterr()
        assert main(["status", waiters[1].run_id, "--db", db]) == 0
        out = capsys.readouterr().out
        assert "waiting_resources cook: waiting for houdini ×1: 2nd of 2 in this engine's queue" in out, out
        assert main(["show", waiters[1].run_id, "--db", db]) == 0
        out = capsys.readouterr().out
        assert "cook  waiting_resources" in out and "waiting for houdini ×1: 2nd of 2 in this engine's queue, since " in out, out

        # The search finds the runs with a step waiting for resources.
        assert main(["runs", "--step-status", "waiting_resources", "--db", db]) == 0
        out = capsys.readouterr().out
        assert all(w.run_id in out for w in waiters) and first.run_id not in out, out

        # Cancelled while it waits, a step leaves the queue; the others move up.
        waiters[0].cancel()
        _until("the cancelled waiter to leave", lambda: len(engine.resources()[0]["queue"]) == 2)
        assert engine.get_status(waiters[0].run_id).steps[0].status is StepStatus.CANCELLED
        assert engine.get_status(waiters[2].run_id).steps[0].waiting["place"] == 2

        release.set()
        driver.join(30)
        assert results and results[0].ok
        for w in waiters[1:]:
            result = w.wait(timeout=30)
            assert result.ok, result.error
            (step,) = result.steps
            assert step.status is StepStatus.COMPLETED and step.waiting is None
        assert len(calls) == 3  # the first and the two left: the cancelled one never called cook


def test_the_run_progress_line_says_what_a_step_waits_for():
    import io

    from dcc_flow._cli._base import Context
    from dcc_flow._cli.run import Progress

    progress = Progress(Context("dcc-flow run", out=io.StringIO()), "r1", "shot_sim", tty=True)
    waiting = {"resources": {"houdini": 1, "gpu": 2}, "place": 2, "of": 3, "since": "2026-11-29T12:00:00Z"}
    progress.event({"run_id": "r1", "type": "step_progress", "step_key": "cook", "status": "waiting_resources",
                    "detail": {"done": 0, "message": "waiting for gpu ×2, houdini ×1: 2nd of 3 in this engine's queue",
                               "waiting": waiting}, "progress": {"completed": 0, "total": 1}})
    assert "cook waiting for gpu ×2, houdini ×1: 2nd of 3 in this engine's queue" in progress.line()
    progress.event({"run_id": "r1", "type": "step_progress", "step_key": "cook", "status": "running",
                    "detail": {"done": 0, "message": "holds gpu ×2, houdini ×1 (waited 1.5 s)"},
                    "progress": {"completed": 0, "total": 1}})
    assert "cook 0 holds gpu ×2, houdini ×1 (waited 1.5 s)" in progress.line()
    other = dict(waiting, other_engines=True, place=1, of=1)
    progress.event({"run_id": "r1", "type": "step_progress", "step_key": "cook", "status": "waiting_resources",
                    "detail": {"done": 0, "waiting": other}, "progress": {}})
    assert "first in this engine's queue; other engines hold the units" in progress.line()


def test_a_run_keeps_its_own_priority_across_a_resume(tmp_path):
    started = threading.Event()
    release = threading.Event()

    def cook():
        started.set()
        assert release.wait(30)
        return {"ok": True}

    with Engine(db=str(tmp_path / "flow.db"), config={"resources": {"houdini": {"limit": 1}}}) as engine:
        engine.register_tool(cook)
        holder = engine.submit(SPEC)
        results = []
        driver = threading.Thread(target=lambda: results.append(holder.wait(timeout=60)))  # runs cook
        driver.start()
        assert started.wait(30)
        own = engine.submit(SPEC, priority=7)
        plain = engine.submit(SPEC)
        assert engine.get_status(own.run_id).priority == 7 and engine.get_status(plain.run_id).priority is None
        _until("both to queue", lambda: len(engine.resources()[0]["queue"]) == 2)
        own.cancel()
        _until("the cancelled run to leave the queue", lambda: len(engine.resources()[0]["queue"]) == 1)
        engine.resume(own.run_id)
        _until("the resumed run to queue", lambda: len(engine.resources()[0]["queue"]) == 2)
        queue = {w["label"]: w["priority"] for w in engine.resources()[0]["queue"]}
        assert queue == {own.run_id + "/cook": 7, plain.run_id + "/cook": 0}, queue
        assert engine.resources()[0]["queue"][0]["label"] == own.run_id + "/cook"  # it goes first
        release.set()
        driver.join(30)
        assert results and results[0].ok
        assert own.wait(timeout=30).ok and plain.wait(timeout=30).ok
        assert engine.get_status(own.run_id).priority == 7


def test_format_waiting_says_which_queue():
    """The CLI's line for a waiting step: this engine's queue, first there while other engines
    hold the units, or the one queue of a PostgreSQL database's engines."""
    from dcc_flow._cli._engine import format_waiting

    amounts = {"resources": {"houdini": 1, "gpu": 2}}
    assert format_waiting(dict(amounts, place=2, of=3)) == "waiting for gpu ×2, houdini ×1: 2nd of 3 in this engine's queue"
    assert format_waiting(dict(amounts, place=1, of=1, other_engines=True)) == (
        "waiting for gpu ×2, houdini ×1: first in this engine's queue; other engines hold the units")
    assert format_waiting(dict(amounts, place=3, of=0, all_engines=True)) == (
        "waiting for gpu ×2, houdini ×1: 3rd in the database's queue (all engines)")
    assert format_waiting(None) == ""
