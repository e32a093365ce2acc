"""Code-first workflows: ``@task`` and ``@workflow`` compile, by tracing, to a ``WorkflowSpec``.

::

    from dcc_flow import FlowContext, Retry, task, workflow

    @task(name="maya__export_fbx", retries=2, timeout_seconds=300, idempotency_key="export_{scene}")
    def export(scene: str) -> dict:
        ...

    @workflow
    def vendor_intake(ctx: FlowContext, date: str) -> None:
        listing = list_sftp(date, step_id="list")
        with ctx.foreach(listing.files, concurrency=4) as file:
            export(scene=file.path)

Decorating a workflow calls its function once (eagerly, unless ``lazy=True``) with *references*
in place of values: each parameter is a reference to ``{{inputs.<name>}}``, each task call
records a step and returns a reference to that step's output. References build template paths
(``ref.files``, ``ref["files"]``, ``ref[0]``) and become templates where they are used, so the
result is exactly the spec a YAML file would hold. Using a reference as a Python value (``if``,
``for``, ``len``, ``str``, ``==``…) raises ``WorkflowTraceError``, naming the step, the line and
the construct to use instead. Outside tracing a task is the plain function.

Ordering follows the spec (docs/reference/spec.md, "Ordering"): a step runs after the step before it. The
compiler adds ``depends_on`` only where Python's data flow needs more than that: a step that uses
the output of a sibling it would not otherwise wait for (inside ``ctx.parallel()``, or after an
``after=`` that skipped it) also waits for that sibling.

This module is the public face; the compiler lives in the private modules of this package, each
importing only the ones below it at run time (tests/py/test_import_layers.py checks it):

- ``_base``: ``WorkflowTraceError``, the user's call site, the spec's name rules;
- ``_refs``: ``Ref``, ``unmapped``;
- ``_trace``: the tracer (step lists, ids, reference checks, ``depends_on``) and the base of
  the blocks;
- ``_convert``: Python values to spec JSON;
- ``_retry``: ``Retry``;
- ``_blocks``: ``ctx.foreach`` / ``ctx.parallel`` / ``ctx.branch``;
- ``_task``: ``@task`` / ``Task``;
- ``_workflow``: ``@workflow`` / ``Workflow`` and ``FlowContext``.
"""

from .._spec import WorkflowSpec as WorkflowSpec  # kept importable from here (tests patch its from_json)
from ._base import WorkflowTraceError
from ._refs import Ref, Unmapped, unmapped
from ._retry import Retry
from ._task import Task, task
from ._workflow import FlowContext, Workflow, workflow

__all__ = [
    "task",
    "workflow",
    "Task",
    "Workflow",
    "Retry",
    "unmapped",
    "Unmapped",
    "Ref",
    "FlowContext",
    "WorkflowTraceError",
]
