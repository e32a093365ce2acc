"""The one place where the native library ``libdccflow`` is found, loaded and called.

Finding the library: ``$DCC_FLOW_LIBRARY`` when set (a file path), else ``_lib/libdccflow.so``
beside this package (``libdccflow.dylib`` on macOS, ``dccflow.dll`` on Windows).

Loading once per process: a process must never hold two Go runtimes, and reloading the Python
package (``importlib.reload(dcc_flow)``, or a DCC "reload my tools" helper that deletes every
``dcc_flow*`` entry of ``sys.modules`` and imports again) must not load the library a second time.
The loaded library and its process-wide state therefore live in a small holder module registered
in ``sys.modules`` under ``_STATE_KEY``; the name deliberately does not start with ``dcc_flow`` so
such helpers leave it alone, and it is never reloaded (it has no spec). Once loaded, a later change
of ``$DCC_FLOW_LIBRARY`` has no effect in that process.

Calling: every export except ``dccflow_abi_version`` and ``dccflow_free`` has the shape
``int32_t dccflow_x(uint64_t handle, const char *in_json, char **out_json)``. ``call()`` encodes
the input as JSON, copies the returned string with ``ctypes.string_at``, frees it with
``dccflow_free``, decodes it, and hands error envelopes to ``_check()``.

Fork safety: the Go runtime does not survive ``fork()`` (its threads are gone in the child). When
the library was loaded before a fork, every call in the child raises ``RuntimeError`` (use
multiprocessing's "spawn" start method) instead of hanging.
"""

import ctypes
import json
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from . import _ffi_table
from ._errors import (
    AbiVersionError,
    DccFlowError,
    InternalError,
    LibraryLoadError,
    LibraryNotFoundError,
    error_from_envelope,
)
from ._json import loads_go

__all__ = ["ABI_VERSION", "call", "call_encoded", "library", "library_path", "candidate_paths"]

#: The C ABI version this package was written for (``DCCFLOW_ABI_VERSION`` in capi/dccflow.h).
ABI_VERSION = _ffi_table.ABI_VERSION
#: The largest request the library accepts, in bytes (``maxRequestSize`` in capi/dispatch.go).
MAX_REQUEST_BYTES = 64 << 20

#: The environment variable that names the library file explicitly.
ENV_VAR = "DCC_FLOW_LIBRARY"

_STATE_KEY = "_dcc_flow_native_state"
_STATE_LAYOUT = 1
_INIT_LOCK = threading.Lock()

# Return codes of the JSON exports (docs/reference/c-abi/README.md).
RC_OK = 0
RC_ERROR = 1
RC_INVALID_REQUEST = 2
RC_INTERNAL = 3

# The table of exports: name -> (argtypes, restype), generated into _ffi_table.py with
# capi/dccflow.h from one table (capi/internal/gen/table.go; `make generate`). Exports are
# configured when present, so an older library simply lacks the newer ones (see `call`).
_SIGNATURES: Dict[str, Any] = _ffi_table.SIGNATURES
_REQUIRED = ("dccflow_abi_version", "dccflow_free")

_FORK_MESSAGE = (
    "dcc_flow cannot be used in a process forked after the native library was loaded "
    "(the Go runtime does not survive fork()). Start worker processes with multiprocessing's "
    "'spawn' start method (multiprocessing.get_context('spawn')), or load dcc_flow only in the "
    "child."
)


def _state() -> Any:
    """The process-wide holder module (created on first use, never replaced)."""
    state: Any = sys.modules.get(_STATE_KEY)
    if state is None:
        fresh = types.ModuleType(_STATE_KEY, "dcc_flow native library state (do not reload)")
        state = sys.modules.setdefault(_STATE_KEY, fresh)
    if getattr(state, "layout", None) != _STATE_LAYOUT:
        # First use, or a holder made by another dcc_flow version in this process: keep what it
        # has (above all its loaded library) and add what is missing.
        with _INIT_LOCK:
            for attr, default in (
                ("lock", threading.RLock()),
                ("lib", None),  # ctypes.CDLL once loaded
                ("path", None),  # the path it was loaded from
                ("funcs", {}),  # export name -> configured ctypes function
                ("forked", False),  # True in a child forked after the library was loaded
                ("fork_hook", False),  # the at-fork hook is registered
            ):
                if not hasattr(state, attr):
                    setattr(state, attr, default)
            state.layout = _STATE_LAYOUT
    return state


def _after_fork_in_child() -> None:
    state: Any = sys.modules.get(_STATE_KEY)
    if state is not None and getattr(state, "lib", None) is not None:
        state.forked = True
        state.lock = threading.RLock()  # the parent's lock may have been held by another thread


def _install_fork_hook(state: Any) -> None:
    # Registered once per process, from the holder's flag, so reloads do not stack hooks.
    if state.fork_hook:
        return
    register = getattr(os, "register_at_fork", None)
    if register is not None:
        register(after_in_child=_after_fork_in_child)
    state.fork_hook = True


def _library_filename() -> str:
    if sys.platform == "darwin":
        return "libdccflow.dylib"
    if sys.platform in ("win32", "cygwin"):
        return "dccflow.dll"
    return "libdccflow.so"


