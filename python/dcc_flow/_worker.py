"""``dcc-flow worker``: serve host tools to an engine as an MCP server over stdio.

A worker is a process (``mayapy``, ``hython``, ``blender -b``, plain Python) that an engine starts
for a remote (``remotes: {"maya": {"command": ["mayapy", "-m", "dcc_flow", "worker", "--tools",
"studio.maya_tools"]}}``) and calls with ``tool_remote`` steps. It registers tools with the same
conventions as ``dcc-flow run --tools`` and runs **every call on its main thread, one at a time**,
so ``maya.cmds`` and ``hou`` are safe in them; a thread reads the protocol meanwhile, so a
cancellation reaches ``current_call().cancelled`` while the tool runs.

The protocol is newline-delimited JSON-RPC 2.0 (MCP's stdio transport) on the process's original
standard output. Anything else written to standard output or standard error (a DCC's startup
banner, ``print`` in a tool, a C library's warnings) is captured from the file descriptors
themselves, so it cannot corrupt the protocol: the lines a call printed go back with its result
(``_meta["dcc-flow/output"]``) and the rest is written to the worker's real standard error. The
capture goes through files (OUTPUT_DIR_ENV), so that when a tool kills the process the engine
still reads what the call printed, and a segfault's Python stacks (``faulthandler``) with it.

A tool's result is the call's ``structuredContent`` when it is a JSON object, and its text content
as JSON always; a tool's exception is an error result whose ``structuredContent`` is ``{"kind",
"message", "trace"}``, the kinds being those of in-process tools (docs/reference/python/tool-calls.md "Tools"). The
worker exits when its standard input closes (the engine stopped or died).
"""

import faulthandler
import io
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, TextIO, Tuple

from ._capture import MAX_LINE_CHARS
from ._ffi import MAX_REQUEST_BYTES
from ._tools import ToolEntry, error_members, execute

__all__ = ["Worker", "PROTOCOL_VERSIONS", "OUTPUT_META_KEY", "OUTPUT_DROPPED_META_KEY", "FILES_META_KEY",
           "ENV_META_KEY"]

#: The MCP revisions this worker speaks (all use the initialize handshake), newest first.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

#: The ``_meta`` key of a tools/call result that holds the lines the call printed, a list of
#: ``{"stream": "stdout" | "stderr", "text": LINE}`` (the engine keeps them on the step record).
OUTPUT_META_KEY = "dcc-flow/output"
#: The ``_meta`` key of a tools/call result that counts the lines the call printed past
#: MAX_OUTPUT_LINES (per stream), which were not kept.
OUTPUT_DROPPED_META_KEY = "dcc-flow/output-dropped"
#: The ``_meta`` keys of a tools/call result that hold the files the call said it read and wrote,
#: a list of ``{"path", "role": "read" | "write"}`` (current_call().reads/.writes, a tool's
#: reads=/writes= arguments), and the environment of this process (``set_environment``, e.g. in
#: ``--init``), a JSON object; each left out when there is none. A failed call's result has them too.
FILES_META_KEY = "dcc-flow/files"
ENV_META_KEY = "dcc-flow/env"
#: The exit status of a worker that left a call running when its engine went away (exit_grace).
EXIT_ORPHANED = 3

#: At most this many output lines of one call are kept per stream, and at most about
#: MAX_OUTPUT_BYTES of them (a step record keeps the newest 1,000 lines and 256 KiB): the rest are
#: counted, not kept. A line keeps its first MAX_LINE_CHARS characters, as in-process (the engine
#: cuts it at 4 KiB, ending it with "…"). Reading them holds at most _CHUNK bytes at once, so a
#: tool that prints 1 GB without a newline costs the worker no memory.
MAX_OUTPUT_LINES = 1000
MAX_OUTPUT_BYTES = 256 << 10

