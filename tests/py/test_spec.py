"""WorkflowSpec / WorkflowStep / InputSpec views: properties, traversal, canonical JSON, YAML."""

import copy
import hashlib
import json
import pickle
from types import MappingProxyType

import pytest

from conftest import (
    ALL_KINDS,
    APPROVAL,
    FULL_VENDOR_INTAKE,
    STEP_POLICY,
    STEP_POLICY_WITH_INPUTS,
    VENDOR_INTAKE,
)
from dcc_flow import (
    BackoffKind,
    InputSpec,
    RetryPolicy,
    StepPolicy,
    ValidationError,
    WorkflowSpec,
    WorkflowStep,
)

# --- the reference examples -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [VENDOR_INTAKE, STEP_POLICY_WITH_INPUTS, APPROVAL, FULL_VENDOR_INTAKE, ALL_KINDS],
    ids=["vendor_intake", "step_policy", "approval", "full_vendor_intake", "all_kinds"],
)
def test_reference_examples_parse_and_validate(text):
    spec = WorkflowSpec.from_yaml_str(text)
    assert spec.validate() is None
    assert spec.is_valid
    assert spec.problems == ()
    assert len(spec.spec_hash) == 64
    int(spec.spec_hash, 16)


def test_vendor_intake_views(vendor_spec):
    spec = vendor_spec
    assert spec.name == "vendor_intake"
    assert spec.description == "Import vendor Maya files, QC, export FBX, push to Unreal."
    assert list(spec.inputs) == ["date"]
    date = spec.inputs["date"]
    assert isinstance(date, InputSpec)
    assert (date.name, date.type, date.format, date.required) == ("date", "string", "date", False)
    assert not date.has_default and date.default is None and date.enum is None and date.description is None

    assert [s.id for s in spec.steps] == ["list", "per_file"]
    assert spec.step_count == 3
    assert [s.id for s in spec.walk()] == ["list", "per_file", "export"]
    assert [s.id for s in spec] == ["list", "per_file", "export"]

    lst = spec.steps[0]
    assert isinstance(lst, WorkflowStep)
    assert (lst.kind, lst.tool, lst.dcc) == ("tool", "vendor_intake__list_sftp", None)
    assert dict(lst.args) == {"date": "{{inputs.date}}"}
    assert lst.depends_on is None
    assert lst.policy.is_empty and lst.policy == StepPolicy._from_dict({})

    per_file = spec.step("per_file")
    assert per_file.kind == "foreach"
    assert per_file.items == "$.list.files"
    assert per_file.as_ == "file"
    assert per_file.concurrency == 1  # default made explicit
    assert per_file.on_any_fail == "abort"
    assert [s.id for s in per_file.steps] == ["export"]
    assert per_file.tool is None and dict(per_file.args) == {}
    assert spec.step("export").tool == "maya__export_fbx"
    assert spec.step("export").args == {}


def test_seed_step_policy_example():
    spec = WorkflowSpec.from_yaml_str(STEP_POLICY_WITH_INPUTS)
    step = spec.steps[0]
    policy = step.policy
    assert isinstance(policy, StepPolicy)
    assert policy.timeout_secs == 300
    retry = policy.retry
    assert isinstance(retry, RetryPolicy)
    assert retry.max_attempts == 3
    assert retry.backoff == BackoffKind.EXPONENTIAL
    assert retry.next_delay_ms(2) == 500  # first retry delay
    assert retry.jitter == 0.25
    assert retry.retry_on == ("transient", "timeout")
    assert policy.idempotency_key == "export_{{scene_id}}_{{frame_range}}"
    assert policy.idempotency_scope == "workflow"
    assert policy.idempotency_ttl_secs == 86400
    assert not policy.is_empty
    assert step.timeout_secs == 300 and step.retry == retry


def test_seed_step_policy_example_as_written_names_unknown_roots():
    # As written, the seed example uses {{scene_id}} and {{frame_range}} without declaring them.
    spec = WorkflowSpec.from_yaml_str(STEP_POLICY)
    with pytest.raises(ValidationError) as info:
        spec.validate()
    err = info.value
    assert isinstance(err, ValueError)
    assert {p.code for p in err.problems} == {"unknown_template_var"}
    assert all(p.step_id == "export_fbx" for p in err.problems)
    assert '"export_fbx"' in str(err)
    assert "scene_id" in str(err) and "frame_range" in str(err)


