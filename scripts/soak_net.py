#!/usr/bin/env python3
"""Network soak of `dcc-flow serve` (issue #26, item 20; the dashboard, issue #22): MCP over HTTP,
webhooks and the web dashboard on 127.0.0.1 under slowloris connections, 10k-request batches,
malformed JSON-RPC and a dashboard load, for a bounded time.

    python scripts/soak_net.py [--duration SECS] [--slowloris N] [--batch N] [--sse N] [--json]

It starts `python -m dcc_flow serve --mcp http://127.0.0.1:0 --webhooks 127.0.0.1:0 --ui 127.0.0.1:0`
(a SQLite database in a temporary folder, the built-in flow__echo, flow__sleep and flow__fail
tools, one webhook schedule signed with `signature: timestamped`, unsigned ones, and the slow
and failing workflows of scripts/soak/soak_ui.py), measures the server's RSS, threads,
goroutines and open event subscriptions at rest, then for --duration seconds at once:

- slowloris: --slowloris connections, half to the MCP and half to the webhook server, each
  sending its request a byte a second (half stall in the headers, half in a body they
  announced); a connection the server closes is opened again;
- batches: 10,000 requests at a time (--batch), from 8 keep-alive connections: MCP ping and
  tools/list in a session, MCP initialize without a DELETE, webhook deliveries with a valid
  signature (about 1 in 50 requests: each starts a run), a wrong one,
  an expired one, one from the future, a replayed one, an unknown path, a GET, an unsigned one;
- malformed JSON-RPC: bodies that are not JSON, not JSON-RPC, an empty batch, deep nesting, a
  huge id, a 9 MiB body (413), a foreign Origin (403);
- the dashboard (scripts/soak/soak_ui.py): --sse event streams open at a time (`GET
  /api/events`, half with `run=`) whose clients read a while and drop the connection, half-close
  it, or never read; API reads with filters and cursors, runs and step details; bad requests
  (malformed and 1 MiB bodies, wrong methods, missing and forged CSRF, foreign Origin and Host,
  bad cursors, unknown ids, paths that climb out of the assets), each with the statuses it may
  get; pause, unpause and cancel of the slow runs it starts;
- a probe every 0.5 s: a fresh connection runs initialize + tools/list, a signed webhook
  delivery, and a dashboard GET /api/runs; each must be answered (2xx) within --probe-bound
  seconds.

Then it stops the load, closes every connection, and waits up to --settle seconds for the
server to come back near the rest figures: threads ≤ max(rest, 11) + 4, RSS ≤ rest + --rss-slack-mib,
goroutines (go_goroutines of the dashboard's /metrics) ≤ rest + 20, and no event subscription
left open (dccflow_event_subscriptions 0). Every dashboard answer must be one its request may
get (never a 5xx). Measured on a 2-core machine (300 slowloris connections, 10,000-request
batches, 60 event streams, 30 s): 23,400 dashboard requests and 900 event streams (12 never
read); RSS 48 MiB at rest, 134 MiB under load, 76 MiB 40 s after (79 MiB after a 60 s soak with
35,600 dashboard requests: a plateau); Go heap in use 4 MiB at rest, 15 MiB after (17 after
60 s); goroutines 18 at rest, 676 under load, 18 after; event subscriptions 0, 42, 0; threads
11 at rest, 13-15 after. Without the dashboard (before issue #22): RSS 48 → 65 MiB, threads 10
→ 11. Everything sent goes to 127.0.0.1. Exit status 0 when every probe was answered in time,
every dashboard answer was allowed and the figures came back, else 1; the figures are printed
(or with --json one JSON object).
"""

import argparse
import hashlib
import hmac
import http.client
import json
import os
import queue
import random
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIT = os.path.join(ROOT, "scripts", "soak")
if KIT not in sys.path:
    sys.path.insert(0, KIT)

import soak_ui  # noqa: E402

SECRET = "soak-net-secret"
PROTOCOL = "2025-11-25"

