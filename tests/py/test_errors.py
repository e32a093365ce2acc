"""Exceptions: hierarchy, envelope mapping, messages that name every problem and step id."""

import pathlib
import pickle
import re

import pytest

from dcc_flow import (
    AbiVersionError,
    DccFlowError,
    InternalError,
    InvalidRequestError,
    LibraryLoadError,
    LibraryNotFoundError,
    ParseError,
    Problem,
    SpecTooLargeError,
    ValidationError,
    WorkflowSpec,
    _errors,
    _ffi,
)


def _problems_of(text):
    """The ValidationError for text, whether raised at parse time or by validate()."""
    with pytest.raises(ValidationError) as info:
        WorkflowSpec.from_yaml_str(text).validate()
    return info.value


# --- hierarchy ----------------------------------------------------------------------------------


def test_hierarchy():
    assert issubclass(ValidationError, DccFlowError) and issubclass(ValidationError, ValueError)
    assert issubclass(ParseError, ValidationError) and issubclass(SpecTooLargeError, ValidationError)
    assert issubclass(InvalidRequestError, ValueError) and issubclass(InvalidRequestError, DccFlowError)
    assert issubclass(InternalError, DccFlowError) and not issubclass(InternalError, ValueError)
    assert issubclass(LibraryNotFoundError, OSError) and issubclass(LibraryNotFoundError, LibraryLoadError)
    assert issubclass(AbiVersionError, LibraryLoadError)
    assert {
        "invalid_request": InvalidRequestError,
        "parse_error": ParseError,
        "not_a_mapping": ParseError,
        "validation_failed": ValidationError,
        "too_large": SpecTooLargeError,
        "internal": InternalError,
        "db_locked": _errors.DatabaseLockedError,
        "read_only": _errors.ReadOnlyError,
        "storage": _errors.StorageError,
        "worker_start": _errors.WorkerStartError,
        "invalid_input": _errors.InvalidInputError,
        "not_found": _errors.NotFoundError,
        "unknown_tool": _errors.UnknownToolError,
        "not_resumable": _errors.NotResumableError,
        "spec_changed": _errors.SpecChangedError,
        "invalid_state": _errors.InvalidStateError,
        "closed": _errors.EngineClosedError,
        "stale_handle": _errors.StaleHandleError,
        "timeout": _errors.DccFlowTimeoutError,
        "cancelled": _errors.CancelledError,
    } == _errors.CODE_TO_CLASS
    # The classes callers catch by the Python meaning of the failure.
    assert issubclass(_errors.NotFoundError, LookupError) and issubclass(_errors.UnknownToolError, LookupError)
    assert issubclass(_errors.InvalidInputError, ValidationError)
    assert issubclass(_errors.EngineClosedError, RuntimeError) and issubclass(_errors.StaleHandleError, _errors.EngineClosedError)
    assert issubclass(_errors.DccFlowTimeoutError, TimeoutError)


_GO_ERRORS = pathlib.Path(__file__).resolve().parents[2] / "engine" / "run" / "errors.go"


def test_every_go_error_code_has_a_class():
    """Each stable code of engine/run/errors.go raises its own class, whose default_code it is."""
    codes = re.findall(r'^\s+Code\w+\s*=\s*"(\w+)"', _GO_ERRORS.read_text(encoding="utf-8"), re.M)
    assert len(codes) >= 18, codes  # the parse found the constants
    missing = [c for c in codes if c not in _errors.CODE_TO_CLASS]
    assert not missing, "Go error codes without a Python class in _errors.CODE_TO_CLASS: %s" % missing
    for code in codes:
        cls = _errors.CODE_TO_CLASS[code]
        assert cls is not DccFlowError and cls.default_code == code, (code, cls)
        assert cls.__name__ in _errors.__all__, cls
        err = _errors.error_from_envelope({"code": code, "message": "m"})
        assert type(err) is cls and err.code == code