def test_seed_approval_example():
    spec = WorkflowSpec.from_yaml_str(APPROVAL)
    gate = spec.steps[0]
    assert gate.kind == "approve"
    assert gate.prompt == "Proceed with vendor drop?"
    assert gate.policy.timeout_secs == 300
    assert gate.tool is None and gate.steps == ()


def test_full_example(dcc_flow):
    spec = WorkflowSpec.from_yaml_str(FULL_VENDOR_INTAKE)
    assert spec.inputs["date"].required is True
    scope = spec.inputs["scope"]
    assert scope.has_default and scope.default == "all" and scope.required is False
    per_file = spec.step("per_file")
    assert per_file.concurrency == 4 and per_file.on_any_fail == "continue"
    export = spec.step("export")
    assert export.policy.retry.retry_on == ("transient", "timeout")
    assert export.policy.idempotency_key == "export_{{file.path}}"
    push = spec.step("push")
    assert (push.kind, push.dcc, push.tool) == ("tool_remote", "unreal", "import_assets")
    assert push.args["files"] == "{{steps.per_file.output}}"
    assert spec.step("human_gate").policy.timeout_secs == 3600


def test_walk_order_and_step_lookup(all_kinds_spec):
    spec = all_kinds_spec
    ids = [s.id for s in spec.walk()]
    assert ids == ["prep", "fan", "left", "right", "loop", "body", "choose", "yes_path", "no_path", "remote"]
    assert spec.step_count == len(ids) == 10
    assert [s.id for s in spec.step("fan").walk()] == ["fan", "left", "right"]
    with pytest.raises(KeyError, match="nope"):
        spec.step("nope")


def test_inputs_views(all_kinds_spec):
    inputs = all_kinds_spec.inputs
    assert isinstance(inputs, MappingProxyType)
    assert sorted(inputs) == ["flags", "fps", "shot"]
    shot = inputs["shot"]
    assert shot.required and shot.description == "the shot" and shot.enum == ("sh010", "sh020")
    assert inputs["fps"].default == 24 and inputs["fps"].type == "number"
    flags = inputs["flags"].default
    assert isinstance(flags, MappingProxyType)
    assert flags["a"] == (1, 2, {"b": None})
    with pytest.raises(TypeError):
        inputs["new"] = inputs["fps"]  # type: ignore[index]
    assert "fps" in repr(inputs["fps"])