#: The largest message the worker sends (the engine's limit on one message from a worker,
#: run.MaxMessageBytes, as for in-process results): a larger result is answered as a
#: ``too_large`` error instead (an engine kills a worker that sends more).
MAX_MESSAGE_BYTES = MAX_REQUEST_BYTES
#: A log line's fields are left out past this many bytes of JSON; a progress message keeps this
#: many characters (the engine's run.MaxLogFieldsBytes and run.MaxProgressMessageBytes).
MAX_FIELDS_BYTES = 4 << 10
MAX_PROGRESS_MESSAGE_CHARS = 512

_LINE_BYTES = MAX_LINE_CHARS * 4  # enough bytes for MAX_LINE_CHARS characters of UTF-8
_CHUNK = 1 << 20


#: The environment variable naming the directory where a worker keeps the output files of its
#: standard output and error (``stdout.log``, ``stderr.log``): an engine sets it for each worker
#: of a pool and reads the files when the worker dies during a call. Unset, the worker makes a
#: temporary directory of its own.
OUTPUT_DIR_ENV = "DCC_FLOW_WORKER_OUTPUT_DIR"

#: How often output written between calls is copied to the real standard error (seconds).
_PUMP_SECS = 0.2
#: Between calls, an output file is emptied once this much of it has been copied.
_ROTATE_AT = 1 << 20

_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602
_PARSE_ERROR = -32700


class _Capture:
    """Captures what is written to a file descriptor (1 or 2) into a file, ``DIR/NAME.log``, and
    hands each call the lines written while it ran; between calls a thread copies new lines to the
    worker's real standard error.

    A file, not a pipe, so that what a call printed outlives the process: when a tool crashes the
    interpreter (a segfault, ``os._exit``) the engine reads the call's lines from the file, whose
    directory it chose (OUTPUT_DIR_ENV). The file is emptied when a call begins and after it ends,
    so it holds the output of the running call, then of the time since the last call."""

    def __init__(self, fd: int, fallback: TextIO, directory: str, name: str) -> None:
        self.name = name
        self.path = os.path.join(directory, name + ".log")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | getattr(os, "O_BINARY", 0)
        write_fd = os.open(self.path, flags, 0o600)
        os.dup2(write_fd, fd)
        os.close(write_fd)
        self._fd = fd
        self._file = open(self.path, "rb")  # noqa: SIM115 - read for the life of the process
        self._fallback = fallback
        self._lock = threading.Lock()
        self._active = False
        self._pos = 0
        self._pending = b""
        self._closed = False
        self._thread = threading.Thread(target=self._pump, name="dcc_flow-worker-" + name, daemon=True)
        self._thread.start()

    def begin(self) -> None:
        with self._lock:
            self._drain(final=True)
            self._reset()
            self._active = True

    def end(self) -> Tuple[List[str], int]:
        """Stop collecting: the call's first lines (MAX_OUTPUT_LINES, MAX_OUTPUT_BYTES) and how
        many more it wrote."""
        with self._lock:
            self._active = False
            self._file.seek(0)
            lines, dropped = _first_lines(self._file)
            self._reset()
        return lines, dropped

    def close(self) -> None:
        """Copy what is left to the real standard error and stop the thread."""
        with self._lock:
            if not self._active:
                self._drain(final=True)
            self._closed = True
        self._file.close()

    def _reset(self) -> None:
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        self._pos, self._pending = 0, b""

    def _drain(self, final: bool = False) -> None:
        """Between calls: copy the lines written since the last look to the real stderr, _CHUNK
        bytes at a time (at most 16 per look, so that a thread writing without pause does not hold
        the lock); a line without an end is passed on in pieces of _LINE_BYTES."""
        self._file.seek(self._pos)
        at_end = False
        for _ in range(16):
            chunk = self._file.read(_CHUNK)
            if not chunk:
                at_end = True
                break
            self._pos += len(chunk)
            *lines, self._pending = (self._pending + chunk).split(b"\n")
            if len(self._pending) > _LINE_BYTES:
                lines.append(self._pending)
                self._pending = b""
            self._copy(lines)
        if final and self._pending:
            self._copy([self._pending])
            self._pending = b""
        if at_end and self._pos > _ROTATE_AT:
            self._reset()

    def _copy(self, lines: List[bytes]) -> None:
        for raw in lines:
            try:
                self._fallback.write(raw.rstrip(b"\r").decode("utf-8", "replace") + "\n")
            except (OSError, ValueError):
                pass
        if lines:
            try:
                self._fallback.flush()
            except (OSError, ValueError):
                pass

    def _pump(self) -> None:
        while True:
            time.sleep(_PUMP_SECS)
            with self._lock:
                if self._closed:
                    return
                if not self._active:
                    try:
                        self._drain()
                    except (OSError, ValueError):
                        return


