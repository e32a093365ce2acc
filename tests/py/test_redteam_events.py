"""Event streams outlive a storage outage (issue #33 item 5): ``on_event`` callbacks, ``Engine.events``
and the threads behind ``serve``'s log and ``dcc-flow run``'s progress retry with backoff when the
database is briefly unreachable (a PostgreSQL restart), as the Go side does for its streams, instead
of ending for good on the first ``storage`` error."""

import logging
import os
import sys
import threading
import time

import pytest

from conftest import ROOT
from dcc_flow import DccFlowError, Engine, WorkflowStatus, _driver, _ffi

sys.path.insert(0, os.path.join(ROOT, "scripts", "soak"))
import soak_pg  # noqa: E402


def _engine_with_ping(db=":memory:"):
    eng = Engine(db)
    eng.register_tool(lambda: {"ok": True}, name="ping", thread="worker")
    eng.serve_tools(workers=1)
    return eng


def _flaky_events(monkeypatch, failures):
    """Make the next ``failures`` crossings of dccflow_events_next fail with code ``storage``."""
    real = _ffi.call
    left = [failures]

    def call(name, *args, **kw):
        payload = next((a for a in args if isinstance(a, dict)), {})
        if name == "dccflow_events_next" and left[0] > 0 and payload.get("max", 1) > 0:
            left[0] -= 1
            raise DccFlowError("database unreachable: connection refused", code="storage")
        return real(name, *args, **kw)

    monkeypatch.setattr(_ffi, "call", call)
    return left


def test_on_event_survives_storage_errors(monkeypatch, caplog):
    monkeypatch.setattr(_driver, "EVENT_RETRY_FIRST", 0.01)
    with _engine_with_ping() as eng:
        got = []
        seen = threading.Event()

        def cb(ev):
            got.append(ev)
            if ev.get("type") == "workflow_terminal":
                seen.set()

        left = _flaky_events(monkeypatch, 5)
        with caplog.at_level(logging.WARNING, logger="dcc_flow"):
            eng.on_event(cb)
            eng.run({"name": "w", "steps": [{"id": "a", "tool": "ping"}]})
            assert seen.wait(20), "the event thread died on a storage error: %r" % got
        assert left[0] == 0
        warnings = [r for r in caplog.records if "events" in r.getMessage() and r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]  # one per outage, not per retry
        assert "database unreachable" in warnings[0].getMessage()


def test_events_iterator_survives_storage_errors(monkeypatch):
    monkeypatch.setattr(_driver, "EVENT_RETRY_FIRST", 0.01)
    with _engine_with_ping() as eng:
        after = eng.last_event_seq()
        eng.run({"name": "w", "steps": [{"id": "a", "tool": "ping"}]})
        _flaky_events(monkeypatch, 3)
        types = [ev["type"] for ev in eng.events(after_seq=after, timeout=2)]
        assert "workflow_terminal" in types


def test_wait_drives_a_run_through_storage_errors(monkeypatch):
    """``Run.wait`` (``dcc-flow run``'s main loop) waits out an outage between calls."""
    monkeypatch.setattr(_driver, "EVENT_RETRY_FIRST", 0.01)
    real = _ffi.call_encoded
    left = [3]

    def call_encoded(name, handle, data, *rest):
        if name == "dccflow_calls_next" and left[0] > 0:
            left[0] -= 1
            raise DccFlowError("database unreachable: connection refused", code="storage")
        return real(name, handle, data, *rest)

    with Engine() as eng:
        eng.register_tool(lambda: {"ok": True}, name="ping")
        run = eng.submit({"name": "w", "steps": [{"id": "a", "tool": "ping"}]})
        monkeypatch.setattr(_ffi, "call_encoded", call_encoded)
        assert run.wait(timeout=20).status == WorkflowStatus.COMPLETED
        assert left[0] == 0


def test_events_iterator_still_raises_other_errors(monkeypatch):
    real = _ffi.call

    def call(name, *args, **kw):
        if name == "dccflow_events_next":
            raise DccFlowError("bad request", code="invalid_request")
        return real(name, *args, **kw)

    with Engine() as eng:
        monkeypatch.setattr(_ffi, "call", call)
        with pytest.raises(DccFlowError, match="bad request"):
            next(iter(eng.events(timeout=1)))


# One pytest-xdist worker runs this file (make test-py): one start of its throwaway PostgreSQL cluster, not one
# per worker, and no two of them loading the machine at once.
pytestmark = pytest.mark.xdist_group("test_redteam_events")


@pytest.fixture(scope="module")
def cluster():
    if soak_pg.bin_dir() is None:
        msg = "no PostgreSQL server binaries (initdb): install postgresql-15"
        if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
            pytest.fail(msg)
        pytest.skip(msg)
    pg = soak_pg.Cluster()
    try:
        yield pg
    finally:
        pg.stop()


def test_on_event_survives_a_postgresql_restart(cluster):
    """The real fault: the server restarts under a live engine; callbacks hear the next run."""
    url = "postgresql://postgres@127.0.0.1:%d/soak?sslmode=disable" % cluster.port
    with _engine_with_ping(url) as eng:
        terminals = []
        done = threading.Event()

        def cb(ev):
            if ev.get("type") == "workflow_terminal":
                terminals.append(ev["run_id"])
                done.set()

        eng.on_event(cb)
        eng.run({"name": "before", "steps": [{"id": "a", "tool": "ping"}]})
        assert done.wait(20)
        done.clear()
        cluster.pg_ctl("restart")
        time.sleep(1.5)  # the stream polls through the outage (POLL_MS): it must meet an error, and survive
        deadline = time.monotonic() + 30
        while True:  # the engine's own connections come back after the restart
            try:
                run = eng.run({"name": "after", "steps": [{"id": "a", "tool": "ping"}]})
                break
            except DccFlowError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert done.wait(30), "on_event went quiet after the PostgreSQL restart"
        assert run.run_id in terminals
        assert eng._events_thread is not None and eng._events_thread.is_alive()
