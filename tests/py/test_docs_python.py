"""docs/reference/python/ (the index README.md and its parts, read as one page) says what the
package really does.

- Its ``>>>`` sessions run as one doctest session, in order across the parts (one DocTest per
  part, sharing one namespace), in an empty directory (as the README's do).
- The blocks marked ``<!-- doc-test: maya -->`` / ``houdini`` run against fake ``maya.cmds`` /
  ``hou`` modules, and the one marked ``pytest`` runs as a studio's test file with the plugin.
- Every other Python block at least compiles.
- Every name in the ``__all__`` of ``dcc_flow``, ``dcc_flow.errors`` and ``dcc_flow.webhooks`` is
  documented, and the doc's tables of error kinds and error codes match the code.
"""

import ast
import doctest
import os
import re
import subprocess
import sys
import textwrap
import time
import types

import pytest

import _docpage
import dcc_flow
from dcc_flow import _errors, _tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = _docpage.PYTHON

#: Names of dcc_flow.__all__ the doc need not mention, with the reason.
UNDOCUMENTED = {}  # type: dict


def doc():
    return _docpage.Page(DOC).text


BLOCK = re.compile(r"(?:<!-- doc-test: (\w+) -->\n)?^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks():
    """(marker or None, code) of every ```python block, in order."""
    return BLOCK.findall(doc())


def sessions():
    """A DocTest per file of the page of every ``>>>`` block, in order, with the examples' line
    numbers in their file; they share one namespace (one session, as when the page was one file)."""
    page = _docpage.Page(DOC)
    parser = doctest.DocTestParser()
    tests, globs = [], {}
    for rel, text in zip(page.files, page.texts):
        examples = []
        for match in BLOCK.finditer(text):
            code = match.group(2)
            if ">>> " not in code:
                continue
            first_line = text.count("\n", 0, match.start(2))  # 0-based line of the block's first line
            for example in parser.get_examples(code, rel):
                example.lineno += first_line
                examples.append(example)
        if examples:
            test = doctest.DocTest(examples, {}, rel, os.path.join(ROOT, rel), 0, text)
            test.globs = globs  # DocTest copies the dict it is given: share one namespace
            tests.append(test)
    return tests


def marked(name):
    found = [code for marker, code in python_blocks() if marker == name]
    assert len(found) == 1, "%s should have one block marked <!-- doc-test: %s -->" % (DOC, name)
    return found[0]


# --- the sessions -----------------------------------------------------------------------------


def test_sessions_run_as_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DCC_FLOW_USER", raising=False)
    tests = sessions()
    assert sum(len(test.examples) for test in tests) > 100, "the doc's Python sessions are missing"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    try:
        for test in tests:
            runner.run(test, clear_globs=False)
    finally:
        for value in tests[0].globs.values():  # an engine left open by a failed example
            if isinstance(value, dcc_flow.Engine):
                value.close()
    assert runner.failures == 0, "%s's sessions do not run as shown (see the output above)" % DOC


def test_other_blocks_compile():
    for marker, code in python_blocks():
        if ">>> " not in code:
            compile(code, "%s (%s block)" % (DOC, marker or "python"), "exec")


# --- the DCC blocks, against fake DCC modules ---------------------------------------------------


def test_maya_block_runs_its_tools_from_the_idle_loop(monkeypatch):
    jobs = {}
    opened = []
    cmds = types.ModuleType("maya.cmds")
    cmds.about = lambda batch=False: False  # an interactive Maya

    def script_job(idleEvent=None, exists=None, kill=None, force=False):
        if idleEvent is not None:
            jobs[len(jobs) + 1] = idleEvent
            return len(jobs)
        if exists is not None:
            return exists in jobs
        jobs.pop(kill, None)
        return None

    cmds.scriptJob = script_job
    cmds.file = lambda path, open=False, force=False: opened.append(path)
    cmds.ls = lambda type=None: ["pSphereShape1", "pCubeShape1"]
    maya = types.ModuleType("maya")
    maya.cmds = cmds
    monkeypatch.setitem(sys.modules, "maya", maya)
    monkeypatch.setitem(sys.modules, "maya.cmds", cmds)

    scope = {}
    exec(compile(marked("maya"), "%s (maya block)" % DOC, "exec"), scope)
    engine, run, pump = scope["engine"], scope["run"], scope["pump"]
    try:
        assert pump.installed and not pump.inline and len(jobs) == 1
        deadline = time.monotonic() + 10
        while not run.result().terminal and time.monotonic() < deadline:
            for tick in list(jobs.values()):
                tick()  # Maya's idle event, on this ("main") thread
            time.sleep(0.001)
        result = run.result()
        assert result.ok, result.error
        assert result.outputs["per_scene"] == [
            {"count": {"scene": "/proj/hero.ma", "meshes": 2}},
            {"count": {"scene": "/proj/chair.ma", "meshes": 2}},
        ]
        assert sorted(opened) == ["/proj/chair.ma", "/proj/hero.ma"] and pump.calls == 2
        pump.uninstall()
        assert jobs == {}
    finally:
        engine.close()


def test_houdini_block_runs_its_tools_from_the_event_loop(monkeypatch):
    cooked = []

    class Node:
        def __init__(self, path):
            self.path = path

        def cook(self, force=False):
            cooked.append((self.path, force))

    callbacks = []
    hou = types.ModuleType("hou")
    hou.isUIAvailable = lambda: True
    hou.node = Node
    hou.ui = types.SimpleNamespace(
        addEventLoopCallback=callbacks.append,
        removeEventLoopCallback=callbacks.remove,
        eventLoopCallbacks=lambda: tuple(callbacks),
    )
    monkeypatch.setitem(sys.modules, "hou", hou)

    scope = {}
    exec(compile(marked("houdini"), "%s (houdini block)" % DOC, "exec"), scope)
    engine, run, pump = scope["engine"], scope["run"], scope["pump"]
    try:
        assert pump.installed and callbacks == [pump.tick]
        deadline = time.monotonic() + 10
        while not run.result().terminal and time.monotonic() < deadline:
            for tick in list(callbacks):
                tick()
            time.sleep(0.001)
        assert run.result().outputs == {"cook": {"node": "/obj/geo1"}}
        assert cooked == [("/obj/geo1", True)]
    finally:
        engine.close()
    for tick in list(callbacks):
        tick()
    assert callbacks == [] and not pump.installed, "the first tick after close() uninstalls the pump"


# --- the pytest plugin block --------------------------------------------------------------------


def test_pytest_block_passes_with_the_plugin(tmp_path):
    test_file = marked("pytest")
    (tmp_path / "test_pipeline.py").write_text(test_file, encoding="utf-8")
    count = len(re.findall(r"^def test_", test_file, flags=re.M))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "dcc_flow.testing", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    assert "%d passed" % count in proc.stdout, proc.stdout


# --- coverage of the public names and the tables ------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(dcc_flow.__all__ + dcc_flow.errors.__all__ + dcc_flow.webhooks.__all__)))
def test_every_public_name_is_documented(name):
    if name in UNDOCUMENTED:
        return
    assert re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(name), doc()), (
        "dcc_flow.%s is exported but %s does not mention it" % (name, DOC)
    )