WORKFLOW = """name: soak_net_echo
steps:
  - {id: echo, tool: flow__echo, args: {value: "{{inputs.n}}"}}
inputs: {n: {type: integer, default: 0}}
"""

SCHEDULES = """schedules:
  - id: net_signed
    workflow: soak_net_echo
    max_concurrent: 0
    inputs: {n: "{{trigger.payload.n}}"}
    trigger: {kind: webhook, path: /hooks/signed, secret_env: SOAK_NET_SECRET, signature: timestamped}
  - id: net_open
    workflow: soak_net_echo
    max_concurrent: 1
    trigger: {kind: webhook, path: /hooks/open}
"""


def sign(body: bytes, t: Optional[int] = None) -> str:
    ts = int(time.time()) if t is None else t
    mac = hmac.new(SECRET.encode(), b"%d." % ts + body, hashlib.sha256).hexdigest()
    return "t=%d,v1=%s" % (ts, mac)


def proc_figures(pid: int) -> Tuple[int, int]:
    """(RSS in bytes, threads) of a process, from /proc."""
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


class Server:
    """`dcc-flow serve` in a child process, with its MCP and webhook addresses."""

    def __init__(self, workdir: str) -> None:
        wf = os.path.join(workdir, "workflows")
        sc = os.path.join(workdir, "schedules")
        os.makedirs(wf, exist_ok=True)
        os.makedirs(sc, exist_ok=True)
        with open(os.path.join(wf, "soak_net_echo.yaml"), "w") as f:
            f.write(WORKFLOW)
        for name, text in soak_ui.WORKFLOWS.items():
            with open(os.path.join(wf, name + ".yaml"), "w") as f:
                f.write(text)
        with open(os.path.join(sc, "net.schedules.yaml"), "w") as f:
            f.write(SCHEDULES + soak_ui.SCHEDULES)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), SOAK_NET_SECRET=SECRET)
        self.stderr = open(os.path.join(workdir, "serve.err"), "wb")  # noqa: SIM115 - the child's, closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dcc_flow", "serve", "--workflows", wf, "--schedules", sc,
             "--webhooks", "127.0.0.1:0", "--mcp", "http://127.0.0.1:0", "--ui", "127.0.0.1:0",
             "--db", os.path.join(workdir, "net.db"), "--worker-threads", "1"],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=self.stderr)
        line = b""
        deadline = time.monotonic() + 60
        assert self.proc.stdout is not None
        while not line.endswith(b"\n") and time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line += os.read(self.proc.stdout.fileno(), 4096)
        text = line.decode()
        hook = re.search(r"webhooks on http://([\d.]+):(\d+)", text)
        mcp = re.search(r"MCP on http://([\d.]+):(\d+)/mcp", text)
        ui = re.search(r"dashboard on http://([\d.]+):(\d+)/", text)
        if not hook or not mcp or not ui:
            self.stop()
            with open(os.path.join(workdir, "serve.err"), "rb") as f:
                err = f.read().decode(errors="replace")
            raise RuntimeError("serve did not get ready: %r %s" % (text, err[-4000:]))
        self.hook = (hook.group(1), int(hook.group(2)))
        self.mcp = (mcp.group(1), int(mcp.group(2)))
        self.ui = (ui.group(1), int(ui.group(2)))
        # Drain the run log so that the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        out = self.proc.stdout
        while out is not None:
            try:
                if not os.read(out.fileno(), 65536):
                    return
            except OSError:
                return

    def figures(self) -> Tuple[int, int]:
        return proc_figures(self.proc.pid)

    def stop(self) -> int:
        self.stderr.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes = b"",
            headers: Optional[Dict[str, str]] = None) -> Tuple[int, bytes, http.client.HTTPResponse]:
    conn.request(method, path, body=body if method != "GET" else None, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    if resp.getheader("Connection", "").lower() == "close":
        conn.close()
    return resp.status, data, resp


def mcp_headers(session: Optional[str] = None) -> Dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": PROTOCOL}
    if session:
        h["Mcp-Session-Id"] = session
    return h


INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "soak-net", "version": "1"}}}).encode()


