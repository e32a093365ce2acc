"""The Unreal Editor adapter against a stand-in ``unreal`` module that imitates its Slate post-tick
callbacks (no Unreal Editor can be installed here)."""
import logging
import sys
import threading
import time
import types

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus
from dcc_flow.dcc import unreal as flow_unreal

SPEC = """
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    steps: [{id: touch, tool: touch, args: {i: "{{item}}"}}]
"""


class FakeUnreal(types.ModuleType):
    """unreal.register/unregister_slate_post_tick_callback, is_editor, SystemLibrary.is_unattended."""

    def __init__(self, editor=True, unattended=False):
        super().__init__("unreal")
        self._editor = editor
        self.SystemLibrary = types.SimpleNamespace(is_unattended=lambda: unattended)
        self.callbacks = {}
        self.next = 1

    def is_editor(self):
        return self._editor

    def register_slate_post_tick_callback(self, fn):
        handle, self.next = object(), self.next + 1
        self.callbacks[handle] = fn
        return handle

    def unregister_slate_post_tick_callback(self, handle):
        if handle not in self.callbacks:
            raise TypeError("Failed to convert argument to '_DelegateHandle'")
        del self.callbacks[handle]

    def frame(self, delta=1 / 60):
        for fn in list(self.callbacks.values()):
            fn(delta)


def test_post_tick_callback_runs_main_tools_each_frame(monkeypatch):
    fake = FakeUnreal()
    monkeypatch.setitem(sys.modules, "unreal", fake)
    with dcc_flow.Engine() as engine:
        ran_on = []

        @engine.tool()
        def touch(i):
            ran_on.append(threading.get_ident())
            return i

        pump = flow_unreal.install(engine, budget=0.005)
        assert pump.installed and not pump.inline and len(fake.callbacks) == 1
        run = engine.submit(SPEC, {"items": list(range(10))})
        deadline = time.monotonic() + 10
        while not run.result().terminal and time.monotonic() < deadline:
            fake.frame()
            time.sleep(0.001)
        assert run.result().status is WorkflowStatus.COMPLETED
        assert set(ran_on) == {threading.get_ident()} and pump.calls == 10
        pump.uninstall()
        pump.uninstall()
        assert fake.callbacks == {}


@pytest.mark.parametrize("editor, unattended", [(False, False), (True, True)])
def test_commandlet_or_unattended_is_batch(monkeypatch, editor, unattended):
    fake = FakeUnreal(editor=editor, unattended=unattended)
    monkeypatch.setitem(sys.modules, "unreal", fake)
    with dcc_flow.Engine() as engine:

        @engine.tool()
        def touch(i):
            return i

        assert flow_unreal.is_batch()
        pump = flow_unreal.install(engine)
        assert pump.inline and fake.callbacks == {}
        assert engine.run(SPEC, {"items": [1]}).ok


def test_failing_pump_or_closed_engine_unregisters_without_raising(monkeypatch, caplog):
    fake = FakeUnreal()
    monkeypatch.setitem(sys.modules, "unreal", fake)
    with dcc_flow.Engine() as engine:
        pump = flow_unreal.install(engine)
        monkeypatch.setattr(engine, "pump", lambda budget: 1 / 0)
        with caplog.at_level(logging.ERROR, logger="dcc_flow"):
            fake.frame()
        assert fake.callbacks == {} and not pump.installed and "ZeroDivisionError" in caplog.text
    engine = dcc_flow.Engine()
    pump = flow_unreal.install(engine)
    engine.close()
    fake.frame()
    assert fake.callbacks == {} and not pump.installed
