"""Output capture of in-process tools: what a tool's thread prints and logs becomes its step's lines.

While a tool runs in this process (``_tools.execute``), what **its thread** writes to
``sys.stdout`` and ``sys.stderr`` and the ``logging`` records emitted on its thread are sent as the
step's output lines (docs/reference/python/tool-calls.md "Output of in-process tools"), through the call's report
throttle (``CallContext._reported``, the path of ``current_call().log()``): stream ``"stdout"``,
``"stderr"``, or ``"log"`` with the record's ``level`` and ``logger`` names.

How it routes, per thread:

- ``sys.stdout`` and ``sys.stderr`` are replaced, once, by proxies (``_StdProxy``) whose ``write``
  looks up the call of the writing thread (``calls.call``, the thread-local ``current_call()``
  reads): a thread running a tool has its text split into lines, anything else is forwarded to
  the stream the proxy wraps. Every other attribute (``encoding``, ``isatty``, ``fileno``,
  ``flush``, ``buffer``, Maya's own methods) is the wrapped stream's. A party that replaces
  ``sys.stdout`` after us (Maya's script editor, pytest, ``contextlib.redirect_stdout``) keeps its
  object until the next tool call starts, which wraps it in turn (``ensure``): the proxies are
  never removed, and cost one thread-local lookup per write outside tools. ``None`` streams
  (``pythonw``) are left alone.
- ``logging.Logger.callHandlers`` is wrapped, once: a record emitted on a thread running a tool
  goes to the step *instead of* the handlers (the line belongs to the step; it is not printed
  to the terminal too, and ``logging.lastResort`` does not print it either). Records of the
  other threads, and the package's own records (logger ``dcc_flow`` and below), go to the
  handlers as before. Which records reach ``callHandlers`` is still the loggers' business: a
  record below its logger's level (``WARNING`` unless configured) is not captured.

Threads a tool starts are not captured (``current_call()`` is ``None`` there too): what they
print goes to the real stream. So does what is written below Python: a C extension writing to
file descriptor 1, ``sys.__stdout__``, ``sys.stdout.buffer``. (The CLI sends all of that to
standard error: docs/reference/cli/README.md.)

Bounds: a line is kept up to MAX_LINE_CHARS characters (the engine cuts it at 4 KiB, ending it with
"…"), the rest of a longer one is discarded as it arrives, so a tool writing 1 GB without a newline
holds 4 KiB; complete lines go to the report throttle, which sends at most 100 a tenth of a second
and counts the others as dropped (shown as "… N more lines"): a tool printing a million lines holds
at most 100 of them. A carriage return starts its line over, as on a terminal (a progress bar
keeps its last state). A line without a trailing newline is sent when the call returns.
"""

import logging
import sys
import threading
from typing import Any, Dict, Iterable, Mapping, Optional

__all__ = ["calls", "ensure", "install", "write_through", "MAX_LINE_CHARS"]


class _Calls(threading.local):
    #: The call this thread is running as a tool (``_tools.current_call()``), or None. A class
    #: default, so that reading it on a thread that never ran a tool raises nothing inside (an
    #: AttributeError caught by getattr would cost microseconds per write).
    call: Any = None


#: The call each thread is running as a tool: ``calls.call``.
calls = _Calls()

#: The characters of one output line kept (more than the engine's 4 KiB cut, so a longer line
#: still ends with "…" there).
MAX_LINE_CHARS = 4097

_PACKAGE_LOGGER = "dcc_flow"


class _Lines:
    """The output state of one call (``CallContext._out``), made by its first captured write:
    the partial line of each stream, and ``busy`` while a line is being handed to the throttle
    (what is written then, by the report path itself, goes to the real stream: no recursion)."""

    __slots__ = ("stdout", "stderr", "busy")

    def __init__(self) -> None:
        self.stdout = ""
        self.stderr = ""
        self.busy = False

    def write(self, call: Any, stream: str, text: str) -> None:
        partial = self.stdout if stream == "stdout" else self.stderr
        if "\n" not in text:
            partial = _append(partial, text)
        else:
            parts = text.split("\n")
            first = _append(partial, parts[0])
            partial = _append("", parts.pop())
            self.emit(call, {"message": _line(first), "stream": stream})
            for part in parts[1:]:
                self.emit(call, {"message": _line(part[:MAX_LINE_CHARS]), "stream": stream})
        if stream == "stdout":
            self.stdout = partial
        else:
            self.stderr = partial

    def emit(self, call: Any, entry: Dict[str, Any]) -> None:
        self.busy = True
        try:
            call._reported(None, entry)
        finally:
            self.busy = False

    def close(self, call: Any) -> None:
        """The call returned: send the lines still without their newline."""
        for stream in ("stdout", "stderr"):
            partial = getattr(self, stream)
            if partial:
                setattr(self, stream, "")
                self.emit(call, {"message": _line(partial), "stream": stream})


