"""Bad input gets a clear error, never a crash (docs/design/architecture.md, "Principles")."""

import random

import pytest

from conftest import FULL_VENDOR_INTAKE
from dcc_flow import ParseError, SpecTooLargeError, ValidationError, WorkflowSpec

MB = 1024 * 1024


def _deep_yaml(depth):
    return "steps:\n  - id: a\n    tool: flow__echo\n    args: { x: " + "{a: " * depth + "1" + "}" * depth + " }\n"


def _deep_json(depth):
    return '{"steps": [{"id": "a", "tool": "flow__echo", "args": {"x": ' + "[" * depth + "]" * depth + "}}]}"


def _big_description(size):
    return "name: big\ndescription: \"" + "a" * size + "\"\nsteps:\n  - id: a\n    tool: flow__echo\n"


def _many_steps(size):
    step = "  - id: s%d\n    tool: flow__echo\n    args: { payload: \"" + "x" * 200 + "\" }\n"
    parts = ["steps:\n"]
    total, i = 0, 0
    while total < size:
        part = step % i
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts)


BAD_INPUTS = [
    # (id, text, expected class, words the message must contain)
    ("malformed_yaml_flow", "steps: [\n  - id: a\n", ParseError, []),
    ("malformed_yaml_colon", "name: : :\n  - x\n", ParseError, []),
    ("malformed_yaml_indent", "steps:\n  - id: a\n   tool: x\n  bad", ParseError, []),
    ("tab_indentation", "steps:\n\t- id: a\n", ParseError, []),
    ("malformed_json", '{"steps": [', ParseError, []),
    ("null", "null", ParseError, []),
    ("tilde", "~", ParseError, []),
    ("empty_string", "", ParseError, []),
    ("whitespace_only", "  \n\n  ", ParseError, []),
    ("comment_only", "# nothing here\n", ParseError, []),
    ("top_level_list", "- id: a\n  tool: flow__echo\n", ParseError, []),
    ("top_level_json_list", '[{"id": "a"}]', ParseError, []),
    ("top_level_scalar", "just a string", ParseError, []),
    ("top_level_number", "42", ParseError, []),
    ("steps_wrong_type", "steps: not-a-list\n", ValidationError, ["steps"]),
    ("step_wrong_type", "steps:\n  - just a string\n", ValidationError, []),
    ("id_wrong_type", "steps:\n  - id: [1, 2]\n    tool: flow__echo\n", ValidationError, []),
    ("args_wrong_type", "steps:\n  - id: a\n    tool: flow__echo\n    args: [1, 2]\n", ValidationError, ['"a"']),
    ("retry_wrong_type", "steps:\n  - id: a\n    tool: flow__echo\n    retry: 3\n", ValidationError, ['"a"']),
    ("max_attempts_string", "steps:\n  - id: a\n    tool: flow__echo\n    retry: { max_attempts: many }\n",
     ValidationError, ['"a"']),
    ("inputs_wrong_type", "inputs: [a, b]\nsteps:\n  - id: a\n    tool: flow__echo\n", ValidationError, []),
    ("name_wrong_type", "name: { a: 1 }\nsteps:\n  - id: a\n    tool: flow__echo\n", ValidationError, []),
    ("no_steps", "name: empty\n", ValidationError, []),
    ("empty_json_object", "{}", ValidationError, []),
    ("missing_id", "steps:\n  - tool: flow__echo\n", ValidationError, []),
    ("duplicate_yaml_key", "name: a\nname: b\nsteps:\n  - id: a\n    tool: flow__echo\n", ValidationError, []),
    ("nul_character", "name: \"a\\0b\"\nsteps:\n  - id: \"a\\0\"\n    tool: flow__echo\n", ValidationError, []),
    ("deep_yaml_1000", _deep_yaml(1000), ValidationError, []),
    ("deep_json_1000", _deep_json(1000), ValidationError, []),
    ("deep_yaml_100000", _deep_yaml(100000), ValidationError, []),
    ("deep_block_yaml_1000", "steps:\n" + "".join("  " * i + "- \n" for i in range(1, 1001)), ValidationError, []),
    (
        "billion_laughs",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
        "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
        "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
        "steps: *h\n",
        ValidationError,
        [],
    ),
]


