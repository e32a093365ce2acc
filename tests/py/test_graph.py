"""dcc_flow.graph: golden Mermaid/DOT drawings, depends_on semantics, escaping, validity checks.

The golden files are tests/py/golden/graph/<name>.{yaml,mmd,dot}. After a deliberate change of the
drawing, rewrite them with ``DCC_FLOW_UPDATE_GOLDEN=1 python3 -m pytest tests/py/test_graph.py``
and review the diff.

Validity: every drawing goes through a structural check of its format (below). When Graphviz's
``dot`` is installed it must also accept every DOT drawing without a warning.
"""

import os
import re
import shutil
import subprocess

import pytest

import dcc_flow
from conftest import ALL_KINDS, FULL_VENDOR_INTAKE
from dcc_flow import ValidationError, WorkflowSpec

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden", "graph")
UPDATE = os.environ.get("DCC_FLOW_UPDATE_GOLDEN", "") not in ("", "0")
GOLDEN_NAMES = ["sequential", "diamond", "foreach", "parallel", "branch", "approve"]
SUFFIX = {"mermaid": ".mmd", "dot": ".dot"}

# Ids that are keywords of Mermaid or DOT, or not identifiers in either (a hyphen), nested boxes,
# branches inside a parallel, and labels with quotes, backslashes, '#', '<', '&' and '%%'.
NASTY = r"""
name: 'nasty "flow" with # stuff'
inputs:
  flag: { type: boolean, default: true }
steps:
  - { id: end, tool: flow__echo }
  - { id: a-b, tool: flow__echo }
  - { id: a_b, tool: flow__echo, depends_on: [] }
  - { id: s_a_b, tool: flow__echo, depends_on: [end, a-b, a_b] }
  - id: graph
    kind: foreach
    items: "{{inputs.flag}}"
    steps:
      - id: node
        kind: parallel
        steps:
          - id: subgraph
            kind: foreach
            items: [{"k": "v \" <b> & #35; %% x \\ y"}, 2]
            as: it
            steps:
              - { id: strict, tool: flow__echo }
          - id: edge
            kind: branch
            on: "$.a_b[?(@.x == \"y\" && @.z != '#')]"
            then:
              - id: inner
                kind: branch
                on: true
                then:
                  - { id: deep, tool: flow__echo }
            else: []
          - { id: after_edge, kind: approve, depends_on: [edge] }
  - { id: digraph-2, kind: tool_remote, dcc: unreal, tool: import_assets }
  - id: class
    kind: branch
    on: false
    then:
      - id: p2
        kind: parallel
        steps:
          - { id: x1, tool: flow__echo }
    else:
      - { id: click, tool: flow__echo }
  - { id: style, kind: approve }
"""


def _golden_spec(name):
    return WorkflowSpec.from_file(os.path.join(GOLDEN, name + ".yaml"))


def _edges(text):
    """(source, target, label) of a Mermaid drawing."""
    out = []
    for line in text.splitlines():
        m = _MERMAID_EDGE.match(line)
        if m:
            out.append((m.group(1), m.group(3), m.group(2)))
    return out


# --- golden files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden(name, fmt):
    text = dcc_flow.graph(_golden_spec(name), format=fmt)
    path = os.path.join(GOLDEN, name + SUFFIX[fmt])
    if UPDATE:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    with open(path, encoding="utf-8", newline="") as fh:
        expected = fh.read()
    assert text == expected, "drawing of %s.yaml changed; see the module docstring to update" % name


def test_golden_sequential_mermaid_reads_as_documented():
    # One golden spelled out here, so the shape of the output is visible in the test itself.
    assert dcc_flow.graph(_golden_spec("sequential")) == (
        "flowchart TD\n"
        '    open_scene["open_scene<br/>maya__open_scene"]\n'
        '    render["render<br/>maya__render_turntable"]\n'
        '    publish[["publish<br/>publish_version @ shotgrid"]]\n'
        "    open_scene --> render\n"
        "    render --> publish\n"
    )