def test_tool_step_args_deep_frozen(all_kinds_spec):
    prep = all_kinds_spec.step("prep")
    assert prep.description == "prepare"
    args = prep.args
    assert isinstance(args, MappingProxyType)
    assert args["shot"] == "{{inputs.shot}}"
    assert args["nested"]["list"] == (1, 2.5, "x", True, None)
    assert isinstance(args["nested"]["map"], MappingProxyType)
    assert args["html"] == "<a & b>"
    assert args["unicode"] == "caf\u00e9 \u2028 \U0001F600"
    with pytest.raises(TypeError):
        args["shot"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        args["nested"]["map"]["k"] = "w"  # type: ignore[index]
    with pytest.raises(AttributeError):
        args["nested"]["list"].append(1)  # type: ignore[union-attr]


def test_parallel_foreach_branch_remote(all_kinds_spec):
    spec = all_kinds_spec
    fan = spec.step("fan")
    assert fan.kind == "parallel" and fan.on_any_fail == "continue" and fan.depends_on == ()
    assert [s.id for s in fan.steps] == ["left", "right"]
    assert fan.items is None and fan.as_ is None and fan.concurrency is None

    right = spec.step("right")
    assert right.policy.idempotency_key == "auto"
    assert right.policy.idempotency_scope == "global"
    assert right.policy.idempotency_ttl_secs == 60
    assert right.args == {"ms": 1}

    loop = spec.step("loop")
    assert loop.items == (1, 2, 3) and loop.as_ == "item" and loop.concurrency == 2
    body = spec.step("body")
    assert body.policy.retry.backoff is BackoffKind.FIXED
    assert body.policy.retry.retry_on is None
    assert body.policy.retry.jitter == 0.0

    choose = spec.step("choose")
    assert choose.kind == "branch"
    assert choose.on == "$.prep.ok" and choose.condition == choose.on
    assert choose.depends_on == ("prep",)
    assert [s.id for s in choose.then] == ["yes_path"]
    assert [s.id for s in choose.else_] == ["no_path"]
    assert choose.steps == ()
    assert spec.step("no_path").prompt == "Go on?"
    assert spec.step("left").then == () and spec.step("left").else_ == ()
    assert spec.step("left").on is None and spec.step("left").prompt is None

    remote = spec.step("remote")
    assert remote.kind == "tool_remote" and remote.dcc == "unreal"
    assert remote.policy.timeout_secs == 1.5
    assert remote.args == {}


# --- canonical JSON, hash, equality ---------------------------------------------------------------


def test_to_json_is_canonical_and_hashes_to_spec_hash(all_kinds_spec):
    spec = all_kinds_spec
    text = spec.to_json()
    assert text == spec.to_json()  # stable
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == spec.spec_hash
    assert "\n" not in text and ": " not in text
    assert json.loads(text) == spec.to_dict()
    again = WorkflowSpec.from_json(text)
    assert again.to_json() == text
    assert again.spec_hash == spec.spec_hash


@pytest.mark.parametrize("text", [VENDOR_INTAKE, STEP_POLICY_WITH_INPUTS, APPROVAL, FULL_VENDOR_INTAKE, ALL_KINDS])
def test_to_json_bytes_match_go_for_every_example(text):
    spec = WorkflowSpec.from_yaml_str(text)
    assert hashlib.sha256(spec.to_json().encode("utf-8")).hexdigest() == spec.spec_hash


def test_to_json_matches_go_for_awkward_values():
    doc = {
        "name": "awkward",
        "description": "awkward <&> \u2028\u2029 \x01\x1f\x7f \u00e9 \U0001F600 \"q\" \\ \t\n\r\b\f",
        "steps": [
            {
                "id": "a",
                "tool": "flow__echo",
                "args": {
                    "floats": [0.1, 1e-7, 1e-6, 123456.789, 1e20, 1e21, 1.5e300, -2.5, 5e-324, 0.000123],
                    "ints": [0, -1, 9007199254740993, 12345678901234567890],
                    "keys": {"b": 1, "a": 2, "\u00e9": 3, "Z": 4, "<": 5},
                },
            }
        ],
    }
    spec = WorkflowSpec.from_json(doc)
    assert hashlib.sha256(spec.to_json().encode("utf-8")).hexdigest() == spec.spec_hash
    assert WorkflowSpec.from_yaml_str(spec.to_yaml()) == spec


def test_spec_hash_independent_of_key_order_and_format():
    yaml_text = """\
name: n
steps:
  - id: a
    tool: flow__echo
    args: { x: 1, y: [1, 2] }
    retry: { max_attempts: 2 }
"""
    json_text = json.dumps(
        {
            "steps": [{"retry": {"max_attempts": 2}, "args": {"y": [1, 2], "x": 1}, "kind": "tool", "tool": "flow__echo", "id": "a"}],
            "name": "n",
        },
        indent=2,
    )
    from_yaml = WorkflowSpec.from_yaml_str(yaml_text)
    from_json = WorkflowSpec.from_json(json_text)
    from_dict = WorkflowSpec.from_json(json.loads(json_text))
    assert from_yaml.spec_hash == from_json.spec_hash == from_dict.spec_hash
    assert from_yaml == from_json == from_dict
    assert hash(from_yaml) == hash(from_json)
    assert from_yaml.to_json() == from_json.to_json()


def test_equality_and_hash_of_views(all_kinds_spec):
    other = WorkflowSpec.from_yaml_str(ALL_KINDS)  # different source label, same canonical form
    assert other == all_kinds_spec and hash(other) == hash(all_kinds_spec)
    assert other.step("body") == all_kinds_spec.step("body")
    assert hash(other.step("body")) == hash(all_kinds_spec.step("body"))
    assert other.step("body").policy == all_kinds_spec.step("body").policy
    assert other.step("body").policy.retry == all_kinds_spec.step("body").policy.retry
    assert other.inputs["fps"] == all_kinds_spec.inputs["fps"]
    assert len({other, all_kinds_spec}) == 1
    assert other.step("left") != other.step("right")
    assert other.step("left") != "left"
    assert all_kinds_spec != WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    # Different view types never compare equal, even over equal JSON.
    assert StepPolicy._from_dict({}) != RetryPolicy(1)


def test_to_dict_is_a_deep_copy(all_kinds_spec):
    d = all_kinds_spec.to_dict()
    d["steps"][0]["args"]["shot"] = "changed"
    d["name"] = "changed"
    assert all_kinds_spec.name == "all_kinds"
    assert all_kinds_spec.step("prep").args["shot"] == "{{inputs.shot}}"
    step_dict = all_kinds_spec.step("prep").to_dict()
    assert step_dict["id"] == "prep" and step_dict["kind"] == "tool"
    step_dict["args"]["nested"]["list"].append(9)
    assert all_kinds_spec.step("prep").args["nested"]["list"] == (1, 2.5, "x", True, None)


# --- YAML ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [VENDOR_INTAKE, STEP_POLICY, APPROVAL, FULL_VENDOR_INTAKE, ALL_KINDS])
def test_to_yaml_round_trip(text):
    spec = WorkflowSpec.from_yaml_str(text)
    out = spec.to_yaml()
    assert out.endswith("\n")
    again = WorkflowSpec.from_yaml_str(out)
    assert again == spec
    assert again.to_json() == spec.to_json()
    assert again.to_yaml() == out  # a fixed point


def test_to_yaml_quotes_strings_that_look_like_other_types():
    doc = {
        "name": "yes",
        "description": "multi\nline: with # and {{ braces }} and 'quotes' \"double\"",
        "inputs": {"nul": {"type": "string", "default": "null"}, "n": {"type": "any", "default": "3"}},
        "steps": [
            {
                "id": "s",
                "tool": "flow__echo",
                "args": {
                    "true": "false",
                    "no": "~",
                    "x-y": "-1",
                    "": "empty key",
                    "list": [[1, [2, []]], {}, [{"a": {}}], "0x1F", "1e3", ".inf", "- dash", ": colon"],
                    "ctrl": "\x00\x07\x1b\u0085\u2028\ufeff",
                },
            }
        ],
    }
    spec = WorkflowSpec.from_json(doc)
    out = spec.to_yaml()
    assert 'name: "yes"' in out
    again = WorkflowSpec.from_yaml_str(out)
    assert again == spec
    args = again.step("s").args
    assert args["true"] == "false" and args["no"] == "~" and args["x-y"] == "-1" and args[""] == "empty key"
    assert args["ctrl"] == "\x00\x07\x1b\u0085\u2028\ufeff"
    assert again.inputs["n"].default == "3" and again.inputs["nul"].default == "null"


def test_to_yaml_is_readable(vendor_spec):
    out = vendor_spec.to_yaml()
    lines = out.splitlines()
    assert lines[0] == 'name: "vendor_intake"'
    assert lines[1].startswith("description: ")
    assert "steps:" in lines
    assert '  - id: "list"' in lines
    assert '    kind: "tool"' in lines


# --- immutability, pickling, repr ----------------------------------------------------------------


def _views(spec):
    step = spec.step("body")
    return [spec, step, step.policy, step.policy.retry, spec.inputs["fps"]]


@pytest.mark.parametrize("attr", ["name", "steps", "id", "policy", "retry", "_data", "new_attribute", "max_attempts"])
def test_every_view_is_immutable(all_kinds_spec, attr):
    for view in _views(all_kinds_spec):
        before = view.to_json()
        with pytest.raises(AttributeError):
            setattr(view, attr, "x")
        with pytest.raises(AttributeError):
            delattr(view, attr)
        assert view.to_json() == before
    with pytest.raises(AttributeError):
        object.__getattribute__(all_kinds_spec, "__dict__")


def test_views_pickle_and_copy(all_kinds_spec):
    for view in _views(all_kinds_spec):
        for clone in (pickle.loads(pickle.dumps(view)), copy.copy(view), copy.deepcopy(view)):
            assert clone == view and type(clone) is type(view)
    restored = pickle.loads(pickle.dumps(all_kinds_spec))
    assert restored.spec_hash == all_kinds_spec.spec_hash
    assert restored.source == "all_kinds.yaml"
    assert [s.id for s in restored.walk()] == [s.id for s in all_kinds_spec.walk()]


def test_reprs(all_kinds_spec):
    assert repr(all_kinds_spec).startswith("WorkflowSpec(name='all_kinds', steps=10, spec_hash='")
    assert repr(all_kinds_spec.step("prep")) == "WorkflowStep(id='prep', kind='tool', tool='flow__echo')"
    assert repr(all_kinds_spec.step("fan")) == "WorkflowStep(id='fan', kind='parallel', children=2)"
    body = all_kinds_spec.step("body")
    assert "retry=RetryPolicy(max_attempts=2, backoff='fixed'" in repr(body.policy)
    assert repr(all_kinds_spec.step("left").policy) == "StepPolicy()"
    assert "InputSpec('shot', type='string', required=True" in repr(all_kinds_spec.inputs["shot"])


# --- constructors -------------------------------------------------------------------------------


def test_from_file_yaml_json_and_source(tmp_path):
    yml = tmp_path / "flow.yml"
    yml.write_text(VENDOR_INTAKE, encoding="utf-8")
    spec = WorkflowSpec.from_file(yml)
    assert spec.source == str(yml)
    js = tmp_path / "flow.json"
    js.write_text(spec.to_json(), encoding="utf-8")
    # The format comes from the content, not the extension.
    odd = tmp_path / "flow.txt"
    odd.write_text(spec.to_json(), encoding="utf-8")
    assert WorkflowSpec.from_file(str(js)) == spec == WorkflowSpec.from_file(odd)
    with pytest.raises(FileNotFoundError):
        WorkflowSpec.from_file(tmp_path / "missing.yaml")


def test_from_file_error_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - id: a\n    tol: flow__echo\n", encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        WorkflowSpec.from_file(bad)
    assert str(bad) in str(info.value)
    assert '"a"' in str(info.value)


def test_from_yaml_str_accepts_bytes_and_bom():
    spec = WorkflowSpec.from_yaml_str(VENDOR_INTAKE.encode("utf-8"))
    assert spec.name == "vendor_intake"
    assert WorkflowSpec.from_yaml_str(b"\xef\xbb\xbf" + VENDOR_INTAKE.encode("utf-8")) == spec
    assert WorkflowSpec.from_yaml_str(bytearray(VENDOR_INTAKE.encode("utf-8"))) == spec


def test_from_json_accepts_dict_mappings_and_views(vendor_spec):
    doc = vendor_spec.to_dict()
    assert WorkflowSpec.from_json(doc) == vendor_spec
    assert WorkflowSpec.from_json(MappingProxyType(doc)) == vendor_spec
    assert WorkflowSpec.from_json(vendor_spec) is vendor_spec
    # Frozen args of one spec can be used to build another.
    doc["steps"][0]["args"] = vendor_spec.steps[0].args
    assert WorkflowSpec.from_json(doc) == vendor_spec
    assert WorkflowSpec.from_json(vendor_spec.to_json().encode("utf-8")) == vendor_spec


def test_warnings_are_exposed():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n  - id: a\n    tool: flow__echo\n    retry: { max_attempts: 2, jitter: 1.5 }\n"
    )
    assert spec.validate() is None
    assert [w.code for w in spec.warnings] == ["jitter_clamped"]
    assert spec.warnings[0].severity == "warning"
    assert spec.warnings[0].step_id == "a"
    assert spec.step("a").policy.retry.jitter == 1.0


