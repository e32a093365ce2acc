"""Tool schemas (docs/reference/python/tools.md "Tool schemas"): the engine checks a host tool's args against its
JSON Schema before the call and its output against its output schema after; a ``@task``'s type
hints make its schema."""

import enum
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import pytest

import dcc_flow
from dcc_flow import Engine, WorkflowStatus, task
from dcc_flow._schema import args_schema, hint_schema, output_schema


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.close()


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_hints_map_to_json_schema():
    assert hint_schema(int) == {"type": "integer"}
    assert hint_schema(float) == {"type": "number"}
    assert hint_schema(str) == {"type": "string"}
    assert hint_schema(bool) == {"type": "boolean"}
    assert hint_schema(type(None)) == {"type": "null"}
    assert hint_schema(list) == {"type": "array"}
    assert hint_schema(dict) == {"type": "object"}
    assert hint_schema(List[str]) == {"type": "array", "items": {"type": "string"}}
    assert hint_schema(Sequence[float]) == {"type": "array", "items": {"type": "number"}}
    assert hint_schema(List) == {"type": "array"}
    assert hint_schema(Dict[str, int]) == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert hint_schema(Optional[int]) == {"type": ["integer", "null"]}
    assert hint_schema(Optional[List[str]]) == {"type": ["array", "null"], "items": {"type": "string"}}
    assert hint_schema(Union[int, str]) == {"type": ["integer", "string"]}
    assert hint_schema(Union[int, float]) == {"type": "number"}
    assert hint_schema(Tuple[int, str]) == {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                            "minItems": 2, "maxItems": 2}
    assert hint_schema(Tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert hint_schema(Color) == {"enum": ["red", "blue"]}
    assert hint_schema(Optional[Color]) == {"enum": ["red", "blue", None]}
    # No rule for what does not map to JSON: the schema never refuses what the function takes.
    assert hint_schema(Any) == {}
    assert hint_schema(Optional[Any]) == {}
    assert hint_schema(object) == {}
    assert hint_schema(Engine) == {}
    assert hint_schema("NotResolvable") == {}
    assert hint_schema("int") == {"type": "integer"}  # an unresolved forward reference to a builtin
    assert hint_schema(set) == {"type": "array"}

    class Shot(str):
        pass

    assert hint_schema(Shot) == {"type": "string"}
    assert hint_schema(Union[int, Engine]) == {}


@pytest.mark.skipif(sys.version_info < (3, 10), reason="list[int] needs 3.9 and X | None 3.10: the syntax of the hint itself")
def test_builtin_generics_and_union_operator():
    assert hint_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert hint_schema(dict[str, list[str]]) == {"type": "object",
                                                 "additionalProperties": {"type": "array", "items": {"type": "string"}}}
    assert hint_schema(int | None) == {"type": ["integer", "null"]}


def test_args_schema_required_defaults_and_kwargs():
    def export(scene: str, frames: int, scale: float = 1.0, tags: Optional[List[str]] = None, note: str = None,
               anything=None) -> Dict[str, str]:
        return {}

    assert args_schema(export) == {
        "type": "object",
        "properties": {
            "scene": {"type": "string"},
            "frames": {"type": "integer"},
            "scale": {"type": "number"},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
            "note": {"type": ["string", "null"]},  # a None default takes None
            "anything": {},
        },
        "required": ["scene", "frames"],
        "additionalProperties": False,
    }
    assert output_schema(export) == {"type": "object", "additionalProperties": {"type": "string"}}

    def loose(scene: "UnknownType", **extra):  # noqa: F821 - a forward reference that does not resolve
        return None

    assert args_schema(loose) == {"type": "object", "properties": {"scene": {}}, "required": ["scene"]}
    assert output_schema(loose) is None


def test_task_with_hints_rejects_wrong_types_before_the_call(engine):
    calls = []

    @task(name="maya__export", retries=2)
    def export(scene: str, frames: int, tags: Optional[List[str]] = None) -> dict:
        calls.append((scene, frames, tags))
        return {"fbx": scene.replace(".ma", ".fbx")}

    @dcc_flow.workflow
    def publish(scene: str):
        return export(scene, 12)

    assert engine.run(publish, {"scene": "a.ma"}).outputs == {"export": {"fbx": "a.fbx"}}
    assert calls == [("a.ma", 12, None)]

    # The same tool from a hand-written spec with wrong types: refused before the call, once,
    # although retries=2 and retry_on lists invalid_input.
    result = engine.run("""
steps:
  - id: export
    tool: maya__export
    args: {scene: a.ma, frames: "12", tags: [1], extra: true}
    retry: {max_attempts: 3, retry_on: [invalid_input]}
""")
    assert result.status is WorkflowStatus.FAILED
    assert result.error["kind"] == "invalid_input"
    assert result.error["message"] == (
        "step export: args.extra: is not allowed (additionalProperties); args.frames: must be integer; got string; "
        "args.tags[0]: must be string; got number (schema of tool maya__export)")
    assert result.steps[0].attempt == 1
    assert calls == [("a.ma", 12, None)]  # never called with the bad args


def test_task_registered_by_name_and_by_cli_path_gets_its_schema(engine):
    @task(name="qc")
    def qc(frames: int):
        return frames

    engine.register_tool(qc, name="qc")  # a Task object: its hints' schema by default
    result = engine.run("steps: [{id: qc, tool: qc, args: {frames: abc}}]")
    assert result.error["kind"] == "invalid_input"
    assert "args.frames: must be integer; got string" in result.error["message"]

    engine.register_tool(qc, name="qc", schema=False)  # opted out: the function sees the string
    assert engine.run("steps: [{id: qc, tool: qc, args: {frames: abc}}]").outputs == {"qc": "abc"}


def test_plain_function_keeps_no_schema_unless_asked(engine):
    seen = []

    def scale(x: int):
        seen.append(x)
        return x

    engine.register_tool(scale)  # no schema: hints are not enforced on plain functions
    assert engine.run("steps: [{id: s, tool: scale, args: {x: '3'}}]").outputs == {"s": "3"}

    engine.register_tool(scale, schema=True)
    result = engine.run("steps: [{id: s, tool: scale, args: {x: '3'}}]")
    assert result.error == {"kind": "invalid_input", "step_key": "s",
                            "message": "step s: args.x: must be integer; got string (schema of tool scale)"}
    assert seen == ["3"]


def test_register_tool_with_explicit_schemas(engine):
    calls = []

    @engine.tool(name="maya__export", schema={"type": "object", "required": ["frames"],
                                              "properties": {"frames": {"type": "integer", "minimum": 1}}},
                 output_schema={"type": "object", "required": ["fbx"],
                                "properties": {"fbx": {"type": "string", "pattern": "\\.fbx$"}}})
    def export(frames, fbx="a.fbx"):
        calls.append(frames)
        return {"fbx": fbx}

    assert engine.run("steps: [{id: export, tool: maya__export, args: {frames: 10}}]").outputs == {
        "export": {"fbx": "a.fbx"}}
    result = engine.run("steps: [{id: export, tool: maya__export, args: {frames: 0}}]")
    assert result.error["message"] == "step export: args.frames: must be >= 1; got 0 (schema of tool maya__export)"
    assert calls == [10]

    # After the call: an output that breaks output_schema fails the step, invalid_output.
    result = engine.run("steps: [{id: export, tool: maya__export, args: {frames: 2, fbx: a.abc}}]")
    assert result.status is WorkflowStatus.FAILED
    assert result.error["kind"] == "invalid_output"
    assert result.error["message"] == ('step export: output.fbx: must match the pattern "\\\\.fbx$" '
                                       '(output_schema of tool maya__export)')
    assert calls == [10, 2]


def test_output_schema_from_the_return_hint(engine):
    def count(n: int) -> int:
        return "many" if n > 3 else n  # type: ignore[return-value]

    engine.register_tool(count, schema=True, output_schema=True)
    assert engine.run("steps: [{id: c, tool: count, args: {n: 2}}]").outputs == {"c": 2}
    assert engine.run("steps: [{id: c, tool: count, args: {n: 9}}]").error["message"] == (
        "step c: output: must be integer; got string (output_schema of tool count)")

    def untyped(n):
        return n

    with pytest.raises(ValueError, match="output_schema=True needs a return hint"):
        engine.register_tool(untyped, output_schema=True)


def test_bad_schema_is_refused_at_register(engine):
    def tool(x):
        return x

    with pytest.raises(dcc_flow.InvalidRequestError) as info:
        engine.register_tool(tool, schema={"type": "object", "properties": {"x": {"type": "intger"}}})
    assert info.value.code == "invalid_request"
    assert str(info.value).startswith("tool tool: schema is not a valid JSON Schema: schema.properties.x.type:")
    assert "tool" not in engine.tools
    with pytest.raises(TypeError, match="schema must be a JSON Schema"):
        engine.register_tool(tool, schema="object")  # type: ignore[arg-type]


def test_large_integers_are_checked_exactly(engine):
    engine.register_tool(lambda asset_id: str(asset_id), name="asset",
                         schema={"type": "object", "properties": {"asset_id": {"type": "integer",
                                                                               "maximum": 2 ** 63 - 1}}})
    ok = engine.run("steps: [{id: a, tool: asset, args: {asset_id: 9223372036854775807}}]")
    assert ok.outputs == {"a": "9223372036854775807"}
    bad = engine.run("steps: [{id: a, tool: asset, args: {asset_id: 9223372036854775808}}]")
    assert bad.error["message"] == ("step a: args.asset_id: must be <= 9223372036854775807; got 9223372036854775808 "
                                    "(schema of tool asset)")


def test_cli_tools_module_registers_tasks_with_their_schema(engine, tmp_path):
    from dcc_flow._cli._engine import load_tools

    module = tmp_path / "schema_cli_tools.py"
    module.write_text(
        "from dcc_flow import task\n"
        "CALLS = []\n"
        "@task(name='maya__render')\n"
        "def render(frames: int):\n"
        "    CALLS.append(frames)\n"
        "    return frames\n"
        "def plain(frames: int):\n"
        "    return frames\n")
    assert sorted(load_tools(engine, [str(module)])) == ["maya__render", "plain"]
    result = engine.run("steps: [{id: r, tool: maya__render, args: {frames: ten}}]")
    assert result.error["message"] == "step r: args.frames: must be integer; got string (schema of tool maya__render)"
    # A plain function of a --tools module keeps no schema, as register_tool(fn) does.
    assert engine.run("steps: [{id: p, tool: plain, args: {frames: ten}}]").outputs == {"p": "ten"}


def test_a_worker_publishes_the_enforced_schema_as_mcp_input_schema(engine, tmp_path):
    """A pool worker is an MCP server of host tools: its tools/list inputSchema is the schema
    the engine enforces for the tool (a @task's hints), {"type": "object"} for one without."""
    import io
    import json

    from dcc_flow._cli._engine import load_tools
    from dcc_flow._worker import Worker

    module = tmp_path / "schema_worker_tools.py"
    module.write_text(
        "from dcc_flow import task\n"
        "@task(name='maya__cache')\n"
        "def cache(shot: str, frames: int = 1):\n"
        "    return shot\n"
        "def plain(x):\n"
        "    return x\n")
    load_tools(engine, [str(module)])
    entries = {name: engine._tools[name] for name in ("maya__cache", "plain")}
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) + "\n"
    out = io.BytesIO()
    Worker(entries, io.BytesIO(request.encode()), out).serve()
    listed = {t["name"]: t["inputSchema"] for t in json.loads(out.getvalue().decode())["result"]["tools"]}
    assert listed == {
        "maya__cache": {"type": "object", "properties": {"shot": {"type": "string"}, "frames": {"type": "integer"}},
                        "required": ["shot"], "additionalProperties": False},
        "plain": {"type": "object"},
    }