def mcp_session(conn: http.client.HTTPConnection) -> str:
    status, _, resp = request(conn, "POST", "/mcp", INITIALIZE, mcp_headers())
    sid = resp.getheader("Mcp-Session-Id") or ""
    if status != 200 or not sid:
        raise RuntimeError("initialize: %d" % status)
    request(conn, "POST", "/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', mcp_headers(sid))
    return sid


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Dict[str, int] = {}
        self.probe_worst = 0.0
        self.probe_failures: List[str] = []
        self.probes = 0
        self.slowloris_cut = 0
        self.slowloris_opened = 0

    def count(self, key: str) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1


def slowloris(server: Server, n: int, stop: threading.Event, stats: Stats) -> None:
    """n connections, half to each server, each sending a byte a second of a request that never
    ends (half in the headers, half in an announced body); reopened when the server closes them."""
    def opening(i: int) -> Tuple[socket.socket, bytes]:
        host, port = server.mcp if i % 2 == 0 else server.hook
        path = "/mcp" if i % 2 == 0 else "/hooks/signed"
        s = socket.create_connection((host, port), timeout=5)
        s.setblocking(False)
        head = "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n" % (path, host, port)
        if (i // 2) % 2 == 0:
            rest = head.encode() + b"X-Slow: " + b"a" * 100000  # headers that never end
        else:
            s.sendall(head.encode() + b"Content-Length: 100000\r\n\r\n")
            rest = b"{" + b" " * 99999  # a body that never ends
        with stats.lock:
            stats.slowloris_opened += 1
        return s, rest

    conns: List[Optional[Tuple[socket.socket, bytes]]] = []
    for i in range(n):
        try:
            conns.append(opening(i))
        except OSError:
            conns.append(None)
    while not stop.wait(1.0):
        for i, c in enumerate(conns):
            if c is None:
                continue
            s, rest = c
            try:
                if select.select([s], [], [], 0)[0] and not s.recv(4096):
                    raise ConnectionResetError
                s.send(rest[:1])
                conns[i] = (s, rest[1:])
            except OSError:
                s.close()
                with stats.lock:
                    stats.slowloris_cut += 1
                try:
                    conns[i] = opening(i)
                except OSError:
                    conns[i] = None
    for c in conns:
        if c is not None:
            c[0].close()


MALFORMED: List[Tuple[bytes, Dict[str, str]]] = [
    (b"not json", {}),
    (b"{", {}),
    (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', {}),
    (b"[]", {}),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0"}]', {}),
    (b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}', {}),
    (b"[" * 20000 + b"]" * 20000, {}),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}', {}),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
     b'"params":{"name":"workflows_run","arguments":{"spec":"steps: ["}}}', {}),
    (b"\xff\xfe\x00garbage", {}),
    (INITIALIZE, {"Origin": "http://evil.example"}),
]


def batch_worker(server: Server, jobs: "queue.Queue[int]", stats: Stats, stop: threading.Event) -> None:
    """Send the jobs of a batch on two keep-alive connections (MCP and webhooks)."""
    mcp = http.client.HTTPConnection(*server.mcp, timeout=30)
    hook = http.client.HTTPConnection(*server.hook, timeout=30)
    sid = ""
    rnd = random.Random(threading.get_ident())
    while not stop.is_set():
        try:
            n = jobs.get_nowait()
        except queue.Empty:
            break
        kind = n % 10
        try:
            if kind <= 3:
                if not sid:
                    sid = mcp_session(mcp)
                method = "ping" if kind < 2 else "tools/list"
                msg = json.dumps({"jsonrpc": "2.0", "id": n, "method": method}).encode()
                status, _, _ = request(mcp, "POST", "/mcp", msg, mcp_headers(sid))
                stats.count("mcp %s %d" % (method, status))
            elif kind == 4:
                status, _, _ = request(mcp, "POST", "/mcp", INITIALIZE, mcp_headers())
                stats.count("mcp initialize (no DELETE) %d" % status)
            elif kind == 5:
                body, extra = MALFORMED[rnd.randrange(len(MALFORMED))]
                h = mcp_headers(sid or None)
                h.update(extra)
                status, _, _ = request(mcp, "POST", "/mcp", body, h)
                stats.count("mcp malformed %d" % status)
            elif kind == 6 and n % 50 == 6:
                try:
                    status, _, _ = request(mcp, "POST", "/mcp", b"x" * (9 << 20), mcp_headers(sid or None))
                    stats.count("mcp 9 MiB %d" % status)
                except OSError:  # answered 413 from the Content-Length and closed while we sent
                    stats.count("mcp 9 MiB closed before the body")
                    mcp.close()
                    mcp = http.client.HTTPConnection(*server.mcp, timeout=30)
            else:
                body = json.dumps({"n": n}).encode()
                choice = (n // 10) % 7
                h = {"Content-Type": "application/json"}
                path, method = "/hooks/signed", "POST"
                if choice == 0 and (n // 70) % 3 == 0:  # about 1 in 50 requests starts a run
                    h["X-Dcc-Flow-Signature"] = sign(body)
                    label = "valid"
                elif choice == 0:
                    h["X-Dcc-Flow-Signature"] = sign(body, int(time.time()) + 3600)
                    label = "from the future"
                elif choice == 1:
                    h["X-Dcc-Flow-Signature"] = sign(body)[:-4] + "0000"
                    label = "wrong signature"
                elif choice == 2:
                    h["X-Dcc-Flow-Signature"] = sign(body, int(time.time()) - 3600)
                    label = "expired"
                elif choice == 3:
                    replay = json.dumps({"n": 0}).encode()
                    body, h["X-Dcc-Flow-Signature"] = replay, sign(replay, REPLAY_T)
                    h["X-GitHub-Delivery"] = "replay-%d" % n
                    label = "replayed"
                elif choice == 4:
                    path, label = "/hooks/unknown", "unknown path"
                elif choice == 5:
                    method, label = "GET", "GET"
                else:
                    path, label = "/hooks/open", "unsigned on loopback"
                status, _, _ = request(hook, method, path, body, h)
                stats.count("webhook %s %d" % (label, status))
        except (OSError, http.client.HTTPException) as exc:
            stats.count("client error %s" % type(exc).__name__)
            mcp.close()
            hook.close()
            mcp = http.client.HTTPConnection(*server.mcp, timeout=30)
            hook = http.client.HTTPConnection(*server.hook, timeout=30)
            sid = ""
    mcp.close()
    hook.close()


REPLAY_T = int(time.time())


def batches(server: Server, size: int, stop: threading.Event, stats: Stats) -> int:
    """Batches of size requests from 8 threads until stop; returns how many batches finished."""
    done = 0
    while not stop.is_set():
        jobs: queue.Queue[int] = queue.Queue()
        for i in range(size):
            jobs.put(i)
        workers = [threading.Thread(target=batch_worker, args=(server, jobs, stats, stop), daemon=True)
                   for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if jobs.empty():
            done += 1
    return done


def probe_once(server: Server, bound: float, stats: Stats) -> None:
    t0 = time.monotonic()
    what = "mcp"
    try:
        conn = http.client.HTTPConnection(*server.mcp, timeout=bound)
        sid = mcp_session(conn)
        status, data, _ = request(conn, "POST", "/mcp", b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
                                  mcp_headers(sid))
        if status != 200 or b"workflows_run" not in data:
            raise RuntimeError("tools/list: %d" % status)
        request(conn, "DELETE", "/mcp", b"", mcp_headers(sid))
        conn.close()
        what = "webhook"
        conn = http.client.HTTPConnection(*server.hook, timeout=bound)
        body = json.dumps({"n": 1}).encode()
        status, data, _ = request(conn, "POST", "/hooks/signed", body,
                                  {"Content-Type": "application/json", "X-Dcc-Flow-Signature": sign(body)})
        conn.close()
        if status not in (200, 202):
            raise RuntimeError("webhook: %d %r" % (status, data[:200]))
        what = "dashboard"
        conn = http.client.HTTPConnection(*server.ui, timeout=bound)
        status, data, _ = request(conn, "GET", "/api/runs?limit=5")
        conn.close()
        if status != 200 or b'"runs"' not in data:
            raise RuntimeError("GET /api/runs: %d %r" % (status, data[:200]))
    except (OSError, http.client.HTTPException, RuntimeError) as exc:
        with stats.lock:
            stats.probe_failures.append("%s: %s: %s" % (what, type(exc).__name__, exc))
        return
    took = time.monotonic() - t0
    with stats.lock:
        stats.probes += 1
        stats.probe_worst = max(stats.probe_worst, took)
        if took > bound:
            stats.probe_failures.append("a probe took %.2f s (bound %.1f s)" % (took, bound))


REST_THREADS_FLOOR = 11  # threads of a warmed-up serve at rest (docs above: 11 at rest, 13-15 after)


def run_soak(duration: float, n_slowloris: int, batch: int, probe_bound: float = 5.0, settle: float = 90.0,
             workdir: Optional[str] = None, warmup: float = 1.0, rss_slack_mib: float = 32.0,
             thread_slack: int = 4, n_sse: int = 60, goroutine_slack: int = 20) -> Dict[str, Any]:
    tmp = tempfile.TemporaryDirectory(prefix="soak-net-") if workdir is None else None
    server = Server(workdir or (tmp.name if tmp else "."))
    stats = Stats()
    ui_stats = soak_ui.UIStats()
    ui = soak_ui.UILoad(server.ui, server.hook, n_sse, ui_stats)
    try:
        time.sleep(warmup)
        probe_once(server, probe_bound, stats)  # warm: the first sessions and runs
        time.sleep(warmup)
        rest_rss, rest_threads = server.figures()
        rest_goroutines, rest_subs, rest_heap = ui.goroutines(), ui.subscriptions(), ui.heap_mib()
        stop = threading.Event()
        load = [threading.Thread(target=slowloris, args=(server, n_slowloris, stop, stats), daemon=True)]
        done: List[int] = []
        load.append(threading.Thread(target=lambda: done.append(batches(server, batch, stop, stats)), daemon=True))
        for t in load:
            t.start()
        load += soak_ui.start(ui, stop)
        peak_rss, peak_threads, peak_goroutines = rest_rss, rest_threads, rest_goroutines
        end = time.monotonic() + duration
        while time.monotonic() < end:
            probe_once(server, probe_bound, stats)
            rss, threads = server.figures()
            peak_rss, peak_threads = max(peak_rss, rss), max(peak_threads, threads)
            try:
                subs, goroutines = ui.subscriptions(), ui.goroutines()
                ui_stats.subs_peak = max(ui_stats.subs_peak, subs)
                peak_goroutines = max(peak_goroutines, goroutines)
            except (OSError, http.client.HTTPException, RuntimeError) as exc:
                stats.probe_failures.append("dashboard /metrics: %s: %s" % (type(exc).__name__, exc))
            time.sleep(0.5)
        stop.set()
        for t in load:
            t.join(timeout=60)
        # Back to rest: the figures must come near the rest figures within settle seconds, and
        # no event subscription may be left open once every stream's client has gone.
        rss_bound = rest_rss + int(rss_slack_mib * 2**20)
        # The Go runtime keeps the threads it made: 'after' is the high-water mark of the load,
        # and the rest figure is how many threads the start-up happened to make, 8 to 11 (on a
        # loaded machine fewer: the warm-up's calls overlapped less). The bound counts from at
        # least REST_THREADS_FLOOR, the usual rest figure, so a low rest count is not a leak;
        # a thread per connection or per request still passes it by hundreds.
        thread_bound = max(rest_threads, REST_THREADS_FLOOR) + thread_slack
        goroutine_bound = rest_goroutines + goroutine_slack
        deadline = time.monotonic() + settle
        t_settle = time.monotonic()
        timeline: List[Tuple[float, float, float, int, int, int]] = []
        while True:
            rss, threads = server.figures()
            subs, goroutines = ui.subscriptions(), ui.goroutines()
            elapsed = time.monotonic() - t_settle
            if not timeline or elapsed - timeline[-1][0] >= 10:
                timeline.append((round(elapsed, 1), round(rss / 2**20, 1), ui.heap_mib(), threads, goroutines, subs))
            back = rss <= rss_bound and threads <= thread_bound and goroutines <= goroutine_bound and subs == 0
            if back or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        settled_after = time.monotonic() - t_settle
        probe_once(server, probe_bound, stats)  # still answering after the load
        ok = not stats.probe_failures and not ui_stats.failures and back and server.proc.poll() is None
        counts = dict(stats.counts)
        counts.update(ui_stats.counts)
        report = {
            "ok": ok, "duration_secs": duration, "slowloris_connections": n_slowloris,
            "slowloris_opened": stats.slowloris_opened, "slowloris_cut_by_server": stats.slowloris_cut,
            "batch_size": batch, "batches_done": done[0] if done else 0,
            "requests": dict(sorted(counts.items())), "probes": stats.probes,
            "probe_worst_secs": round(stats.probe_worst, 3), "probe_failures": stats.probe_failures[:20],
            "ui_requests": ui_stats.requests(), "ui_failures": ui_stats.failures[:20],
            "sse_streams_opened": ui_stats.sse_opened,
            "sse_streams_by_client": dict(sorted(ui_stats.sse_modes.items())),
            "sse_streams_peak_open": ui_stats.sse_peak_open,
            "event_subscriptions_rest_peak_after": [rest_subs, ui_stats.subs_peak, subs],
            "goroutines_rest_peak_after": [rest_goroutines, peak_goroutines, goroutines],
            "goroutine_bound": goroutine_bound,
            "rest_rss_mib": round(rest_rss / 2**20, 1), "peak_rss_mib": round(peak_rss / 2**20, 1),
            "after_rss_mib": round(rss / 2**20, 1), "rss_bound_mib": round(rss_bound / 2**20, 1),
            "rest_threads": rest_threads, "peak_threads": peak_threads, "after_threads": threads,
            "thread_bound": thread_bound, "settled_after_secs": round(settled_after, 1),
            "go_heap_inuse_mib_rest_after": [rest_heap, ui.heap_mib()],
            "settle_timeline_secs_rss_heap_mib_threads_goroutines_subs": timeline,
        }
        code = server.stop()
        report["exit_code"] = code
        report["ok"] = ok and code == 0
        return report
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=45.0, help="seconds of load (default 45)")
    p.add_argument("--slowloris", type=int, default=300, help="slowloris connections (default 300)")
    p.add_argument("--batch", type=int, default=10000, help="requests per batch (default 10000)")
    p.add_argument("--probe-bound", type=float, default=5.0, help="seconds a probe may take (default 5)")
    p.add_argument("--settle", type=float, default=90.0,
                   help="seconds to wait for the rest figures (default 90; abandoned MCP sessions end 30 s after "
                        "their initialize, and the memory goes back to the system then)")
    p.add_argument("--rss-slack-mib", type=float, default=32.0, help="RSS over the rest figure that counts as back "
                   "(default 32: the SQLite page caches fill as the database grows, and the dashboard's reads "
                   "fill the read connections' caches too; measured 28 MiB over rest after 30 s, 31 after 60 s)")
    p.add_argument("--sse", type=int, default=60, help="dashboard event streams open at a time (default 60)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--workdir", help="keep the server's files (database, serve.err) in this folder")
    args = p.parse_args(argv)
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    report = run_soak(args.duration, args.slowloris, args.batch, args.probe_bound, args.settle, args.workdir,
                      rss_slack_mib=args.rss_slack_mib, n_sse=args.sse)
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print("%-24s %s" % (k, v))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