def table_rows(heading_cell):
    """The rows (lists of cells) of the Markdown table whose header starts with heading_cell."""
    lines = doc().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| " + heading_cell + " |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_error_kind_table_matches_the_code():
    """Each row's first exception, raised by a tool, gets the kind the row names."""
    rows = {row[0]: row[1] for row in table_rows("the tool raises")}
    samples = {
        "`dcc_flow.Transient(message)`": dcc_flow.Transient("x"),
        "`dcc_flow.Fatal(message)`": dcc_flow.Fatal("x"),
        '`dcc_flow.ToolError(message, kind="quota")`': dcc_flow.ToolError("x", kind="quota"),
        "`TimeoutError` (and `socket.timeout`)": TimeoutError("x"),
        "`PermissionError`": PermissionError("x"),
        "`FileNotFoundError`": FileNotFoundError("x"),
    }
    for cell, exc in samples.items():
        assert cell in rows, cell
        assert rows[cell].startswith("`%s`" % _tools.error_kind(exc)), (cell, rows[cell])
    for name in ("ConnectionError", "ConnectionResetError", "BrokenPipeError"):
        assert _tools.error_kind(getattr(__builtins__, name, None) or eval(name)("x")) == "transient"
    for exc in (ValueError("x"), TypeError("x")):
        assert _tools.error_kind(exc) == "invalid_input"
    for exc in (KeyError("x"), OSError("x"), RuntimeError("x"), dcc_flow.ToolError("x")):
        assert _tools.error_kind(exc) == "error"


def test_exception_table_matches_the_code():
    rows = {row[0].strip("`"): row for row in table_rows("class | base classes")}
    for code, cls in _errors.CODE_TO_CLASS.items():
        row = rows[cls.__name__]
        assert "`%s`" % code in row[2], (cls.__name__, code, row)
    for name, row in rows.items():
        cls = getattr(dcc_flow, name)
        bases = [b.strip("` ") for b in row[1].split(",")]
        assert [b.__name__ for b in cls.__bases__] == bases, (name, cls.__bases__, bases)


def test_engine_docstring_config_keys_are_accepted():
    """The config keys Engine's docstring names are the ones the library accepts."""
    keys = re.search(r"settings of docs/reference/c-abi/README.md \(([^)]*)\)", dcc_flow.Engine.__doc__ or "").group(1)
    for key in re.findall(r"``(\w+)``", keys):
        value = {"env_allow": [], "remotes": {}}.get(key, 1)
        dcc_flow.Engine(config={key: value}).close()


def test_config_keys_in_the_doc_are_accepted():
    for row in table_rows("`config` key"):
        key = row[0].strip("`")
        value = {"env_allow": ["STUDIO_*"], "remotes": {}, "tool_pools": {}, "defaults": {"timeout_secs": 60},
                 "openlineage": {"url": "http://127.0.0.1:9/api/v1/lineage"},
                 "tracing": {"enabled": True, "endpoint": "http://127.0.0.1:9"}}.get(key, 1)
        dcc_flow.Engine(config={key: value}).close()


def test_code_first_examples_still_parse():
    """The doc's code-first block names only public names of dcc_flow."""
    for _, code in python_blocks():
        tree = ast.parse(textwrap.dedent(code)) if ">>> " not in code else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ImportFrom) and node.module == "dcc_flow":
                for alias in node.names:
                    assert alias.name in dcc_flow.__all__, alias.name
