"""Hostile pool workers (issue 33): whatever a tool on a ``dcc-flow worker`` prints, logs or returns,
what the worker sends the engine stays bounded (docs/reference/limits.md "Workers"), so a chatty tool
neither grows the engine's memory nor gets its worker killed for a message over the engine's
limit. The protocol tests speak MCP to a real ``dcc-flow worker`` process; the last ones run it
in a pool of an engine."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import dcc_flow
from dcc_flow import WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
MB = 1 << 20

TOOLS = textwrap.dedent('''
    import os, sys, time
    import dcc_flow
    import dcc_flow._worker

    if os.environ.get("LOW_MESSAGE_LIMIT"):
        dcc_flow._worker.MAX_MESSAGE_BYTES = int(os.environ["LOW_MESSAGE_LIMIT"])

    def register(engine):
        @engine.tool(name="rt__chatty")
        def chatty(one_line=0, lines=0, err_line=0):
            chunk = "x" * 65536
            for _ in range(one_line // len(chunk)):
                sys.stdout.write(chunk)  # no newline: one line of one_line bytes
            sys.stdout.write("\\n")
            for i in range(lines):
                print("line %d" % i)
            if err_line:
                os.write(2, b"e" * err_line)  # below Python, no newline
            return {"pid": os.getpid()}

        @engine.tool(name="rt__loud_log")
        def loud_log(size=0):
            call = dcc_flow.current_call()
            call.log("y" * size)
            call.log("with fields", blob="z" * 10000)
            call.progress(1, 2, message="p" * size)
            return {"pid": os.getpid()}

        @engine.tool(name="rt__background")
        def background(size=0):
            def flood():
                while not os.path.exists(os.environ["FLOOD_GO"]):  # the call has been answered
                    time.sleep(0.01)
                chunk = b"b" * 65536
                for _ in range(size // len(chunk)):
                    os.write(1, chunk)  # between calls, no newline
                open(os.environ["FLOOD_DONE"], "w").close()
            import threading
            threading.Thread(target=flood, daemon=True).start()
            return {"pid": os.getpid()}

        @engine.tool(name="rt__big")
        def big(n=0):
            return {"pid": os.getpid(), "data": "x" * n}
''')


def _maxrss_kib():
    """This process's peak resident set in KiB (Linux), 0 elsewhere."""
    if not sys.platform.startswith("linux"):
        return 0
    import resource  # Unix only

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class WorkerProc:
    """A ``dcc-flow worker`` child spoken to over its standard streams."""

    def __init__(self, tmp_path, env=None):
        path = tmp_path / "rt_tools.py"
        path.write_text(TOOLS)
        out = tmp_path / "out"
        out.mkdir()
        full_env = dict(os.environ, PYTHONPATH=PYTHON_DIR, DCC_FLOW_WORKER_OUTPUT_DIR=str(out), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=full_env)
        self.stderr_bytes = 0
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self.next_id = 0
        init = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "0"}})
        assert init[-1]["result"]["serverInfo"]["name"]

    def _read_stderr(self):
        while True:
            data = os.read(self.proc.stderr.fileno(), 1 << 16)
            if not data:
                return
            self.stderr_bytes += len(data)

    def request(self, method, params):
        """Send a request; return every message up to its answer, as parsed JSON (the raw sizes in
        self.sizes)."""
        self.next_id += 1
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                           "params": params}) + "\n").encode())
        self.proc.stdin.flush()
        msgs, self.sizes = [], []
        while True:
            line = self.proc.stdout.readline()
            assert line, "the worker exited"
            self.sizes.append(len(line))
            msg = json.loads(line)
            msgs.append(msg)
            if msg.get("id") == self.next_id:
                return msgs

    def call(self, tool, args, token=None):
        params = {"name": tool, "arguments": args}
        if token:
            params["_meta"] = {"progressToken": token}
        return self.request("tools/call", params)

    def hwm(self):
        """The worker's peak resident set (Linux), in bytes; 0 elsewhere."""
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self._reader.join(timeout=30)
        self.proc.stderr.close()


def test_a_call_that_prints_megabytes_answers_with_bounded_output(tmp_path):
    worker = WorkerProc(tmp_path)
    try:
        msgs = worker.call("rt__chatty", {"one_line": 20 * MB, "lines": 30000, "err_line": 2 * MB})
        result = msgs[-1]["result"]
        assert not result.get("isError"), result
        # The answer carries at most 1,000 lines a stream, about 256 KiB, each line's first
        # 4,097 characters: not the 22 MB printed.
        assert worker.sizes[-1] < 1 * MB, worker.sizes[-1]
        meta = result["_meta"]
        out = [e for e in meta["dcc-flow/output"] if e["stream"] == "stdout"]
        err = [e for e in meta["dcc-flow/output"] if e["stream"] == "stderr"]
        assert out[0]["text"] == "x" * 4097
        assert out[1]["text"] == "line 0"
        assert len(out) <= 1000 and sum(len(e["text"]) for e in out) <= 256 * 1024 + 4097 * 4
        assert err == [{"stream": "stderr", "text": "e" * 4097}]
        assert meta["dcc-flow/output-dropped"] == 30001 - len(out)
        # Reading its output did not cost the worker the 20 MB line.
        if worker.hwm():
            before = worker.hwm()
            worker.call("rt__chatty", {"one_line": 40 * MB})
            assert worker.hwm() - before < 16 * MB, (before, worker.hwm())
    finally:
        worker.close()


