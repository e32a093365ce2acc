"""The web dashboard's part of the network soak (scripts/soak_net.py, docs/guide/ui.md).

While the MCP and webhook load runs, `UILoad` hammers `serve --ui` on 127.0.0.1:

- event streams: --sse clients at a time open `GET /api/events` (half with `run=ID`), and each
  either reads for 0.3-3 s and drops the connection (a plain close or a reset), half-closes it
  at once and goes away later, or never reads at all (a 4 KiB receive buffer, held until the
  load stops: the server must cut it after its write timeout, not hold it forever);
- API reads: `/api/runs` with filters and the next cursor, a run, its step instances (a failed
  one's error), workflows, schedules and their fires, the stale outputs, `/metrics`;
- bad requests, each with the statuses it may get: bodies that are not JSON or not an action's,
  a 1 MiB body (413), wrong methods (405), a missing or forged CSRF header (403), a foreign
  Origin (403), a foreign Host (403), bad cursors, limits, statuses and lineage queries (400),
  unknown runs, steps and files (404), asset paths that climb out (never a file outside the assets);
- actions: pause, unpause and cancel of the slow runs the soak starts (200, or 409 once the
  run has ended).

Every answer is counted by label and status; a 5xx, or a status a request may not get, is a
failure. `subscriptions()` and `goroutines()` read the server's dccflow_event_subscriptions and
go_goroutines from /metrics, for the check that both come back to rest.
"""

import http.client
import json
import random
import re
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

CSRF = "soak-csrf"
SLOW_HOOK = "/hooks/slow"
FAIL_HOOK = "/hooks/fail"

# Workflows and schedules soak_net.py adds for the dashboard's runs.
WORKFLOWS = {
    "soak_net_slow": """name: soak_net_slow
steps:
  - {id: a, tool: flow__sleep, args: {ms: 400}}
  - {id: b, tool: flow__sleep, args: {ms: 400}, depends_on: [a]}
  - {id: c, tool: flow__sleep, args: {ms: 400}, depends_on: [b]}
""",
    "soak_net_fail": """name: soak_net_fail
steps:
  - {id: ok, tool: flow__echo, args: {value: 1}}
  - {id: boom, tool: flow__fail, args: {message: "soak: disk full on /proj"}, depends_on: [ok]}
""",
}
SCHEDULES = """
  - id: net_slow
    workflow: soak_net_slow
    max_concurrent: 0
    trigger: {kind: webhook, path: /hooks/slow}
  - id: net_fail
    workflow: soak_net_fail
    max_concurrent: 0
    trigger: {kind: webhook, path: /hooks/fail}
"""

Outcome = Tuple[str, Sequence[int]]  # a label, the statuses it may get


class UIStats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Dict[str, int] = {}
        self.failures: List[str] = []
        self.sse_opened = 0
        self.sse_modes: Dict[str, int] = {}
        self.sse_peak_open = 0
        self.subs_peak = 0

    def answer(self, label: str, status: int, allowed: Sequence[int]) -> None:
        with self.lock:
            key = "ui %s %d" % (label, status)
            self.counts[key] = self.counts.get(key, 0) + 1
            if (status >= 500 or status not in allowed) and len(self.failures) < 50:
                self.failures.append("%s: %d (allowed %s)" % (label, status, list(allowed)))

    def count(self, key: str) -> None:
        with self.lock:
            self.counts["ui " + key] = self.counts.get("ui " + key, 0) + 1

    def requests(self) -> int:
        with self.lock:
            return sum(v for k, v in self.counts.items() if re.search(r" \d{3}$", k))


