"""Draw a workflow as a Mermaid flowchart or a Graphviz DOT digraph (``dcc_flow.graph``).

The drawing follows the ordering rules of the spec (docs/reference/spec.md, "Ordering: depends_on"):

- in a step list (top level, foreach body, branch ``then``/``else``) a step without ``depends_on``
  follows the step before it; ``depends_on: []`` starts with the list; otherwise one edge comes
  from each listed sibling;
- the children of a ``parallel`` step start together unless they declare ``depends_on``;
- ``foreach`` and ``parallel`` steps are boxes (Mermaid ``subgraph``, DOT ``subgraph cluster_<id>``)
  holding their body; edges into and out of them attach to the box;
- a ``branch`` step is a diamond with ``then``/``else`` edges to the first steps of each list; the
  steps after the branch follow the last steps of both lists (or the diamond itself, with the
  label of the empty list);
- ``approve`` steps are hexagons, ``tool_remote`` steps double boxes (Mermaid subroutines);
- a ``workflow`` step (a child run) is one node naming the workflow it runs, a stadium in
  Mermaid and a 3-D box in DOT (the child's steps are drawn by graphing that workflow).

The output depends only on the spec: the same spec always gives the same text.
"""

import json
import re
from typing import Any, Container, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ._spec import WorkflowSpec, WorkflowStep

__all__ = ["graph", "FORMATS"]

#: The formats ``graph()`` draws.
FORMATS = ("mermaid", "dot")

_CONTAINERS = ("foreach", "parallel")
_EXPR_MAX = 40  # characters of an items/condition expression shown in a label
_INDENT = "    "

# An endpoint of an edge: (step id, edge label or None). Edge: (source id, target id, label).
_Exit = Tuple[str, Optional[str]]
_Edge = Tuple[str, str, Optional[str]]


def graph(spec_or_flow: Any, format: str = "mermaid") -> str:
    """Draw a workflow and return the diagram text (ending with a newline).

    ``spec_or_flow`` is a ``WorkflowSpec``, or any object whose ``.spec`` attribute is one (a
    code-first flow). ``format`` is ``"mermaid"`` (a ``flowchart TD``) or ``"dot"`` (a Graphviz
    ``digraph``; render it with ``dot -Tsvg``).

    Raises ``TypeError`` for other objects, ``ValueError`` for an unknown format, and
    ``ValidationError`` when the spec has problems (``spec.validate()``)::

        >>> print(dcc_flow.graph(dcc_flow.WorkflowSpec.from_file("vendor_intake.yaml")))
        flowchart TD
            list["list<br/>vendor_intake__list_sftp"]
            ...
    """
    spec = _spec_of(spec_or_flow)
    if format not in FORMATS:
        raise ValueError("graph format must be one of %s, got %r" % (", ".join(map(repr, FORMATS)), format))
    spec.validate()
    model = _Model(spec)
    if format == "dot":
        return _DotWriter(model).render()
    return _MermaidWriter(model).render()


def _spec_of(value: Any) -> WorkflowSpec:
    if isinstance(value, WorkflowSpec):
        return value
    inner = getattr(value, "spec", None)
    if isinstance(inner, WorkflowSpec):
        return inner
    raise TypeError("graph() expects a WorkflowSpec or a flow with a .spec WorkflowSpec, got %s" % type(value).__name__)


# --- the model: steps, containment and edges -------------------------------------------------------


class _Model:
    """What both writers draw: the step tree and the edges between steps, in document order."""

    def __init__(self, spec: WorkflowSpec) -> None:
        self.spec = spec
        self.steps: Dict[str, WorkflowStep] = {s.id: s for s in spec.walk()}
        self.edges: List[_Edge] = []
        self._seen: Set[_Edge] = set()
        self._visit(spec.steps, parallel=False, entry=None)

    def _add(self, source: str, target: str, label: Optional[str]) -> None:
        edge = (source, target, label)
        if edge not in self._seen:
            self._seen.add(edge)
            self.edges.append(edge)

    def _visit(self, steps: Sequence[WorkflowStep], parallel: bool, entry: Optional[_Exit]) -> None:
        """Add the edges into each step of a list, then those inside it, depth-first.

        ``entry`` is the edge source of the list's first steps (a branch diamond), or None.
        """
        by_id = {s.id: s for s in steps}
        for index, step in enumerate(steps):
            deps = _deps(steps, index, parallel, by_id)
            if deps:
                for dep in deps:
                    for source, label in self.exits(by_id[dep]):
                        self._add(source, step.id, label)
            elif entry is not None:
                self._add(entry[0], step.id, entry[1])
            if step.kind in _CONTAINERS:
                self._visit(step.steps, parallel=step.kind == "parallel", entry=None)
            elif step.kind == "branch":
                self._visit(step.then, parallel=False, entry=(step.id, "then"))
                self._visit(step.else_, parallel=False, entry=(step.id, "else"))

    def exits(self, step: WorkflowStep) -> List[_Exit]:
        """Where the edges to the steps that wait for ``step`` come from."""
        if step.kind != "branch":
            return [(step.id, None)]
        if not step.then and not step.else_:
            return [(step.id, None)]
        out: List[_Exit] = []
        for steps, label in ((step.then, "then"), (step.else_, "else")):
            if not steps:
                out.append((step.id, label))
            for last in _sinks(steps):
                out.extend(self.exits(last))
        return out


