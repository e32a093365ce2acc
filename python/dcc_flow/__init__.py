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
from . import errors as errors  # the exceptions (dcc_flow.errors)
from . import webhooks as webhooks  # signing webhook requests (dcc_flow.webhooks)
from ._dryrun import DryRunResult, DryRunStep
from ._engine import Engine, Run
from ._errors import DccFlowError, Problem
from ._flow import FlowContext, Retry, Task, Workflow, task, unmapped, workflow
from ._results import AttemptRecord, RunResult, StepRecord
from ._schedule import ScheduleSpec, TriggerSpec, parse_schedules_yaml
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
from ._tools import CallContext, Fatal, ToolError, ToolInterrupted, Transient, current_call, set_environment

# Still importable from here, as before dcc_flow.errors and dcc_flow.webhooks held them (the same
# objects; ``X as X`` marks them re-exported for type checkers), but not listed in __all__.
from .errors import AbiVersionError as AbiVersionError
from .errors import CancelledError as CancelledError
from .errors import DatabaseLockedError as DatabaseLockedError
from .errors import DccFlowTimeoutError as DccFlowTimeoutError
from .errors import EngineClosedError as EngineClosedError
from .errors import InternalError as InternalError
from .errors import InvalidInputError as InvalidInputError
from .errors import InvalidRequestError as InvalidRequestError
from .errors import InvalidStateError as InvalidStateError
from .errors import LibraryLoadError as LibraryLoadError
from .errors import LibraryNotFoundError as LibraryNotFoundError
from .errors import NotFoundError as NotFoundError
from .errors import NotResumableError as NotResumableError
from .errors import ParseError as ParseError
from .errors import ReadOnlyError as ReadOnlyError
from .errors import RunFailedError as RunFailedError
from .errors import SpecChangedError as SpecChangedError
from .errors import SpecTooLargeError as SpecTooLargeError
from .errors import StaleHandleError as StaleHandleError
from .errors import StorageError as StorageError
from .errors import UnknownToolError as UnknownToolError
from .errors import ValidationError as ValidationError
from .errors import WorkerStartError as WorkerStartError
from .errors import WorkflowTraceError as WorkflowTraceError
from .webhooks import hmac_sha256_hex as hmac_sha256_hex
from .webhooks import timestamped_signature as timestamped_signature
from .webhooks import verify_hub_signature_256 as verify_hub_signature_256

__version__ = "0.1.0"

# The everyday API. The exceptions are in dcc_flow.errors (DccFlowError, the base to catch, is
# here too) and the webhook signing helpers in dcc_flow.webhooks.
__all__ = [
    "__version__",
    "library_version",
    # running workflows
    "Engine",
    "Run",
    "RunResult",
    "StepRecord",
    "AttemptRecord",
    "DryRunResult",
    "DryRunStep",
    "graph",
    # writing tools
    "current_call",
    "CallContext",
    "set_environment",
    "ToolError",
    "Transient",
    "Fatal",
    "ToolInterrupted",
    # code-first workflows
    "task",
    "workflow",
    "Task",
    "Workflow",
    "Retry",
    "unmapped",
    "FlowContext",
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
    # scheduler
    "ScheduleSpec",
    "TriggerSpec",
    "parse_schedules_yaml",
    # errors (all of them: dcc_flow.errors)
    "DccFlowError",
]


def library_version() -> Dict[str, Any]:
    """Versions of the loaded native library: ``{"version", "abi_version", "go_version", "path"}``."""
    info = dict(_ffi.call("dccflow_version"))
    info["path"] = _ffi.library_path()
    return info


def _present_public_classes_as_dcc_flow() -> None:
    """Show public classes as ``dcc_flow.X`` in tracebacks and reprs, not ``dcc_flow._errors.X``
    (the exceptions of dcc_flow.errors too, as before that module existed).

    Each stays importable under that name, so pickling works the same.
    """
    for _name in __all__ + errors.__all__:
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