def test_default_format_is_mermaid():
    spec = _golden_spec("approve")
    assert dcc_flow.graph(spec) == dcc_flow.graph(spec, "mermaid") == dcc_flow.graph(spec, format="mermaid")
    assert dcc_flow.graph(spec).startswith("flowchart TD\n")
    assert dcc_flow.graph(spec, "dot").startswith("digraph ship_drop {\n")


# --- semantics --------------------------------------------------------------------------------------


def test_diamond_edges_follow_depends_on():
    edges = _edges(dcc_flow.graph(_golden_spec("diamond")))
    assert edges == [
        ("fetch", "model_qc", None),
        ("fetch", "rig_qc", None),
        ("model_qc", "merge", None),
        ("rig_qc", "merge", None),
        ("merge", "report", None),
        ("notes", "report", None),
    ]
    # `depends_on: []` starts at once: notes has no incoming edge, not even from rig_qc before it.
    assert not [e for e in edges if e[1] == "notes"]


def test_step_without_depends_on_follows_previous_sibling():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n"
        "  - { id: a, tool: t }\n"
        "  - { id: b, tool: t, depends_on: [] }\n"
        "  - { id: c, tool: t }\n"
        "  - { id: d, tool: t, depends_on: [a, a, c] }\n"
    )
    assert _edges(dcc_flow.graph(spec)) == [("b", "c", None), ("a", "d", None), ("c", "d", None)]


def test_parallel_children_start_together():
    text = dcc_flow.graph(_golden_spec("parallel"))
    assert _edges(text) == [("usd", "usd_check", None), ("exports", "upload", None)]
    body = text.split('subgraph exports["exports: parallel"]\n', 1)[1].split("    end\n", 1)[0]
    for child in ("fbx", "abc", "usd", "usd_check"):
        assert '%s["%s<br/>' % (child, child) in body


def test_foreach_body_is_inside_its_box():
    mermaid = dcc_flow.graph(_golden_spec("foreach"))
    assert 'subgraph per_file["per_file: foreach file in $.list.files (concurrency 4)"]' in mermaid
    assert _edges(mermaid) == [("list", "per_file", None), ("export", "check", None), ("per_file", "summary", None)]
    dot = dcc_flow.graph(_golden_spec("foreach"), "dot")
    assert 'label="per_file\\nforeach file in $.list.files (concurrency 4)";' in dot
    assert "list -> export [lhead=cluster_per_file];" in dot
    assert "check -> summary [ltail=cluster_per_file];" in dot


def test_branch_has_then_else_edges_and_joins_after():
    edges = _edges(dcc_flow.graph(_golden_spec("branch")))
    assert ("gate", "publish", "then") in edges
    assert ("gate", "report", "else") in edges
    # The step after a branch follows the last step of each list.
    assert ("push", "cleanup", None) in edges and ("report", "cleanup", None) in edges
    assert not [e for e in edges if e[0] == "gate" and e[1] == "cleanup"]
    assert ("maybe_notify", "send_notes", "then") in edges


def test_branch_with_an_empty_list_joins_from_the_diamond():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n"
        "  - { id: gate, kind: branch, on: true, then: [{ id: a, tool: t }] }\n"
        "  - { id: after, tool: t }\n"
        "  - { id: gate2, kind: branch, on: true }\n"
        "  - { id: last, tool: t }\n"
    )
    assert _edges(dcc_flow.graph(spec)) == [
        ("gate", "a", "then"),
        ("a", "after", None),
        ("gate", "after", "else"),
        ("after", "gate2", None),
        ("gate2", "last", None),
    ]


def test_approve_has_its_own_shape():
    spec = _golden_spec("approve")
    assert '    human_gate{{"human_gate<br/>approve"}}\n' in dcc_flow.graph(spec)
    assert '    human_gate [label="human_gate\\napprove", shape=hexagon, style=""];\n' in dcc_flow.graph(spec, "dot")


def test_every_step_is_drawn_once():
    for text in (ALL_KINDS, FULL_VENDOR_INTAKE, NASTY):
        spec = WorkflowSpec.from_yaml_str(text)
        ids = [s.id for s in spec.walk()]
        mermaid = dcc_flow.graph(spec)
        dot = dcc_flow.graph(spec, "dot")
        for sid in ids:
            assert len(re.findall(r'"%s(?:<br/>|: )' % re.escape(sid), mermaid)) == 1, sid
            assert dot.count('label="%s\\n' % sid) == 1, sid


