"""``Engine.run(spec, dry_run=True)``: what a run would do, with no tool called and nothing recorded.

The engine walks the run's plan on its real executor with every tool call answered from
``fixtures`` (docs/reference/spec.md, "Dry runs"); this module holds the answer's Python shape and its
text form, the one ``dcc-flow run --dry-run`` prints.
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._results import RunFailedError
from ._spec import StepStatus, WorkflowStatus

__all__ = ["DryRunResult", "DryRunStep"]

#: Step kinds that only organise other steps: not numbered in the plan.
_CONTROL = ("foreach", "parallel", "branch")

#: Rendered args longer than this are cut in the text form (``--json`` has them whole).
MAX_ARGS_CHARS = 240


class DryRunStep:
    """One step instance of a dry run, in the order a run would start it."""

    __slots__ = ("order", "key", "step_id", "kind", "depth", "status", "tool", "dcc", "unknown_tool", "workflow",
                 "args", "output", "output_from", "fixture", "prompt", "approved", "items", "taken", "error")

    def __init__(self, d: Mapping[str, Any]) -> None:
        #: 1, 2, … for the steps that call a tool or wait for an approval; 0 for control steps
        #: (foreach, parallel, branch) and skipped ones.
        self.order: int = int(d.get("order") or 0)
        self.key: str = d.get("key", "")
        self.step_id: str = d.get("step_id", "")
        self.kind: str = d.get("kind", "")
        self.depth: int = int(d.get("depth") or 0)
        self.status = StepStatus(d.get("status", "pending"))
        self.tool: Optional[str] = d.get("tool")
        self.dcc: Optional[str] = d.get("dcc")
        self.unknown_tool: bool = bool(d.get("unknown_tool"))
        #: The catalog workflow a ``workflow`` step would run as a child run; the dry run does
        #: not walk into it (the step is answered from the fixtures, like a tool step).
        self.workflow: Optional[str] = d.get("workflow")
        #: The rendered arguments the tool would receive (tool and tool_remote steps), or the
        #: rendered inputs of the child run (workflow steps).
        self.args: Optional[Dict[str, Any]] = d.get("args")
        if self.args is None and self.kind in ("tool", "tool_remote", "workflow"):
            self.args = {}  # the answer leaves out empty args
        self.output: Any = d.get("output")
        #: Where a tool or workflow step's output came from: "key", "step_id", "tool", "workflow"
        #: (the fixture of that name, ``fixture``), "echo" (flow__echo's args) or "none" (null).
        self.output_from: Optional[str] = d.get("output_from")
        self.fixture: Optional[str] = d.get("fixture")
        self.prompt: Optional[str] = d.get("prompt")
        self.approved: Optional[bool] = d.get("approved")
        self.items: Optional[int] = d.get("items")
        self.taken: Optional[str] = d.get("taken")
        self.error: Optional[Dict[str, Any]] = d.get("error")

    def __repr__(self) -> str:
        return "DryRunStep(%r, kind=%s, status=%s)" % (self.key, self.kind, self.status.value)


class DryRunResult:
    """What ``Engine.run(spec, dry_run=True, fixtures=...)`` found. No run was recorded, so there
    is no ``run_id``; ``str(result)`` is the plan as ``dcc-flow run --dry-run`` prints it."""

    #: Tells a dry run's result from a ``RunResult``.
    dry_run = True

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.name: str = d.get("name", "")
        self.spec_hash: str = d.get("spec_hash", "")
        #: completed, or failed when a step would fail even with these fixtures (a denied
        #: approval, a foreach whose items are not a list).
        self.status = WorkflowStatus(d.get("status", "completed"))
        self.error: Optional[Dict[str, Any]] = d.get("error")
        self.inputs: Dict[str, Any] = dict(d.get("inputs") or {})
        self.outputs: Dict[str, Any] = dict(d.get("outputs") or {})
        self.steps: Tuple[DryRunStep, ...] = tuple(DryRunStep(s) for s in d.get("steps") or ())
        #: Tool names (and "dcc/tool" of tool_remote steps) this engine has no tool for: a real
        #: run would be refused with unknown_tool.
        self.unknown_tools: List[str] = list(d.get("unknown_tools") or ())
        self.suggestions: Dict[str, str] = dict(d.get("suggestions") or {})
        #: Fixtures and approvals that name no step or tool of the spec.
        self.warnings: List[str] = list(d.get("warnings") or ())

    @property
    def ok(self) -> bool:
        return self.status is WorkflowStatus.COMPLETED

    @property
    def calls(self) -> Tuple[DryRunStep, ...]:
        """The steps that would call a tool, in order."""
        return tuple(s for s in self.steps if s.order and s.tool is not None)

    def step(self, key: str) -> DryRunStep:
        """The step instance with this key (``"export"``, ``"per_file[3].export"``)."""
        for s in self.steps:
            if s.key == key:
                return s
        raise KeyError("the dry run of %s reached no step instance %r" % (self.name, key))

    def raise_for_status(self) -> "DryRunResult":
        """Return self when the dry run completed, else raise ``RunFailedError`` with its error."""
        if not self.ok:
            err = self.error or {}
            where = " at step %r" % err["step_key"] if err.get("step_key") else ""
            raise RunFailedError("dry run of %s %s%s: %s" % (self.name, self.status.value, where,
                                                             err.get("message", "")),
                                 code=str(err.get("kind") or self.status.value), details=self.raw,
                                 step_id=err.get("step_key"))
        return self

    def format(self) -> str:
        """The plan as text: a header, one line per step instance, the warnings, a summary."""
        return "\n".join(format_lines(self))

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return "DryRunResult(%r, status=%s, steps=%d)" % (self.name, self.status.value, len(self.steps))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _cut(text: str, limit: int = MAX_ARGS_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _what(s: DryRunStep) -> str:
    """The middle of a step's line: what it would do, and with what."""
    if s.status is StepStatus.SKIPPED:
        return "skipped: %s" % ((s.error or {}).get("message") or "")
    if s.kind in ("tool", "tool_remote", "workflow"):
        if s.kind == "workflow":
            text = "workflow %s  inputs %s" % (s.workflow or "", _cut(_json(s.args or {})))
        else:
            name = s.tool or ""
            if s.kind == "tool_remote":
                name = "%s/%s" % (s.dcc, s.tool)
            text = "%s %s%s  args %s" % (s.kind, name, " (not registered)" if s.unknown_tool else "",
                                         _cut(_json(s.args or {})))
        source = {
            "key": "fixture %s" % _json(s.fixture),
            "step_id": "fixture %s" % _json(s.fixture),
            "tool": "fixture %s" % _json(s.fixture),
            "workflow": "fixture %s" % _json(s.fixture),
            "echo": "its args (flow__echo)",
        }.get(s.output_from or "", "null (no fixture)")
        return "%s  → %s" % (text, source)
    if s.kind == "approve":
        decision = "not reached" if s.approved is None else ("approved automatically" if s.approved else "denied")
        return "approve %s  → %s" % (_json(s.prompt or ""), decision)
    if s.kind == "foreach":
        n = s.items or 0
        return "foreach over %d item%s" % (n, "" if n == 1 else "s")
    if s.kind == "branch":
        cond = (s.output or {}).get("condition") if isinstance(s.output, dict) else None
        return "branch → %s (condition %s)" % (s.taken or "?", _cut(_json(cond), 80)) if s.taken else "branch"
    return s.kind


