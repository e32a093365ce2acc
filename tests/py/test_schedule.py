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


def test_schedule_problems_name_file_and_schedule():
    # Schedule and spec problems are one type in the library; a schedule's carry its file and id.
    bad = "schedules:\n  - id: a\n    workflow: w\n    max_concurent: 2\n    trigger: {kind: interval, every: 1m}\n"
    with pytest.raises(dcc_flow.ValidationError) as info:
        dcc_flow.parse_schedules_yaml(bad, path_hint="x.schedules.yaml")
    (p,) = info.value.problems
    assert (p.code, p.severity, p.file, p.schedule_id, p.step_id) == ("unknown_field", "error", "x.schedules.yaml", "a", None)
    assert (p.path, p.line, p.column, p.hint) == ("schedules[0].max_concurent", 4, 5, 'did you mean "max_concurrent"?')
    assert p.to_dict()["file"] == "x.schedules.yaml" and dcc_flow.Problem.from_dict(p.to_dict()) == p
    assert str(p) == 'x.schedules.yaml:4:5 schedule "a": unknown field "max_concurent"; did you mean "max_concurrent"?'
    assert 'x.schedules.yaml:4:5 schedule "a"' in str(info.value)


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


def test_engine_schedules_and_serves_signed_webhooks(monkeypatch):
    import json
    import threading
    import urllib.error
    import urllib.request

    monkeypatch.setenv("UPLOAD_SECRET", "It's a Secret to Everybody")
    with dcc_flow.Engine() as engine:
        seen = []

        @engine.tool(thread="worker")
        def check_upload(path):
            seen.append(path)
            return {"checked": path}

        engine.serve_tools(workers=1)
        flow = "name: validate_upload\ninputs: {path: {type: string}}\nsteps: [{id: c, tool: check_upload, args: {path: '{{inputs.path}}'}}]"
        spec = engine.schedule(flow, webhook="/webhooks/upload", secret_env="UPLOAD_SECRET",
                               inputs={"path": "{{trigger.payload.file_path}}"}, id="on_upload")
        assert spec.workflow == "validate_upload"
        nightly = engine.schedule("validate_upload", cron="0 0 3 * * *", timezone="America/New_York", id="nightly",
                                  inputs={"path": "/all"})
        assert nightly.trigger.timezone == "America/New_York"
        listed = {s["id"]: s for s in engine.schedules()}
        assert set(listed) == {"on_upload", "nightly"}
        assert listed["nightly"]["next_fire"] and listed["on_upload"]["next_fire"] is None
        addr = engine.serve(webhooks="127.0.0.1:0")["webhooks_addr"]

        body = json.dumps({"file_path": "/drops/a.ma"}).encode()

        def post(sig):
            req = urllib.request.Request("http://%s/webhooks/upload" % addr, data=body, method="POST",
                                         headers={"Content-Type": "application/json", "X-Hub-Signature-256": sig})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        code, doc = post("sha256=" + "0" * 64)
        assert code == 401 and doc["error"] == "invalid_signature"
        code, doc = post("sha256=" + dcc_flow.hmac_sha256_hex("It's a Secret to Everybody", body))
        assert code == 202 and doc["status"] == "enqueued"
        result = engine.get_status(doc["run_id"])
        for _ in range(200):
            if result.terminal:
                break
            threading.Event().wait(0.02)
            result = engine.get_status(doc["run_id"])
        assert result.ok and result.outputs["c"] == {"checked": "/drops/a.ma"}
        assert seen == ["/drops/a.ma"]
        with pytest.raises(ValueError):
            engine.schedule("validate_upload", cron="0 3 * * *")  # 5 fields
        with pytest.raises(ValueError):
            engine.schedule("validate_upload")
        engine.unschedule("nightly")
        assert [s["id"] for s in engine.schedules()] == ["on_upload"]
        engine.stop_serving()
