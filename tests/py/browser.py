"""A small W3C WebDriver client for the browser tests (issue #22), standard library only.

It starts Debian's ``chromedriver`` on a free loopback port (``--port=0``: the driver picks the port
and prints it), opens one headless Chromium session (``--headless=new``; ``--no-sandbox`` when
running as root, where Chromium's sandbox cannot start), and speaks the W3C WebDriver protocol
over ``urllib`` + ``json``: navigate, find elements by CSS, click, type, read text and attributes,
run scripts, wait for a DOM condition, take PNG screenshots, quit.

Waiting is event-driven: ``wait_js`` runs one asynchronous script in the page that re-checks the
condition on every DOM mutation (a ``MutationObserver`` on the whole document, attributes and
text included) and answers as soon as it holds; a slow timer re-checks conditions that no
mutation signals (a ``window`` variable), and the wait fails after ``timeout`` seconds with the
condition's text. Nothing sleeps and hopes.

Where the binaries come from: ``$DCC_FLOW_CHROMEDRIVER`` / ``$DCC_FLOW_CHROMIUM``, else
``chromedriver`` and ``chromium`` (or ``chromium-browser``, ``google-chrome``) on ``PATH``.
``.ci/run`` installs Debian's ``chromium`` and ``chromium-driver``. ``require_chromium()`` fails
the test under ``CI=true`` when they are missing and skips it, naming the packages, elsewhere.
"""

import base64
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from typing import Any, Dict, List, Optional, Tuple

# The W3C key of an element reference in a WebDriver answer.
ELEMENT_KEY = "element-6066-11e4-a52e-4f735466cecf"
# WebDriver key codes (W3C "Keyboard actions").
KEY_ENTER = "\ue007"
KEY_TAB = "\ue004"

DEFAULT_TIMEOUT = 10.0
CHROMIUM_PACKAGES = "chromium chromium-driver"


class WebDriverError(Exception):
    """An error answer of the driver: ``error`` is the W3C error code ("no such element", ...)."""

    def __init__(self, error: str, message: str, status: int = 0):
        super().__init__("%s: %s" % (error, message))
        self.error = error
        self.message = message
        self.status = status


class WaitTimeout(AssertionError):
    """``wait_js`` / ``wait_until`` ran out of time; the message names the condition."""


def find_binaries() -> Tuple[Optional[str], Optional[str]]:
    """(chromedriver path, chromium path), each None when not found."""
    driver = os.environ.get("DCC_FLOW_CHROMEDRIVER") or shutil.which("chromedriver")
    browser = os.environ.get("DCC_FLOW_CHROMIUM")
    if not browser:
        for name in ("chromium", "chromium-browser", "google-chrome"):
            browser = shutil.which(name)
            if browser:
                break
    return driver, browser


def require_chromium() -> Tuple[str, str]:
    """The (chromedriver, chromium) paths; without them the calling test fails under CI=true (CI
    installs them: a missing browser there is a broken CI, not a reason to skip) and is skipped,
    naming the packages to install, elsewhere."""
    import pytest

    driver, browser = find_binaries()
    if driver and browser:
        return driver, browser
    missing = " and ".join(n for n, p in (("chromedriver", driver), ("chromium", browser)) if not p)
    msg = ("BROWSER TESTS NOT RUN: %s not found. Install Debian's %s (apt-get install -y %s; .ci/run does "
           "it) or set DCC_FLOW_CHROMEDRIVER / DCC_FLOW_CHROMIUM" % (missing, CHROMIUM_PACKAGES, CHROMIUM_PACKAGES))
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")


