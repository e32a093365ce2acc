"""Standard-library-only smoke test, run under every Python 3.7-3.13: ``python tests/py/smoke.py``.

Prints ``smoke ok: Python X.Y, dcc_flow from DIR`` and exits 0, or prints what failed and exits 1.
"""

import hashlib
import importlib
import os
import pickle
import sys
import threading
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("DCC_FLOW_SMOKE_INSTALLED"):  # set by the wheel test: use the installed package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

VENDOR_INTAKE = """\
name: vendor_intake
description: "Import vendor Maya files, QC, export FBX, push to Unreal."
inputs:
  date: { type: string, format: date, required: true }
  scope: { type: string, default: all }
steps:
  - id: list
    tool: vendor_intake__list_sftp
    args: { date: "{{inputs.date}}" }
  - id: per_file
    kind: foreach
    items: "$.list.files"
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
    dcc: unreal
    tool: import_assets
    args: { files: "{{steps.per_file.output}}" }
"""

BAD = """\
steps:
  - id: export
    tool: maya__export_fbx
    retry: { max_attempts: 0 }
"""


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    import dcc_flow
    from dcc_flow import BackoffKind, ValidationError, WorkflowSpec

    banned = [m for m in sys.modules if m.split(".")[0] in ("maya", "hou", "PySide2", "PySide6", "PyQt5")]
    check(not banned, "import dcc_flow imported %s" % banned)

    spec = WorkflowSpec.from_yaml_str(VENDOR_INTAKE)
    check(spec.validate() is None, "vendor_intake validates")
    check(spec.name == "vendor_intake", "name")
    check([s.id for s in spec.steps] == ["list", "per_file", "human_gate", "push"], "top-level steps")
    check(spec.step_count == 5, "step_count")
    check(spec.inputs["date"].required and spec.inputs["scope"].default == "all", "inputs")
    export = spec.step("export")
    retry = export.policy.retry
    check(retry is not None and retry.backoff is BackoffKind.EXPONENTIAL, "retry backoff")
    check([retry.next_delay_ms(n) for n in (1, 2, 3, 4)] == [0, 500, 1000, 2000], "next_delay_ms")
    check(retry.is_retryable("transient") and not retry.is_retryable("fatal"), "is_retryable")
    check(export.args["scene"] == "{{file.path}}", "args")
    try:
        export.policy.retry = None  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("views are immutable")

    check(hashlib.sha256(spec.to_json().encode("utf-8")).hexdigest() == spec.spec_hash, "to_json bytes")
    again = WorkflowSpec.from_yaml_str(spec.to_yaml())
    check(again == spec and again.spec_hash == spec.spec_hash, "to_yaml round trip")
    check(WorkflowSpec.from_json(spec.to_dict()) == spec, "from_json(dict)")
    check(pickle.loads(pickle.dumps(spec)) == spec, "pickle")

    try:
        WorkflowSpec.from_yaml_str(BAD).validate()
    except ValidationError as err:
        check(isinstance(err, ValueError), "ValidationError is a ValueError")
        check('"export"' in str(err), "message names the step id: %s" % err)
        check(err.problems and err.problems[0].step_id == "export", "problems")
    else:
        raise AssertionError("max_attempts: 0 must not validate")

    try:
        WorkflowSpec.from_yaml_str(b"steps: [\xff]")
    except dcc_flow.ParseError as err:
        check("UTF-8" in str(err), "non-UTF-8 message")
    else:
        raise AssertionError("non-UTF-8 bytes must not parse")

    lib = dcc_flow._ffi.library()
    reloaded = importlib.reload(dcc_flow)
    check(reloaded._ffi.library() is lib, "reload keeps the library")
    check(reloaded.WorkflowSpec.from_yaml_str(VENDOR_INTAKE).spec_hash == spec.spec_hash, "parse after reload")

    # Run a workflow whose tools are Python functions, on this thread.
    with reloaded.Engine() as engine:
        main_thread = threading.current_thread()

        @engine.tool()
        def vendor_intake__list_sftp(date):
            return {"files": [{"path": "%s/%d.ma" % (date, i)} for i in range(3)]}

        @engine.tool()
        def maya__export_fbx(scene):
            check(threading.current_thread() is main_thread, "main-lane tool on the calling thread")
            return {"fbx": scene.replace(".ma", ".fbx")}

        result = engine.run(
            "name: smoke\ninputs: {date: {type: string}}\nsteps:\n"
            "  - {id: list, tool: vendor_intake__list_sftp, args: {date: '{{inputs.date}}'}}\n"
            "  - {id: per_file, kind: foreach, items: '$.list.files', as: file, concurrency: 2,\n"
            "     steps: [{id: export, tool: maya__export_fbx, args: {scene: '{{file.path}}'}}]}\n",
            {"date": "2026-11-22"},
        )
        check(result.ok, "smoke run completed: %r %r" % (result, result.error))
        check(result.outputs["per_file"][2]["export"]["fbx"] == "2026-11-22/2.fbx", "outputs")

        # A @task's type hints are its args schema, read with this Python's typing (docs/reference/python/tools.md
        # "Tool schemas"): a wrong type fails invalid_input before the function runs.
        from typing import Dict, List, Optional

        @dcc_flow.task(name="smoke__typed")
        def typed(scene: str, frames: int, tags: Optional[List[str]] = None, meta: Dict[str, float] = None):
            raise AssertionError("called with args that break its schema")

        # What a tool's thread prints and logs is its step's lines (docs/reference/python/tool-calls.md "Output of
        # in-process tools"), with this Python's sys.stdout and logging.
        import logging

        @engine.tool()
        def smoke__chatty():
            print("hello from print")
            sys.stderr.write("to stderr\n")
            logging.getLogger("smoke").warning("a warning")
            print("no newline", end="")

        chatty = engine.run("steps: [{id: c, tool: smoke__chatty}]").step("c")
        check([(line["stream"], line.get("level"), line["text"]) for line in chatty.logs]
              == [("stdout", None, "hello from print"), ("stderr", None, "to stderr"),
                  ("log", "WARNING", "a warning"), ("stdout", None, "no newline")], "capture: %r" % (chatty.logs,))

        # A tool looping in Python is interrupted at its deadline (docs/reference/python/tools.md "Timeouts and
        # cancel"): PyThreadState_SetAsyncExc as this Python has it.
        import time

        stopped = []

        @engine.tool()
        def smoke__spin():
            end = time.monotonic() + 30
            try:
                while time.monotonic() < end:
                    pass
            finally:
                stopped.append(time.monotonic())

        t0 = time.monotonic()
        spun = engine.run("steps: [{id: s, tool: smoke__spin, timeout_secs: 0.2}]")
        check(spun.error is not None and spun.error["message"] == "attempt 1 timed out after 200ms", "interrupt: %r"
              % (spun.error,))
        took = time.monotonic() - t0
        check(took < 10, "the spinning tool was interrupted: the run took %.1fs" % took)
        # CPython 3.13 can raise an asynchronous exception past the handlers of the frame it
        # interrupts (python/cpython#139622): the tool's own finally: may not run there.
        check(len(stopped) == 1 or sys.version_info[:2] == (3, 13), "the tool's finally: ran: %r" % (stopped,))

        engine.register_tool(typed, name="smoke__typed")
        bad = engine.run("steps: [{id: t, tool: smoke__typed, args: {scene: a, frames: '2', tags: [1]}}]")
        check(bad.error is not None and bad.error["message"] == "step t: args.frames: must be integer; got string; "
              "args.tags[0]: must be string; got number (schema of tool smoke__typed)", "task schema: %r" % (bad.error,))


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        print("smoke FAILED: Python %d.%d" % sys.version_info[:2])
        sys.exit(1)
    print("smoke ok: Python %d.%d, dcc_flow from %s"
          % (sys.version_info[0], sys.version_info[1], os.path.dirname(sys.modules["dcc_flow"].__file__)))