# --- envelopes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, cls",
    [
        ("invalid_request", InvalidRequestError),
        ("parse_error", ParseError),
        ("validation_failed", ValidationError),
        ("too_large", SpecTooLargeError),
        ("internal", InternalError),
        ("not_found", _errors.NotFoundError),
        ("closed", _errors.EngineClosedError),
        ("some_future_code", DccFlowError),
    ],
)
def test_envelope_to_exception(code, cls):
    envelope = {"code": code, "message": "boom", "step_id": "export", "line": 7, "column": 5, "details": {"x": 1}}
    err = _errors.error_from_envelope(envelope)
    assert type(err) is cls
    assert err.code == code
    assert err.step_id == "export" and err.line == 7 and err.column == 5
    assert "boom" in str(err)
    if isinstance(err, ValidationError):
        assert len(err.problems) == 1 and err.problems[0].step_id == "export"
        assert 'line 7:5 boom (step "export")' in str(err)
    else:
        assert err.details == {"x": 1}


def test_envelope_with_problems():
    problems = [
        {"code": "unknown_field", "severity": "error", "message": 'steps[0] (id "list"): unknown field "tol"',
         "step_id": "list", "path": "steps[0].tol", "line": 4, "column": 5, "hint": 'did you mean "tool"?'},
        {"code": "no_steps", "severity": "error", "message": "spec has no steps"},
        {"code": "jitter_clamped", "severity": "warning", "message": "jitter clamped", "step_id": "x"},
    ]
    err = _errors.error_from_envelope(
        {"code": "validation_failed", "message": "ignored", "details": {"problems": problems}}, source="f.yaml"
    )
    assert isinstance(err, ValidationError)
    assert [p.code for p in err.problems] == ["unknown_field", "no_steps", "jitter_clamped"]
    assert [p.code for p in err.errors] == ["unknown_field", "no_steps"]
    assert [p.code for p in err.warnings] == ["jitter_clamped"]
    assert str(err) == (
        "3 problems in f.yaml:\n"
        '  line 4:5 steps[0] (id "list"): unknown field "tol"\n'
        "  spec has no steps\n"
        '  warning: jitter clamped (step "x")'
    )
    assert err.step_id == "list" and (err.line, err.column) == (4, 5)
    first = err.problems[0]
    assert first.hint == 'did you mean "tool"?' and first.path == "steps[0].tol"


def test_internal_error_mentions_stack():
    err = _errors.error_from_envelope({"code": "internal", "message": "panic: x", "details": {"stack": "goroutine 1"}})
    assert isinstance(err, InternalError)
    assert err.details["stack"] == "goroutine 1"
    assert "bug" in str(err)


@pytest.mark.parametrize(
    "rc, raw, cls",
    [
        (1, b'{"code":"parse_error","message":"bad"}', ParseError),
        (2, b'{"code":"invalid_request","message":"bad json"}', InvalidRequestError),
        (3, b'{"code":"internal","message":"panic"}', InternalError),
        (3, b'{"message":"no code"}', InternalError),
        (2, b'{"message":"no code"}', InvalidRequestError),
        (1, None, InternalError),
        (1, b"not json", InternalError),
        (0, b"[1]", InternalError),
        (1, b"[1]", InternalError),
    ],
)
def test_check(rc, raw, cls):
    with pytest.raises(cls):
        _ffi._check("dccflow_x", rc, raw)


def test_check_ok():
    assert _ffi._check("dccflow_x", 0, None) == {}
    assert _ffi._check("dccflow_x", 0, b'{"a": "\xc3\xa9"}') == {"a": "\u00e9"}


# --- Problem ------------------------------------------------------------------------------------


def test_problem_is_frozen_value():
    p = Problem.from_dict({"code": "cycle", "message": "m", "step_id": "a", "line": 2, "column": 3})
    q = Problem("cycle", "m", step_id="a", line=2, column=3)
    assert p == q and hash(p) == hash(q) and p != Problem("cycle", "other")
    assert p.severity == "error" and p.is_error and p.path is None and p.hint is None
    with pytest.raises(AttributeError):
        p.code = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.message
    assert pickle.loads(pickle.dumps(p)) == p
    assert Problem.from_dict(p.to_dict()) == p
    assert p.to_dict() == {"code": "cycle", "severity": "error", "message": "m", "step_id": "a", "line": 2, "column": 3}
    assert "cycle" in repr(p)
    assert str(p) == 'line 2:3 m (step "a")'


def test_errors_pickle():
    err = _errors.error_from_envelope(
        {"code": "validation_failed", "message": "x",
         "details": {"problems": [{"code": "cycle", "severity": "error", "message": "m", "step_id": "a"}]}}
    )
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is ValidationError and str(clone) == str(err) and clone.problems == err.problems
    internal = pickle.loads(pickle.dumps(InternalError("boom", details={"stack": "s"})))
    assert type(internal) is InternalError and internal.code == "internal" and internal.details == {"stack": "s"}


