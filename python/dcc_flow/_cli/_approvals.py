"""Approvals that nothing can give: the runs of an in-memory engine (``--db :memory:``).

``dcc-flow approve`` runs in another process and reaches a run through its database; an
in-memory engine has none, so an ``approve`` step of a ``run --db :memory:`` would wait for ever
behind a hint that cannot work. ``run`` therefore refuses such a spec before it starts (unless
``--approve-all``), and cancels a run whose approval opens anyway (one the spec did not show:
in a sub-workflow, or a catalog workflow named with ``--workflows``).
"""

import argparse
from typing import Any, Dict, Iterator, List

from .._errors import DccFlowError
from .._spec import WorkflowSpec
from ._base import CliError, Context
from ._engine import db_path
from ._specfile import STDIN

__all__ = ["approvals_reachable", "refuse_unreachable_approvals", "cancel_unreachable_approval", "run_tree_events"]

_FIX = "add --approve-all to grant approvals as they open, or use --db FILE and approve from another terminal"


def approvals_reachable(args: argparse.Namespace) -> bool:
    """Whether ``dcc-flow approve`` in another process can reach the runs of this command's
    engine: false for an in-memory engine (``--db :memory:``, or ``$DCC_FLOW_DB`` set to it)."""
    return db_path(args) != ":memory:"


def approve_steps(spec: Any) -> List[str]:
    """The ids of the ``approve`` steps of ``spec`` (a ``WorkflowSpec``, or a ``@workflow``
    carrying one), nested ones and ``on_failure`` included; [] for anything else (a catalog
    name, whose spec this process does not hold)."""
    spec = getattr(spec, "spec", spec)
    if not isinstance(spec, WorkflowSpec):
        return []
    return [step.id for step in spec.walk() if step.kind == "approve"]


def refuse_unreachable_approvals(args: argparse.Namespace, spec: Any, label: str) -> None:
    """A ``CliError`` (nothing runs) when the run would have an ``approve`` step that nothing can
    answer: an in-memory engine without ``--approve-all``. ``label`` names the spec."""
    if getattr(args, "approve_all", False) or approvals_reachable(args):
        return
    steps = approve_steps(spec)
    if not steps:
        return
    label = "<stdin>" if label == STDIN else label
    which = "step %s is an approve step" % steps[0] if len(steps) == 1 else (
        "steps %s are approve steps" % ", ".join(steps))
    raise CliError("%s: %s, and dcc-flow approve cannot reach a run of an in-memory engine (--db :memory:); "
                   "%s; nothing was run" % (label, which, _FIX))


def cancel_unreachable_approval(engine: Any, run_id: str, step_key: str, ctx: Context) -> None:
    """Cancel run ``run_id``, whose step ``step_key`` waits for an approval that no one can give
    (an in-memory engine), instead of waiting for ever; the reason, which the command's error line
    shows, says why and what to do."""
    try:
        engine.cancel(run_id, reason="step %s waits for approval, and dcc-flow approve cannot reach a run of an "
                                     "in-memory engine (--db :memory:); %s" % (step_key, _FIX))
    except DccFlowError as exc:  # it ended meanwhile
        ctx.error("cancelling run %s: %s" % (run_id, exc))


def run_tree_events(engine: Any, run_id: str, after_seq: int) -> Iterator[Dict[str, Any]]:
    """The events after ``after_seq`` of run ``run_id`` and of the sub-workflow runs it started
    (at any depth), until ``run_id``'s ``workflow_terminal``: an approval that opens in a child
    run is one the command must answer (``--approve-all``) or show too."""
    ours: Dict[str, bool] = {run_id: True}

    def in_tree(rid: str) -> bool:
        chain: List[str] = []
        while rid and rid not in ours and len(chain) < 64:  # the engine's max_depth ceiling
            chain.append(rid)
            try:
                rid = engine.get_status(rid).parent_run_id or ""
            except DccFlowError:  # pruned or unknown: not ours
                rid = ""
        found = ours.get(rid, False) if rid else False
        for r in chain:
            ours[r] = found
        return found

    for ev in engine.events(after_seq=after_seq):
        rid = str(ev.get("run_id") or "")
        if rid == run_id:
            yield ev
            if ev.get("type") == "workflow_terminal":
                return
        elif rid and in_tree(rid):
            yield ev