def _first_lines(f: Any) -> Tuple[List[str], int]:
    """The first lines of the binary file ``f`` from where it is (MAX_OUTPUT_LINES, about
    MAX_OUTPUT_BYTES, each cut to MAX_LINE_CHARS characters) and how many more lines it holds."""
    lines: List[str] = []
    size = 0
    while len(lines) < MAX_OUTPUT_LINES and size < MAX_OUTPUT_BYTES:
        raw = f.readline(_LINE_BYTES)
        if not raw:
            return lines, 0
        if not raw.endswith(b"\n"):  # the rest of a longer line is skipped
            while True:
                rest = f.readline(_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
        lines.append(raw.rstrip(b"\r\n").decode("utf-8", "replace")[:MAX_LINE_CHARS])
        size += len(raw)
    more, last = 0, b"\n"
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return lines, more + (0 if last == b"\n" else 1)
        more += chunk.count(b"\n")
        last = chunk[-1:]


def _too_large(tool: str, size: int, what: str = "") -> str:
    return ("tool %r returned %d bytes of JSON%s; the limit on one message from a worker is %d (64 MiB): return a "
            "file path instead of the data" % (tool, size, what, MAX_MESSAGE_BYTES))


def _clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (the engine cuts it again, in bytes, with "…")."""
    return text if len(text) <= limit else text[:limit]


class Worker:
    """One worker process's server: ``tools`` by name (set before ``serve()``), answered on ``out``
    (a binary stream of the protocol), requests read from ``inp`` by a thread, calls run by
    ``serve()`` on its thread. ``over_stdio`` builds one on this process's standard streams."""

    def __init__(self, tools: Mapping[str, ToolEntry], inp: Any, out: Any, name: str = "dcc-flow-worker",
                 version: str = "0", captures: Tuple["_Capture", ...] = ()) -> None:
        self.tools = dict(tools)
        self._in = inp
        self._out = out
        self._name, self._version = name, version
        self._write_lock = threading.Lock()
        self._calls: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()  # noqa: UP037 - Python 3.7, 3.8
        self._cancelled: Dict[Any, bool] = {}
        self._state_lock = threading.Lock()
        self._captures = captures
        self._restore: Optional[Callable[[], None]] = None
        #: Where the captured output files are (over_stdio); removed when the worker exits.
        self._output_dir: Optional[str] = None
        self.served = 0
        #: Seconds a call still running when standard input closes (the engine closed or died) has
        #: to return after it is marked cancelled, before the process exits with EXIT_ORPHANED
        #: (``os._exit``: a tool stuck in a DCC call cannot be interrupted otherwise); None = wait
        #: for it. ``dcc-flow worker`` sets it (``--exit-grace``).
        self.exit_grace: Optional[float] = None

    @classmethod
    def over_stdio(cls, tools: Mapping[str, ToolEntry], name: str = "dcc-flow-worker", version: str = "0",
                   capture: bool = True) -> "Worker":
        """A worker on this process's standard input and output, capturing fds 1 and 2 when
        ``capture`` (what tools and the DCC print goes to the call's output, not the protocol)."""
        _flush_std()
        proto = os.fdopen(os.dup(1), "wb", buffering=0)
        captures: Tuple[_Capture, ...] = ()
        restore: Optional[Callable[[], None]] = None
        directory = ""
        if capture:
            saved = (os.dup(1), os.dup(2))
            std = (sys.stdout, sys.stderr)
            real_err = os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace")
            directory = os.environ.get(OUTPUT_DIR_ENV) or ""
            own_dir = not directory or not os.path.isdir(directory)
            if own_dir:
                directory = tempfile.mkdtemp(prefix="dcc-flow-worker-")
            captures = (_Capture(1, real_err, directory, "stdout"), _Capture(2, real_err, directory, "stderr"))
            # Python-level writers follow the descriptors, line-buffered so prints arrive in order.
            sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(1), "wb", buffering=0), encoding="utf-8",
                                          errors="replace", line_buffering=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb", buffering=0), encoding="utf-8",
                                          errors="replace", line_buffering=True)
            # A crash of the interpreter (a segfault in a DCC plug-in) writes the Python stack of
            # every thread to fd 2: into the call's output, which the engine keeps.
            had_faulthandler = faulthandler.is_enabled()
            faulthandler.enable(file=sys.stderr, all_threads=True)

            def restore() -> None:
                _flush_std()
                for c in captures:
                    c.close()  # what is still in the files reaches the real stderr first
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                sys.stdout, sys.stderr = std
                if not had_faulthandler:
                    faulthandler.disable()
                # An engine's directory too: its pool reads it only after a crash, and removes it
                # itself then; a worker whose engine was killed cleans up after itself.
                shutil.rmtree(directory, ignore_errors=True)

        inp = os.fdopen(os.dup(0), "rb")
        worker = cls(tools, inp, proto, name=name, version=version, captures=captures)
        worker._restore = restore
        worker._output_dir = directory if capture else None
        return worker

    def restore_stdio(self) -> None:
        """Give the process its standard output and error back (before it exits or reports an
        error on them); a no-op when nothing was captured or it was done already."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    # -- the protocol thread ----------------------------------------------------------------------

    def _send(self, msg: Mapping[str, Any]) -> None:
        self._write(_encode(msg))

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            self._out.write(data)
            if hasattr(self._out, "flush"):
                self._out.flush()

    def _reply(self, req_id: Any, result: Any = None, error: Optional[Tuple[int, str]] = None) -> None:
        if error is not None:
            self._send({"jsonrpc": "2.0", "id": req_id, "error": {"code": error[0], "message": error[1]}})
        else:
            self._send({"jsonrpc": "2.0", "id": req_id, "result": result})

    def _read_loop(self) -> None:
        """Answer requests that need no tool at once; queue tools/call for the main thread. At the
        end of input (the engine went away) the main thread is told to stop."""
        try:
            for raw in self._in:
                line = raw.strip()
                if not line:
                    continue
                try:
                    msg = json.loads(line.decode("utf-8"))
                except ValueError:
                    self._reply(None, error=(_PARSE_ERROR, "not JSON"))
                    continue
                if isinstance(msg, dict):
                    self._handle(msg)
        except (OSError, ValueError):
            pass
        finally:
            self._calls.put(None)
            self._orphaned()

    def _orphaned(self) -> None:
        """Standard input closed: cancel the running call and, with ``exit_grace``, exit if it
        does not return in time, so that a worker never outlives its engine for long."""
        with self._state_lock:
            running = list(self._cancelled)
            for req_id in running:
                self._cancelled[req_id] = True
        if not running or self.exit_grace is None:
            return

        def exit_if_still_running() -> None:
            with self._state_lock:
                still = any(r in self._cancelled for r in running)
            if still:
                if self._output_dir:  # nobody is left to read it
                    shutil.rmtree(self._output_dir, ignore_errors=True)
                os._exit(EXIT_ORPHANED)

        timer = threading.Timer(self.exit_grace, exit_if_still_running)
        timer.daemon = True
        timer.start()

    def _handle(self, msg: Dict[str, Any]) -> None:
        method, req_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None:
            return  # a response to something we never ask
        if method == "notifications/cancelled":
            with self._state_lock:
                target = params.get("requestId")
                if target in self._cancelled:
                    self._cancelled[target] = True
            return
        if req_id is None:
            return  # other notifications (initialized, …)
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            self._reply(req_id, {"protocolVersion": version, "capabilities": {"tools": {}},
                                 "serverInfo": {"name": self._name, "version": self._version}})
        elif method == "ping":
            self._reply(req_id, {})
        elif method == "tools/list":
            self._reply(req_id, {"tools": [_describe(e) for e in sorted(self.tools.values(), key=lambda e: e.name)]})
        elif method == "tools/call":
            name = params.get("name")
            if name not in self.tools:
                self._reply(req_id, error=(_INVALID_PARAMS, "unknown tool %r; this worker serves %s"
                                           % (name, ", ".join(sorted(self.tools)) or "no tools")))
                return
            with self._state_lock:
                self._cancelled[req_id] = False
            meta = params.get("_meta") or {}
            if not isinstance(meta, dict):
                meta = {}
            self._calls.put({"id": req_id, "name": name, "args": params.get("arguments") or {},
                             "token": meta.get("progressToken"), "traceparent": meta.get("traceparent")})
        else:
            self._reply(req_id, error=(_METHOD_NOT_FOUND, "method %r is not served by a dcc-flow worker" % method))

    # -- the main thread ----------------------------------------------------------------------------

    def serve(self) -> int:
        """Serve until standard input closes; return how many calls ran. Call it on the thread that
        must run the tools (the main thread of a DCC)."""
        reader = threading.Thread(target=self._read_loop, name="dcc_flow-worker-protocol", daemon=True)
        reader.start()
        while True:
            call = self._calls.get()
            if call is None:
                return self.served
            self._run(call)

    def _run(self, call: Dict[str, Any]) -> None:
        req_id = call["id"]

        def cancelled(_call_id: int) -> bool:
            with self._state_lock:
                return bool(self._cancelled.get(req_id))

        token = call.get("token")
        notifier = _Notifier(self._send, token) if isinstance(token, (str, int)) else None
        for c in self._captures:
            c.begin()
        try:
            members = execute(self.tools[call["name"]], {"call_id": 0, "tool": call["name"], "args": call["args"],
                                                         "traceparent": call.get("traceparent")},
                              cancelled, notifier, capture=False)  # its output: from the fds (self._captures)
        finally:
            _flush_std()
            output: List[Dict[str, str]] = []
            dropped = 0
            for c in self._captures:
                lines, n = c.end()
                output.extend({"stream": c.name, "text": line} for line in lines)
                dropped += n
            with self._state_lock:
                self._cancelled.pop(req_id, None)
        self.served += 1
        meta: Dict[str, Any] = {}
        if len(members) > MAX_MESSAGE_BYTES:  # over already: not decoded and encoded twice more
            members = error_members({"call_id": 0}, "too_large", _too_large(call["name"], len(members)))
        answer = json.loads(members + "}")
        if output or dropped:
            meta[OUTPUT_META_KEY] = output
            if dropped:
                meta[OUTPUT_DROPPED_META_KEY] = dropped
        if answer.get("files"):
            meta[FILES_META_KEY] = answer["files"]
        if answer.get("env") is not None:
            meta[ENV_META_KEY] = answer["env"]
        result = _tool_result(answer)
        if meta:
            result["_meta"] = meta
        data = _encode({"jsonrpc": "2.0", "id": req_id, "result": result})
        if len(data) > MAX_MESSAGE_BYTES:
            # Sent whole, the engine would kill this worker at its limit: say so instead.
            message = _too_large(call["name"], len(data), " (its answer, with its output lines)")
            result = _tool_result({"error": {"kind": "too_large", "message": message}})
            if meta:
                result["_meta"] = meta
            data = _encode({"jsonrpc": "2.0", "id": req_id, "result": result})
        self._write(data)


class _Notifier:
    """Sends what a running tool reported (``current_call().progress``/``.log``, coalesced by
    ``_tools.ReportThrottle``: at most every REPORT_INTERVAL seconds, at most
    ``max_lines`` lines each time) to the engine as MCP notifications naming the
    call's progress token: ``notifications/progress``, and ``notifications/message`` with ``data``
    ``{"progressToken", "message", "fields"?}`` per line or ``{"progressToken", "dropped"}``. So a
    tool reporting in a tight loop does not flood the pipe to the engine."""

    #: Lines per send (ReportThrottle): each is a notification on the protocol pipe.
    max_lines = 100

    def __init__(self, send: Callable[[Mapping[str, Any]], None], token: Any) -> None:
        self._send, self._token = send, token

    def __call__(self, _call_id: int, progress: Optional[Dict[str, Any]], logs: List[Dict[str, Any]],
                 dropped: int) -> None:
        if progress is not None:
            params = {"progressToken": self._token, "progress": progress.get("done", 0)}
            if progress.get("total") is not None:
                params["total"] = progress["total"]
            if progress.get("message"):
                params["message"] = _clip(str(progress["message"]), MAX_PROGRESS_MESSAGE_CHARS)
            self._send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        for entry in logs:
            # Cut here as the engine would cut them: a 100 MB log line is not sent whole.
            data: Dict[str, Any] = {"progressToken": self._token, "message": _clip(str(entry.get("message", "")))}
            if entry.get("fields"):
                fields = _json_fields(entry["fields"])
                if len(json.dumps(fields, ensure_ascii=False).encode("utf-8", "replace")) > MAX_FIELDS_BYTES:
                    data["message"] = _clip(data["message"] + " [fields left out: over 4 KiB]")
                else:
                    data["fields"] = fields
            self._message(data)
        if dropped:
            self._message({"progressToken": self._token, "dropped": dropped})

    def _message(self, data: Dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "logger": "dcc-flow", "data": data}})


def _encode(msg: Mapping[str, Any]) -> bytes:
    """One protocol line."""
    return (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")


def _json_fields(fields: Any) -> Any:
    """``fields`` as JSON values: what is not a JSON value becomes its ``repr``."""
    try:
        return json.loads(json.dumps(fields, default=repr, allow_nan=False))
    except (ValueError, TypeError, RecursionError):
        return {"repr": repr(fields)}


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _describe(entry: ToolEntry) -> Dict[str, Any]:
    """The tool's tools/list entry: its inputSchema is the schema the engine enforces for it (a
    @task's hints, register_tool(schema=...)) when that is an object schema, as MCP requires;
    else ``{"type": "object"}``."""
    doc = (getattr(entry.fn, "__doc__", None) or "").strip()
    schema = getattr(entry, "schema", None)
    if not (isinstance(schema, dict) and schema.get("type") == "object"):
        schema = {"type": "object"}
    return {"name": entry.name, "description": doc.splitlines()[0] if doc else entry.name,
            "inputSchema": schema}


def _tool_result(answer: Mapping[str, Any]) -> Dict[str, Any]:
    """The MCP tools/call result of a call answered as ``_tools.execute`` answers it."""
    error = answer.get("error")
    if error is not None:
        structured = {"kind": error.get("kind") or "error", "message": error.get("message") or ""}
        if error.get("trace"):
            structured["trace"] = error["trace"]
        return {"isError": True, "content": [{"type": "text", "text": structured["message"]}],
                "structuredContent": structured}
    output = answer.get("output")
    result: Dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(output, ensure_ascii=False)}]}
    if isinstance(output, dict):
        result["structuredContent"] = output
    return result


def run_init(spec: str, load: Callable[[str], Any]) -> None:
    """Run ``--init MODULE:FUNCTION`` (a dotted module or a .py path, then the function's name)."""
    module_spec, sep, func_name = spec.rpartition(":")
    if not sep or not module_spec or not func_name:
        raise ValueError("--init %s: write it as MODULE:FUNCTION (a dotted module or a .py path)" % spec)
    fn = getattr(load(module_spec), func_name, None)
    if not callable(fn):
        raise ValueError("--init %s: %s has no function %r" % (spec, module_spec, func_name))
    fn()