def _append(partial: str, text: str) -> str:
    """``partial + text`` within MAX_LINE_CHARS; a carriage return starts the line over."""
    if "\r" in text and not text.endswith("\r"):  # a "\r" at the end may be half of "\r\n"
        partial, text = "", text[text.rfind("\r") + 1:]
    room = MAX_LINE_CHARS - len(partial)
    if room <= 0:
        return partial
    return partial + text[:room]


def _line(text: str) -> str:
    """A complete line as kept: without "\\r" line ends, from its last carriage return on."""
    text = text.rstrip("\r")
    cr = text.rfind("\r")
    return text if cr < 0 else text[cr + 1:]


def _state(call: Any) -> Optional[_Lines]:
    """The output state of the call, made when needed; None when the call is not captured (a
    pool worker's, whose output is captured from its file descriptors) or is sending a line."""
    state = call._out
    if state is None:
        state = call._out = _Lines()
    elif state is False or state.busy:
        return None
    return state  # type: ignore[no-any-return]


class _StdProxy:
    """What ``sys.stdout`` (or ``sys.stderr``) is once a tool ran: writes of a thread running a
    tool become its step's lines; the rest, and every other attribute, is the wrapped stream's."""

    __slots__ = ("_target", "_stream")

    def __init__(self, target: Any, stream: str) -> None:
        self._target = target
        self._stream = stream

    def write(self, text: Any) -> Any:
        call = calls.call
        if call is not None:
            state = _state(call)
            if state is not None:
                if not isinstance(text, str):
                    raise TypeError("write() argument must be str, not %s" % type(text).__name__)
                state.write(call, self._stream, text)
                return len(text)
        return self._target.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> Any:
        return self._target.flush()

    def __getattr__(self, name: str) -> Any:
        if name in _StdProxy.__slots__:  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return "<dcc_flow output capture of %r>" % (self._target,)


_call_handlers = logging.Logger.callHandlers


def _capturing_call_handlers(self: logging.Logger, record: logging.LogRecord) -> None:
    """``logging.Logger.callHandlers``, except that a record of a thread running a tool goes to
    its step's lines instead of the handlers."""
    call = calls.call
    if call is not None:
        name = record.name
        if not (name == _PACKAGE_LOGGER or name.startswith(_PACKAGE_LOGGER + ".")):
            state = _state(call)
            if state is not None:
                state.emit(call, {"message": _record_text(record), "stream": "log",
                                  "level": record.levelname, "logger": name})
                return
    _call_handlers(self, record)


def _record_text(record: logging.LogRecord) -> str:
    """The record's message, with its traceback and stack when it has them."""
    try:
        text = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format: say so rather than lose the line
        text = "%s (could not format with %r)" % (record.msg, record.args)
    if record.exc_info or record.exc_text or record.stack_info:
        formatter = logging.Formatter()
        if record.exc_info and not record.exc_text:
            record.exc_text = formatter.formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + formatter.formatStack(record.stack_info)
    return text


def write_through(lines: Iterable[Mapping[str, Any]]) -> None:
    """Write report lines the engine did not take to ``sys.stdout`` (lines of stream "stdout")
    or ``sys.stderr`` (the others), past the capture: where the thread's writes would go had no
    tool run (the stream a proxy wraps). One line each, the message alone (a log line's level and
    logger are on the record's lines only). A stream that is None, or fails, is skipped: this is
    the last resort of a tool's output."""
    for entry in lines:
        stream = sys.stdout if entry.get("stream") == "stdout" else sys.stderr
        while type(stream) is _StdProxy:
            stream = stream._target
        if stream is None:
            continue
        text = "%s\n" % (entry.get("message", ""),)
        try:
            try:
                stream.write(text)
            except UnicodeEncodeError:  # a console that cannot show it (cp1252): escaped, not lost
                encoding = getattr(stream, "encoding", None) or "ascii"
                stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nowhere left to write
            pass


_lock = threading.Lock()
#: sys.stdout and sys.stderr as ``install`` left them (our proxies, or None when a stream is None).
_installed = [object(), object()]


def ensure() -> None:
    """Make sure the capture is installed (cheap when it is: two identity checks)."""
    if sys.stdout is not _installed[0] or sys.stderr is not _installed[1]:
        install()


def install() -> None:
    """Wrap sys.stdout and sys.stderr (unless they are ours already, or None) and
    ``logging.Logger.callHandlers`` (once). Idempotent; safe from any thread."""
    with _lock:
        if logging.Logger.callHandlers is _call_handlers:
            logging.Logger.callHandlers = _capturing_call_handlers  # type: ignore[method-assign]
        for i, name in enumerate(("stdout", "stderr")):
            stream = getattr(sys, name)
            if stream is not None and (type(stream) is not _StdProxy or stream._stream != name):
                # (a proxy of the other stream, as when sys.stdout = sys.stderr: wrapped, so that
                # a tool's print stays "stdout")
                stream = _StdProxy(stream, name)
                setattr(sys, name, stream)
            _installed[i] = stream