# --- escaping and ids --------------------------------------------------------------------------------


def test_keyword_and_hyphen_ids_are_renamed_in_mermaid_and_quoted_in_dot():
    spec = WorkflowSpec.from_yaml_str(NASTY)
    mermaid = dcc_flow.graph(spec)
    assert '    s_end["end<br/>flow__echo"]' in mermaid
    assert '    s_a_b_2["a-b<br/>flow__echo"]' in mermaid  # s_a_b is a real step id: no clash
    assert '    s_a_b["s_a_b<br/>flow__echo"]' in mermaid
    assert "subgraph s_graph[" in mermaid and "subgraph s_subgraph[" in mermaid
    assert "    s_class -->|then| p2" in mermaid
    dot = dcc_flow.graph(spec, "dot")
    assert '    "a-b" [label="a-b\\nflow__echo"];' in dot
    assert '"strict" [label=' in dot and '"edge" [label=' in dot
    assert "    end [label=" in dot  # not a DOT keyword
    assert "subgraph cluster_subgraph {" in dot
    assert dot.startswith('digraph "nasty \\"flow\\" with # stuff" {\n')


def test_labels_are_escaped():
    spec = WorkflowSpec.from_yaml_str(NASTY)
    mermaid = dcc_flow.graph(spec)
    assert "branch on $.a_b[?(@.x == #34;y#34; #38;#38; @.z != '#35;')]" in mermaid
    assert '"' not in mermaid.replace('["', "").replace('"]', "").replace('{"', "").replace('"}', "")
    dot = dcc_flow.graph(spec, "dot")
    assert "branch on $.a_b[?(@.x == \\\"y\\\" && @.z != '#')]" in dot


def test_long_expressions_are_shortened():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n"
        "  - { id: list, tool: t }\n"
        '  - { id: loop, kind: foreach, items: "$.list.files_with_a_long_name[*].and_more.and_more",'
        " steps: [{ id: b, tool: t }] }\n"
    )
    assert 'subgraph loop["loop: foreach item in $.list.files_with_a_long_name[*].and_..."]' in dcc_flow.graph(spec)


# --- inputs -----------------------------------------------------------------------------------------


class _Flow:
    def __init__(self, spec):
        self.spec = spec


def test_accepts_an_object_with_a_spec():
    spec = _golden_spec("diamond")
    assert dcc_flow.graph(_Flow(spec), "dot") == dcc_flow.graph(spec, "dot")


@pytest.mark.parametrize("value", [None, "steps: []", {"steps": []}, _Flow("not a spec"), 3])
def test_rejects_other_objects(value):
    with pytest.raises(TypeError, match="WorkflowSpec"):
        dcc_flow.graph(value)


@pytest.mark.parametrize("fmt", ["svg", "Mermaid", "", None])
def test_rejects_unknown_formats(fmt):
    with pytest.raises(ValueError, match="mermaid"):
        dcc_flow.graph(_golden_spec("approve"), fmt)


def test_invalid_spec_raises_validation_error():
    spec = WorkflowSpec.from_yaml_str(
        "steps:\n  - { id: publish, tool: unreal__publish, depends_on: [qc] }\n  - { id: qc, tool: maya__qc }\n"
    )
    with pytest.raises(ValidationError) as info:
        dcc_flow.graph(spec)
    assert [p.code for p in info.value.problems] == ["cycle"]


def test_output_is_deterministic_and_ignores_spelling():
    yaml_spec = WorkflowSpec.from_yaml_str(ALL_KINDS)
    json_spec = WorkflowSpec.from_json(yaml_spec.to_json())
    for fmt in ("mermaid", "dot"):
        first = dcc_flow.graph(yaml_spec, fmt)
        assert first == dcc_flow.graph(yaml_spec, fmt) == dcc_flow.graph(json_spec, fmt)
        assert first.endswith("}\n" if fmt == "dot" else "\n") and not first.endswith("\n\n")


def test_graph_is_public():
    assert "graph" in dcc_flow.__all__
    assert dcc_flow.graph.__doc__ and "mermaid" in dcc_flow.graph.__doc__


