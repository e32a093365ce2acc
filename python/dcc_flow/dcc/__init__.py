"""DCC adapters: run main-lane tools on a DCC's main thread without freezing its UI.

``dcc_flow.dcc.maya.install(engine)`` and ``dcc_flow.dcc.houdini.install(engine)`` register an idle
callback that calls ``engine.pump(budget)``: each tick runs pending main-lane tool calls for at
most ``budget`` seconds, so a long pipeline shares the main thread with the UI. In batch mode
(``mayapy``, ``hython``) there is no event loop: ``install`` returns a pump that does nothing and
``engine.run()`` / ``Run.wait()`` drive the tools inline.

Neither module imports ``maya`` or ``hou`` before ``install`` is called.
"""

from ._pump import IdlePump

__all__ = ["IdlePump"]