def _deps(steps: Sequence[WorkflowStep], index: int, parallel: bool, siblings: Container[str]) -> List[str]:
    """The sibling ids step ``index`` waits for (unknown ids and duplicates dropped); ``siblings``
    holds the ids of ``steps`` (built once per list: the cost stays linear in the list)."""
    step = steps[index]
    declared = step.depends_on
    if declared is None:
        return [steps[index - 1].id] if index > 0 and not parallel else []
    out: List[str] = []
    seen: Set[str] = {step.id}
    for dep in declared:
        if dep in siblings and dep not in seen:
            seen.add(dep)
            out.append(dep)
    return out


def _sinks(steps: Sequence[WorkflowStep]) -> List[WorkflowStep]:
    """The steps of a sequential list that no sibling waits for, in document order."""
    siblings = {s.id for s in steps}
    waited: Set[str] = set()
    for index in range(len(steps)):
        waited.update(_deps(steps, index, False, siblings))
    return [s for s in steps if s.id not in waited]


def _children(step: WorkflowStep) -> Iterator[WorkflowStep]:
    """The steps drawn at the same level as a branch (its lists), or inside a container."""
    if step.kind in _CONTAINERS:
        yield from step.steps
    elif step.kind == "branch":
        yield from step.then
        yield from step.else_


def _expr(value: Any) -> str:
    """An items/condition value as short text: strings as written, literals as compact JSON."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    text = " ".join(text.split())
    if len(text) > _EXPR_MAX:
        text = text[: _EXPR_MAX - 3] + "..."
    return text


def _plain(value: Any) -> Any:
    """Thaw the frozen views (read-only mappings, tuples) into JSON-encodable values."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _label_lines(step: WorkflowStep) -> List[str]:
    """The text of a step's node or box: its id, then what it does."""
    kind = step.kind
    if kind == "tool":
        detail = step.tool or "tool"
    elif kind == "tool_remote":
        detail = "%s @ %s" % (step.tool or "?", step.dcc or "?")
    elif kind == "foreach":
        detail = "foreach %s in %s" % (step.as_ or "item", _expr(step.items))
        if step.concurrency and step.concurrency > 1:
            detail += " (concurrency %d)" % step.concurrency
    elif kind == "branch":
        detail = "branch on %s" % _expr(step.on)
    elif kind == "workflow":
        detail = "workflow %s" % (step.workflow or "?")
    else:
        detail = kind
    return [step.id, detail]


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text)


# --- Mermaid ----------------------------------------------------------------------------------------

_MERMAID_SAFE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words the flowchart grammar reads as keywords wherever a node id may stand (compared lowercase).
_MERMAID_KEYWORDS = frozenset(
    [
        "accdescr",
        "acctitle",
        "call",
        "callback",
        "class",
        "classdef",
        "click",
        "default",
        "direction",
        "end",
        "flowchart",
        "flowchart-elk",
        "graph",
        "href",
        "interpolate",
        "linkstyle",
        "style",
        "subgraph",
    ]
)
# Characters written as Mermaid entity codes inside quoted labels.
_MERMAID_ENTITIES = {'"': "#34;", "#": "#35;", "&": "#38;", "<": "#60;", ">": "#62;"}
# Node shapes by kind: (open, close) around the quoted label.
_MERMAID_SHAPES = {
    "tool": ("[", "]"),
    "tool_remote": ("[[", "]]"),
    "branch": ("{", "}"),
    "approve": ("{{", "}}"),
    "workflow": ("([", "])"),
}


def _mermaid_text(text: str) -> str:
    return "".join(_MERMAID_ENTITIES.get(ch, ch) for ch in _one_line(text))


def _mermaid_label(lines: Sequence[str]) -> str:
    return '"%s"' % "<br/>".join(_mermaid_text(line) for line in lines)


