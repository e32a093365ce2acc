"""Code-first workflows (``@task`` / ``@workflow``): traced specs equal hand-written YAML, and run the same.

Every pipeline below has a hand-written twin in ``tests/py/codefirst/*.yaml``. For each one the
traced spec must have the same canonical JSON and spec hash as the YAML, and running it (its tasks
registered as tools automatically) must give the same step outputs as running the YAML with the
same functions registered by hand.
"""

import importlib.util
import os
import pickle
import subprocess
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence

import pytest

import dcc_flow
from dcc_flow import (
    Engine,
    FlowContext,
    Retry,
    Task,
    Workflow,
    WorkflowSpec,
    WorkflowStatus,
    WorkflowTraceError,
    task,
    unmapped,
    workflow,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
YAML_DIR = os.path.join(HERE, "codefirst")
THIS_FILE = os.path.basename(__file__)


def marker_line(marker: str) -> int:
    """The line of this file that carries the comment ``# <marker>``."""
    with open(__file__, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.rstrip().endswith("# " + marker):
                return number
    raise AssertionError("no line marked %r" % marker)


# --- tasks: plain, deterministic functions (the "tools") --------------------------------------


@task(name="maya__open_scene", timeout_seconds=60)
def open_scene(path):
    return {"scene": path, "nodes": 12}


@task(name="maya__qc_scene", retries=2, retry_delay_seconds=0.01)
def qc_scene(scene, checks=("naming",)):
    ok = "bad" not in scene
    return {"passed": ok, "errors": [] if ok else ["bad_normals"], "checked": list(checks)}


@task(
    name="maya__export_fbx",
    retries=3,
    retry_delay_seconds=Retry("linear", 0.01, 0.05, jitter=0.1, retry_on=["transient", TimeoutError]),
    timeout_seconds=120,
    idempotency_key="fbx_{scene}_{fps}",
)
def export_fbx(scene, fps=24):
    return {"fbx": scene.replace(".ma", "_%s.fbx" % fps), "fps": fps}


@task(name="maya__export_abc")
def export_abc(scene, frames):
    return {"abc": scene.replace(".ma", ".abc"), "frames": frames}


@task(name="maya__playblast")
def playblast(scene):
    return {"movie": scene.replace(".ma", ".mov")}


@task(name="studio__make_review")
def make_review(movie):
    return {"review": movie + ".review"}


@task(name="studio__publish", idempotency_key="auto", idempotency_scope="global", idempotency_ttl_seconds=3600)
def publish(files, shot):
    return {"published": list(files), "shot": shot}


@task(name="studio__notify")
def notify(text):
    return {"sent": text}


@task(name="studio__report")
def report(results, first=None):
    return {"count": len(results) if isinstance(results, (list, dict)) else 0, "first": first}


@task(name="vendor__list_drop")
def list_drop(date):
    names = ["hero", "prop", "set"]
    return {
        "files": [{"path": "/drop/%s/%s.ma" % (date, n)} for n in names],
        "paths": ["/drop/%s/%s.ma" % (date, n) for n in names],
    }


@task(name="maya__convert", thread="worker", max_concurrent=2)
def convert(scene, fmt="fbx"):
    return {"out": scene.rsplit(".", 1)[0] + "." + fmt}


@task(name="studio__list_shots")
def list_shots(project):
    return {"shots": [{"name": "sh010", "layers": ["bg", "fg"]}, {"name": "sh020", "layers": ["fx"]}],
            "project": project}


@task(name="houdini__render")
def render(shot, layer, frames):
    return {"image": "/render/%s/%s.exr" % (shot, layer), "frames": frames}


@task(name="studio__fetch_refs")
def fetch_refs(project):
    return {"refs": ["%s/ref_a" % project, "%s/ref_b" % project]}


@task(name="studio__merge")
def merge(files, refs):
    return {"merged": list(files) + list(refs)}


@task(name="studio__cleanup")
def cleanup():
    return {"clean": True}


@task(name="studio__push")
def push(files, approved_by):
    return {"pushed": files, "by": approved_by}


# --- the pipelines --------------------------------------------------------------------------


@workflow(name="sequential", description="Open, QC, export twice, publish.")
def sequential(ctx: FlowContext, shot: str, fps: int = 24, notes: Optional[str] = None):
    opened = open_scene(path=ctx.template("/proj/{}/anim.ma", shot))
    qc_scene(opened.scene, checks=["naming", "normals"])
    first = export_fbx(scene=opened["scene"], fps=fps)
    second = export_fbx(scene=opened.scene, fps=30)
    publish(files=[first.fbx, second.fbx], shot=shot)


@workflow
def foreach_drop(ctx, date: str):
    listing = list_drop(date)
    loop = ctx.foreach(listing.files, concurrency=4, on_any_fail="continue")
    with loop as file:
        convert(scene=file.path)
        convert(scene=file.path, fmt="abc")
    report(results=loop.output, first=loop.output[0].convert.out)


@workflow
def nested(ctx, project: str = "demo", frames: List[int] = (1001, 1002)):
    shots = list_shots(project=project)
    with ctx.foreach(shots.shots, concurrency=2) as shot:
        layers = ctx.foreach(shot.layers)
        with layers as layer:
            render(shot=shot.name, layer=layer, frames=frames)
        report(results=layers.output, first=shot.name)


@workflow
def parallel_export(ctx, scene: str):
    with ctx.parallel(on_any_fail="continue", step_id="exports"):
        abc = export_abc(scene=scene, frames=[1001, 1100])
        movie = playblast(scene=scene)
        review = make_review(movie=movie.movie)  # uses a sibling's output: waits for it
    publish(files=[abc.abc, review.review], shot="sh010")


@workflow
def branch_qc(ctx, scene: str):
    qc = qc_scene(scene)
    ctx.branch(
        qc.passed,
        then=lambda: publish(files=[scene], shot="sh010"),
        else_=lambda: notify(text=ctx.template("QC failed: {}", qc.errors)),
        step_id="gate",
    )
    notify(text="done")


@workflow(name="branch_qc")
def branch_qc_with_blocks(ctx, scene: str):
    qc = qc_scene(scene)
    with ctx.branch(qc.passed, step_id="gate") as br:
        with br.then():
            publish(files=[scene], shot="sh010")
        with br.else_():
            notify(text=ctx.template("QC failed: {}", qc.errors))
    notify(text="done")


@workflow(inputs={"date": {"format": "date"}})
def approve_push(ctx, date: str):
    out = convert(scene=ctx.template("/drop/{}/hero.ma", date))
    gate = ctx.approve(ctx.template("Push the {} drop to Unreal?", date), timeout_seconds=3600, step_id="human_gate")
    push(files=[out.out], approved_by=gate.by)


@workflow
def dag(ctx, date: str):
    listing = list_drop(date)
    refs = fetch_refs(project="demo", after=[])
    merge(files=listing.paths, refs=refs.refs, after=[refs])
    notify(text="ready", after=[listing, refs])
    cleanup()


@workflow
def ingest(date: str, fmt: str = "fbx"):
    listing = list_drop(date)
    return convert(scene=listing.files[0].path, fmt=fmt)


@workflow
def nightly(ctx, date: str):
    first = ingest.inline(date)
    second = ingest.inline(date=date, fmt="abc", step_id="abc")
    notify(text=ctx.template("{} and {}", first.out, second.out))


@workflow
def mapped(ctx, date: str, fmt: str = "fbx"):
    listing = list_drop(date)
    results = convert.map(scene=listing.paths, fmt=unmapped(fmt), concurrency=3)
    report(results=results, first=listing.paths[0])


@workflow
def prep(scene: str):
    opened = open_scene(path=scene)
    return qc_scene(opened.scene)


@workflow
def parallel_prep(ctx, scene: str):
    with ctx.parallel() as par:
        checked = prep.inline(scene)
        playblast(scene=scene)
    report(results=par.output, first=checked.passed)


# --- running both ways ----------------------------------------------------------------------


def _drive(engine: Engine, spec: Any, inputs: Mapping[str, Any], approve: bool) -> dcc_flow.RunResult:
    run = engine.submit(spec, inputs)
    thread = None
    if approve:
        def approver():
            for ev in run.events(timeout=20):
                if ev["type"] == "approve_requested":
                    run.approve(ev["step_key"], True, reason="looks good", by="supervisor")
                    return

        thread = threading.Thread(target=approver)
        thread.start()
    result = run.wait(timeout=60)
    if thread is not None:
        thread.join(10)
    return result


def _records(result: dcc_flow.RunResult) -> Dict[str, Any]:
    return {s.key: (s.status.value, s.output) for s in result.steps}


def assert_same_as_yaml(flow: Workflow, yaml_name: str, inputs: Mapping[str, Any], approve: bool = False):
    path = os.path.join(YAML_DIR, yaml_name)
    hand = WorkflowSpec.from_file(path)
    hand.validate()
    assert flow.spec.to_json() == hand.to_json()
    assert flow.spec.spec_hash == hand.spec_hash
    assert flow.spec == hand
    with Engine() as engine:
        traced = _drive(engine, flow, inputs, approve)
    with Engine() as engine:
        for t in flow.tasks:
            name, fn, lane, max_concurrent = t.tool_info()
            engine.register_tool(fn, name=name, thread=lane, max_concurrent=max_concurrent)
        written = _drive(engine, path, inputs, approve)
    assert traced.ok, traced.error
    assert written.ok, written.error
    assert traced.outputs == written.outputs
    assert _records(traced) == _records(written)
    return traced


def test_sequential_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(sequential, "sequential.yaml", {"shot": "sh010"})
    assert result.outputs["publish"] == {
        "published": ["/proj/sh010/anim_24.fbx", "/proj/sh010/anim_30.fbx"],
        "shot": "sh010",
    }


def test_foreach_with_concurrency_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(foreach_drop, "foreach.yaml", {"date": "2026-03-08"})
    assert [row["convert_2"]["out"] for row in result.outputs["per_file"]] == [
        "/drop/2026-03-08/hero.abc", "/drop/2026-03-08/prop.abc", "/drop/2026-03-08/set.abc"]
    assert result.outputs["report"] == {"count": 3, "first": "/drop/2026-03-08/hero.fbx"}


def test_nested_foreach_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(nested, "nested_foreach.yaml", {})
    assert result.outputs["per_shot"][0]["per_layer"][1]["render"]["image"] == "/render/sh010/fg.exr"
    assert [row["report"]["count"] for row in result.outputs["per_shot"]] == [2, 1]


def test_parallel_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(parallel_export, "parallel.yaml", {"scene": "/proj/hero.ma"})
    assert result.outputs["publish"]["published"] == ["/proj/hero.abc", "/proj/hero.mov.review"]


@pytest.mark.parametrize("flow", [branch_qc, branch_qc_with_blocks], ids=["callables", "with-blocks"])
@pytest.mark.parametrize("scene, taken", [("/proj/hero.ma", "then"), ("/proj/bad.ma", "else")])
def test_branch_equals_yaml_and_runs_the_same(flow, scene, taken):
    result = assert_same_as_yaml(flow, "branch.yaml", {"scene": scene})
    assert result.outputs["gate"]["condition"] is (taken == "then")
    if taken == "else":
        assert result.outputs["notify"] == {"sent": 'QC failed: ["bad_normals"]'}


def test_approve_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(approve_push, "approve.yaml", {"date": "2026-03-08"}, approve=True)
    assert result.outputs["human_gate"]["approved"] is True
    assert result.outputs["push"] == {"pushed": ["/drop/2026-03-08/hero.fbx"], "by": "supervisor"}


def test_dag_with_depends_on_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(dag, "dag.yaml", {"date": "2026-03-08"})
    assert dag.spec.step("fetch_refs").depends_on == ()
    assert dag.spec.step("merge").depends_on == ("fetch_refs", "list_drop")
    assert dag.spec.step("cleanup").depends_on is None
    assert result.outputs["merge"]["merged"][-1] == "demo/ref_b"


def test_sub_workflow_steps_are_inlined_with_prefixed_ids():
    result = assert_same_as_yaml(nightly, "subworkflow.yaml", {"date": "2026-03-08"})
    assert result.outputs["notify"]["sent"] == "/drop/2026-03-08/hero.fbx and /drop/2026-03-08/hero.abc"
    # the sub-workflow is also a workflow of its own
    assert [s.id for s in ingest.spec.steps] == ["list_drop", "convert"]


def test_map_equals_yaml_and_runs_the_same():
    result = assert_same_as_yaml(mapped, "map.yaml", {"date": "2026-03-08", "fmt": "usd"})
    assert [row["convert"]["out"] for row in result.outputs["per_scene"]][0] == "/drop/2026-03-08/hero.usd"


def test_sub_workflow_inside_parallel_stays_one_ordered_chain():
    result = assert_same_as_yaml(parallel_prep, "parallel_subworkflow.yaml", {"scene": "/proj/hero.ma"})
    assert result.outputs["report"] == {"count": 3, "first": True}


def test_the_vendor_intake_example_compiles_to_examples_vendor_intake_yaml():
    module = _load_example()
    hand = WorkflowSpec.from_file(os.path.join(ROOT, "examples", "vendor_intake.yaml"))
    assert module.vendor_intake.spec == hand
    assert module.vendor_intake.spec.to_json() == hand.to_json()


def test_the_vendor_intake_example_runs_with_file_tools(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "vendor_intake_codefirst.py"), "--root", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fbx = sorted(p.name for p in (tmp_path / "fbx").iterdir())
    assert fbx == ["chair.fbx", "hero.fbx", "lamp.fbx"]
    assert (tmp_path / "fbx" / "hero.fbx").read_text().startswith("FBX")
    assert "completed" in proc.stdout


def _load_example():
    path = os.path.join(ROOT, "examples", "vendor_intake_codefirst.py")
    spec = importlib.util.spec_from_file_location("vendor_intake_codefirst", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- tasks outside tracing ------------------------------------------------------------------


def test_a_task_called_outside_tracing_is_the_plain_function():
    assert export_fbx("/proj/hero.ma", fps=30) == {"fbx": "/proj/hero_30.fbx", "fps": 30}
    assert qc_scene(scene="/proj/bad.ma")["passed"] is False
    assert isinstance(export_fbx, Task) and export_fbx.__wrapped__.__name__ == "export_fbx"
    assert export_fbx.__name__ == "export_fbx"
    with pytest.raises(TypeError):
        export_fbx()  # the plain function's own error


def test_bare_task_defaults_its_tool_name_to_a_valid_name():
    @task
    def übersetzen(x):
        return x + 1

    assert übersetzen(1) == 2
    assert übersetzen.name == "_bersetzen"
    assert übersetzen.tool_info() == ("_bersetzen", übersetzen.fn, "main", None)


def test_with_options_returns_a_copy():
    fast = convert.with_options(name="maya__convert_fast", thread="main", id="quick")
    assert fast is not convert and fast.fn is convert.fn
    assert fast.tool_info() == ("maya__convert_fast", convert.fn, "main", 2)  # other options are kept
    assert convert.tool_info() == ("maya__convert", convert.fn, "worker", 2)
    with pytest.raises(TypeError, match="unknown option"):
        convert.with_options(retrys=3)

    @workflow
    def quick(ctx, scene: str):
        fast(scene=scene)
        fast(scene=scene, step_id="again")

    assert [s.id for s in quick.spec.steps] == ["quick", "again"]
    assert quick.spec.steps[0].tool == "maya__convert_fast"


def test_flow_tasks_expose_tool_info_for_the_engine():
    assert sorted(t.name for t in nightly.tasks) == ["maya__convert", "studio__notify", "vendor__list_drop"]
    assert all(t.tool_info() is not None for t in nightly.tasks)


def test_flow_run_with_an_engine_or_a_temporary_one():
    with Engine() as engine:
        result = nightly.run(engine, date="2026-03-08")
        assert result.ok and result.outputs["abc__convert"]["out"] == "/drop/2026-03-08/hero.abc"
        assert nightly.run(engine=engine, date="2026-03-09").ok
    result = mapped.run(date="2026-03-08")
    assert result.status is WorkflowStatus.COMPLETED
    with pytest.raises(dcc_flow.ValidationError, match="dat"):
        mapped.run(dat="2026-03-08")


def test_to_yaml_round_trips_and_graph_accepts_a_flow():
    assert WorkflowSpec.from_yaml_str(dag.to_yaml()) == dag.spec
    assert dag.to_json() == dag.spec.to_json()
    text = dcc_flow.graph(dag)
    assert "fetch_refs" in text and "merge" in text


# --- inputs ---------------------------------------------------------------------------------


def test_parameters_become_typed_inputs():
    @workflow(lazy=True)
    def typed(ctx: FlowContext, s: str, i: int, f: float, b: bool, d: dict, m: Mapping[str, Any],
              lst: list, seq: Sequence[int], ls: List[str], opt: Optional[int] = None, anything=3,
              flag: bool = False):
        notify(text=s)

    assert typed.inputs == {
        "s": {"type": "string", "required": True},
        "i": {"type": "integer", "required": True},
        "f": {"type": "number", "required": True},
        "b": {"type": "boolean", "required": True},
        "d": {"type": "object", "required": True},
        "m": {"type": "object", "required": True},
        "lst": {"type": "array", "required": True},
        "seq": {"type": "array", "required": True},
        "ls": {"type": "array", "required": True},
        "opt": {"type": "integer", "default": None},
        "anything": {"type": "any", "default": 3},
        "flag": {"type": "boolean", "default": False},
    }
    spec = typed.spec
    assert spec.inputs["i"].required is True and spec.inputs["flag"].default is False


def test_ctx_is_found_by_name_or_by_annotation_and_is_not_an_input():
    @workflow(lazy=True)
    def by_annotation(context: FlowContext, scene: str):
        context.approve("go?")

    assert list(by_annotation.inputs) == ["scene"]
    assert by_annotation.spec.steps[0].kind == "approve"

    @workflow(lazy=True)
    def no_ctx(scene: str):
        notify(text=scene)

    assert list(no_ctx.inputs) == ["scene"]


def test_description_defaults_to_the_docstring_summary():
    @workflow(lazy=True)
    def documented(scene: str):
        """Export the scene.

        Long text that is not part of the description.
        """
        notify(text=scene)

    assert documented.spec.description == "Export the scene."
    assert documented.spec.name == "documented"


# --- references build paths and templates ---------------------------------------------------


def test_reference_paths_templates_and_jsonpath():
    @workflow(lazy=True)
    def paths(ctx, date: str):
        listing = list_drop(date)
        named = list_drop(date, step_id="my-list")
        notify(text={"a": listing.files[0].path, "b": listing["files"][1]["path"], "whole": listing,
                     "dash": named.paths, "env": ctx.env.HOME, "run": ctx.run_info.id,
                     "mixed": ctx.template("{0}/{name}-{n:03d}", date, name=listing.paths[2], n=7)})
        with ctx.foreach(named["paths"]) as scene:
            convert(scene=scene)

    step = paths.spec.step("notify")
    assert dict(step.args["text"]) == {
        "a": "{{list_drop.files[0].path}}",
        "b": "{{list_drop.files[1].path}}",
        "whole": "{{list_drop}}",
        "dash": "{{my-list.paths}}",
        "env": "{{env.HOME}}",
        "run": "{{run.id}}",
        "mixed": "{{inputs.date}}/{{list_drop.paths[2]}}-007",
    }
    assert paths.spec.step("per_scene").items == "$['my-list'].paths"


def test_literal_values_pass_through_as_json():
    import pathlib

    @workflow(lazy=True)
    def literal(ctx):
        notify(text={"n": 1, "f": 2.5, "t": True, "none": None, "tuple": (1, "a"), "path": pathlib.PurePosixPath("/a/b")})

    assert literal.spec.steps[0].to_dict()["args"]["text"] == {
        "n": 1, "f": 2.5, "t": True, "none": None, "tuple": [1, "a"], "path": "/a/b"}


def test_the_as_name_comes_from_the_with_variable():
    @workflow(lazy=True)
    def names(ctx, date: str):
        listing = list_shots(project=date)
        with ctx.foreach(listing.shots) as shot, ctx.foreach(shot.layers) as layer:
            render(shot=shot.name, layer=layer, frames=[1])
        with ctx.foreach(
            listing.shots,
            concurrency=2,
        ) as multi_line:
            notify(text=multi_line.name)
        loop = ctx.foreach(listing.shots, step_id="explicit", as_="chosen")
        with loop as ignored:
            notify(text=ignored.name)
        with ctx.foreach(listing.shots) as date:
            notify(text="shadows an input: falls back to item")

    loops = [(s.id, s.as_) for s in names.spec.walk() if s.kind == "foreach"]
    assert loops == [("per_shot", "shot"), ("per_layer", "layer"), ("per_multi_line", "multi_line"),
                     ("explicit", "chosen"), ("per_item", "item")]


def test_deterministic_step_ids_and_reserved_names():
    @task
    def run(x):
        return x

    @workflow(lazy=True)
    def ids(ctx, notify_2: str = "x"):
        notify(text="a")
        notify(text="b")
        notify(text="c")
        run(x=1)

    assert [s.id for s in ids.spec.steps] == ["notify", "notify_3", "notify_4", "run_2"]


def test_remote_tasks_compile_to_tool_remote_and_are_not_registered():
    @task(dcc="unreal", name="import_assets", timeout_seconds=600, idempotency_key="push_{files}",
          idempotency_scope="global", idempotency_ttl_seconds=86400)
    def push_to_unreal(files, destination="/Game/Vendor"):
        raise NotImplementedError("served by the Unreal MCP server")

    @workflow(lazy=True)
    def remote(ctx, asset: str):
        push_to_unreal(files=[ctx.template("/proj/drop/{}.fbx", asset)])

    hand = WorkflowSpec.from_yaml_str("""
name: remote
inputs: { asset: { type: string, required: true } }
steps:
  - id: push_to_unreal
    dcc: unreal
    tool: import_assets
    args: { files: ["/proj/drop/{{inputs.asset}}.fbx"] }
    timeout_secs: 600
    idempotency_key: 'push_["/proj/drop/{{inputs.asset}}.fbx"]'
    idempotency_scope: global
    idempotency_ttl_secs: 86400
""")
    assert remote.spec == hand
    assert remote.tasks == ()
    assert push_to_unreal.tool_info() is None


POOL_TOOLS = """
import os
from dcc_flow import task

@task(pool="maya", name="pool_pid", timeout_seconds=30)
def pool_pid(tag):
    return {"pid": os.getpid(), "tag": tag}
"""


def _pool_flow(tmp_path):
    """A workflow calling a @task(pool="maya") from a module a pool worker can serve too."""
    path = tmp_path / "pool_tools.py"
    path.write_text(POOL_TOOLS, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pool_tools_%d" % id(tmp_path), str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    @workflow
    def routed(ctx, tag: str = "t"):
        module.pool_pid(tag=tag, step_id="where")

    return routed, module.pool_pid, str(path)


def test_a_pool_task_compiles_to_the_steps_pool_field_and_is_registered(tmp_path):
    routed, pool_pid, _ = _pool_flow(tmp_path)
    hand = WorkflowSpec.from_yaml_str("""
name: routed
inputs: { tag: { type: string, default: t } }
steps:
  - id: where
    tool: pool_pid
    pool: maya
    args: { tag: "{{inputs.tag}}" }
    timeout_secs: 30
""")
    assert routed.spec == hand
    assert routed.spec.steps[0].pool == "maya" and routed.spec.steps[0].kind == "tool"
    assert 'pool: "maya"' in routed.to_yaml()
    assert pool_pid.pool == "maya" and pool_pid.with_options(pool=None).pool is None
    assert routed.tasks == (pool_pid,)  # registered: an engine without the pool runs it in-process
    assert pool_pid.tool_info() == ("pool_pid", pool_pid.fn, "main", None)


def test_a_pool_task_runs_in_process_on_an_engine_without_that_remote(tmp_path):
    routed, _, _ = _pool_flow(tmp_path)
    with Engine() as engine:
        result = routed.run(engine, tag="here")
    assert result.status is WorkflowStatus.COMPLETED, result.error
    assert result.outputs["where"] == {"pid": os.getpid(), "tag": "here"}
    (step,) = result.steps
    assert step.worker == ""


@pytest.mark.skipif(sys.platform == "win32", reason="as tests/py/test_pools.py: pool workers are checked on POSIX")
def test_a_pool_task_runs_on_the_pool_when_the_engine_has_that_remote(tmp_path):
    routed, _, path = _pool_flow(tmp_path)
    worker = {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", path],
              "env": {"PYTHONPATH": os.path.join(ROOT, "python")}, "workers": 1}
    with Engine(config={"remotes": {"maya": worker}}) as engine:
        result = routed.run(engine, tag="there")
    assert result.status is WorkflowStatus.COMPLETED, result.error
    pid = result.outputs["where"]["pid"]
    assert pid != os.getpid()
    (step,) = result.steps
    assert step.worker == "maya/%d" % pid


def test_pool_option_errors_fail_at_decoration():
    with pytest.raises(ValueError, match="pool='maya pool' must name a worker pool"):
        task(pool="maya pool")(lambda scene: scene)
    with pytest.raises(ValueError, match="give pool= or dcc=, not both"):
        task(pool="maya", dcc="maya")(lambda scene: scene)


@pytest.mark.parametrize(
    "delays, retries, expected",
    [
        (5, 2, {"backoff": "fixed", "initial_delay_ms": 5000, "max_delay_ms": 10000, "max_attempts": 3}),
        (20, 1, {"backoff": "fixed", "initial_delay_ms": 20000, "max_delay_ms": 20000, "max_attempts": 2}),
        ([1, 1, 1], None, {"backoff": "fixed", "initial_delay_ms": 1000, "max_delay_ms": 10000, "max_attempts": 4}),
        ([1, 2, 4], 5, {"backoff": "exponential", "initial_delay_ms": 1000, "max_delay_ms": 4000, "max_attempts": 6}),
        ([1, 2, 3], None, {"backoff": "linear", "initial_delay_ms": 1000, "max_delay_ms": 3000, "max_attempts": 4}),
        (Retry(jitter=0.25, retry_on=[ConnectionError, "license_busy", dcc_flow.Fatal]), 2,
         {"backoff": "exponential", "initial_delay_ms": 500, "max_delay_ms": 10000, "max_attempts": 3,
          "jitter": 0.25, "retry_on": ["transient", "license_busy", "fatal"]}),
        (None, 2, {"backoff": "exponential", "initial_delay_ms": 500, "max_delay_ms": 10000, "max_attempts": 3}),
    ],
)
def test_retry_options_compile_to_the_retry_block(delays, retries, expected):
    t = task(name="t", retries=retries, retry_delay_seconds=delays)(lambda x: x)

    @workflow(lazy=True)
    def retried():
        t(x=1)

    retry = retried.spec.steps[0].to_dict()["retry"]
    assert {k: retry[k] for k in expected} == expected


# --- hostile references ---------------------------------------------------------------------

BRANCH = "ctx.branch(ref, then=..., else_=...) instead of `if`"
LOOP = "task.map(...) or `with ctx.foreach(ref) as item:` instead of a for loop"
TEXT = "ctx.template("
COMPARE = "Compare inside a task"
CONVERT = "convert it inside a task"

HOSTILE = [
    ("bool", lambda r: bool(r), BRANCH),
    ("if-expression", lambda r: 1 if r else 0, BRANCH),
    ("not", lambda r: not r, BRANCH),
    ("and", lambda r: r and 1, BRANCH),
    ("iter", lambda r: iter(r), LOOP),
    ("comprehension", lambda r: [x for x in r], LOOP),  # noqa: C416 - the construct under test
    ("list", lambda r: list(r), LOOP),
    ("unpacking", lambda r: (lambda *a: a)(*r), LOOP),
    ("reversed", lambda r: reversed(r), LOOP),
    ("len", lambda r: len(r), "compute it in a task"),
    ("contains", lambda r: "x" in r, "Test membership in a task"),
    ("str", lambda r: str(r), TEXT),
    ("percent", lambda r: "%s" % r, TEXT),
    ("format", lambda r: format(r), TEXT),
    ("f-string", lambda r: f"scene {r}", TEXT),
    ("concatenation", lambda r: "/proj/" + r, TEXT),
    ("eq", lambda r: r == "ok", COMPARE),
    ("ne", lambda r: r != "ok", COMPARE),
    ("lt", lambda r: r < 3, COMPARE),
    ("hash", lambda r: hash(r), "References cannot be keys"),
    ("dict key", lambda r: {r: 1}, "References cannot be keys"),
    ("set member", lambda r: {r}, "References cannot be keys"),
    ("int", lambda r: int(r), CONVERT),
    ("float", lambda r: float(r), CONVERT),
    ("index", lambda r: [1, 2][r], CONVERT),
    ("round", lambda r: round(r), CONVERT),
    ("call", lambda r: r.get("x"), "here 'qc_scene.passed.get'"),
    ("double star", lambda r: dict(**r), "Pass the reference as one argument"),
    ("setattr", lambda r: setattr(r, "passed", True), "read-only"),
    ("setitem", lambda r: r.__setitem__("passed", True), "read-only"),
    ("pickle", lambda r: pickle.dumps(r), "exist only while a workflow is traced"),
    ("negative index", lambda r: r[-1], "non-negative"),
    ("slice", lambda r: r[1:], "slice"),
    ("bad key", lambda r: r["two words"], "[A-Za-z_]"),
    ("dynamic index", lambda r: r[r], "foreach"),
]


@pytest.mark.parametrize("name, op, advice", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_use_of_a_reference_names_the_step_the_line_and_the_alternative(name, op, advice):
    @workflow(lazy=True)
    def hostile(ctx, scene: str):
        qc = qc_scene(scene)
        op(qc.passed)

    with pytest.raises(WorkflowTraceError) as info:
        _ = hostile.spec
    err = info.value
    message = str(err)
    line = op.__code__.co_firstlineno
    assert "%s:%d:" % (THIS_FILE, line) in message
    assert "step 'qc_scene'" in message
    assert advice in message
    assert "'hostile'" in message  # the workflow
    assert err.step_id == "qc_scene" and err.lineno == line and err.filename == __file__
    assert isinstance(err, dcc_flow.DccFlowError) and isinstance(err, TypeError)


def test_if_statement_on_a_reference():
    @workflow(lazy=True)
    def gate(ctx, scene: str):
        qc = qc_scene(scene)
        if qc.passed:  # HOSTILE-IF
            publish(files=[scene], shot="sh010")

    with pytest.raises(WorkflowTraceError) as info:
        _ = gate.spec
    message = str(info.value)
    assert "%s:%d:" % (THIS_FILE, marker_line("HOSTILE-IF")) in message
    assert "step 'qc_scene' ({{qc_scene.passed}})" in message
    assert "use ctx.branch(ref, then=..., else_=...) instead of `if`" in message.replace("Use", "use")


def test_for_loop_over_a_reference():
    @workflow(lazy=True)
    def loop(ctx, date: str):
        listing = list_drop(date)
        for f in listing.files:  # HOSTILE-FOR
            convert(scene=f)

    with pytest.raises(WorkflowTraceError) as info:
        _ = loop.spec
    message = str(info.value)
    assert "%s:%d:" % (THIS_FILE, marker_line("HOSTILE-FOR")) in message
    assert "step 'list_drop'" in message and LOOP in message


def test_while_on_an_input_names_the_input():
    @workflow(lazy=True)
    def spin(ctx, ready: bool):
        while ready:  # HOSTILE-WHILE
            notify(text="x")

    with pytest.raises(WorkflowTraceError) as info:
        _ = spin.spec
    message = str(info.value)
    assert "%s:%d:" % (THIS_FILE, marker_line("HOSTILE-WHILE")) in message
    assert "input 'ready' ({{inputs.ready}})" in message and BRANCH in message


def test_hostile_use_fails_at_decoration_when_compiled_eagerly():
    with pytest.raises(WorkflowTraceError, match="len"):
        @workflow
        def eager(ctx, date: str):
            listing = list_drop(date)
            notify(text="%d files" % len(listing.files))


def test_references_survive_copy_and_repr_without_raising():
    import copy

    seen = []

    @workflow(lazy=True)
    def probe(ctx, date: str):
        listing = list_drop(date)
        seen.append(repr(listing.files))
        seen.append(copy.deepcopy(listing) is listing)
        seen.append(hasattr(listing, "_private"))
        notify(text=listing.files)

    _ = probe.spec
    assert seen == ["<dcc_flow.Ref {{list_drop.files}}>", True, False]


# --- compile errors at decoration -----------------------------------------------------------


def test_an_argument_the_task_does_not_accept_fails_at_decoration():
    with pytest.raises(WorkflowTraceError) as info:
        @workflow
        def typo(ctx, scene: str):
            export_fbx(scen=scene)  # TYPO-KWARG

    message = str(info.value)
    assert "%s:%d:" % (THIS_FILE, marker_line("TYPO-KWARG")) in message
    assert "export_fbx" in message and "'scen'" in message and "did you mean 'scene'" in message
    assert "(scene, fps)" in message


def test_a_missing_argument_fails_at_decoration():
    with pytest.raises(WorkflowTraceError, match="missing a required argument: 'frames'"):
        @workflow
        def missing(ctx, scene: str):
            export_abc(scene=scene)


def test_an_unknown_input_name_fails_at_decoration():
    with pytest.raises(NameError, match="scen"):
        @workflow
        def typo(ctx, scene: str):
            export_fbx(scene=scen)  # noqa: F821 - the typo under test


def test_an_unknown_input_of_a_sub_workflow_fails_at_decoration():
    with pytest.raises(WorkflowTraceError, match="ingest.*'format'.*inputs are \\(date, fmt\\)"):
        @workflow
        def caller(ctx, date: str):
            ingest(date=date, format="abc")


def test_a_template_typo_in_a_literal_string_is_refused_by_the_validator():
    with pytest.raises(dcc_flow.ValidationError, match="inptus"):
        @workflow
        def typo(ctx, date: str):
            notify(text="drop {{inptus.date}}")


def test_a_reference_from_another_workflow_is_refused():
    leaked = []

    @workflow
    def first(ctx, date: str):
        leaked.append(list_drop(date))

    with pytest.raises(WorkflowTraceError) as info:
        @workflow
        def second(ctx, date: str):
            convert(scene=leaked[0].paths[0])  # CROSS-WORKFLOW

    message = str(info.value)
    assert "%s:%d:" % (THIS_FILE, marker_line("CROSS-WORKFLOW")) in message
    assert "from workflow 'first'" in message and "cannot cross workflows" in message


def test_a_foreach_item_used_after_its_block_is_refused():
    with pytest.raises(WorkflowTraceError, match="outside its `with ctx.foreach"):
        @workflow
        def leak(ctx, date: str):
            listing = list_drop(date)
            with ctx.foreach(listing.paths) as scene:
                convert(scene=scene)
            notify(text=scene)


def test_a_body_step_used_outside_its_foreach_is_refused():
    with pytest.raises(WorkflowTraceError, match="outside foreach step 'per_scene'.*loop's output"):
        @workflow
        def leak(ctx, date: str):
            listing = list_drop(date)
            with ctx.foreach(listing.paths) as scene:
                out = convert(scene=scene)
            notify(text=out.out)


def test_a_shadowed_foreach_item_is_refused():
    with pytest.raises(WorkflowTraceError, match="same name"):
        @workflow
        def shadow(ctx, date: str):
            listing = list_drop(date)
            with ctx.foreach(listing.paths, as_="scene") as outer, ctx.foreach(listing.files, as_="scene"):
                convert(scene=outer)


def test_a_foreach_not_used_as_a_with_block_is_refused():
    with pytest.raises(WorkflowTraceError, match="never used as a `with` block"):
        @workflow
        def forgot(ctx, date: str):
            listing = list_drop(date)
            ctx.foreach(listing.paths)
            notify(text="x")


def test_empty_blocks_and_workflows_are_refused():
    with pytest.raises(WorkflowTraceError, match="has no branches"):
        @workflow
        def empty_parallel(ctx):
            with ctx.parallel():
                pass

    with pytest.raises(WorkflowTraceError, match="has no steps"):
        @workflow
        def nothing(ctx):
            pass


def test_map_needs_exactly_one_iterated_argument():
    with pytest.raises(WorkflowTraceError, match="exactly one argument.*unmapped"):
        @workflow
        def two(ctx, date: str):
            listing = list_drop(date)
            convert.map(scene=listing.paths, fmt=listing.paths)


def test_steps_directly_inside_a_branch_block_are_refused():
    with pytest.raises(WorkflowTraceError, match="br.then"):
        @workflow
        def misplaced(ctx, scene: str):
            qc = qc_scene(scene)
            with ctx.branch(qc.passed):
                notify(text="x")


def test_two_functions_with_one_tool_name_are_refused():
    other = task(name="studio__notify")(lambda text: text)

    with pytest.raises(WorkflowTraceError, match="two different functions use the tool name 'studio__notify'"):
        @workflow
        def clash(ctx):
            notify(text="a")
            other(text="b")


def test_recursive_sub_workflows_are_refused():
    @workflow(lazy=True)
    def forever(scene: str):
        notify(text=scene)
        forever(scene)

    with pytest.raises(WorkflowTraceError, match="calls itself"):
        _ = forever.spec


def test_a_workflow_is_not_a_plain_function():
    with pytest.raises(TypeError, match="run it with nightly.run"):
        nightly(date="2026-03-08")


def test_lazy_workflows_compile_on_first_use():
    @workflow(lazy=True)
    def later(ctx, scene: str):
        defined_below(scene=scene)

    @task
    def defined_below(scene):
        return scene

    assert later.spec.steps[0].tool == "defined_below"


@pytest.mark.parametrize(
    "options, error",
    [
        ({"name": "maya.export"}, "not a valid tool name"),
        ({"name": "maya_export\n"}, "not a valid tool name"),  # Python's $ would match before the newline
        ({"id": "export\n"}, "id="),
        ({"dcc": "maya\n"}, "dcc="),
        ({"retries": -1}, "retries must be an int >= 0"),
        ({"retry_delay_seconds": 2}, "needs retries=N"),
        ({"retries": 3, "retry_delay_seconds": [1, 5, 30]}, "cannot be expressed"),
        ({"timeout_seconds": 0}, "timeout_seconds must be a number > 0"),
        ({"idempotency_key": "k_{scen}"}, "names {scen}, which is not a parameter"),
        ({"idempotency_scope": "global"}, "need an idempotency_key"),
        ({"thread": "gpu"}, "thread must be 'main' or 'worker'"),
        ({"max_concurrent": 0}, "max_concurrent"),
    ],
)
def test_bad_task_options_fail_at_decoration(options, error):
    with pytest.raises((TypeError, ValueError), match=error.replace("(", "\\(").replace("{", "\\{")):
        task(**options)(lambda scene: scene)


def test_bad_retry_shapes_fail_when_built():
    with pytest.raises(ValueError, match="jitter"):
        Retry(jitter=2)
    with pytest.raises(ValueError, match="backoff"):
        Retry(backoff="random")
    with pytest.raises(ValueError, match="initial_delay_ms"):
        Retry(initial_delay_seconds=5, max_delay_seconds=1)


def test_tasks_must_take_keyword_arguments():
    with pytest.raises(TypeError, match=r"\*paths cannot receive tool arguments"):
        @task
        def bad(*paths):
            return paths


def test_bad_workflow_parameters_fail_at_decoration():
    with pytest.raises(ValueError, match="'run' cannot be an input name"):
        @workflow
        def bad(ctx, run: str):
            notify(text=run)

    with pytest.raises(TypeError, match="cannot be workflow inputs"):
        @workflow
        def star(ctx, **inputs):
            notify(text="x")

    with pytest.raises(ValueError, match="inputs= names 'dat'"):
        @workflow(inputs={"dat": {"format": "date"}})
        def typo(ctx, date: str):
            notify(text=date)


# --- ordering details ------------------------------------------------------------------------


def test_after_inside_a_foreach_on_an_outer_step_orders_the_loop():
    @workflow(lazy=True)
    def outer(ctx, date: str):
        listing = list_drop(date)
        refs = fetch_refs(project="demo", after=[])
        with ctx.foreach(listing.paths, after=[listing]) as scene:
            convert(scene=scene, after=[refs])

    loop = outer.spec.step("per_scene")
    assert loop.depends_on == ("list_drop", "fetch_refs")
    assert loop.steps[0].depends_on == ()


def test_a_dag_sub_workflow_is_waited_for_as_a_whole():
    @workflow(lazy=True)
    def fan(date: str):
        list_drop(date, after=[])
        fetch_refs(project="demo", after=[])

    @workflow(lazy=True)
    def caller(ctx, date: str):
        notify(text="start")
        fan.inline(date)
        cleanup()

    steps = {s.id: s.depends_on for s in caller.spec.steps}
    assert steps == {
        "notify": None,
        "fan__list_drop": None,  # = after notify
        "fan__fetch_refs": ("notify",),
        "cleanup": ("fan__list_drop", "fan__fetch_refs"),
    }
    with Engine() as engine:
        assert engine.run(caller, {"date": "2026-03-08"}).ok


def test_after_accepts_blocks_and_approvals_and_ctx_may_be_passed_to_a_sub_workflow():
    @workflow(lazy=True)
    def sub(ctx, scene: str):
        ctx.approve(ctx.template("ok {}?", scene), step_id="check")

    @workflow(lazy=True)
    def caller(ctx, date: str):
        listing = list_drop(date)
        loop = ctx.foreach(listing.paths)
        with loop as scene:
            convert(scene=scene)
        gate = ctx.approve("go?", after=[])
        sub.inline(ctx, scene="x", after=[gate])
        notify(text="done", after=[loop, gate])

    deps = {s.id: s.depends_on for s in caller.spec.steps}
    assert deps == {"list_drop": None, "per_scene": None, "approve": (), "sub__check": ("approve",),
                    "notify": ("per_scene", "approve")}
    assert caller.spec.step("sub__check").prompt == "ok x?"


def test_trace_errors_pickle_and_keep_their_location():
    with pytest.raises(WorkflowTraceError) as info:
        @workflow
        def bad(ctx, scene: str):
            qc = qc_scene(scene)
            notify(text=str(qc))

    err = pickle.loads(pickle.dumps(info.value))
    assert type(err) is WorkflowTraceError
    assert (err.step_id, err.filename, err.lineno, str(err)) == (
        info.value.step_id, info.value.filename, info.value.lineno, str(info.value))


def test_without_the_native_library_decoration_still_traces(monkeypatch):
    from dcc_flow import _flow

    def no_library(*args, **kwargs):
        raise dcc_flow.LibraryNotFoundError("libdccflow not found")

    monkeypatch.setattr(_flow.WorkflowSpec, "from_json", no_library)

    @workflow
    def offline(ctx, scene: str):
        notify(text=scene)

    with pytest.raises(dcc_flow.LibraryNotFoundError):
        _ = offline.spec
    with pytest.raises(WorkflowTraceError, match="len"):  # tracing mistakes still fail at decoration
        @workflow
        def still_checked(ctx, scene: str):
            notify(text=len(scene))
    monkeypatch.undo()
    assert offline.spec.steps[0].id == "notify"


def test_a_long_chain_with_far_references_keeps_only_the_edges_it_needs():
    """Steps that use the first step's output wait for it through the chain: no depends_on is
    written for them. A step after an explicit after= (which breaks the chain) still gets the
    far edge it needs. Tracing 2,000 tasks used to take about 30 s (cubic); it is linear now."""

    @task
    def first():
        return 1

    @task
    def use(x=0):
        return x

    @workflow(name="chain_far")
    def chain_far():
        f = first()
        prev = f
        for i in range(2000):
            prev = use(x=f) if i % 2 else use(x=prev)
        g = use(x=1, after=f)  # waits for the first step only: off the chain
        return use(x=f, after=g)  # uses f, which g already waits for

    steps = {s.id: s for s in chain_far.spec.steps}
    assert len(steps) == 2003
    assert all(steps["use_%d" % i].depends_on is None for i in range(2, 2001))
    assert steps["use"].depends_on is None
    assert list(steps["use_2001"].depends_on) == ["first"]
    assert list(steps["use_2002"].depends_on) == ["use_2001"]


def test_frames_anywhere_in_the_package_are_not_the_users():
    """The trace error names the user's file:line: the innermost frame outside the whole dcc_flow
    package, not only outside the compiler's own folder (dcc_flow/_flow/)."""
    from dcc_flow import _engine
    from dcc_flow._flow import _base

    assert _base._is_own_frame(_engine.__file__)
    assert _base._is_own_frame(_base.__file__)
    assert not _base._is_own_frame(__file__)