class UILoad:
    """Load on the dashboard at addr (host, port) and on the webhook server at hook."""

    def __init__(self, addr: Tuple[str, int], hook: Tuple[str, int], n_sse: int, stats: UIStats) -> None:
        self.addr, self.hook, self.n_sse, self.stats = addr, hook, n_sse, stats
        self.host = "%s:%d" % addr
        self.run_ids: List[str] = []
        self.failed_ids: List[str] = []
        self.lock = threading.Lock()

    # --- plain requests -------------------------------------------------------------------

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(*self.addr, timeout=30)

    def send(self, conn: http.client.HTTPConnection, method: str, path: str, body: Optional[bytes] = None,
             headers: Optional[Dict[str, str]] = None) -> Tuple[int, bytes]:
        """One request on conn; (0, b"") when the server closed the connection meanwhile."""
        h = dict(headers or {})
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
        return resp.status, data

    def action_headers(self, csrf: Optional[str] = CSRF, header: Optional[str] = None) -> Dict[str, str]:
        h = {"Content-Type": "application/json", "Origin": "http://" + self.host}
        if csrf is not None:
            h["Cookie"] = "dccflow_csrf_%d=%s" % (self.addr[1], csrf)  # the cookie's name ends with the port
        h["X-DCC-Flow-CSRF"] = header if header is not None else (csrf or "")
        if not h["X-DCC-Flow-CSRF"]:
            del h["X-DCC-Flow-CSRF"]
        return h

    def get_json(self, conn: http.client.HTTPConnection, path: str, label: str) -> Any:
        status, data = self.send(conn, "GET", path)
        self.stats.answer(label, status, (200,))
        return json.loads(data) if status == 200 else None

    def start_run(self, path: str) -> None:
        c = http.client.HTTPConnection(*self.hook, timeout=30)
        try:
            status, data = self.send(c, "POST", path, b"{}", {"Content-Type": "application/json"})
            self.stats.answer("webhook " + path, status, (200, 202))
        finally:
            c.close()

    def reads(self, conn: http.client.HTTPConnection, rnd: random.Random) -> None:
        status_filter = rnd.choice(["", "running", "completed,failed", "waiting_approval", "paused", "cancelled"])
        workflow = rnd.choice(["", "soak_net_echo", "soak_net_slow", "soak_net_fail"])
        q = "/api/runs?limit=%d" % rnd.choice([1, 5, 50, 500])
        if status_filter:
            q += "&status=" + status_filter
        if workflow:
            q += "&workflow=" + workflow
        page = self.get_json(conn, q, "GET /api/runs (filters)")
        if page and page.get("next_cursor"):
            self.get_json(conn, q + "&cursor=" + page["next_cursor"], "GET /api/runs (next page)")
        if page:
            with self.lock:
                for r in page["runs"]:
                    if r["name"] == "soak_net_fail" and r["status"] == "failed":
                        self.failed_ids = (self.failed_ids + [r["id"]])[-20:]
                    self.run_ids = (self.run_ids + [r["id"]])[-200:]
        with self.lock:
            ids = list(self.run_ids[-50:])
            failed = list(self.failed_ids)
        if ids:
            rid = rnd.choice(ids)
            run = self.get_json(conn, "/api/runs/" + rid, "GET /api/runs/ID")
            if run and run.get("instances"):
                key = rnd.choice(run["instances"])["key"]
                self.get_json(conn, "/api/runs/%s/steps/%s" % (rid, key), "GET step")
        if failed:
            step = self.get_json(conn, "/api/runs/%s/steps/boom" % rnd.choice(failed), "GET failed step")
            if step and not (step.get("error") or {}).get("message"):
                self.stats.answer("failed step without its error", 200, ())
        for path, label in [("/api/workflows", "GET /api/workflows"),
                            ("/api/workflows/soak_net_slow", "GET /api/workflows/NAME"),
                            ("/api/schedules", "GET /api/schedules"),
                            ("/api/schedules/net_slow/fires?limit=20", "GET fires"),
                            ("/api/stale?path=%2Fsoak-net", "GET /api/stale"),
                            ("/", "GET /"), ("/app.js", "GET asset")]:
            if rnd.random() < 0.3:
                status, _ = self.send(conn, "GET", path)
                self.stats.answer(label, status, (200,))

    def bad(self, conn: http.client.HTTPConnection, rnd: random.Random) -> None:
        with self.lock:
            rid = self.run_ids[-1] if self.run_ids else "r-none"
        act = "/api/runs/%s/cancel" % rid
        ok_body = b'{"by":"soak"}'
        cases: List[Tuple[str, str, str, Optional[bytes], Dict[str, str], Sequence[int]]] = [
            ("not JSON", "POST", act, b"not json", self.action_headers(), (400,)),
            ("truncated JSON", "POST", act, b'{"by":', self.action_headers(), (400,)),
            ("JSON array", "POST", act, b"[1,2]", self.action_headers(), (400,)),
            ("unknown field", "POST", act, b'{"by":"soak","rm":"-rf"}', self.action_headers(), (400,)),
            ("no by", "POST", act, b"{}", self.action_headers(), (400,)),
            ("deep JSON", "POST", act, b"[" * 10000 + b"]" * 10000, self.action_headers(), (400,)),
            ("no CSRF", "POST", act, ok_body, self.action_headers(csrf=None), (403,)),
            ("forged CSRF", "POST", act, ok_body, self.action_headers(header="forged"), (403,)),
            ("foreign Origin", "POST", act, ok_body,
             dict(self.action_headers(), Origin="http://evil.example"), (403,)),
            ("foreign Origin GET", "GET", "/api/runs", None, {"Origin": "http://evil.example"}, (403,)),
            ("foreign Host", "GET", "/api/runs", None, {"Host": "evil.example"}, (403,)),
            ("DELETE /api/runs", "DELETE", "/api/runs", None, {}, (405,)),
            ("PUT action", "PUT", act, ok_body, self.action_headers(), (405,)),
            ("GET action", "GET", act, None, {}, (405,)),
            ("POST asset", "POST", "/app.js", ok_body, {}, (405,)),
            ("bad cursor", "GET", "/api/runs?cursor=not-a-cursor", None, {}, (400,)),
            ("bad cursor (base64)", "GET", "/api/runs?cursor=MTIzNA", None, {}, (400,)),
            ("bad status", "GET", "/api/runs?status=exploded", None, {}, (400,)),
            ("bad limit", "GET", "/api/runs?limit=100000", None, {}, (400,)),
            ("bad since", "GET", "/api/runs?since=yesterday", None, {}, (400,)),
            ("bad from", "GET", "/api/events?from=abc", None, {}, (400,)),
            ("unknown run", "GET", "/api/runs/r-00000000-unknown", None, {}, (404,)),
            ("unknown step", "GET", "/api/runs/%s/steps/nope" % rid, None, {}, (404,)),
            ("unknown run action", "POST", "/api/runs/r-unknown/pause", ok_body, self.action_headers(), (404,)),
            ("unknown workflow", "GET", "/api/workflows/nope", None, {}, (404,)),
            ("unknown schedule", "GET", "/api/schedules/nope/fires", None, {}, (404,)),
            ("unknown API route", "GET", "/api/nope", None, {}, (404,)),
            ("lineage without a path", "GET", "/api/lineage", None, {}, (400,)),
            ("bad lineage depth", "GET", "/api/lineage?path=%2Fa&depth=-1", None, {}, (400,)),
            ("unrecorded file", "GET", "/api/lineage?path=%2Fsoak-net%2Fnope.usd", None, {}, (404,)),
            ("unknown asset", "GET", "/nope.js", None, {}, (404,)),
            # Paths that climb out of the assets: a redirect to the cleaned path, or not found.
            ("traversal", "GET", "/../../../../etc/passwd", None, {}, (301, 307, 404)),
            ("traversal (encoded)", "GET", "/%2e%2e/%2e%2e/etc/passwd", None, {}, (301, 307, 400, 404)),
            ("traversal (encoded slash)", "GET", "/..%2f..%2fgo.mod", None, {}, (301, 307, 400, 404)),
            ("traversal (backslash)", "GET", "/..%5c..%5cgo.mod", None, {}, (301, 307, 400, 404)),
            ("traversal (asset)", "GET", "/app.js/../../ui.go", None, {}, (301, 307, 404)),
        ]
        label, method, path, body, headers, allowed = rnd.choice(cases)
        status, data = self.send(conn, method, path, body, headers)
        if b"root:" in data or b"package ui" in data or b"module github.com" in data:
            self.stats.answer("bad %s served a file outside the assets" % label, status, ())
        self.stats.answer("bad " + label, status, allowed)

    def huge(self, rnd: random.Random) -> None:
        """A 1 MiB action body: 413, or the connection closed while it is sent."""
        c = self.conn()
        try:
            status, _ = self.send(c, "POST", "/api/runs/r-x/cancel", b'{"by":"' + b"x" * (1 << 20) + b'"}',
                                  self.action_headers())
            self.stats.answer("bad 1 MiB body", status, (413,))
        except OSError:
            self.stats.count("bad 1 MiB body closed while sent")
        finally:
            c.close()

    def actions(self, conn: http.client.HTTPConnection, rnd: random.Random) -> None:
        page = self.get_json(conn, "/api/runs?workflow=soak_net_slow&status=running,paused&limit=20",
                             "GET /api/runs (actions)")
        for r in (page or {}).get("runs", [])[:3]:
            verb = rnd.choice(["pause", "unpause", "cancel"]) if r["status"] == "running" else \
                rnd.choice(["unpause", "cancel"])
            body = json.dumps({"by": "soak", "reason": "soak_net"}).encode()
            status, data = self.send(conn, "POST", "/api/runs/%s/%s" % (r["id"], verb), body, self.action_headers())
            # 409: the run ended (or was already paused) meanwhile.
            self.stats.answer("POST " + verb, status, (200, 409))

    def worker(self, stop: threading.Event, seed: int) -> None:
        rnd = random.Random(seed)
        conn = self.conn()
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if n % 25 == 0:
                    self.start_run(SLOW_HOOK if n % 50 == 0 else FAIL_HOOK)
                    self.actions(conn, rnd)
                elif n % 3 == 0:
                    self.bad(conn, rnd)
                elif n % 97 == 0:
                    self.huge(rnd)
                else:
                    self.reads(conn, rnd)
            except (OSError, http.client.HTTPException) as exc:
                self.stats.count("client error %s" % type(exc).__name__)
                conn.close()
                conn = self.conn()
            except Exception as exc:  # noqa: BLE001 - an answer the soak did not expect fails it
                self.stats.answer("unexpected answer: %s: %s" % (type(exc).__name__, exc), 0, ())
                conn.close()
                conn = self.conn()
        conn.close()

    # --- event streams --------------------------------------------------------------------

    def open_stream(self, mode: str, query: str) -> Optional[socket.socket]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if mode == "stall":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        try:
            s.connect(self.addr)
            s.sendall(("GET /api/events%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n"
                       % (query, self.host)).encode())
            head = b""
            while b"dcc-flow events from" not in head and len(head) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            m = re.match(rb"HTTP/1\.1 (\d{3})", head)
            status = int(m.group(1)) if m else 0
            self.stats.answer("SSE GET /api/events" + (" ?run=" if "run=" in query else ""), status, (200,))
            if status != 200:
                s.close()
                return None
            s.setblocking(False)
            with self.stats.lock:
                self.stats.sse_opened += 1
                self.stats.sse_modes[mode] = self.stats.sse_modes.get(mode, 0) + 1
            return s
        except OSError as exc:
            self.stats.count("SSE client error %s" % type(exc).__name__)
            s.close()
            return None

    def streams(self, stop: threading.Event, seed: int) -> None:
        rnd = random.Random(seed)
        live: List[Tuple[socket.socket, str, float]] = []  # socket, mode, when it goes
        stalls = 0
        while not stop.wait(0.05):
            now = time.monotonic()
            kept: List[Tuple[socket.socket, str, float]] = []
            for s, mode, until in live:
                if mode == "read":
                    try:
                        while s.recv(65536):
                            pass
                    except BlockingIOError:
                        pass
                    except OSError:
                        until = 0
                if now < until:
                    kept.append((s, mode, until))
                    continue
                if rnd.random() < 0.5:  # a reset rather than a close
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
            live = kept
            with self.stats.lock:
                self.stats.sse_peak_open = max(self.stats.sse_peak_open, len(live))
            for _ in range(min(4, self.n_sse - len(live))):  # a few new ones per turn
                with self.lock:
                    ids = list(self.run_ids[-20:])
                query = ""
                if ids and rnd.random() < 0.5:
                    query = "?run=" + rnd.choice(ids) + rnd.choice(["", "&from=1"])
                r = rnd.random()
                mode = "read" if r < 0.5 else "half" if r < 0.8 or stalls >= self.n_sse // 5 else "stall"
                opened = self.open_stream(mode, query)
                if opened is None:
                    continue
                if mode == "half":
                    opened.shutdown(socket.SHUT_WR)
                if mode == "stall":
                    stalls += 1
                    until = float("inf")
                else:
                    until = time.monotonic() + rnd.uniform(0.3, 3.0)
                live.append((opened, mode, until))
        for s, _, _ in live:
            s.close()

    # --- figures from /metrics ------------------------------------------------------------

    def metric(self, name: str) -> float:
        c = self.conn()
        try:
            status, data = self.send(c, "GET", "/metrics")
        finally:
            c.close()
        if status != 200:
            raise RuntimeError("GET /metrics on the dashboard: %d" % status)
        m = re.search(rb"^%s (\S+)$" % re.escape(name.encode()), data, re.M)
        if not m:
            raise RuntimeError("no %s in the dashboard's /metrics" % name)
        return float(m.group(1))

    def subscriptions(self) -> int:
        return int(self.metric("dccflow_event_subscriptions"))

    def goroutines(self) -> int:
        return int(self.metric("go_goroutines"))

    def heap_mib(self) -> float:
        """The Go heap in use (go_memstats_heap_inuse_bytes), in MiB."""
        return round(self.metric("go_memstats_heap_inuse_bytes") / 2**20, 1)


def start(load: UILoad, stop: threading.Event, workers: int = 2) -> List[threading.Thread]:
    """The load's threads, started: workers request threads and one of event streams."""
    threads = [threading.Thread(target=load.worker, args=(stop, 1000 + i), daemon=True) for i in range(workers)]
    threads.append(threading.Thread(target=load.streams, args=(stop, 7), daemon=True))
    for t in threads:
        t.start()
    return threads