class _MermaidWriter:
    def __init__(self, model: _Model) -> None:
        self.model = model
        self.ids = self._assign_ids()
        self.out: List[str] = ["flowchart TD"]

    def _assign_ids(self) -> Dict[str, str]:
        """Mermaid ids: the step id when the grammar reads it as an id, else ``s_<id>`` made unique."""
        step_ids = list(self.model.steps)
        ids: Dict[str, str] = {}
        used: Set[str] = set()
        for sid in step_ids:
            if _MERMAID_SAFE_ID.match(sid) and sid.lower() not in _MERMAID_KEYWORDS:
                ids[sid] = sid
                used.add(sid)
        for sid in step_ids:
            if sid in ids:
                continue
            base = "s_" + re.sub(r"[^A-Za-z0-9_]", "_", sid)
            candidate, n = base, 2
            while candidate in used:
                candidate = "%s_%d" % (base, n)
                n += 1
            ids[sid] = candidate
            used.add(candidate)
        return ids

    def render(self) -> str:
        self._declare(self.model.spec.steps, 1)
        for source, target, label in self.model.edges:
            arrow = "-->" if label is None else "-->|%s|" % _mermaid_text(label)
            self.out.append("%s%s %s %s" % (_INDENT, self.ids[source], arrow, self.ids[target]))
        return "\n".join(self.out) + "\n"

    def _declare(self, steps: Sequence[WorkflowStep], depth: int) -> None:
        pad = _INDENT * depth
        for step in steps:
            mid = self.ids[step.id]
            lines = _label_lines(step)
            if step.kind in _CONTAINERS:
                # One line: Mermaid draws a two-line subgraph title over the first node.
                title = _mermaid_label([": ".join(lines)])
                self.out.append("%ssubgraph %s[%s]" % (pad, mid, title))
                self._declare(step.steps, depth + 1)
                self.out.append("%send" % pad)
                continue
            opening, closing = _MERMAID_SHAPES.get(step.kind, ("[", "]"))
            self.out.append("%s%s%s%s%s" % (pad, mid, opening, _mermaid_label(lines), closing))
            if step.kind == "branch":
                self._declare(list(_children(step)), depth)


# --- DOT --------------------------------------------------------------------------------------------

_DOT_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOT_KEYWORDS = frozenset(["node", "edge", "graph", "digraph", "subgraph", "strict"])
_DOT_NODE_ATTRS = {
    "tool_remote": ["peripheries=2"],
    "branch": ["shape=diamond", 'style=""'],
    "approve": ["shape=hexagon", 'style=""'],
    "workflow": ["shape=box3d", 'style=""'],
}


def _dot_string(text: str) -> str:
    return '"%s"' % _one_line(text).replace("\\", "\\\\").replace('"', '\\"')


def _dot_id(name: str) -> str:
    """``name`` bare when DOT reads it as an identifier, else a quoted string."""
    if _DOT_ID.match(name) and name.lower() not in _DOT_KEYWORDS:
        return name
    return _dot_string(name)


def _dot_label(lines: Sequence[str]) -> str:
    """A quoted label with ``\\n`` line breaks (escape sequences in the text are kept literal)."""
    return "\\n".join(_dot_string(line)[1:-1] for line in lines).join('""')


class _DotWriter:
    def __init__(self, model: _Model) -> None:
        self.model = model
        self.out: List[str] = []

    def render(self) -> str:
        name = self.model.spec.name or "workflow"
        self.out.append("digraph %s {" % _dot_id(name))
        self.out.append("%scompound=true;" % _INDENT)
        self.out.append("%snode [shape=box, style=rounded];" % _INDENT)
        self._declare(self.model.spec.steps, 1)
        for source, target, label in self.model.edges:
            attrs: List[str] = []
            if label is not None:
                attrs.append("label=%s" % _dot_string(label))
            tail, head = self._anchor(source, last=True), self._anchor(target, last=False)
            if tail != source:
                attrs.append("ltail=%s" % _dot_id(_cluster(source)))
            if head != target:
                attrs.append("lhead=%s" % _dot_id(_cluster(target)))
            suffix = " [%s]" % ", ".join(attrs) if attrs else ""
            self.out.append("%s%s -> %s%s;" % (_INDENT, _dot_id(tail), _dot_id(head), suffix))
        self.out.append("}")
        return "\n".join(self.out) + "\n"

    def _anchor(self, step_id: str, last: bool) -> str:
        """A node to attach an edge to: the step itself, or for a box its first (last) plain node."""
        step = self.model.steps[step_id]
        if step.kind not in _CONTAINERS:
            return step_id
        nodes = [s.id for s in step.walk() if s.kind not in _CONTAINERS]
        return nodes[-1] if last else nodes[0]

    def _declare(self, steps: Sequence[WorkflowStep], depth: int) -> None:
        pad = _INDENT * depth
        for step in steps:
            label = _dot_label(_label_lines(step))
            if step.kind in _CONTAINERS:
                self.out.append("%ssubgraph %s {" % (pad, _dot_id(_cluster(step.id))))
                self.out.append("%s%slabel=%s;" % (pad, _INDENT, label))
                style = "rounded,dashed" if step.kind == "foreach" else "rounded"
                self.out.append("%s%sstyle=%s;" % (pad, _INDENT, _dot_string(style)))
                self._declare(step.steps, depth + 1)
                self.out.append("%s}" % pad)
                continue
            attrs = ["label=%s" % label] + _DOT_NODE_ATTRS.get(step.kind, [])
            self.out.append("%s%s [%s];" % (pad, _dot_id(step.id), ", ".join(attrs)))
            if step.kind == "branch":
                self._declare(list(_children(step)), depth)


def _cluster(step_id: str) -> str:
    return "cluster_" + step_id
