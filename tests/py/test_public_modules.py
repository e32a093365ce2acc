"""The public surface: ``dcc_flow`` (the everyday API), ``dcc_flow.errors`` (every exception) and
``dcc_flow.webhooks`` (signing webhook requests).

The root's ``__all__`` was cut from 63 names to the everyday ones; every name it listed before
still imports from ``dcc_flow`` and is the very object its new home holds.
"""

import doctest
import pickle
import subprocess
import sys
import textwrap

import pytest

import dcc_flow
from conftest import ROOT
from dcc_flow import _errors, errors, webhooks

#: dcc_flow.__all__ before dcc_flow.errors and dcc_flow.webhooks existed (issue 35), verbatim.
OLD_ALL = [
    "__version__", "library_version", "ScheduleSpec", "TriggerSpec", "parse_schedules_yaml", "hmac_sha256_hex",
    "verify_hub_signature_256", "timestamped_signature", "Engine", "Run", "RunResult", "DryRunResult", "DryRunStep",
    "StepRecord", "AttemptRecord", "RunFailedError", "current_call", "CallContext", "ToolError", "Transient", "Fatal",
    "ToolInterrupted", "graph", "task", "workflow", "Task", "Workflow", "Retry", "unmapped", "FlowContext",
    "WorkflowTraceError", "WorkflowSpec", "WorkflowStep", "StepPolicy", "RetryPolicy", "InputSpec", "BackoffKind",
    "WorkflowStatus", "StepStatus", "Problem", "DccFlowError", "InvalidRequestError", "ValidationError", "ParseError",
    "SpecTooLargeError", "InternalError", "DatabaseLockedError", "ReadOnlyError", "StorageError", "WorkerStartError",
    "InvalidInputError", "NotFoundError", "UnknownToolError", "NotResumableError", "SpecChangedError",
    "InvalidStateError", "EngineClosedError", "StaleHandleError", "DccFlowTimeoutError", "CancelledError",
    "LibraryLoadError", "LibraryNotFoundError", "AbiVersionError",
]


def home(name):
    """The public module that lists ``name`` now (the root first)."""
    for module in (dcc_flow, errors, webhooks):
        if name in module.__all__:
            return module
    raise AssertionError("%s was in dcc_flow.__all__ and is in no public module's __all__ now" % name)


#: Root names added since, on purpose, with the issue that added them.
NEW_ROOT_NAMES = [
    "set_environment",  # issue 36: the environment a tool call ran in (docs/reference/python/tool-calls.md)
]


def test_the_root_lists_about_35_names():
    assert 30 <= len(dcc_flow.__all__) <= 40, len(dcc_flow.__all__)
    assert len(set(dcc_flow.__all__)) == len(dcc_flow.__all__)
    assert set(dcc_flow.__all__) <= set(OLD_ALL + NEW_ROOT_NAMES), "a new root name: add it on purpose, then here"


@pytest.mark.parametrize("name", OLD_ALL)
def test_every_old_name_still_imports_from_the_root_as_the_same_object(name):
    new = getattr(home(name), name)
    namespace = {}
    exec("from dcc_flow import %s as got" % name, namespace)
    assert namespace["got"] is new
    assert getattr(dcc_flow, name) is new


def test_each_name_has_one_home_and_the_moved_ones_are_not_in_the_root():
    for name in errors.__all__ + webhooks.__all__:
        assert hasattr(dcc_flow, name), name
    both = set(errors.__all__) & set(webhooks.__all__)
    assert not both
    # Only the catch-all base and Problem (a spec view too) are listed in two places.
    assert set(dcc_flow.__all__) & set(errors.__all__) == {"DccFlowError", "Problem"}
    assert not set(dcc_flow.__all__) & set(webhooks.__all__)


def test_errors_holds_every_exception_of_the_package():
    every = {name for name in _errors.__all__ if isinstance(getattr(_errors, name), type)}
    assert every <= set(errors.__all__), sorted(every - set(errors.__all__))
    for cls in set(_errors.CODE_TO_CLASS.values()):
        assert getattr(errors, cls.__name__) is cls
    with pytest.raises(errors.RunFailedError):
        dcc_flow.RunResult({"status": "failed"}).raise_for_status()
    for name in errors.__all__:
        obj = getattr(errors, name)
        assert isinstance(obj, type) and (issubclass(obj, (Exception,)) or name == "Problem"), name


def test_star_import_gives_the_everyday_names_only():
    namespace = {}
    exec("from dcc_flow import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(dcc_flow.__all__)
    namespace = {}
    exec("from dcc_flow.errors import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(errors.__all__)


def test_moved_classes_still_read_and_pickle_as_dcc_flow_names():
    """Tracebacks and reprs say dcc_flow.ValidationError as before, and pickles made before the
    move (which name dcc_flow.X) load."""
    for name in errors.__all__:
        assert getattr(errors, name).__module__ == "dcc_flow", name
    err = pickle.loads(pickle.dumps(errors.NotFoundError("no run", code="not_found")))
    assert type(err) is errors.NotFoundError and err.code == "not_found"
    old = pickle.dumps(dcc_flow.RunFailedError("run r1 failed", code="error"))
    assert b"dcc_flow" in old and type(pickle.loads(old)) is errors.RunFailedError


@pytest.mark.parametrize("module", [errors, webhooks], ids=lambda m: m.__name__)
def test_the_module_docstring_examples_run(module):
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(module)
    assert sum(len(t.examples) for t in tests) >= 2
    for test in tests:
        runner.run(test)
    assert runner.failures == 0


def test_a_fresh_interpreter_imports_each_public_module_first():
    """``import dcc_flow.errors`` (or .webhooks) alone, before anything else of the package."""
    for module in ("dcc_flow.errors", "dcc_flow.webhooks"):
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import %s as m
            import dcc_flow
            assert all(getattr(dcc_flow, n) is getattr(m, n) for n in m.__all__)
        """ % (ROOT + "/python", module))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
