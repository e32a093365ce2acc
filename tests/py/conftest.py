"""Shared fixtures: example specs as YAML text (the reference project's seed 000 examples, the full
vendor_intake example, every kind and field)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

# Seed 000, "What is a workflow?": the short vendor_intake example, as written.
VENDOR_INTAKE = """\
name: vendor_intake
description: "Import vendor Maya files, QC, export FBX, push to Unreal."
inputs:
  date: { type: string, format: date }
steps:
  - id: list
    tool: vendor_intake__list_sftp
    args: { date: "{{inputs.date}}" }
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    steps:
      - id: export
        tool: maya__export_fbx
"""

# Seed 000, "Step policies", as written (it declares no inputs).
STEP_POLICY = """\
steps:
  - id: export_fbx
    tool: maya_animation__export_fbx
    args: { scene: "{{inputs.scene_id}}" }
    timeout_secs: 300
    retry:
      max_attempts: 3
      backoff: exponential          # "fixed" | "linear" | "exponential"
      initial_delay_ms: 500
      max_delay_ms: 10000
      jitter: 0.25                  # relative, clamped to [0.0, 1.0]
      retry_on: ["transient", "timeout"]
    idempotency_key: "export_{{scene_id}}_{{frame_range}}"
    idempotency_scope: workflow     # or "global" (default: "workflow")
    idempotency_ttl_secs: 86400     # optional; None / 0 = no expiry within scope
"""

# The same with the inputs its templates refer to declared, so that it validates.
STEP_POLICY_WITH_INPUTS = """\
inputs:
  scene_id: { type: string }
  frame_range: { type: string }
""" + STEP_POLICY

# Seed 000, "Approval gating".
APPROVAL = """\
steps:
  - id: human_gate
    kind: approve
    prompt: "Proceed with vendor drop?"
    timeout_secs: 300          # optional — default is indefinite
"""

# The full vendor_intake example: the README tour's workflow with every policy field, an approval
# timeout and a tool_remote push to Unreal (engine/spec/testdata/full_vendor_intake.yaml too).
FULL_VENDOR_INTAKE = """\
name: vendor_intake
description: "Import vendor Maya files, QC, export FBX, push to Unreal."
inputs:
  date: { type: string, format: date, required: true }
  scope: { type: string, default: all }
steps:
  - id: list
    tool: vendor_intake__list_sftp            # shorthand for kind: tool
    args: { date: "{{inputs.date}}" }
  - id: per_file
    kind: foreach
    items: "$.list.files"                      # JSONPath; step ids are roots (= steps.list.output)
    as: file
    concurrency: 4
    on_any_fail: continue
    steps:
      - id: export
        tool: maya__export_fbx
        args: { scene: "{{file.path}}" }
        timeout_secs: 300
        retry: { max_attempts: 3, backoff: exponential, initial_delay_ms: 500, max_delay_ms: 10000, jitter: 0.25, retry_on: [transient, timeout] }
        idempotency_key: "export_{{file.path}}"
  - id: human_gate
    kind: approve
    prompt: "Push the {{inputs.date}} vendor drop to Unreal?"
    timeout_secs: 3600
  - id: push
    kind: tool_remote
    dcc: unreal                                # a remote MCP server named in the engine config
    tool: import_assets
    args: { files: "{{steps.per_file.output}}" }
"""

# Every step kind and field, for property and round-trip tests.
ALL_KINDS = """\
name: all_kinds
description: every kind
inputs:
  shot: { type: string, required: true, description: "the shot", enum: [sh010, sh020] }
  fps: { type: number, default: 24 }
  flags: { type: object, default: { a: [1, 2, { b: null }] } }
steps:
  - id: prep
    tool: flow__echo
    description: "prepare"
    args:
      shot: "{{inputs.shot}}"
      nested: { list: [1, 2.5, "x", true, null], map: { k: v } }
      html: "<a & b>"
      unicode: "caf\\u00e9 \\u2028 \\U0001F600"
  - id: fan
    kind: parallel
    on_any_fail: continue
    depends_on: []
    steps:
      - id: left
        tool: flow__echo
      - id: right
        tool: flow__sleep
        args: { ms: 1 }
        idempotency_key: auto
        idempotency_scope: global
        idempotency_ttl_secs: 60
  - id: loop
    kind: foreach
    items: [1, 2, 3]
    concurrency: 2
    steps:
      - id: body
        tool: flow__echo
        args: { n: "{{item}}" }
        retry: { max_attempts: 2, backoff: fixed, initial_delay_ms: 10, max_delay_ms: 20 }
  - id: choose
    kind: branch
    condition: "$.prep.ok"
    depends_on: [prep]
    then:
      - id: yes_path
        tool: flow__echo
    else:
      - id: no_path
        kind: approve
        prompt: "Go on?"
  - id: remote
    kind: tool_remote
    dcc: unreal
    tool: import_assets
    timeout_secs: 1.5
"""


@pytest.fixture(scope="session")
def dcc_flow():
    import dcc_flow as module

    return module


@pytest.fixture()
def vendor_spec(dcc_flow):
    return dcc_flow.WorkflowSpec.from_yaml_str(VENDOR_INTAKE)


@pytest.fixture()
def all_kinds_spec(dcc_flow):
    return dcc_flow.WorkflowSpec.from_yaml_str(ALL_KINDS, source="all_kinds.yaml")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``item.rep_call``...), so that a fixture's
    teardown can tell whether its test failed (the browser tests then save the page)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
