"""The exceptions dcc_flow raises, in one place (docs/reference/python/errors.md, "Exceptions and error codes").

Every error the library reports carries a stable ``code`` string, the same in Python, the C ABI
and MCP; Python raises the class registered for the code, else ``DccFlowError`` with that code.
Every ``DccFlowError`` has ``code``, ``message``, ``details`` (a dict), and ``step_id``, ``line``,
``column`` (``None`` when unknown), and pickles with its fields. ``Problem`` is one finding of a
spec or schedule check (``ValidationError.problems``).

    >>> import dcc_flow
    >>> from dcc_flow.errors import NotFoundError
    >>> with dcc_flow.Engine() as engine:
    ...     try:
    ...         engine.get_status("r0000")
    ...     except NotFoundError as error:
    ...         print(error.code, error)
    not_found no run with id "r0000"

Each name is also importable from ``dcc_flow`` itself (``dcc_flow.NotFoundError``), as it was
before this module existed: the same class, not a copy. The exceptions a tool raises to say how
its call failed (``ToolError``, ``Transient``, ``Fatal``) are the tool author's vocabulary and stay
in ``dcc_flow``.
"""

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
    WorkflowTraceError,
)
from ._results import RunFailedError

__all__ = [
    "DccFlowError",
    "InvalidRequestError",
    "ValidationError",
    "ParseError",
    "SpecTooLargeError",
    "InvalidInputError",
    "InternalError",
    "DatabaseLockedError",
    "ReadOnlyError",
    "StorageError",
    "WorkerStartError",
    "NotFoundError",
    "UnknownToolError",
    "InvalidStateError",
    "NotResumableError",
    "SpecChangedError",
    "DccFlowTimeoutError",
    "CancelledError",
    "EngineClosedError",
    "StaleHandleError",
    "RunFailedError",
    "WorkflowTraceError",
    "LibraryLoadError",
    "LibraryNotFoundError",
    "AbiVersionError",
    "Problem",
]