def test_a_100_mb_log_line_is_cut_before_it_is_sent(tmp_path):
    worker = WorkerProc(tmp_path)
    try:
        msgs = worker.call("rt__loud_log", {"size": 100 * MB}, token="t1")
        assert not msgs[-1]["result"].get("isError"), msgs[-1]
        assert max(worker.sizes) < 64 * 1024, worker.sizes
        logs = [m["params"]["data"] for m in msgs if m.get("method") == "notifications/message"]
        assert logs[0]["message"] == "y" * 4097
        assert logs[1]["message"] == "with fields [fields left out: over 4 KiB]" and "fields" not in logs[1]
        progress = [m["params"] for m in msgs if m.get("method") == "notifications/progress"]
        assert progress[0]["message"] == "p" * 512
    finally:
        worker.close()


def test_a_result_over_the_message_limit_is_refused_by_the_worker_which_stays(tmp_path):
    worker = WorkerProc(tmp_path, env={"LOW_MESSAGE_LIMIT": str(MB)})
    try:
        ok = worker.call("rt__big", {"n": 10})[-1]["result"]["structuredContent"]
        answer = worker.call("rt__big", {"n": MB})[-1]["result"]
        assert answer["isError"] and answer["structuredContent"]["kind"] == "too_large"
        message = answer["structuredContent"]["message"]
        assert "'rt__big'" in message and "1048576" in message and "file path" in message
        assert worker.sizes[-1] < 4096
        again = worker.call("rt__big", {"n": 10})[-1]["result"]["structuredContent"]
        assert again["pid"] == ok["pid"]
    finally:
        worker.close()


def test_output_written_between_calls_is_passed_on_in_bounded_pieces(tmp_path):
    done = tmp_path / "flood.done"
    go = tmp_path / "flood.go"
    worker = WorkerProc(tmp_path, env={"FLOOD_DONE": str(done), "FLOOD_GO": str(go)})
    try:
        worker.call("rt__chatty", {})
        before = worker.hwm()
        worker.call("rt__background", {"size": 40 * MB})
        go.touch()
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "the flood did not end"
            time.sleep(0.05)
        worker.call("rt__chatty", {})  # begin() copies what is left
        # The worker's pump copied it to its real stderr (some may be lost when the file is
        # emptied as a write lands: it is a log, not the protocol) without holding it.
        while worker.stderr_bytes == 0:
            assert time.monotonic() < deadline, "nothing reached the worker's stderr"
            time.sleep(0.05)
        if before:
            assert worker.hwm() - before < 16 * MB, (before, worker.hwm())
    finally:
        worker.close()


def _remote(tmp_path, env=None):
    path = tmp_path / "rt_tools.py"
    path.write_text(TOOLS)
    return {"command": [sys.executable, "-m", "dcc_flow", "worker", "--tools", str(path)], "workers": 1,
            "env": dict({"PYTHONPATH": PYTHON_DIR}, **(env or {}))}


def test_a_pool_tool_that_prints_megabytes_keeps_a_bounded_step_record(tmp_path):
    config = {"remotes": {"maya": _remote(tmp_path)}}
    with dcc_flow.Engine(db=str(tmp_path / "flow.db"), config=config) as engine:
        engine.run({"steps": [{"id": "warm", "dcc": "maya", "tool": "rt__chatty"}]})
        before = _maxrss_kib()
        result = engine.run({"steps": [
            {"id": "talk", "dcc": "maya", "tool": "rt__chatty",
             "args": {"one_line": 30 * MB, "lines": 50000, "err_line": MB}},
            {"id": "log", "dcc": "maya", "tool": "rt__loud_log", "args": {"size": 30 * MB}},
        ]})
        grew_kb = _maxrss_kib() - before
        assert result.status is WorkflowStatus.COMPLETED, result.error
        talk = result.step("talk")
        assert len(talk.logs) <= 1000 and sum(len(line["text"].encode()) for line in talk.logs) <= 256 * 1024
        assert talk.logs_dropped >= 49000
        assert all(len(line["text"].encode()) <= 4096 for line in talk.logs)
        log = result.step("log")
        assert log.logs[0]["stream"] == "log" and len(log.logs[0]["text"].encode()) <= 4096
        assert grew_kb < 40 * 1024, grew_kb  # the engine never held the 30 MB line or log line


def test_a_pool_tool_result_over_the_limit_fails_too_large_and_keeps_its_worker(tmp_path):
    config = {"remotes": {"maya": _remote(tmp_path, env={"LOW_MESSAGE_LIMIT": str(MB)})}}
    with dcc_flow.Engine(db=str(tmp_path / "flow.db"), config=config) as engine:
        result = engine.run({"steps": [
            {"id": "small", "dcc": "maya", "tool": "rt__big", "args": {"n": 10}},
            {"id": "big", "dcc": "maya", "tool": "rt__big", "args": {"n": MB}, "depends_on": ["small"]},
        ]})
        assert result.status is WorkflowStatus.FAILED
        big = result.step("big")
        assert big.error["kind"] == "too_large" and big.attempt == 1, big.error
        assert big.worker == result.step("small").worker  # answered, not killed
        assert engine.pools()[0]["lost"] == 0
