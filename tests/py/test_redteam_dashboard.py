"""Red-team regressions of the dashboard's credential and the files beside the database (issue 33,
defects 3 and 4), through the real library and the ``dcc-flow serve`` command:

- a sign-in posts the token (``POST /login``) and gets a random session of its own, which sign-out
  ends; ``GET /login?token=`` signs nobody in; the cookies carry the port in their names;
- off loopback a weak token (``" "``, ``"\\n"``, ``"a"``) is refused when the dashboard starts;
- wrong tokens from one address are answered 429 with Retry-After after a few, while another
  address still gets in;
- ``serve --token T`` leaves no token in ``<db>.lock``; the lock, the database, its -wal and -shm
  are 0600 even under umask 0; a clean exit removes the lock file; ``DCCFLOW_TOKEN`` keeps the
  token out of the process list.
"""

import http.client
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time
import urllib.parse

import pytest

from dcc_flow import Engine, InvalidInputError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "rT7-q2Lx_9vKm4Wb8NcZ1pYe"


def _request(url, method, path, body=None, headers=None, source="127.0.0.1"):
    """One request to the dashboard at url from the address source: (status, headers, body)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        res = conn.getresponse()
        return res.status, res.getheaders(), res.read()
    finally:
        conn.close()


def _cookies(headers):
    """{name: (value, attributes)} of the Set-Cookie headers."""
    out = {}
    for k, v in headers:
        if k.lower() == "set-cookie":
            first, _, attrs = v.partition(";")
            name, _, value = first.partition("=")
            out[name.strip()] = (value, attrs)
    return out


def _sign_in(url, token, source="127.0.0.1"):
    body = urllib.parse.urlencode({"token": token})
    return _request(url, "POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"}, source)


@pytest.fixture
def dashboard():
    with Engine() as engine:
        url = engine.serve(ui="127.0.0.1:0", token=TOKEN, scheduler=False)["ui_url"]
        yield url
        engine.stop_serving()


def test_each_sign_in_gets_its_own_session_and_sign_out_ends_it(dashboard):
    port = urllib.parse.urlsplit(dashboard).port
    sessions = []
    for _ in range(2):
        status, headers, _ = _sign_in(dashboard, TOKEN)
        cookies = _cookies(headers)
        assert status == 303, (status, headers)
        value, attrs = cookies["dccflow_session_%d" % port]
        assert "HttpOnly" in attrs and "SameSite=Strict" in attrs and "Path=/" in attrs, attrs
        assert TOKEN not in value and len(value) >= 40
        sessions.append((value, cookies["dccflow_csrf_%d" % port][0]))
    assert sessions[0][0] != sessions[1][0], "two sign-ins got the same session"

    def get(session):
        return _request(dashboard, "GET", "/api/runs", headers={"Cookie": "dccflow_session_%d=%s" % (port, session)})[0]

    assert [get(s) for s, _ in sessions] == [200, 200]
    session, csrf = sessions[0]
    status, _, body = _request(dashboard, "POST", "/api/logout", b"{}", {
        "Cookie": "dccflow_session_%d=%s; dccflow_csrf_%d=%s" % (port, session, port, csrf),
        "X-DCC-Flow-CSRF": csrf, "Content-Type": "application/json"})
    assert status == 200, body
    assert get(session) == 401, "a signed-out session still works"
    assert get(sessions[1][0]) == 200, "signing out one browser ended another's session"


def test_a_token_in_the_url_signs_nobody_in(dashboard):
    status, headers, body = _request(dashboard, "GET", "/login?token=" + TOKEN)
    assert status == 200 and b'method="post"' in body, (status, body[:200])
    assert not [n for n in _cookies(headers) if n.startswith("dccflow_session")], headers


def test_weak_tokens_are_refused_off_loopback():
    with Engine() as engine:
        for token in (" ", "\n", "a", "0123456789"):
            with pytest.raises(InvalidInputError, match="--token-file") as exc:
                engine.serve(ui="0.0.0.0:0", token=token, scheduler=False)
            assert "secrets.token_urlsafe" in str(exc.value)


def test_wrong_tokens_are_throttled_per_address(dashboard):
    statuses = []
    for i in range(12):
        started = time.monotonic()  # the last wrong token's: the first wait (1 s) runs from its answer
        status, headers, _ = _request(dashboard, "GET", "/api/runs", headers={"Authorization": "Bearer guess%d" % i})
        statuses.append(status)
        if status == 429:
            assert int({k.lower(): v for k, v in headers}["retry-after"]) >= 1
            break
        blocked_from = started
    assert statuses[-1] == 429 and set(statuses[:-1]) == {401}, statuses
    # The right token from the throttled address waits too (unless the 1 s wait has passed
    # meanwhile, on a loaded machine); from another address it works.
    for status in (_request(dashboard, "GET", "/api/runs", headers={"Authorization": "Bearer " + TOKEN})[0],
                   _sign_in(dashboard, TOKEN)[0]):
        assert status == 429 or time.monotonic() - blocked_from >= 1.0, status
    if not sys.platform.startswith("linux"):
        return  # 127.0.0.2 is a loopback address of Linux only
    assert _request(dashboard, "GET", "/api/runs", headers={"Authorization": "Bearer " + TOKEN}, source="127.0.0.2")[0] == 200
    assert _sign_in(dashboard, TOKEN, source="127.0.0.2")[0] == 303


def _serve(tmp_path, args, env_token=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DCCFLOW_TOKEN", None)
    if env_token:
        env["DCCFLOW_TOKEN"] = env_token
    return subprocess.Popen([sys.executable, "-m", "dcc_flow", "serve", "--ui", "127.0.0.1:0"] + args,
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.umask(0))  # the modes must not come from the umask


def _ui_url(proc, timeout=30.0):
    """The URL of serve's ``ui: URL`` line on stderr, and the stderr read until then."""
    data = b""
    deadline = time.monotonic() + timeout
    while not re.search(rb"(^|\n)ui: \S+\n", data) and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stderr], [], [], 0.5)[0]:
            data += os.read(proc.stderr.fileno(), 4096)
    err = data.decode()
    urls = [ln[4:].strip() for ln in err.splitlines() if ln.startswith("ui: ")]
    assert urls, "no ui: line from serve: %s" % err
    return urls[0], err