class Element:
    """A reference to one element of the current page."""

    def __init__(self, browser: "Browser", ref: str, selector: str = ""):
        self._b = browser
        self.ref = ref
        self.selector = selector

    def __repr__(self) -> str:
        return "<Element %s %s>" % (self.selector, self.ref[:8])

    def _path(self, tail: str) -> str:
        return "/element/%s%s" % (self.ref, tail)

    def click(self) -> None:
        self._b._cmd("POST", self._path("/click"), {})

    def clear(self) -> None:
        self._b._cmd("POST", self._path("/clear"), {})

    def send_keys(self, text: str) -> None:
        self._b._cmd("POST", self._path("/value"), {"text": text})

    @property
    def text(self) -> str:
        """The rendered text (as a user sees it: hidden parts left out)."""
        return str(self._b._cmd("GET", self._path("/text")))

    def attribute(self, name: str) -> Optional[str]:
        value = self._b._cmd("GET", self._path("/attribute/%s" % name))
        return None if value is None else str(value)

    def prop(self, name: str) -> Any:
        return self._b._cmd("GET", self._path("/property/%s" % name))

    @property
    def tag_name(self) -> str:
        return str(self._b._cmd("GET", self._path("/name")))

    def is_displayed(self) -> bool:
        return bool(self._b.execute(
            "const r = arguments[0].getBoundingClientRect();"
            "return !!(r.width || r.height) && getComputedStyle(arguments[0]).visibility !== 'hidden';", self))

    def find(self, css: str) -> "Element":
        value = self._b._cmd("POST", self._path("/element"), {"using": "css selector", "value": css})
        return Element(self._b, value[ELEMENT_KEY], css)

    def find_all(self, css: str) -> List["Element"]:
        values = self._b._cmd("POST", self._path("/elements"), {"using": "css selector", "value": css})
        return [Element(self._b, v[ELEMENT_KEY], css) for v in values]


def tid(name: str, **attrs: str) -> str:
    """The CSS selector of ``[data-testid=name]`` with ``data-*`` attributes: ``tid("run-row",
    run_id="r1")`` is ``[data-testid="run-row"][data-run-id="r1"]``."""
    sel = '[data-testid="%s"]' % name
    for k, v in attrs.items():
        sel += '[data-%s="%s"]' % (k.replace("_", "-"), v)
    return sel


class _PortTaken(RuntimeError):
    """chromedriver exited because the port it picked was taken before it bound it."""