# --- validity: Mermaid -------------------------------------------------------------------------------

_MERMAID_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_MERMAID_LABEL = r'"[^"]*"'
_MERMAID_NODE = re.compile(
    r"^(?P<id>%s)(?:\[%s\]|\[\[%s\]\]|\{%s\}|\{\{%s\}\})$" % ((_MERMAID_ID,) + (_MERMAID_LABEL,) * 4)
)
_MERMAID_SUBGRAPH = re.compile(r"^subgraph (?P<id>%s)\[%s\]$" % (_MERMAID_ID, _MERMAID_LABEL))
_MERMAID_EDGE = re.compile(r"^\s*(%s) -->(?:\|([a-z]+)\|)? (%s)$" % (_MERMAID_ID, _MERMAID_ID))
_MERMAID_KEYWORDS = {
    "end", "graph", "flowchart", "subgraph", "style", "class", "classdef", "linkstyle", "click",
    "call", "callback", "href", "interpolate", "default", "direction", "acctitle", "accdescr",
}  # fmt: skip


def check_mermaid(text):
    """Structural check of a Mermaid flowchart in the subset graph() writes. Returns the node ids."""
    lines = text.split("\n")
    assert lines[0] == "flowchart TD" and lines[-1] == "", "header or final newline"
    declared, open_subgraphs, edges = set(), [], 0
    for number, raw in enumerate(lines[1:-1], start=2):
        line = raw.strip()
        where = "line %d: %r" % (number, raw)
        assert raw.startswith("    ") and line, where
        if "#" in line:
            assert re.fullmatch(r"([^#]|#\d+;)*", line), "a raw # outside an entity code: " + where
        m = _MERMAID_EDGE.match(raw)
        if m:
            assert not open_subgraphs, "edges come after every subgraph is closed: " + where
            assert m.group(1) in declared and m.group(3) in declared, "edge to an undeclared id: " + where
            edges += 1
            continue
        m = _MERMAID_SUBGRAPH.match(line) or _MERMAID_NODE.match(line)
        if m:
            assert edges == 0, "declarations come before edges: " + where
            node_id = m.group("id")
            assert node_id.lower() not in _MERMAID_KEYWORDS, "keyword used as an id: " + where
            assert node_id not in declared, "id declared twice: " + where
            declared.add(node_id)
            if line.startswith("subgraph "):
                open_subgraphs.append(node_id)
            continue
        assert line == "end" and open_subgraphs, "not a node, subgraph, end or edge: " + where
        open_subgraphs.pop()
    assert not open_subgraphs, "unclosed subgraph"
    return declared


# --- validity: DOT -----------------------------------------------------------------------------------

_DOT_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(->)|([{}\[\];,=])|([A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?))')
_DOT_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}


def _dot_tokens(text):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _DOT_TOKEN.match(text, pos)
        assert m and m.end() > pos, "cannot read DOT at %r" % text[pos : pos + 40]
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


def _dot_name(token):
    if token.startswith('"'):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    assert token.lower() not in _DOT_KEYWORDS, "keyword %r used as an id" % token
    return token


