"""The Qt adapter against a real offscreen QApplication (PySide6; QT_QPA_PLATFORM=offscreen), and
its choice of binding against stand-in bindings. The real-Qt tests skip, naming the package, where
no PySide6 wheel exists."""
import logging
import os
import sys
import threading
import time
import types

import pytest

import dcc_flow
from _real_dcc import real_module
from dcc_flow import WorkflowStatus
from dcc_flow.dcc import qt as flow_qt

SPEC = """
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    steps: [{id: touch, tool: touch, args: {i: "{{item}}"}}]
"""


@pytest.fixture(scope="module")
def app():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    real_module("PySide6")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(["dcc_flow-tests"])


def spin(app, until, limit=10.0):
    """Run the Qt event loop until ``until()`` is true or ``limit`` seconds passed."""
    from PySide6.QtCore import QTimer

    deadline = time.monotonic() + limit
    check = QTimer()
    check.setInterval(2)

    def poll():
        if until() or time.monotonic() > deadline:
            app.quit()

    check.timeout.connect(poll)
    check.start()
    app.exec()
    check.stop()
    return until()


def test_qt_pump_runs_main_tools_on_the_gui_thread_while_the_ui_ticks(app):
    from PySide6.QtCore import QTimer

    with dcc_flow.Engine() as engine:
        ran_on = []

        @engine.tool()
        def touch(i):
            ran_on.append(threading.get_ident())
            time.sleep(0.002)
            return i

        assert flow_qt.qt_core().__name__ == "PySide6.QtCore" and not flow_qt.is_batch()
        pump = flow_qt.install(engine, budget=0.01)
        assert pump.installed and not pump.inline
        ui_ticks = []
        ui = QTimer()
        ui.setInterval(5)
        ui.timeout.connect(lambda: ui_ticks.append(time.monotonic()))
        ui.start()
        run = engine.submit(SPEC, {"items": list(range(40))})
        assert spin(app, lambda: run.result().terminal)
        ui.stop()
        assert run.result().status is WorkflowStatus.COMPLETED
        assert set(ran_on) == {threading.main_thread().ident} and pump.calls == 40
        # The UI kept ticking during the ~80 ms of tool time: the pump gave the loop back.
        assert len(ui_ticks) >= 5
        gaps = [b - a for a, b in zip(ui_ticks, ui_ticks[1:])]
        assert max(gaps) < 1.0  # loose: the machine is shared; make bench measures the real figure

        # Idle, the timer waits `interval`; a new run is picked up by it.
        later = engine.submit(SPEC, {"items": [1]})
        assert spin(app, lambda: later.result().terminal)
        assert later.result().ok and pump.calls == 41

        pump.uninstall()
        pump.uninstall()
        assert not pump.installed
        # Uninstalled: nothing pumps from the event loop any more.
        idle = engine.submit(SPEC, {"items": [2]})
        spin(app, lambda: False, limit=0.1)
        assert not idle.result().terminal and pump.calls == 41
        assert idle.wait(timeout=10).ok  # the thread that waits runs it again


def test_a_ui_timer_that_fell_due_runs_between_two_busy_ticks(app):
    """A repeating Qt timer is due again from its last due time, so after a full budget it would
    fire again before a UI timer that fell due meanwhile (the UI would wait two budgets); the
    adapter schedules each tick from the end of the last."""
    from PySide6.QtCore import QTimer

    with dcc_flow.Engine() as engine:

        @engine.tool()
        def touch(i):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.002:
                pass
            return i

        pump = flow_qt.install(engine, budget=0.01)
        order = []
        real_tick = pump.tick

        def tick():
            t = time.perf_counter()
            ran = real_tick()
            # "L": a busy tick long enough for the 5 ms UI timer to fall due during it.
            order.append(("L" if time.perf_counter() - t >= 0.005 else "P") if ran else "p")
            return ran

        pump.tick = tick
        ui = QTimer()
        ui.setInterval(5)
        ui.timeout.connect(lambda: order.append("U"))
        ui.start()
        run = engine.submit(SPEC, {"items": list(range(60))})
        assert spin(app, lambda: run.result().terminal)
        ui.stop()
        pump.uninstall()
        assert run.result().ok and pump.calls == 60
        busy = "".join(order).replace("p", "")
        assert busy.count("L") >= 3, busy
        assert "LL" not in busy and "LP" not in busy, busy  # the overdue UI tick always came next