def candidate_paths() -> List[str]:
    """The paths tried, in order: ``$DCC_FLOW_LIBRARY`` when set, else ``_lib/`` beside the package."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return [os.path.abspath(os.path.expanduser(explicit))]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "_lib", _library_filename())]


def _load() -> Any:
    state = _state()
    if state.forked:
        raise RuntimeError(_FORK_MESSAGE)
    if state.lib is not None:
        return state
    with state.lock:
        if state.lib is not None:
            return state
        tried = candidate_paths()
        path = next((p for p in tried if os.path.isfile(p)), None)
        if path is None:
            origin = " (from $%s)" % ENV_VAR if os.environ.get(ENV_VAR) else ""
            raise LibraryNotFoundError(
                "dcc_flow native library not found; tried: %s%s. Build it with `make lib` in the "
                "dcc-flow repository (it writes python/dcc_flow/_lib/%s), or set %s to the path of "
                "an existing library." % (", ".join(tried), origin, _library_filename(), ENV_VAR)
            )
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise LibraryLoadError("cannot load the dcc_flow native library %s: %s" % (path, exc)) from exc
        funcs: Dict[str, Any] = {}
        for name, (argtypes, restype) in _SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                if name in _REQUIRED:
                    raise LibraryLoadError(
                        "%s is not a dcc_flow library: it does not export %s" % (path, name)
                    ) from None
                continue
            fn.argtypes = argtypes
            fn.restype = restype
            funcs[name] = fn
        abi = int(funcs["dccflow_abi_version"]())
        if abi != ABI_VERSION:
            raise AbiVersionError(
                "%s speaks C ABI version %d but this dcc_flow package needs version %d; rebuild the "
                "library from the same dcc-flow version (`make lib`) or install a matching package"
                % (path, abi, ABI_VERSION)
            )
        state.funcs = funcs
        state.path = path
        _install_fork_hook(state)
        state.lib = lib  # last: marks the state as loaded
    return state


def _configure(state: Any, name: str) -> Any:
    """Configure export ``name`` from the table on first use; ``None`` if the library lacks it."""
    signature = _SIGNATURES.get(name)
    if signature is None:
        raise ValueError(
            "unknown dcc_flow export %r (exports are listed in capi/internal/gen/table.go; add it there "
            "and run `make generate`)" % name
        )
    fn = getattr(state.lib, name, None)
    if fn is None:
        return None
    fn.argtypes, fn.restype = signature
    state.funcs[name] = fn
    return fn


def library() -> Any:
    """The loaded ``ctypes.CDLL`` (loading it on first use)."""
    return _load().lib


def library_path() -> str:
    """The path the library was loaded from (loading it on first use)."""
    return str(_load().path)


def _take_string(free: Callable[[Any], None], ptr: Optional[int]) -> Optional[bytes]:
    """Copy a library-owned C string and free it; ``None`` for NULL."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr)
    finally:
        free(ptr)


def _encode(name: str, payload: Optional[Mapping[str, Any]]) -> bytes:
    if payload is None:
        return b"{}"
    try:
        # ensure_ascii=False keeps the request small; lone surrogates cannot be UTF-8 encoded and
        # raise UnicodeEncodeError, which callers that accept text check for beforehand.
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("%s: request contains text that is not valid Unicode: %s" % (name, exc)) from None


def _check(name: str, rc: int, raw: Optional[Union[bytes, str]], source: Optional[str] = None) -> Dict[str, Any]:
    """Decode the output of export ``name`` (UTF-8 bytes, or text already decoded); turn a
    non-zero return code into an exception."""
    doc: Any = None
    if raw is not None:
        try:
            doc = loads_go(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
        except ValueError:
            raise InternalError(
                "%s returned %d with output that is not JSON: %r" % (name, rc, raw[:200]), code="internal"
            ) from None
    if rc == RC_OK:
        if doc is None:
            return {}
        if not isinstance(doc, dict):
            raise InternalError("%s returned a JSON %s, expected an object" % (name, type(doc).__name__))
        return doc
    if not isinstance(doc, dict):
        raise InternalError("%s failed with return code %d and no error envelope" % (name, rc))
    if "code" not in doc:
        doc = dict(doc, code="internal" if rc == RC_INTERNAL else "invalid_request" if rc == RC_INVALID_REQUEST else "")
    raise error_from_envelope(doc, source=source)


def call(
    name: str, handle: int = 0, payload: Optional[Mapping[str, Any]] = None, source: Optional[str] = None
) -> Dict[str, Any]:
    """Call JSON export ``name`` with ``payload`` and return its decoded result object.

    Raises the ``DccFlowError`` subclass for the envelope's code when the export fails;
    ``source`` labels validation messages (a file name).
    """
    return call_encoded(name, handle, _encode(name, payload), source)


def call_encoded(name: str, handle: int, data: bytes, source: Optional[str] = None) -> Dict[str, Any]:
    """``call`` with a request that is already JSON-encoded UTF-8 (the tool-call hot path)."""
    state = _state()
    if state.forked:
        raise RuntimeError(_FORK_MESSAGE)
    if state.lib is None:
        state = _load()
    fn = state.funcs.get(name) or _configure(state, name)
    if fn is None:
        raise DccFlowError(
            "the dcc_flow native library at %s does not export %s (is it older than this package?)"
            % (state.path, name),
            code="unsupported",
        )
    out = ctypes.c_void_p()
    rc = int(fn(handle, data, ctypes.byref(out)))
    # The output can be tens of MB (a run's outputs): decode it to text and let the bytes go
    # before parsing, so that the bytes, the text and the parsed objects are never all alive.
    raw = _take_string(state.funcs["dccflow_free"], out.value)
    text = None if raw is None else raw.decode("utf-8", "replace")
    del raw
    return _check(name, rc, text, source)


def abi_version() -> int:
    """The ABI version reported by the loaded library (equal to ``ABI_VERSION``)."""
    return int(_load().funcs["dccflow_abi_version"]())
