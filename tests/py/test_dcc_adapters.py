"""DCC adapters against fake maya/hou modules that imitate their idle-callback APIs."""
import sys
import threading
import time
import types

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus

SPEC = """
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    steps: [{id: touch, tool: touch, args: {i: "{{item}}"}}]
"""


class FakeMaya:
    """maya.cmds with scriptJob(idleEvent=..., exists=..., kill=...) and about(batch=...)."""

    def __init__(self, batch):
        self.batch = batch
        self.jobs = {}
        self.next = 1

    def install(self, monkeypatch):
        maya = types.ModuleType("maya")
        cmds = types.ModuleType("maya.cmds")
        cmds.about = lambda batch=False: self.batch
        cmds.scriptJob = self.script_job
        maya.cmds = cmds
        monkeypatch.setitem(sys.modules, "maya", maya)
        monkeypatch.setitem(sys.modules, "maya.cmds", cmds)

    def script_job(self, idleEvent=None, exists=None, kill=None, force=False):
        if idleEvent is not None:
            job, self.next = self.next, self.next + 1
            self.jobs[job] = idleEvent
            return job
        if exists is not None:
            return exists in self.jobs
        if kill is not None:
            del self.jobs[kill]
        return None

    def idle(self):
        for cb in list(self.jobs.values()):
            cb()


class FakeHou(types.ModuleType):
    def __init__(self, ui_available):
        super().__init__("hou")
        self._ui = ui_available
        self.callbacks = []
        self.ui = types.SimpleNamespace(
            addEventLoopCallback=self.callbacks.append,
            removeEventLoopCallback=self.callbacks.remove,
            eventLoopCallbacks=lambda: tuple(self.callbacks),
        )

    def isUIAvailable(self):
        return self._ui

    def idle(self):
        for cb in list(self.callbacks):
            cb()


def drive(engine, idle, run, limit=10.0):
    """Call the fake DCC's idle callbacks from this ('main') thread until the run ends."""
    deadline = time.monotonic() + limit
    while not run.result().terminal and time.monotonic() < deadline:
        idle()
        time.sleep(0.001)
    return run.result()


def test_package_import_does_not_import_maya_or_hou():
    assert "maya" not in sys.modules and "hou" not in sys.modules
    import dcc_flow.dcc.houdini  # noqa: F401
    import dcc_flow.dcc.maya  # noqa: F401

    assert "maya" not in sys.modules and "hou" not in sys.modules


@pytest.mark.parametrize("dcc", ["maya", "houdini"])
def test_gui_pump_runs_main_tools_on_the_idle_thread_within_budget(monkeypatch, dcc):
    with dcc_flow.Engine() as engine:
        ran_on = []
        durations = []

        @engine.tool()
        def touch(i):
            ran_on.append(threading.get_ident())
            return i

        if dcc == "maya":
            fake = FakeMaya(batch=False)
            fake.install(monkeypatch)
            from dcc_flow.dcc import maya as adapter
        else:
            fake = FakeHou(ui_available=True)
            monkeypatch.setitem(sys.modules, "hou", fake)
            from dcc_flow.dcc import houdini as adapter

        pump = adapter.install(engine, budget=0.005)
        assert pump.installed and not pump.inline

        def timed_idle():
            t = time.monotonic()
            fake.idle()
            durations.append(time.monotonic() - t)

        run = engine.submit(SPEC, {"items": list(range(20))})
        result = drive(engine, timed_idle, run)
        assert result.status is WorkflowStatus.COMPLETED
        assert set(ran_on) == {threading.get_ident()}
        assert pump.calls == 20 and pump.ticks >= 1
        # Each tick respects its budget (with slack for one call that started before it ran out).
        assert max(durations) < 0.5
        pump.uninstall()
        pump.uninstall()
        assert not pump.installed
        if dcc == "maya":
            assert fake.jobs == {}
        else:
            assert fake.callbacks == []


@pytest.mark.parametrize("dcc", ["maya", "houdini"])
def test_batch_mode_registers_nothing_and_run_pumps_inline(monkeypatch, dcc):
    with dcc_flow.Engine() as engine:
        if dcc == "maya":
            fake = FakeMaya(batch=True)
            fake.install(monkeypatch)
            from dcc_flow.dcc import maya as adapter
        else:
            fake = FakeHou(ui_available=False)
            monkeypatch.setitem(sys.modules, "hou", fake)
            from dcc_flow.dcc import houdini as adapter

        @engine.tool()
        def touch(i):
            return i

        pump = adapter.install(engine)
        assert pump.inline and not pump.installed
        assert engine.run(SPEC, {"items": [1, 2]}).ok


def test_pump_uninstalls_itself_when_the_engine_closes(monkeypatch):
    fake = FakeMaya(batch=False)
    fake.install(monkeypatch)
    from dcc_flow.dcc import maya as adapter

    engine = dcc_flow.Engine()
    pump = adapter.install(engine)
    engine.close()
    fake.idle()
    assert fake.jobs == {} and not pump.installed
