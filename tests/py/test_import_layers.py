"""The Python twin of engine/imports_test.go: imports point down.

The modules of ``dcc_flow._flow`` (the code-first compiler) form layers, listed below from the
bottom up: a module imports, at run time, only modules of the layers below its own. A few modules
of the package root have the same kind of rule (``MUST_NOT_IMPORT``): the run records, the dry run
and the pull driver never import the engine that uses them.

Imports are read from the source with ``ast``, not by importing it: ``from . import x``,
``from ._x import y``, ``from .._x import y`` and ``import dcc_flow._x`` all count, at module level
and inside functions (an import in a function runs too, later). Imports under
``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``) do not: they never run.
"""

import ast
import os
from typing import Dict, Iterator, List, Tuple

import pytest

from conftest import ROOT

PACKAGE_DIR = os.path.join(ROOT, "python", "dcc_flow")

#: dcc_flow._flow, bottom layer first. A module may import only modules of the layers before its
#: own (never one of its own layer). A new module of the package must be placed here.
FLOW_LAYERS: List[List[str]] = [
    ["_base"],  # WorkflowTraceError, the user's call site, the spec's name rules
    ["_refs"],  # Ref, unmapped
    ["_trace"],  # the tracer and the base of the blocks
    ["_convert", "_retry"],  # Python values to spec JSON; Retry
    ["_blocks"],  # ctx.foreach / ctx.parallel / ctx.branch
    ["_task"],  # @task / Task
    ["_workflow"],  # @workflow / Workflow / FlowContext
    ["__init__"],  # the public face
]

#: The modules of the package root the compiler may import (all of them below it: none imports
#: dcc_flow._flow back, see test_only_the_package_root_imports_the_compiler).
FLOW_MAY_IMPORT = {"dcc_flow._errors", "dcc_flow._spec", "dcc_flow._schema", "dcc_flow._engine",
                   "dcc_flow._results", "dcc_flow._tools"}  # _tools: @task's reads=/writes= (file_args)

#: Root modules and what they must never import at run time (the import would be upward).
MUST_NOT_IMPORT: Dict[str, List[str]] = {
    "dcc_flow._results": ["dcc_flow._engine", "dcc_flow._dryrun", "dcc_flow._driver"],
    "dcc_flow._dryrun": ["dcc_flow._engine", "dcc_flow._driver"],
    "dcc_flow._driver": ["dcc_flow._engine", "dcc_flow._dryrun", "dcc_flow._results"],
}


def _module_files() -> Dict[str, str]:
    """Every module of dcc_flow by dotted name (a package by its own name), to its file."""
    found = {}
    for folder, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_lib")) and d != "__pycache__"]
        rel = os.path.relpath(folder, os.path.dirname(PACKAGE_DIR)).replace(os.sep, ".")
        for f in files:
            if f.endswith(".py"):
                name = rel if f == "__init__.py" else rel + "." + f[:-3]
                found[name] = os.path.join(folder, f)
    return found


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_runtime(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node`` that run: the bodies of ``if TYPE_CHECKING:`` are left out (their
    ``else`` is kept)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk_runtime(other)
            continue
        yield child
        yield from _walk_runtime(child)


def runtime_imports(module: str) -> List[Tuple[int, str]]:
    """(line, dotted module) for each dcc_flow module ``module`` imports at run time."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = []
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "dcc_flow"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                target = base + "." + node.module if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != "dcc_flow":
                continue
            subs = [target + "." + a.name for a in node.names if target + "." + a.name in MODULES]
            if len(subs) < len(node.names):  # not only submodules (`from . import x` imports x; its
                out.append((node.lineno, target))  # package is loaded already, being this one's)
            out += [(node.lineno, s) for s in subs]
    return out


def _layer_of() -> Dict[str, int]:
    return {"dcc_flow._flow" + ("" if m == "__init__" else "." + m): i
            for i, layer in enumerate(FLOW_LAYERS) for m in layer}


def test_every_module_of_the_compiler_has_a_layer():
    layers = _layer_of()
    flow = {m for m in MODULES if m == "dcc_flow._flow" or m.startswith("dcc_flow._flow.")}
    assert flow == set(layers), "place each module of dcc_flow._flow in FLOW_LAYERS (bottom first)"


def test_the_compiler_imports_only_downward():
    layers = _layer_of()
    bad = []
    for module, layer in sorted(layers.items(), key=lambda kv: kv[1]):
        for line, target in runtime_imports(module):
            if target in layers:
                if layers[target] >= layer:
                    bad.append("%s:%d imports %s (layer %d, not below its own %d): move the shared code down, "
                               "or import it under `if TYPE_CHECKING:` when only annotations need it"
                               % (module, line, target, layers[target], layer))
            elif target not in FLOW_MAY_IMPORT:
                bad.append("%s:%d imports %s, which is not one of the root modules the compiler may use (%s)"
                           % (module, line, target, ", ".join(sorted(FLOW_MAY_IMPORT))))
    assert not bad, "\n".join(bad)


def test_only_the_package_root_imports_the_compiler():
    bad = ["%s:%d imports %s" % (m, line, t)
           for m in sorted(MODULES) if m != "dcc_flow" and not m.startswith("dcc_flow._flow")
           for line, t in runtime_imports(m) if t == "dcc_flow._flow" or t.startswith("dcc_flow._flow.")]
    assert not bad, "the compiler sits on the root modules; only dcc_flow/__init__.py re-exports it:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(MUST_NOT_IMPORT))
def test_lower_root_modules_do_not_import_upward(module):
    bad = ["%s:%d imports %s" % (module, line, t) for line, t in runtime_imports(module)
           if t in MUST_NOT_IMPORT[module]]
    assert not bad, "\n".join(bad)


def test_the_reader_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The checks above are only as good as runtime_imports: it finds module-level, function-level,
    relative, parent-relative and absolute imports, and skips TYPE_CHECKING blocks."""
    src = tmp_path / "probe.py"
    src.write_text(
        "import typing\n"
        "from typing import TYPE_CHECKING\n"
        "from . import _base\n"
        "from ._refs import Ref\n"
        "from .._spec import WorkflowSpec\n"
        "import dcc_flow._engine\n"
        "if TYPE_CHECKING:\n"
        "    from ._workflow import Workflow\n"
        "if typing.TYPE_CHECKING:\n"
        "    from ._task import Task\n"
        "else:\n"
        "    from ._blocks import _Foreach\n"
        "def late():\n"
        "    from ._trace import _Tracer\n"
        "    from dcc_flow import _results\n",
        encoding="utf-8")
    monkeypatch.setitem(MODULES, "dcc_flow._flow.probe", str(src))
    got = sorted(t for _, t in runtime_imports("dcc_flow._flow.probe"))
    assert got == sorted(["dcc_flow._flow._base", "dcc_flow._flow._refs", "dcc_flow._spec", "dcc_flow._engine",
                          "dcc_flow._flow._blocks", "dcc_flow._flow._trace", "dcc_flow._results"])


_CONSTANTS = (ast.Constant, getattr(ast, "NameConstant", ast.Constant))  # Python 3.7 parses False as NameConstant


def test_typing_only_imports_use_type_checking():
    """``if TYPE_CHECKING:`` is the one spelling of a typing-only import (not ``if False:``), so
    the reader above and type checkers agree on what runs."""
    bad = []
    for module, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        bad += ["%s:%d" % (module, node.lineno) for node in ast.walk(tree)
                if isinstance(node, ast.If) and isinstance(node.test, _CONSTANTS) and not node.test.value]
    assert not bad, "use `if TYPE_CHECKING:` (from typing) instead of `if False:` at " + ", ".join(bad)