def check_dot(text):
    """Structural check of a DOT digraph: balanced braces and brackets, every edge endpoint declared,
    every lhead/ltail a cluster that holds its endpoint. Returns the declared node names."""
    tokens = _dot_tokens(text)
    assert tokens[0] == "digraph" and tokens[2] == "{" and tokens[-1] == "}", "digraph NAME { ... }"
    i = 3
    stack = []  # clusters open around the current statement
    nodes, members, edges = {}, {}, []
    while i < len(tokens) - 1:
        token = tokens[i]
        if token == "subgraph":
            name = _dot_name(tokens[i + 1])
            assert tokens[i + 2] == "{", "subgraph NAME {"
            assert name not in members, "cluster %s declared twice" % name
            stack.append(name)
            members[name] = set()
            i += 3
            continue
        if token == "}":
            assert stack, "unbalanced }"
            stack.pop()
            i += 1
            continue
        # a statement up to ';'
        end = tokens.index(";", i)
        statement = tokens[i:end]
        i = end + 1
        attrs = {}
        if "[" in statement:
            open_at = statement.index("[")
            assert statement[-1] == "]", "attribute list closes the statement: %r" % statement
            body = statement[open_at + 1 : -1]
            while body:
                assert len(body) >= 3 and body[1] == "=", "key=value in an attribute list: %r" % body
                attrs[body[0]] = body[2]
                body = body[4:] if len(body) > 3 and body[3] == "," else body[3:]
            statement = statement[:open_at]
        if statement in (["node"], ["edge"], ["graph"]):
            continue
        if len(statement) == 3 and statement[1] == "=":
            continue  # graph attribute: compound=true, label=..., style=...
        if len(statement) == 1:
            name = _dot_name(statement[0])
            assert name not in nodes, "node %s declared twice" % name
            nodes[name] = list(stack)
            for cluster in stack:
                members[cluster].add(name)
            continue
        assert len(statement) == 3 and statement[1] == "->", "not a DOT statement we write: %r" % statement
        edges.append((_dot_name(statement[0]), _dot_name(statement[2]), attrs))
    assert not stack, "unclosed subgraph"
    for tail, head, attrs in edges:
        assert tail in nodes and head in nodes, "edge %s -> %s has an undeclared endpoint" % (tail, head)
        for key, node in (("ltail", tail), ("lhead", head)):
            if key in attrs:
                cluster = _dot_name(attrs[key])
                assert cluster.startswith("cluster_") and cluster in members, "%s=%s is no cluster" % (key, cluster)
                assert node in members[cluster], "%s: %s is not inside %s" % (key, node, cluster)
    return set(nodes)


def _all_drawings():
    specs = [(name, _golden_spec(name)) for name in GOLDEN_NAMES]
    specs += [
        ("all_kinds", WorkflowSpec.from_yaml_str(ALL_KINDS)),
        ("full_vendor_intake", WorkflowSpec.from_yaml_str(FULL_VENDOR_INTAKE)),
        ("nasty", WorkflowSpec.from_yaml_str(NASTY)),
    ]
    return specs


@pytest.mark.parametrize("name,spec", _all_drawings(), ids=[n for n, _ in _all_drawings()])
def test_mermaid_is_valid(name, spec):
    text = dcc_flow.graph(spec)
    declared = check_mermaid(text)
    assert len(declared) == spec.step_count


@pytest.mark.parametrize("name,spec", _all_drawings(), ids=[n for n, _ in _all_drawings()])
def test_dot_is_valid(name, spec, tmp_path):
    text = dcc_flow.graph(spec, "dot")
    nodes = check_dot(text)
    # Every step except foreach/parallel (drawn as clusters) is a node.
    assert nodes == {s.id for s in spec.walk() if s.kind not in ("foreach", "parallel")}
    dot = shutil.which("dot")
    if dot is None:
        return  # Graphviz is not installed: the structural check above is the test.
    source = tmp_path / (name + ".dot")
    source.write_text(text, encoding="utf-8")
    result = subprocess.run([dot, "-Tsvg", "-o", os.devnull, str(source)], capture_output=True, timeout=60)
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize(
    "text,message",
    [
        ("digraph g {\n    a -> b;\n}\n", "undeclared endpoint"),
        ('digraph g {\n    a [label="a"];\n    subgraph cluster_x {\n}\n', "unclosed"),
        ('digraph g {\n    node [label="x"];\n    a [label="a"];\n    a -> a [lhead=cluster_y];\n}\n', "no cluster"),
    ],
)
def test_the_dot_check_catches_mistakes(text, message):
    with pytest.raises(AssertionError, match=message):
        check_dot(text)


@pytest.mark.parametrize(
    "text,message",
    [
        ("flowchart TD\n    a --> b\n", "undeclared"),
        ('flowchart TD\n    end["end"]\n', "keyword"),
        ('flowchart TD\n    subgraph x["x"]\n        a["a"]\n', "unclosed"),
        ('flowchart TD\n    a["say "hi""]\n', "not a node"),
    ],
)
def test_the_mermaid_check_catches_mistakes(text, message):
    with pytest.raises(AssertionError, match=message):
        check_mermaid(text)
