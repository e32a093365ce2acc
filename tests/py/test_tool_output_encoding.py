"""A tool's result is encoded as json.dumps(result, ensure_ascii=False, allow_nan=False,
separators=(",", ":")) would, by one shared encoder with shortcuts for None, bools and ints
(_tools.encode_output, the Python step's hot path: docs/design/performance.md)."""

import enum
import json

import pytest

from dcc_flow._tools import encode_output


class Colour(enum.IntEnum):
    RED = 3


class Flag(int):
    def __repr__(self):
        return "Flag!"


@pytest.mark.parametrize("value", [None, True, False, 0, -5, 10 ** 40, 1.5, -0.0, "é ü 中", "\u2028", "",
                                   [1, {"a": None, "b": [True]}], {"k": "v"}, Colour.RED, Flag(7), (1, 2)])
def test_same_text_as_json_dumps(value):
    assert encode_output(value) == json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@pytest.mark.parametrize("value, error", [(float("nan"), ValueError), ({"x": float("inf")}, ValueError),
                                          (object(), TypeError), ({1j: 1}, TypeError)])
def test_refuses_what_json_dumps_refuses(value, error):
    with pytest.raises(error):
        encode_output(value)


def test_a_tool_returning_an_int_subclass_and_nan():
    import dcc_flow

    with dcc_flow.Engine() as engine:
        engine.register_tool(lambda: Colour.RED, name="colour")
        engine.register_tool(lambda: float("nan"), name="nan")
        result = engine.run({"steps": [{"id": "c", "tool": "colour"}]})
        assert result.ok and result.outputs["c"] == 3
        result = engine.run({"steps": [{"id": "n", "tool": "nan", "retry": {"max_attempts": 1}}]})
        assert not result.ok and result.error["kind"] == "invalid_output", result.error