def test_a_failing_pump_is_logged_and_stops_the_timer_without_raising(app, monkeypatch, caplog):
    with dcc_flow.Engine() as engine:
        pump = flow_qt.install(engine)

        def broken(budget):
            raise OSError("library gone")

        monkeypatch.setattr(engine, "pump", broken)
        with caplog.at_level(logging.ERROR, logger="dcc_flow"):
            assert spin(app, lambda: not pump.installed, limit=5)
        assert "uninstalling" in caplog.text and "library gone" in caplog.text
        assert pump.ticks == 1


def test_timer_stops_itself_when_the_engine_closes(app):
    engine = dcc_flow.Engine()
    pump = flow_qt.install(engine)
    engine.close()
    assert spin(app, lambda: not pump.installed, limit=5)


def test_install_off_the_qt_main_thread_is_refused(app):
    with dcc_flow.Engine() as engine:
        errors = []

        def other():
            try:
                flow_qt.install(engine)
            except RuntimeError as e:
                errors.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        assert errors and "Qt main thread" in errors[0]


def test_bad_interval_is_refused():
    with dcc_flow.Engine() as engine, pytest.raises(ValueError, match="interval must be > 0"):
        flow_qt.install(engine, interval=-1)


# -- choosing the binding, against stand-ins ------------------------------------------------------


def fake_binding(monkeypatch, name, app):
    pkg = types.ModuleType(name)
    core = types.ModuleType(name + ".QtCore")
    core.QCoreApplication = types.SimpleNamespace(instance=lambda: app)
    pkg.QtCore = core
    monkeypatch.setitem(sys.modules, name, pkg)
    monkeypatch.setitem(sys.modules, name + ".QtCore", core)
    return core


@pytest.fixture
def no_bindings(monkeypatch):
    """Hide every loaded binding; each import of one fails as if it were not installed."""
    for name in flow_qt.BINDINGS:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, mod)
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    return monkeypatch


def test_binding_with_a_running_application_is_preferred(no_bindings):
    for name in flow_qt.BINDINGS:
        no_bindings.delitem(sys.modules, name)
    fake_binding(no_bindings, "PyQt5", app=None)
    pyside2 = fake_binding(no_bindings, "PySide2", app=None)
    assert flow_qt.qt_core() is pyside2  # none runs an app: the first in BINDINGS order
    pyqt5 = fake_binding(no_bindings, "PyQt5", app=object())
    assert flow_qt.qt_core() is pyqt5  # Nuke ships PySide2, a plug-in loaded PyQt5 with the app


def test_no_application_means_batch_and_install_registers_nothing(no_bindings):
    no_bindings.delitem(sys.modules, "PySide2")
    fake_binding(no_bindings, "PySide2", app=None)
    assert flow_qt.is_batch()
    with dcc_flow.Engine() as engine:

        @engine.tool()
        def touch(i):
            return i

        pump = flow_qt.install(engine)
        assert pump.inline and not pump.installed
        assert engine.run(SPEC, {"items": [1, 2]}).ok


def test_no_binding_at_all_names_the_packages(no_bindings):
    with pytest.raises(ImportError, match="PySide6, PySide2, PyQt6, PyQt5.*PySide6-Essentials"):
        flow_qt.qt_core()


def test_docs_qt_block_runs_its_tool_from_the_qt_loop(app, monkeypatch):
    """docs/reference/python/README.md's Qt block, with a stand-in nuke module, in a real QApplication."""
    import re

    import _docpage

    text = _docpage.Page(_docpage.PYTHON).text
    [block] = re.findall(r"<!-- doc-test: qt -->\n```python\n(.*?)^```", text, flags=re.S | re.M)
    executed = []
    nuke = types.ModuleType("nuke")
    nuke.execute = lambda node, first, last: executed.append((node, first, last, threading.get_ident()))
    monkeypatch.setitem(sys.modules, "nuke", nuke)
    scope = {"__name__": "nuke_script_editor"}
    exec(compile(block, "docs/reference/python/dcc.md (qt block)", "exec"), scope)
    engine, pump, run = scope["engine"], scope["pump"], scope["run"]
    try:
        assert pump.installed
        assert spin(app, lambda: run.result().terminal)
        assert run.result().outputs["render"] == {"node": "Write1", "frame": 1001}
        assert executed == [("Write1", 1001, 1001, threading.main_thread().ident)]
    finally:
        pump.uninstall()
        engine.close()
