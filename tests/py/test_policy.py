"""RetryPolicy formulas and classification, StepPolicy fields, status enums."""

import pytest

from dcc_flow import BackoffKind, RetryPolicy, StepStatus, WorkflowSpec, WorkflowStatus


def _retry(yaml_retry):
    text = "steps:\n  - id: s\n    tool: flow__echo\n    retry: %s\n" % yaml_retry
    spec = WorkflowSpec.from_yaml_str(text)
    spec.validate()
    return spec.steps[0].policy.retry


# --- next_delay_ms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backoff, expected",
    [
        ("fixed", [0, 100, 100, 100, 100, 100]),
        ("linear", [0, 100, 200, 300, 400, 500]),
        ("exponential", [0, 100, 200, 400, 800, 1600]),
    ],
)
def test_next_delay_formulas(backoff, expected):
    policy = RetryPolicy(6, backoff=backoff, initial_delay_ms=100, max_delay_ms=100000)
    assert [policy.next_delay_ms(n) for n in range(1, 7)] == expected
    # The same numbers for a policy parsed by the library.
    parsed = _retry("{ max_attempts: 6, backoff: %s, initial_delay_ms: 100, max_delay_ms: 100000 }" % backoff)
    assert parsed == policy
    assert [parsed.next_delay_ms(n) for n in range(1, 7)] == expected


@pytest.mark.parametrize(
    "backoff, attempt, expected",
    [
        ("fixed", 2, 300),
        ("linear", 2, 300),
        ("linear", 4, 900),
        ("linear", 5, 1000),  # 1200 clamped
        ("linear", 1000, 1000),
        ("exponential", 2, 300),
        ("exponential", 3, 600),
        ("exponential", 4, 1000),  # 1200 clamped
        ("exponential", 64, 1000),
        ("exponential", 65, 1000),
        ("exponential", 10 ** 9, 1000),  # no giant integers
    ],
)
def test_next_delay_clamps_to_max(backoff, attempt, expected):
    policy = RetryPolicy(3, backoff=backoff, initial_delay_ms=300, max_delay_ms=1000)
    assert policy.next_delay_ms(attempt) == expected


def test_next_delay_with_zero_initial_delay():
    policy = RetryPolicy(5, initial_delay_ms=0, max_delay_ms=0)
    assert [policy.next_delay_ms(n) for n in (1, 2, 3, 100, 10 ** 6)] == [0, 0, 0, 0, 0]


def test_next_delay_defaults_match_the_docs():
    policy = RetryPolicy(3)
    assert policy.backoff is BackoffKind.EXPONENTIAL
    assert (policy.initial_delay_ms, policy.max_delay_ms, policy.jitter, policy.retry_on) == (500, 10000, 0.0, None)
    assert [policy.next_delay_ms(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [0, 500, 1000, 2000, 4000, 8000, 10000]
    # Defaults filled in by the library match the Python defaults exactly.
    assert _retry("{ max_attempts: 3 }") == policy


@pytest.mark.parametrize("bad", [0, -1, 1.0, 2.5, "2", None, True, False])
def test_next_delay_rejects_bad_attempt(bad):
    with pytest.raises(ValueError, match="attempt"):
        RetryPolicy(3).next_delay_ms(bad)


# --- is_retryable ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, retried",
    [
        ("timeout", True),
        ("transient", True),
        ("error", True),
        ("some_tool_kind", True),
        ("", True),  # counts as "error"
        ("fatal", False),
        ("cancelled", False),
        ("invalid_input", False),
        ("permission", False),
        ("not_found", False),
        ("invalid_output", False),
        ("too_large", False),
    ],
)
def test_is_retryable_defaults(kind, retried):
    assert RetryPolicy(3).is_retryable(kind) is retried
    assert _retry("{ max_attempts: 3 }").is_retryable(kind) is retried


def test_is_retryable_with_retry_on():
    policy = _retry("{ max_attempts: 3, retry_on: [transient, timeout, fatal] }")
    assert policy.retry_on == ("transient", "timeout", "fatal")
    assert policy.is_retryable("transient") and policy.is_retryable("timeout")
    assert policy.is_retryable("fatal")  # listed explicitly
    assert not policy.is_retryable("error")
    assert not policy.is_retryable("")
    empty = _retry("{ max_attempts: 3, retry_on: [] }")
    assert empty.retry_on == ()
    assert not empty.is_retryable("transient")


# --- RetryPolicy construction ---------------------------------------------------------------------


def test_retry_policy_constructor_matches_parsed():
    built = RetryPolicy(
        3, backoff=BackoffKind.LINEAR, initial_delay_ms=10, max_delay_ms=50, jitter=0.5, retry_on=["timeout"]
    )
    parsed = _retry(
        "{ max_attempts: 3, backoff: linear, initial_delay_ms: 10, max_delay_ms: 50, jitter: 0.5, retry_on: [timeout] }"
    )
    assert built == parsed and hash(built) == hash(parsed)
    assert built.to_json() == parsed.to_json()
    assert RetryPolicy(3, backoff="linear") == RetryPolicy(3, backoff=BackoffKind.LINEAR)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2, "backoff": "quadratic"}, "backoff"),
        ({"max_attempts": 2, "initial_delay_ms": 20, "max_delay_ms": 10}, "initial_delay_ms"),
        ({"max_attempts": 2, "initial_delay_ms": -1}, "initial_delay_ms"),
        ({"max_attempts": 2, "jitter": 1.5}, "jitter"),
        ({"max_attempts": 2, "jitter": -0.1}, "jitter"),
        ({"max_attempts": 2, "retry_on": "transient"}, "retry_on"),
    ],
)
def test_retry_policy_constructor_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


