"""A minimal MCP client over streamable HTTP, standard library only (urllib), for scripts/soak.py.

It speaks just what the soak needs: ``initialize`` (keeping the ``Mcp-Session-Id`` the server
answers with), ``notifications/initialized``, ``tools/call`` and a ``DELETE`` that ends the
session. A POST is answered either with ``application/json`` (one JSON-RPC message) or with
``text/event-stream`` (server-sent events: notifications about the request, then its response);
both are read, and the response is the message whose ``id`` is the request's.

Errors are split so the caller can tell what happened to a request:

- ``Unavailable``: the request did not get an answer (connection refused or reset, timeout, a
  server killed mid-request). Whether the server acted on it is unknown.
- ``SessionGone``: the server does not know the session (it was restarted). It did not act on
  the request; ``call_tool`` opens a new session and sends it again once.
- ``RpcError``: a JSON-RPC error response, or an HTTP error status with a body.

A tool result is returned as ``(structured_content, is_error)``.
"""

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

PROTOCOL_VERSION = "2025-11-25"

# Servers are on 127.0.0.1: never through a proxy of the environment (http_proxy).
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

__all__ = ["McpClient", "Unavailable", "SessionGone", "RpcError"]


class Unavailable(Exception):
    """No answer: the server is down, was killed mid-request, or timed out."""


class SessionGone(Exception):
    """The server does not know the session id (a restarted server)."""


class RpcError(Exception):
    """A JSON-RPC error, or an HTTP error status."""

    def __init__(self, message: str, code: Optional[int] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def parse_sse(text: str) -> List[Dict[str, Any]]:
    """The JSON messages of a text/event-stream body (each event's ``data:`` lines joined)."""
    messages: List[Dict[str, Any]] = []
    data: List[str] = []
    for line in text.splitlines() + [""]:
        if line == "":
            if data:
                messages.append(json.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    return messages


class McpClient:
    """One MCP session with a streamable HTTP endpoint (``http://127.0.0.1:PORT/mcp``)."""

    def __init__(self, url: str, timeout: float = 15.0, token: Optional[str] = None, name: str = "soak") -> None:
        self.url = url
        self.timeout = timeout
        self.token = token
        self.name = name
        self.session: Optional[str] = None
        self._next_id = 0

    def _post(self, message: Dict[str, Any]) -> Tuple[int, Dict[str, str], str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url, data=json.dumps(message).encode("utf-8"), headers=headers,
                                     method="POST")
        try:
            with OPENER.open(req, timeout=self.timeout) as resp:
                body = resp.read().decode("utf-8", "replace")
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, body
        except urllib.error.HTTPError as exc:
            body = ""
            try:
                body = exc.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                pass
            if exc.code == 404 and self.session:
                raise SessionGone("session %s unknown to the server: %s" % (self.session, body.strip())) from None
            if exc.code == 400 and self.session and "session" in body.lower():
                raise SessionGone("session %s refused: %s" % (self.session, body.strip())) from None
            raise RpcError("HTTP %d: %s" % (exc.code, body.strip()[:300]), status=exc.code) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, OSError) as exc:
            raise Unavailable("%s: %s" % (type(exc).__name__, exc)) from None

    def _request(self, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        status, headers, body = self._post(msg)
        if method == "initialize" and headers.get("mcp-session-id"):
            self.session = headers["mcp-session-id"]
        ctype = headers.get("content-type", "")
        try:
            if ctype.startswith("text/event-stream"):
                messages = parse_sse(body)
            else:
                messages = [json.loads(body)] if body.strip() else []
        except ValueError as exc:
            raise RpcError("unreadable %s response to %s: %s" % (ctype, method, exc), status=status) from None
        for m in messages:
            if m.get("id") == rid:
                if "error" in m:
                    err = m["error"] or {}
                    raise RpcError("%s: %s" % (method, err.get("message")), code=err.get("code"), status=status)
                result: Dict[str, Any] = m.get("result") or {}
                return result
        raise Unavailable("no response to %s %d in a %d reply (%s)" % (method, rid, status, ctype))

    def _notify(self, method: str) -> None:
        self._post({"jsonrpc": "2.0", "method": method})

    def initialize(self) -> Dict[str, Any]:
        """Open a session (initialize, then notifications/initialized)."""
        self.session = None
        result = self._request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                              "clientInfo": {"name": self.name, "version": "1"}})
        self._notify("notifications/initialized")
        return result

    def call_tool(self, name: str, arguments: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
        """Call a tool; returns (structuredContent, isError). Opens a session when there is none,
        and a new one when the server forgot this one (then the call is sent once more: the
        server refused the first without acting on it)."""
        for attempt in (1, 2):
            if self.session is None:
                self.initialize()
            try:
                result = self._request("tools/call", {"name": name, "arguments": arguments})
            except SessionGone:
                self.session = None
                if attempt == 2:
                    raise
                continue
            content = result.get("structuredContent")
            if not isinstance(content, dict):
                text = "".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
                try:
                    content = json.loads(text) if text else {}
                except ValueError:
                    content = {"text": text}
            return content, bool(result.get("isError"))
        raise AssertionError("unreachable")

    def close(self) -> None:
        """End the session (HTTP DELETE), ignoring errors: the server may be gone."""
        if not self.session:
            return
        headers = {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url, headers=headers, method="DELETE")
        try:
            with OPENER.open(req, timeout=min(self.timeout, 5.0)) as resp:
                resp.read()
        except (urllib.error.URLError, http.client.HTTPException, OSError):
            pass
        self.session = None