# --- validation errors from the library -----------------------------------------------------------


@pytest.mark.parametrize(
    "step_yaml, code",
    [
        ("tool: flow__echo\n    retry: { max_attempts: 0 }", "invalid_policy"),
        ("tool: flow__echo\n    retry: { max_attempts: 2, initial_delay_ms: 900, max_delay_ms: 100 }", "invalid_policy"),
        ("tool: flow__echo\n    timeout_secs: 0", "invalid_policy"),
        ('tool: flow__echo\n    idempotency_key: "k_{{inputs.x"', None),
        ('tool: flow__echo\n    idempotency_key: "k_{{nope}}"', "unknown_template_var"),
        ('tool: flow__echo\n    args: { a: "{{nope.x}}" }', "unknown_template_var"),
        ("tool: \"bad tool name!\"", "invalid_tool_name"),
        ("tol: flow__echo", "unknown_field"),
        ("tool: flow__echo\n    timeout_secs: soon", "wrong_type"),
        ("kind: teleport", "unknown_kind"),
    ],
)
def test_policy_and_field_errors_name_the_step(step_yaml, code):
    text = "steps:\n  - id: first\n    tool: flow__echo\n  - id: culprit\n    %s\n" % step_yaml
    err = _problems_of(text)
    assert isinstance(err, ValueError)
    assert '"culprit"' in str(err)
    assert any(p.step_id == "culprit" for p in err.problems)
    if code is not None:
        assert code in {p.code for p in err.problems}, err.problems
    for p in err.problems:
        if p.step_id == "culprit":
            assert p.line is not None and p.line >= 4


def test_every_problem_is_reported_at_once():
    text = """\
steps:
  - id: a
    tool: flow__echo
    retry: { max_attempts: 0 }
  - id: b
    tool: flow__echo
    timeout_secs: 0
  - id: c
    tool: flow__echo
    args: { x: "{{nope}}" }
"""
    err = _problems_of(text)
    assert len(err.errors) >= 3
    message = str(err)
    assert message.startswith("%d problems in spec:\n" % len(err.problems))
    for step_id in ("a", "b", "c"):
        assert '"%s"' % step_id in message
    lines = message.splitlines()[1:]
    assert len(lines) == len(err.problems)
    assert all(line.startswith("  line ") for line in lines)


def test_structural_errors_raise_at_parse_time():
    with pytest.raises(ValidationError) as info:
        WorkflowSpec.from_yaml_str("steps:\n  - id: a\n    tol: flow__echo\n")
    problem = next(p for p in info.value.problems if p.code == "unknown_field")
    assert problem.hint and "tool" in problem.hint
    assert (problem.line, problem.step_id) == (3, "a")


def test_duplicate_ids_and_cycles():
    err = _problems_of(
        "steps:\n  - id: a\n    tool: flow__echo\n    depends_on: [b]\n"
        "  - id: b\n    tool: flow__echo\n    depends_on: [a]\n"
        "  - id: b\n    tool: flow__echo\n"
    )
    codes = {p.code for p in err.problems}
    assert "duplicate_step_id" in codes
    err = _problems_of(
        "steps:\n  - id: a\n    tool: flow__echo\n    depends_on: [b]\n"
        "  - id: b\n    tool: flow__echo\n    depends_on: [a]\n"
    )
    assert "cycle" in {p.code for p in err.problems}
    err = _problems_of("steps:\n  - id: a\n    tool: flow__echo\n    depends_on: [ghost]\n")
    assert "unknown_dependency" in {p.code for p in err.problems}
    assert "ghost" in str(err)


def test_public_classes_present_as_dcc_flow():
    import pickle

    import dcc_flow

    assert dcc_flow.ValidationError.__module__ == "dcc_flow"
    assert dcc_flow.WorkflowSpec.__module__ == "dcc_flow"
    try:
        dcc_flow.WorkflowSpec.from_yaml_str("steps: [{id: a, tol: t}]")
    except dcc_flow.ValidationError as exc:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is dcc_flow.ValidationError
        assert str(again) == str(exc)
    else:
        raise AssertionError("no ValidationError")