@pytest.mark.skipif(sys.platform == "win32", reason="Unix modes and signals")
def test_serve_leaves_no_token_in_world_readable_files(tmp_path):
    db = tmp_path / "flow.db"
    proc = _serve(tmp_path, ["--db", str(db), "--token", TOKEN])
    try:
        url, err = _ui_url(proc)
        assert "--token-file" in err, "no note that --token shows in the process list: %s" % err
        lock = (tmp_path / "flow.db.lock").read_text()
        assert TOKEN not in lock and "--token" not in lock and lock.startswith("pid %d " % proc.pid), lock
        for name in ("flow.db.lock", "flow.db", "flow.db-wal", "flow.db-shm"):
            mode = stat.S_IMODE(os.stat(str(tmp_path / name)).st_mode)
            assert mode == 0o600, "%s is %o under umask 0, want 600" % (name, mode)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not (tmp_path / "flow.db.lock").exists(), "the lock file is left after a clean exit"
        assert stat.S_IMODE(os.stat(str(db)).st_mode) == 0o600
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/cmdline")
def test_the_token_can_come_from_the_environment(tmp_path):
    proc = _serve(tmp_path, ["--db", ":memory:"], env_token=TOKEN)
    try:
        url, err = _ui_url(proc)
        assert "--token is visible" not in err
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            assert TOKEN.encode() not in f.read()
        assert _request(url, "GET", "/api/runs")[0] == 401
        assert _request(url, "GET", "/api/runs", headers={"Authorization": "Bearer " + TOKEN})[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_session_lifetimes_are_bounded_settings():
    from dcc_flow import InvalidRequestError
    with Engine() as engine:
        for kw in ({"ui_session_idle_secs": 30}, {"ui_session_max_secs": 400 * 86400}):
            with pytest.raises(InvalidRequestError, match="60 to 31536000"):
                engine.serve(ui="127.0.0.1:0", token=TOKEN, scheduler=False, **kw)
        url = engine.serve(ui="127.0.0.1:0", token=TOKEN, scheduler=False, ui_session_idle_secs=600,
                           ui_session_max_secs=3600)["ui_url"]
        status, headers, body = _sign_in(url, TOKEN)
        assert status == 303
        [(value, attrs)] = [v for n, v in _cookies(headers).items() if n.startswith("dccflow_session_")]
        assert "Max-Age=3600" in attrs, attrs
        engine.stop_serving()