def test_to_json_reparses_with_raw_control_characters(tmp_path):
    # Go's canonical JSON keeps DEL, C1 controls and NEL raw; they must survive a JSON round trip.
    spec = WorkflowSpec.from_yaml_str(
        'steps:\n  - id: a\n    tool: flow__echo\n    args: { x: "a\\x7fb\\x80c\\x85d\\u2028e\\u2029f" }\n'
    )
    assert spec.step("a").args["x"] == "a\x7fb\x80c\x85d\u2028e\u2029f"
    assert WorkflowSpec.from_json(spec.to_json()) == spec
    path = tmp_path / "spec.json"
    path.write_bytes(spec.to_json().encode("utf-8"))
    assert WorkflowSpec.from_file(path) == spec
    assert WorkflowSpec.from_json(spec.to_dict()) == spec
    assert WorkflowSpec.from_yaml_str(spec.to_yaml()) == spec


def test_to_json_matches_go_for_negative_zero():
    # Go keeps the float -0 and writes it "-0", which json.loads alone reads as the integer 0.
    text = '{"name":"z","steps":[{"id":"a","tool":"t","args":{"i":-0,"f":-0.0,"l":[-0,0,-0.5]}}]}'
    spec = WorkflowSpec.from_json(text)
    assert '"f":-0,"i":-0,"l":[-0,0,-0.5]' in spec.to_json()
    assert hashlib.sha256(spec.to_json().encode("utf-8")).hexdigest() == spec.spec_hash
    assert WorkflowSpec.from_json(spec.to_dict()).spec_hash == spec.spec_hash


def test_to_yaml_keeps_a_final_newline_in_strings_and_keys():
    # A double-quoted YAML scalar folds a raw line break into a space: "line\n" must be escaped.
    spec = WorkflowSpec.from_json({"name": "n", "description": "ends with a newline\n", "steps": [
        {"id": "a", "tool": "t", "args": {"x": "line\n", "key\n": 1, "crlf": "a\r\n"}}]})
    again = WorkflowSpec.from_yaml_str(spec.to_yaml())
    assert again.steps[0].args["x"] == "line\n"
    assert again.steps[0].args["key\n"] == 1
    assert again.description == "ends with a newline\n"
    assert again == spec
