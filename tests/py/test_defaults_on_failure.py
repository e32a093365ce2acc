"""Spec and engine defaults, the retry multiplier and on_failure steps (docs/reference/spec.md, "Defaults",
"on_failure"), from Python: spec views, Engine(config={"defaults": ...}), code-first options."""

import pytest

from dcc_flow import (
    Engine,
    InvalidRequestError,
    RetryPolicy,
    StepStatus,
    WorkflowSpec,
    WorkflowStatus,
    task,
    workflow,
)

ALERT_SPEC = """
name: nightly
defaults:
  timeout_secs: 600
  retry: {max_attempts: 2, multiplier: 1.5, initial_delay_ms: 0, retry_on: [transient]}
steps:
  - {id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}
on_failure:
  - id: alert
    tool: flow__echo
    args: {text: "{{run.name}} failed at {{run.error.step_key}}: {{run.error.kind}}: {{run.error.message}}"}
"""


def test_spec_views_expose_defaults_and_on_failure():
    spec = WorkflowSpec.from_yaml_str(ALERT_SPEC)
    spec.validate()
    assert spec.defaults.timeout_secs == 600
    retry = spec.defaults.retry
    assert retry is not None and retry.max_attempts == 2 and retry.multiplier == 1.5
    assert [s.id for s in spec.on_failure] == ["alert"]
    assert spec.step("alert").tool == "flow__echo"
    assert spec.step_count == 2
    # The YAML dump round-trips to the same spec (same hash).
    again = WorkflowSpec.from_yaml_str(spec.to_yaml())
    assert again.spec_hash == spec.spec_hash and again.on_failure == spec.on_failure
    plain = WorkflowSpec.from_yaml_str("steps: [{id: a, tool: t}]")
    assert plain.defaults.is_empty and plain.on_failure == () and "defaults" not in plain.to_json()


def test_multiplier_policy_view_and_delays():
    policy = RetryPolicy(5, initial_delay_ms=100, max_delay_ms=2000, multiplier=3)
    assert [policy.next_delay_ms(n) for n in range(1, 6)] == [0, 100, 300, 900, 2000]
    assert "multiplier=3" in repr(policy)
    assert RetryPolicy(3).multiplier is None and "multiplier" not in RetryPolicy(3).to_json()
    with pytest.raises(ValueError, match="exponential backoff only"):
        RetryPolicy(3, backoff="linear", multiplier=2)
    with pytest.raises(ValueError, match="from 1 to 100"):
        RetryPolicy(3, multiplier=0.5)


def test_on_failure_runs_with_the_run_error():
    with Engine() as engine:
        result = engine.run(ALERT_SPEC)
    assert result.status is WorkflowStatus.FAILED
    assert result.error["kind"] == "fatal" and result.error["step_key"] == "export"
    alert = result.step("on_failure.alert")
    assert alert.status is StepStatus.COMPLETED
    assert alert.output == {"text": "nightly failed at export: fatal: corrupt scene"}


def test_engine_config_defaults_apply_and_are_checked():
    spec = "steps: [{id: flaky, tool: flow__fail, args: {times: 2, kind: transient}}]"
    with Engine(config={"defaults": {"retry": {"max_attempts": 3, "initial_delay_ms": 0}}}) as engine:
        result = engine.run(spec)
    assert result.ok and result.step("flaky").attempt == 3
    with Engine() as engine:
        assert engine.run(spec).status is WorkflowStatus.FAILED
    with pytest.raises(InvalidRequestError, match="defaults.retry.multiplier"):
        Engine(config={"defaults": {"retry": {"max_attempts": 2, "multiplier": 500}}})


@task(name="pyalert")
def pyalert(text: str) -> dict:
    return {"sent": text}


@task
def export_scene(scene: str) -> str:
    raise RuntimeError("corrupt " + scene)


@workflow(
    defaults={"retry": RetryPolicy(2, initial_delay_ms=0, retry_on=["transient"]), "timeout_secs": 60},
    on_failure=[{"id": "alert", "tool": pyalert, "args": {"text": "{{run.error.step_key}}: {{run.error.message}}"}}],
)
def guarded(scene: str = "/proj/a.ma"):
    export_scene(scene)


def test_codefirst_defaults_and_on_failure():
    spec = guarded.spec
    assert spec.defaults.timeout_secs == 60 and spec.defaults.retry.max_attempts == 2
    assert [s.tool for s in spec.on_failure] == ["pyalert"]
    assert {t.name for t in guarded.tasks} == {"pyalert", "export_scene"}
    with Engine() as engine:
        result = engine.run(guarded)
    assert result.status is WorkflowStatus.FAILED and result.error["step_key"] == "export_scene"
    sent = result.step("on_failure.alert").output["sent"]
    assert sent.startswith("export_scene: ") and "corrupt /proj/a.ma" in sent
    with pytest.raises(ValueError, match="unknown key"):
        workflow(defaults={"idempotency_key": "auto"})(lambda: None)
