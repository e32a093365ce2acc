"""pytest plugin for testing pipelines without a DCC: ``engine`` and ``fake_tools`` fixtures.

Installed with the package (entry point ``pytest11``), or enabled explicitly with
``pytest -p dcc_flow.testing`` / ``pytest_plugins = ["dcc_flow.testing"]``::

    def test_intake(engine, fake_tools):
        fake_tools.add("vendor_intake__list_sftp", {"files": [{"path": "a.ma"}]})
        export = fake_tools.add("maya__export_fbx", lambda scene: {"fbx": scene[:-3] + ".fbx"})
        result = engine.run("examples/vendor_intake.yaml", {"date": "2026-11-22"})
        assert result.ok
        assert export.calls == [{"scene": "a.ma"}]
"""

import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import pytest

from ._engine import Engine

__all__ = ["FakeTool", "FakeTools", "engine", "fake_tools"]

Behaviour = Union[Any, Callable[..., Any], BaseException]


class FakeTool:
    """A host tool that records its calls and answers with canned behaviour.

    ``result`` is returned as is, or called with the tool's keyword arguments when callable, or
    raised when it is an exception. ``side_effect`` (a sequence) gives one behaviour per call;
    the last one repeats.
    """

    def __init__(self, name: str, result: Behaviour = None, side_effect: Optional[Sequence[Behaviour]] = None) -> None:
        self.name = name
        self.result = result
        self.side_effect = list(side_effect) if side_effect is not None else None
        self.calls: List[Dict[str, Any]] = []
        self.threads: List[str] = []
        self._lock = threading.Lock()

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            index = len(self.calls)
            self.calls.append(dict(kwargs))
            self.threads.append(threading.current_thread().name)
        behaviour = self.result
        if self.side_effect:
            behaviour = self.side_effect[min(index, len(self.side_effect) - 1)]
        if isinstance(behaviour, BaseException):
            raise behaviour
        if isinstance(behaviour, type) and issubclass(behaviour, BaseException):
            raise behaviour()
        if callable(behaviour):
            return behaviour(**kwargs)
        return behaviour

    def __repr__(self) -> str:
        return "FakeTool(%r, calls=%d)" % (self.name, len(self.calls))


class FakeTools:
    """Registers FakeTools on an engine: ``fake_tools.add(name, result)``, ``fake_tools[name]``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._tools: Dict[str, FakeTool] = {}

    def add(
        self,
        name: str,
        result: Behaviour = None,
        side_effect: Optional[Sequence[Behaviour]] = None,
        thread: str = "main",
        max_concurrent: Optional[int] = None,
    ) -> FakeTool:
        tool = FakeTool(name, result, side_effect)
        self.engine.register_tool(tool, name=name, thread=thread, max_concurrent=max_concurrent)
        self._tools[name] = tool
        return tool

    def __getitem__(self, name: str) -> FakeTool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[FakeTool]:
        return iter(self._tools.values())


@pytest.fixture
def engine() -> Iterator[Engine]:
    """A fresh in-memory dcc_flow.Engine, closed after the test."""
    with Engine() as eng:
        yield eng


@pytest.fixture
def fake_tools(engine: Engine) -> FakeTools:
    """Register fake host tools on the ``engine`` fixture and inspect their calls."""
    return FakeTools(engine)