def plan_lines(result: DryRunResult) -> List[str]:
    """The header and one line per step instance: its number (steps that call a tool or wait for
    an approval), its key indented by depth, and what it would do."""
    lines = ["dry run of %s: no tool is called, nothing is recorded" % (result.name or "(unnamed)")]
    width = max([len(s.key) + 2 * s.depth for s in result.steps] or [0])
    num = len(str(max([s.order for s in result.steps] or [0])))
    for s in result.steps:
        number = ("%*d." % (num, s.order)) if s.order else " " * (num + 1)
        key = ("  " * s.depth + s.key).ljust(width)
        line = "%s %s  %s" % (number, key, _what(s))
        if s.status is StepStatus.FAILED and s.error and s.kind != "approve":
            line += "  FAILED: %s" % s.error.get("message", "")
        lines.append(line.rstrip())
    return lines


def warning_lines(result: DryRunResult) -> List[str]:
    """The unknown tools, then the request's warnings (fixtures or approvals that match nothing)."""
    out = []
    for tool in result.unknown_tools:
        hint = result.suggestions.get(tool)
        out.append("tool %s is not registered here: a real run would be refused%s"
                   % (tool, "; did you mean %r?" % hint if hint else ""))
    return out + list(result.warnings)


def summary_line(result: DryRunResult) -> str:
    """``dry run completed: 3 tool calls, 1 approval``, or how it failed."""
    calls = sum(1 for s in result.steps if s.order and s.kind in ("tool", "tool_remote"))
    subflows = sum(1 for s in result.steps if s.order and s.kind == "workflow")
    approvals = sum(1 for s in result.steps if s.order and s.kind == "approve")
    counts = "%d tool call%s" % (calls, "" if calls == 1 else "s")
    if subflows:
        counts += ", %d sub-workflow%s" % (subflows, "" if subflows == 1 else "s")
    if approvals:
        counts += ", %d approval%s" % (approvals, "" if approvals == 1 else "s")
    if result.ok:
        return "dry run completed: %s" % counts
    err = result.error or {}
    where = "at %s: " % err["step_key"] if err.get("step_key") else ""
    return "dry run failed %s%s (%s)" % (where, err.get("message") or result.status.value, counts)


def format_lines(result: DryRunResult) -> List[str]:
    return plan_lines(result) + ["warning: " + w for w in warning_lines(result)] + [summary_line(result)]