# --- StepPolicy ------------------------------------------------------------------------------------


def test_step_policy_absent_fields_are_none():
    spec = WorkflowSpec.from_yaml_str("steps:\n  - id: s\n    tool: flow__echo\n")
    policy = spec.steps[0].policy
    assert policy.is_empty
    assert policy.timeout_secs is None
    assert policy.retry is None
    assert policy.idempotency_key is None
    assert policy.idempotency_ttl_secs is None
    assert policy.idempotency_scope == "workflow"
    assert policy.to_dict() == {}


def test_step_policy_ttl_zero_is_normalised_away():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n  - id: s\n    tool: flow__echo\n    idempotency_key: k\n    idempotency_ttl_secs: 0\n"
    )
    policy = spec.steps[0].policy
    assert policy.idempotency_ttl_secs is None
    assert "idempotency_ttl_secs" not in spec.steps[0].to_dict()
    assert policy.idempotency_key == "k" and policy.idempotency_scope == "workflow"
    assert not policy.is_empty


def test_step_policy_timeout_only():
    spec = WorkflowSpec.from_yaml_str("steps:\n  - id: s\n    tool: flow__echo\n    timeout_secs: 2.5\n")
    policy = spec.steps[0].policy
    assert policy.timeout_secs == 2.5 and policy.retry is None and not policy.is_empty
    assert policy.to_dict() == {"timeout_secs": 2.5}


def test_policies_on_control_flow_steps():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n  - id: loop\n    kind: foreach\n    items: [1]\n    timeout_secs: 5\n"
        "    steps:\n      - id: b\n        tool: flow__echo\n"
    )
    spec.validate()
    assert spec.step("loop").policy.timeout_secs == 5
    assert spec.step("loop").policy.retry is None


# --- enums ------------------------------------------------------------------------------------------


def test_backoff_kind_values():
    assert [k.value for k in BackoffKind] == ["fixed", "linear", "exponential"]
    assert BackoffKind("fixed") is BackoffKind.FIXED
    assert BackoffKind.EXPONENTIAL == "exponential"
    assert str(BackoffKind.LINEAR) == "linear" and "%s" % BackoffKind.LINEAR == "linear"
    assert "{}".format(BackoffKind.FIXED) == "fixed"


def test_workflow_status():
    assert [s.value for s in WorkflowStatus] == [
        "pending", "running", "waiting", "paused", "completed", "failed", "cancelled", "interrupted",
    ]
    terminal = {s for s in WorkflowStatus if s.is_terminal}
    assert terminal == {
        WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED, WorkflowStatus.INTERRUPTED,
    }
    assert WorkflowStatus("waiting") is WorkflowStatus.WAITING and not WorkflowStatus.WAITING.is_terminal
    assert WorkflowStatus("paused") is WorkflowStatus.PAUSED and not WorkflowStatus.PAUSED.is_terminal


def test_step_status():
    assert [s.value for s in StepStatus] == [
        "pending", "running", "retrying", "waiting_approval", "waiting_resources", "completed", "failed", "cancelled",
        "skipped", "interrupted",
    ]
    terminal = {s.value for s in StepStatus if s.is_terminal}
    assert terminal == {"completed", "failed", "cancelled", "skipped", "interrupted"}
    assert str(StepStatus.WAITING_APPROVAL) == "waiting_approval"
    assert StepStatus("waiting_resources") is StepStatus.WAITING_RESOURCES and not StepStatus.WAITING_RESOURCES.is_terminal
