"""The scheduler's Python surface: ScheduleSpec, TriggerSpec, parse_schedules_yaml, HMAC helpers."""
import pytest

import dcc_flow
from dcc_flow import ScheduleSpec, TriggerSpec

SEED = """
schedules:
  - id: nightly_cleanup
    workflow: scene_cleanup          # WorkflowSpec id
    inputs:
      scope: all-scenes
    trigger:
      kind: cron
      expression: "0 0 3 * * *"      # sec min hour day month weekday
      timezone: UTC
      jitter_secs: 120
    enabled: true
    max_concurrent: 1

  - id: on_upload
    workflow: validate_upload
    inputs:
      path: "{{trigger.payload.file_path}}"
    trigger:
      kind: webhook
      path: /webhooks/upload
      secret_env: UPLOAD_WEBHOOK_SECRET
    enabled: true
"""


def test_reference_schedules_file_parses():
    specs = dcc_flow.parse_schedules_yaml(SEED, path_hint="maint.schedules.yaml")
    assert [s.id for s in specs] == ["nightly_cleanup", "on_upload"]
    nightly, upload = specs
    assert nightly.trigger == TriggerSpec.cron("0 0 3 * * *", timezone="UTC", jitter_secs=120)
    assert nightly.inputs == {"scope": "all-scenes"} and nightly.max_concurrent == 1
    assert upload.trigger == TriggerSpec.webhook("/webhooks/upload", secret_env="UPLOAD_WEBHOOK_SECRET")
    assert upload.inputs["path"] == "{{trigger.payload.file_path}}"
    assert nightly.line == 3


def test_parse_errors_are_value_errors_with_file_line_and_id():
    bad = """
schedules:
  - id: a
    workflow: w
    trigger: {kind: cron, expression: "0 3 * * *"}
  - id: a
    workflow: w
    trigger: {kind: webhook, path: hooks/x}
"""
    with pytest.raises(ValueError) as info:
        dcc_flow.parse_schedules_yaml(bad, path_hint="bad.schedules.yaml")
    err = info.value
    assert isinstance(err, dcc_flow.ValidationError)
    codes = sorted(p.code for p in err.problems)
    assert "invalid_cron" in codes and "duplicate_id" in codes and "invalid_webhook_path" in codes
    text = str(err)
    assert "0 0 3 * * *" in text  # the hint to add the seconds field
    assert "bad.schedules.yaml" in text
    cron = [p for p in err.problems if p.code == "invalid_cron"][0]
    assert cron.line == 5


def test_schedule_spec_validate_and_immutability():
    spec = ScheduleSpec(id="nightly_cleanup", workflow="scene_cleanup",
                        trigger=TriggerSpec.cron("0 0 3 * * *", timezone="UTC", jitter_secs=120),
                        inputs='{"scope": "all-scenes"}', max_concurrent=1)
    assert spec.validate() is None
    assert spec.inputs == {"scope": "all-scenes"}
    with pytest.raises(AttributeError):
        spec.workflow = "x"
    with pytest.raises(AttributeError):
        spec.trigger.expression = "x"
    with pytest.raises(dcc_flow.ValidationError, match="timezone"):
        ScheduleSpec(id="x", workflow="w", trigger=TriggerSpec.cron("0 0 3 * * *", timezone="Mars/Olympus")).validate()
    with pytest.raises(dcc_flow.ValidationError):
        ScheduleSpec(id="x", workflow="w", trigger=TriggerSpec.interval("-5m")).validate()
    assert ScheduleSpec(id="i", workflow="w", trigger=TriggerSpec.interval("15m")).validate() is None
    with pytest.raises(TypeError):
        ScheduleSpec(id="x", workflow="w", trigger={"kind": "cron"})


def test_github_published_hmac_example():
    secret, body = "It's a Secret to Everybody", "Hello, World!"
    digest = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert dcc_flow.hmac_sha256_hex(secret, body) == digest
    assert dcc_flow.verify_hub_signature_256(secret.encode(), body.encode(), "sha256=" + digest)
    assert not dcc_flow.verify_hub_signature_256(secret, "Hello, World?", "sha256=" + digest)
    assert not dcc_flow.verify_hub_signature_256(secret, body, digest)  # bare hex
    assert not dcc_flow.verify_hub_signature_256(secret, body, None)
    assert not dcc_flow.verify_hub_signature_256(secret, body, "sha256=" + digest[:-1] + "0")
    with pytest.raises(TypeError):
        dcc_flow.hmac_sha256_hex(123, body)