class Browser:
    """One chromedriver process and one headless Chromium session; ``quit()`` ends both."""

    def __init__(self, width: int = 1366, height: int = 768, driver: Optional[str] = None,
                 binary: Optional[str] = None, start_timeout: float = 30.0):
        found_driver, found_binary = find_binaries()
        driver = driver or found_driver
        binary = binary or found_binary
        if not driver:
            raise FileNotFoundError("chromedriver not found (apt-get install -y %s)" % CHROMIUM_PACKAGES)
        fd, self._log_path = tempfile.mkstemp(prefix="chromedriver-", suffix=".log")
        os.close(fd)
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._session: Optional[str] = None
        self.base = ""
        try:
            port = self._start_driver(driver, start_timeout)
            self.base = "http://127.0.0.1:%d" % port
            args = ["--headless=new", "--window-size=%d,%d" % (width, height), "--force-device-scale-factor=1",
                    "--hide-scrollbars", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                    "--disable-extensions", "--lang=en-US"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                args.append("--no-sandbox")  # Chromium's sandbox refuses to start as root
            opts: Dict[str, Any] = {"args": args}
            if binary:
                opts["binary"] = binary
            caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": opts,
                                                     "pageLoadStrategy": "normal"}}}
            value = self._request("POST", "/session", caps, timeout=start_timeout)
            self._session = value["sessionId"]
            self.set_viewport(width, height)
        except BaseException:
            self.quit()
            raise

    # -- process and protocol --------------------------------------------------------------------

    def _start_driver(self, driver: str, timeout: float) -> int:
        """Start chromedriver on a port of its choosing; returns the port. With ``--port=0``,
        chromedriver 156 picks a port, then binds it, and exits with "IPv4 port not available"
        when another process took that port meanwhile (seen under xdist, with every worker
        opening sockets): that start is made again, up to 5 times, each on a port picked anew."""
        for tries in range(5):
            self._proc = subprocess.Popen(
                [driver, "--port=0", "--log-path=%s" % self._log_path],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                return self._read_port(timeout)
            except _PortTaken:
                self._proc.wait()
                if tries == 4:
                    raise
        raise AssertionError("unreachable")

    def _read_port(self, timeout: float) -> int:
        """The port chromedriver printed ("... started successfully on port N.")."""
        assert self._proc is not None and self._proc.stdout is not None
        found: Dict[str, Any] = {}
        lines: List[str] = []

        def read() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            for raw in self._proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip()
                lines.append(line)
                m = re.search(r"started successfully on port (\d+)", line)
                if m:
                    found["port"] = int(m.group(1))
                    break
            # keep draining so the driver never blocks on a full pipe
            for _ in self._proc.stdout:
                pass

        t = threading.Thread(target=read, name="chromedriver-stdout", daemon=True)
        t.start()
        deadline = time.monotonic() + timeout
        while "port" not in found:
            if self._proc.poll() is not None and not t.is_alive():
                error = _PortTaken if any("port not available" in line for line in lines) else RuntimeError
                raise error("chromedriver exited (%s): %s" % (self._proc.returncode, "\n".join(lines)))
            if time.monotonic() > deadline:
                raise RuntimeError("chromedriver printed no port within %.0f s: %s" % (timeout, "\n".join(lines)))
            t.join(0.05)
        return int(found["port"])

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                 timeout: float = 60.0) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                payload = json.loads(resp.read().decode("utf-8") or "{}")
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                value = json.loads(text)["value"]
                raise WebDriverError(str(value.get("error")), str(value.get("message", "")).split("\n")[0],
                                     e.code) from None
            except (ValueError, KeyError, TypeError, AttributeError):
                raise WebDriverError("http %d" % e.code, text[:500], e.code) from None
        return payload.get("value")

    def _cmd(self, method: str, tail: str, body: Optional[Dict[str, Any]] = None, timeout: float = 60.0) -> Any:
        if self._session is None:
            raise WebDriverError("invalid session id", "the browser has quit")
        return self._request(method, "/session/%s%s" % (self._session, tail), body, timeout=timeout)

    def quit(self) -> None:
        """End the session (Chromium exits) and the driver. Safe to call twice, also after a failed
        start."""
        if self._session is not None:
            try:
                self._request("DELETE", "/session/%s" % self._session, timeout=15)
            except Exception:
                pass
            self._session = None
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        try:
            os.unlink(self._log_path)
        except OSError:
            pass

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.quit()

    # -- pages -----------------------------------------------------------------------------------

    def get(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._cmd("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self._cmd("GET", "/url"))

    @property
    def title(self) -> str:
        return str(self._cmd("GET", "/title"))

    @property
    def page_source(self) -> str:
        return str(self._cmd("GET", "/source"))

    def refresh(self) -> None:
        self._cmd("POST", "/refresh", {})

    def cookies(self) -> List[Dict[str, Any]]:
        """The cookies of the current page's origin, HttpOnly ones included: dicts with ``name``,
        ``value``, ``httpOnly``, ``sameSite``, ``path``..."""
        return list(self._cmd("GET", "/cookie") or [])

    def set_viewport(self, width: int, height: int) -> None:
        """Make the page's viewport exactly ``width`` x ``height`` CSS pixels (and screenshots
        that many pixels: the device scale factor is 1)."""
        self.cdp("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def cdp(self, cmd: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """A Chrome DevTools Protocol command through chromedriver."""
        return self._cmd("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params or {}})

    # -- elements --------------------------------------------------------------------------------

    @staticmethod
    def _wrap_args(args: Tuple[Any, ...]) -> List[Any]:
        return [{ELEMENT_KEY: a.ref} if isinstance(a, Element) else a for a in args]

    def _unwrap(self, value: Any) -> Any:
        if isinstance(value, dict):
            if ELEMENT_KEY in value and len(value) == 1:
                return Element(self, value[ELEMENT_KEY])
            return {k: self._unwrap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unwrap(v) for v in value]
        return value

    def find(self, css: str) -> Element:
        """The first element matching ``css`` now (``WebDriverError`` "no such element" if none)."""
        value = self._cmd("POST", "/element", {"using": "css selector", "value": css})
        return Element(self, value[ELEMENT_KEY], css)

    def find_all(self, css: str) -> List[Element]:
        values = self._cmd("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self, v[ELEMENT_KEY], css) for v in values]

    # Reading by selector: one script finds the element and reads it, so a live page that
    # replaces the element between a find and a read cannot make the read fail (stale reference).

    def attr(self, css: str, name: str) -> Optional[str]:
        """Attribute ``name`` of the first element matching ``css`` now (None when it has none;
        ``LookupError`` when nothing matches)."""
        found, value = self.execute("const e = document.querySelector(arguments[0]);"
                                    "return e ? [true, e.getAttribute(arguments[1])] : [false, null];", css, name)
        if not found:
            raise LookupError("no element matches %s" % css)
        return None if value is None else str(value)

    def attrs(self, css: str, name: str) -> List[Optional[str]]:
        """Attribute ``name`` of every element matching ``css`` now, in document order."""
        return list(self.execute("return Array.from(document.querySelectorAll(arguments[0]),"
                                 " e => e.getAttribute(arguments[1]));", css, name))

    def text_of(self, css: str) -> str:
        """The rendered text (``innerText``) of the first element matching ``css`` now
        (``LookupError`` when nothing matches)."""
        value = self.execute("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)
        if value is None:
            raise LookupError("no element matches %s" % css)
        return str(value)

    def execute(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body; ``arguments`` holds ``args``) and return its value."""
        return self._unwrap(self._cmd("POST", "/execute/sync", {"script": script, "args": self._wrap_args(args)}))

    def execute_async(self, script: str, *args: Any, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Run ``script``, which answers by calling ``arguments[arguments.length - 1](value)``."""
        self._cmd("POST", "/timeouts", {"script": int(timeout * 1000) + 2000})
        return self._unwrap(self._cmd("POST", "/execute/async", {"script": script, "args": self._wrap_args(args)},
                                      timeout=timeout + 30))

    # -- waiting ---------------------------------------------------------------------------------

    _WAIT_JS = """
const args = arguments[0], timeoutMs = arguments[1], done = arguments[arguments.length - 1];
const check = () => { %s };
let finished = false, observer = null, timer = null, poll = null;
const finish = (ok, value) => {
  if (finished) return;
  finished = true;
  if (observer) observer.disconnect();
  clearTimeout(timer); clearInterval(poll);
  done({ok: ok, value: value});
};
const test = () => {
  let v;
  try { v = check(); } catch (e) { return; }
  if (v) finish(true, v);
};
test();
if (!finished) {
  observer = new MutationObserver(test);
  observer.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  poll = setInterval(test, 200);  /* conditions no mutation signals: window variables, focus */
  timer = setTimeout(() => finish(false, null), timeoutMs);
}
"""

    def wait_js(self, condition: str, *args: Any, timeout: float = DEFAULT_TIMEOUT, what: str = "") -> Any:
        """Wait until the JavaScript function body ``condition`` returns a truthy value (``args``
        is ``arguments[0]``'s list in it) and return that value. The check reruns on every DOM
        mutation; a navigation that replaces the document restarts the wait."""
        deadline = time.monotonic() + timeout
        body = condition if "return" in condition else "return (%s);" % condition
        script = self._WAIT_JS % body
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                out = self.execute_async(script, self._wrap_args(args), int(left * 1000), timeout=left)
            except WebDriverError as e:
                # The document was replaced (navigation, reload) while the script waited: wait again.
                if "unload" in e.message or "navigat" in e.message or e.error == "script timeout":
                    continue
                raise
            if out and out.get("ok"):
                return out.get("value")
            break
        raise WaitTimeout("waited %.1f s for %s; page %s" % (timeout, what or condition, self.url))

    def wait_css(self, css: str, timeout: float = DEFAULT_TIMEOUT, visible: bool = True) -> Element:
        """Wait until an element matches ``css`` (and is displayed, by default), and return it."""
        cond = ("const el = document.querySelector(args[0]);"
                "if (!el) return null;"
                "if (args[1]) { const r = el.getBoundingClientRect();"
                " if (!(r.width || r.height) || getComputedStyle(el).visibility === 'hidden') return null; }"
                "return el;")
        el = self.wait_js(cond, css, visible, timeout=timeout, what="%s%s" % (css, " (displayed)" if visible else ""))
        assert isinstance(el, Element)
        el.selector = css
        return el

    # Errors of a click on an element the page was re-rendering at that moment: worth a retry.
    _RETRY_CLICK = ("stale element reference", "element not interactable", "element click intercepted")

    def click(self, css: str, timeout: float = DEFAULT_TIMEOUT, visible: bool = True) -> Element:
        """Wait until ``css`` matches a displayed element (any, with ``visible=False``: the
        ``<option>`` of a closed ``<select>`` has no box) and click it. A live page re-renders
        under the test: a click that lands while the element is replaced or covered (stale,
        not interactable, intercepted) is tried again on the element matching ``css`` then,
        until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            el = self.wait_css(css, timeout=max(0.1, deadline - time.monotonic()), visible=visible)
            try:
                el.click()
                return el
            except WebDriverError as e:
                if e.error not in self._RETRY_CLICK or time.monotonic() > deadline:
                    raise

    def wait_gone(self, css: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.wait_js("return !document.querySelector(args[0]);", css, timeout=timeout, what="no %s" % css)

    def wait_text(self, css: str, text: str, timeout: float = DEFAULT_TIMEOUT) -> Element:
        """Wait until the first element matching ``css`` has exactly ``text`` (trimmed)."""
        cond = ("const el = document.querySelector(args[0]);"
                "return el && el.textContent.trim() === args[1] ? el : null;")
        try:
            el = self.wait_js(cond, css, text, timeout=timeout, what="%s with text %r" % (css, text))
        except WaitTimeout as e:
            raise WaitTimeout("%s (the text is %r)" % (e, self._text_now(css))) from None
        assert isinstance(el, Element)
        return el

    def wait_attr(self, css: str, name: str, predicate_js: str, timeout: float = DEFAULT_TIMEOUT) -> str:
        """Wait until attribute ``name`` of the first element matching ``css`` satisfies the
        JavaScript expression ``predicate_js`` over ``v`` (the attribute's string), e.g.
        ``"Number(v) >= 2"``; return the attribute."""
        cond = ("const el = document.querySelector(args[0]); if (!el) return null;"
                "const v = el.getAttribute(args[1]); if (v === null) return null;"
                "return (%s) ? v : null;" % predicate_js)
        return str(self.wait_js(cond, css, name, timeout=timeout, what="%s[%s] with %s" % (css, name, predicate_js)))

    def _text_now(self, css: str) -> Optional[str]:
        try:
            return self.execute("const el = document.querySelector(arguments[0]);"
                                "return el ? el.textContent.trim() : null;", css)
        except WebDriverError:
            return None

    @staticmethod
    def wait_until(fn: Any, timeout: float = DEFAULT_TIMEOUT, what: str = "", interval: float = 0.05) -> Any:
        """Poll the Python callable ``fn`` until it returns a truthy value (for state outside the
        page, such as the engine's)."""
        deadline = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            if time.monotonic() > deadline:
                raise WaitTimeout("waited %.1f s for %s" % (timeout, what or fn))
            time.sleep(interval)

    # -- screenshots -----------------------------------------------------------------------------

    def screenshot(self, path: str, full_page: bool = False) -> str:
        """Save a PNG of the viewport (or, with ``full_page``, of the whole page) to ``path``."""
        if full_page:
            metrics = self.cdp("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            shot = self.cdp("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
            data = base64.b64decode(shot["data"])
        else:
            data = base64.b64decode(self._cmd("GET", "/screenshot"))
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path


# -- PNG reading (to check screenshots) ------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_image_data(path: str) -> Tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, inflated image data) of an 8-bit RGB or RGBA PNG, after
    checking the signature, every chunk's CRC and that the data has the size the header says."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != PNG_SIGNATURE:
        raise ValueError("%s: not a PNG (signature %r)" % (path, data[:8]))
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        ctype, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise ValueError("%s: bad CRC in chunk %r" % (path, ctype))
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat += body
        elif ctype == b"IEND":
            break
        pos += 12 + length
    if ihdr is None:
        raise ValueError("%s: no IHDR chunk" % path)
    width, height, depth, color, _, _, interlace = ihdr
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError("%s: only 8-bit non-interlaced RGB/RGBA is read here (depth %d, color type %d)"
                         % (path, depth, color))
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    if len(raw) != height * (width * bpp + 1):
        raise ValueError("%s: image data is %d bytes, %dx%d needs %d" % (path, len(raw), width, height,
                                                                          height * (width * bpp + 1)))
    return width, height, bpp, raw


def check_png(path: str) -> Tuple[int, int]:
    """(width, height) of a well-formed 8-bit RGB/RGBA PNG (signature, CRCs, data size checked);
    ValueError otherwise. Fast: the pixels are not unfiltered."""
    width, height, _, _ = _png_image_data(path)
    return width, height


def read_png(path: str) -> Tuple[int, int, List[bytes]]:
    """(width, height, rows) of an 8-bit RGB or RGBA PNG, each row the RGB bytes of its pixels.
    Raises ValueError when the file is not a well-formed PNG (bad signature, chunk CRC, or image
    data of the wrong length). Pure Python: about a second per megapixel."""
    width, height, bpp, raw = _png_image_data(path)
    stride = width * bpp
    rows: List[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            elif ftype != 0:
                raise ValueError("%s: bad filter type %d in row %d" % (path, ftype, y))
        rows.append(bytes(line))
        prev = line
    return width, height, rows if bpp == 3 else [_rgba_to_rgb(r) for r in rows]


def _rgba_to_rgb(row: bytes) -> bytes:
    return bytes(b for i, b in enumerate(row) if i % 4 != 3)


def png_size(path: str) -> Tuple[int, int]:
    """(width, height) from a PNG's header, after checking the signature."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise ValueError("%s: not a PNG" % path)
    w, h = struct.unpack(">II", head[16:24])
    return int(w), int(h)
