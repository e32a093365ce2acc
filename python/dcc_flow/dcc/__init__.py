"""DCC adapters: run main-lane tools on a DCC's main thread without freezing its UI.

``install(engine)`` of ``dcc_flow.dcc.maya`` (an idle scriptJob), ``houdini`` (an event-loop
callback), ``blender`` (a persistent ``bpy.app.timers`` callback), ``qt`` (a ``QTimer``: Nuke,
Katana, Mari, any Qt tool, and Maya or Houdini too) and ``unreal`` (a Slate post-tick callback)
registers a callback that calls ``engine.pump(budget)``: each tick runs pending main-lane tool
calls for at most ``budget`` seconds, so a long pipeline shares the main thread with the UI. In
batch mode (``mayapy``, ``hython``, ``blender --background`` and the ``bpy`` module, no
``QApplication``, an Unreal commandlet) there is no event loop: ``install`` returns a pump that
does nothing and ``engine.run()`` / ``Run.wait()`` drive the tools inline.

No module imports its DCC (``maya``, ``hou``, ``bpy``, a Qt binding, ``unreal``) before
``install``/``is_batch`` is called.
"""

from ._pump import IdlePump

__all__ = ["IdlePump"]
