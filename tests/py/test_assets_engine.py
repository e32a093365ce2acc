"""Assets end to end from Python (docs/guide/assets.md): a tool that says what it read and wrote
(``current_call().reads/.writes``, ``@engine.tool(reads=, writes=)``), a step with ``cache: true``
served from the cache while its inputs are unchanged, and the engine's ``environment`` in each
attempt's record and in the cache key."""

import os

from dcc_flow import Engine, StepStatus, WorkflowStatus, current_call

SPEC = """
name: layout
inputs: {shot: {type: string, default: sh010}}
steps:
  - id: assemble
    tool: assemble
    args: {layers: %r, out: "%s/{{inputs.shot}}.usda"}
    cache: true
"""


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _tool(engine, calls):
    @engine.tool()
    def assemble(layers, out):
        calls.append(out)
        text = ""
        for layer in layers:
            with open(layer, encoding="utf-8") as f:
                text += f.read()
            current_call().reads(layer)
        _write(out, text)
        current_call().writes(out)
        return {"usd": out}


def _step(result, key="assemble"):
    return next(s for s in result.steps if s.key == key)


def test_files_cache_and_environment_from_python(tmp_path):
    layers = [str(tmp_path / "chair.usda"), str(tmp_path / "table.usda")]
    for p in layers:
        _write(p, "#usda 1.0\n# %s\n" % os.path.basename(p))
    spec = SPEC % (layers, tmp_path)
    db = str(tmp_path / "flow.db")
    calls = []
    with Engine(db=db, environment={"dcc": "usd", "version": "25.11"}) as engine:
        _tool(engine, calls)
        first = engine.run(spec)
        assert first.status is WorkflowStatus.COMPLETED and len(calls) == 1
        attempt = _step(engine.get_status(first.run_id, all_steps=True)).attempts[0]
        assert attempt.env == {"dcc": "usd", "version": "25.11"}
        roles = sorted((f["role"], os.path.basename(f["path"]), f["state"]) for f in attempt.files)
        assert roles == [("read", "chair.usda", "ok"), ("read", "table.usda", "ok"), ("write", "sh010.usda", "ok")]
        assert all(f["hash"].startswith("blake3:") for f in attempt.files)

        second = engine.run(spec)  # nothing changed: served from the cache
        step = _step(engine.get_status(second.run_id, all_steps=True))
        assert len(calls) == 1 and step.cached and step.status is StepStatus.COMPLETED
        assert second.outputs["assemble"] == first.outputs["assemble"]

        _write(layers[0], "#usda 1.0\n# a taller chair\n")  # an input changed: the tool runs
        assert engine.run(spec).status is WorkflowStatus.COMPLETED and len(calls) == 2

    # Another DCC version is another key: the step runs again.
    with Engine(db=db, environment={"dcc": "usd", "version": "26.02"}) as engine:
        _tool(engine, calls)
        assert engine.run(spec).status is WorkflowStatus.COMPLETED and len(calls) == 3