@pytest.mark.parametrize("text, cls, words", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_text_raises_clear_validation_error(text, cls, words):
    with pytest.raises(ValidationError) as info:
        WorkflowSpec.from_yaml_str(text).validate()
    err = info.value
    assert isinstance(err, cls), (type(err), str(err))
    assert isinstance(err, ValueError)
    assert err.problems, "a ValidationError always lists its problems"
    message = str(err)
    assert message.strip() and "problem" in message
    assert len(message) < 20000, "messages stay readable"
    for word in words:
        assert word in message


@pytest.mark.parametrize("case", ["description", "steps"])
def test_ten_megabyte_document(case):
    text = _big_description(10 * MB) if case == "description" else _many_steps(10 * MB)
    assert len(text) >= 10 * MB
    with pytest.raises(SpecTooLargeError) as info:
        WorkflowSpec.from_yaml_str(text)
    assert info.value.code == "too_large"
    assert len(str(info.value)) < 2000


def test_thousand_deep_nesting_is_too_large():
    with pytest.raises(SpecTooLargeError):
        WorkflowSpec.from_yaml_str(_deep_yaml(1000))
    with pytest.raises(SpecTooLargeError):
        WorkflowSpec.from_json(_deep_json(1000))
    deep = {}  # type: dict
    node = deep
    for _ in range(1000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(SpecTooLargeError):
        WorkflowSpec.from_json({"steps": [{"id": "a", "tool": "flow__echo", "args": deep}]})


def test_non_utf8_bytes():
    with pytest.raises(ParseError) as info:
        WorkflowSpec.from_yaml_str(b"name: ok\ndescription: caf\xe9\nsteps: []\n")
    err = info.value
    assert "UTF-8" in str(err)
    assert "0xe9" in str(err)
    assert (err.problems[0].line, err.problems[0].column) == (2, 17)
    assert err.code == "parse_error"
    with pytest.raises(ParseError, match="UTF-8"):
        WorkflowSpec.from_json(b'{"name": "\xff"}')
    with pytest.raises(ParseError, match="UTF-8"):
        WorkflowSpec.from_yaml_str(b"\xff\xfe" + "steps: []".encode("utf-16-le"))


def test_lone_surrogate_in_str():
    with pytest.raises(ParseError, match="surrogate"):
        WorkflowSpec.from_yaml_str("name: a\udc80b\nsteps: []\n")


@pytest.mark.parametrize("value", [None, 42, 4.2, ["steps: []"], object(), True])
def test_wrong_python_types_raise_type_error(value):
    with pytest.raises(TypeError) as info:
        WorkflowSpec.from_yaml_str(value)  # type: ignore[arg-type]
    assert type(value).__name__ in str(info.value)
    assert "from_yaml_str" in str(info.value)
    if not isinstance(value, (list,)):
        with pytest.raises(TypeError, match=type(value).__name__):
            WorkflowSpec.from_json(value)  # type: ignore[arg-type]


def test_from_json_dict_that_is_not_json():
    with pytest.raises(TypeError, match="set"):
        WorkflowSpec.from_json({"steps": [{"id": "a", "tool": "flow__echo", "args": {"x": {1, 2}}}]})
    with pytest.raises(ParseError):
        WorkflowSpec.from_json({"steps": [{"id": "a", "tool": "flow__echo", "args": {"x": float("nan")}}]})
    loop = {}  # type: dict
    loop["self"] = loop
    with pytest.raises(ValidationError):
        WorkflowSpec.from_json(loop)


def test_from_file_with_bad_content(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"steps:\n  - id: \xff\n")
    with pytest.raises(ParseError) as info:
        WorkflowSpec.from_file(path)
    assert "UTF-8" in str(info.value)


def test_random_mutations_never_crash():
    """Mutated versions of a valid spec either parse or raise a ValidationError, nothing else."""
    rng = random.Random(1234)
    base = FULL_VENDOR_INTAKE
    alphabet = ":-[]{}\"'#&*!|>%@`\n\t ,?0123456789abcxyz{{}}$."
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        chars = list(base)
        for _ in range(rng.randint(1, 8)):
            op = rng.random()
            pos = rng.randrange(len(chars) + 1)
            if op < 0.4 and chars:
                del chars[min(pos, len(chars) - 1)]
            elif op < 0.8:
                chars.insert(pos, rng.choice(alphabet))
            else:
                chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
        text = "".join(chars)
        try:
            spec = WorkflowSpec.from_yaml_str(text)
            spec.to_json()
            spec.to_yaml()
            assert WorkflowSpec.from_yaml_str(spec.to_yaml()) == spec
            spec.validate()
            outcomes["ok"] += 1
        except ValidationError as err:
            assert err.problems and str(err)
            outcomes["error"] += 1
    assert outcomes["error"] > 0
