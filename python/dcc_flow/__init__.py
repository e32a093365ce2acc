"""dcc-flow: spec-driven, persistable, cancellable pipelines of tool calls for DCC studios.

The engine is a native library (``_lib/libdccflow.so``, or the file named by ``$DCC_FLOW_LIBRARY``)
driven through ctypes. It is loaded lazily, on the first call that needs it, once per process
(``importlib.reload(dcc_flow)`` keeps using it). Importing this package never imports Maya,
Houdini or Qt modules.

    >>> import dcc_flow
    >>> spec = dcc_flow.WorkflowSpec.from_file("vendor_intake.yaml")
    >>> spec.validate()
    >>> spec.steps[0].policy.retry
"""

from typing import Any, Dict

from . import _ffi
from ._dryrun import DryRunResult, DryRunStep
from ._engine import Engine, Run
from ._errors import (
    AbiVersionError,
    CancelledError,
    DatabaseLockedError,
    DccFlowError,
    DccFlowTimeoutError,
    EngineClosedError,
    InternalError,
    InvalidInputError,
    InvalidRequestError,
    InvalidStateError,
    LibraryLoadError,
    LibraryNotFoundError,
    NotFoundError,
    NotResumableError,
    ParseError,
    Problem,
    ReadOnlyError,
    SpecChangedError,
    SpecTooLargeError,
    StaleHandleError,
    StorageError,
    UnknownToolError,
    ValidationError,
    WorkerStartError,
)
from ._flow import FlowContext, Retry, Task, Workflow, WorkflowTraceError, task, unmapped, workflow
from ._results import AttemptRecord, RunFailedError, RunResult, StepRecord
from ._schedule import (
    ScheduleSpec,
    TriggerSpec,
    hmac_sha256_hex,
    parse_schedules_yaml,
    timestamped_signature,
    verify_hub_signature_256,
)
from ._spec import (
    BackoffKind,
    InputSpec,
    RetryPolicy,
    StepPolicy,
    StepStatus,
    WorkflowSpec,
    WorkflowStatus,
    WorkflowStep,
)
from ._tools import CallContext, Fatal, ToolError, ToolInterrupted, Transient, current_call

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "library_version",
    # scheduler
    "ScheduleSpec",
    "TriggerSpec",
    "parse_schedules_yaml",
    "hmac_sha256_hex",
    "verify_hub_signature_256",
    "timestamped_signature",
    # running workflows
    "Engine",
    "Run",
    "RunResult",
    "DryRunResult",
    "DryRunStep",
    "StepRecord",
    "AttemptRecord",
    "RunFailedError",
    "current_call",
    "CallContext",
    "ToolError",
    "Transient",
    "Fatal",
    "ToolInterrupted",
    "graph",
    # code-first workflows
    "task",
    "workflow",
    "Task",
    "Workflow",
    "Retry",
    "unmapped",
    "FlowContext",
    "WorkflowTraceError",
    # spec views
    "WorkflowSpec",
    "WorkflowStep",
    "StepPolicy",
    "RetryPolicy",
    "InputSpec",
    "BackoffKind",
    "WorkflowStatus",
    "StepStatus",
    "Problem",
    # errors
    "DccFlowError",
    "InvalidRequestError",
    "ValidationError",
    "ParseError",
    "SpecTooLargeError",
    "InternalError",
    "DatabaseLockedError",
    "ReadOnlyError",
    "StorageError",
    "WorkerStartError",
    "InvalidInputError",
    "NotFoundError",
    "UnknownToolError",
    "NotResumableError",
    "SpecChangedError",
    "InvalidStateError",
    "EngineClosedError",
    "StaleHandleError",
    "DccFlowTimeoutError",
    "CancelledError",
    "LibraryLoadError",
    "LibraryNotFoundError",
    "AbiVersionError",
]


def library_version() -> Dict[str, Any]:
    """Versions of the loaded native library: ``{"version", "abi_version", "go_version", "path"}``."""
    info = dict(_ffi.call("dccflow_version"))
    info["path"] = _ffi.library_path()
    return info


def _present_public_classes_as_dcc_flow() -> None:
    """Show public classes as ``dcc_flow.X`` in tracebacks and reprs, not ``dcc_flow._errors.X``.

    Each stays importable under that name, so pickling works the same.
    """
    for _name in __all__:
        _obj = globals().get(_name)
        if isinstance(_obj, type) and _obj.__module__.startswith("dcc_flow."):
            _obj.__module__ = "dcc_flow"


_present_public_classes_as_dcc_flow()


def __getattr__(name: str) -> Any:
    """Import rarely used parts on first access, keeping ``import dcc_flow`` light."""
    if name == "graph":
        from ._graph import graph

        return graph
    raise AttributeError("module 'dcc_flow' has no attribute %r" % name)
