"""The WebDriver client of the browser tests (tests/py/browser.py), proven on its own against a
tiny page served by http.server in this process: navigation, finding, clicking, typing, text and
attributes, scripts, event-driven waits, screenshots (a valid PNG of the asked size, showing the
page), and that quit ends the browser and the driver."""

import http.server
import os
import threading

import pytest

from browser import (
    Browser,
    WaitTimeout,
    WebDriverError,
    check_png,
    find_binaries,
    png_size,
    read_png,
    require_chromium,
    tid,
)

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>client test</title>
<style>html, body { margin: 0; background: #ff0000; } #tall { height: 3000px; }</style></head>
<body>
<h1 data-testid="title">Hello <b>there</b></h1>
<button data-testid="inc" data-count="0" onclick="
  const n = Number(this.dataset.count) + 1; this.dataset.count = String(n);
  document.querySelector('[data-testid=out]').textContent = 'clicked ' + n;">inc</button>
<p data-testid="out">not clicked</p>
<input data-testid="name" value="">
<p data-testid="echo"></p>
<button data-testid="later" onclick="setTimeout(() => {
  const p = document.createElement('p'); p.dataset.testid = 'late'; p.textContent = 'arrived';
  document.body.appendChild(p); }, 300)">later</button>
<ul><li class="item" data-n="1">one</li><li class="item" data-n="2">two</li></ul>
<a data-testid="next" href="/next.html">next</a>
<button data-testid="swap" onclick="window.__swapClicks = (window.__swapClicks || 0) + 1">swap</button>
<div id="tall"></div>
<script>
  document.querySelector('[data-testid=name]').addEventListener('change', (e) => {
    document.querySelector('[data-testid=echo]').textContent = 'name=' + e.target.value;
  });
</script>
</body></html>
"""

NEXT = b"""<!doctype html><html><head><title>next page</title></head>
<body><p data-testid="where">second page</p></body></html>"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = NEXT if self.path.startswith("/next") else PAGE
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Set-Cookie", "probe=p1; Path=/; HttpOnly; SameSite=Strict")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


# One pytest-xdist worker runs this file (make test-py): one start of its headless Chromium, not one
# per worker, and no two of them loading the machine at once.
pytestmark = pytest.mark.xdist_group("test_browser_client")


@pytest.fixture(scope="module")
def site():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield "http://127.0.0.1:%d/" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    b = Browser(width=800, height=600)
    try:
        yield b
    finally:
        b.quit()


@pytest.fixture()
def page(browser, site):
    browser.set_viewport(800, 600)
    browser.get(site)
    return browser


def test_navigation_title_url_and_text(page, site):
    assert page.title == "client test"
    assert page.url == site
    assert page.find(tid("title")).text == "Hello there"
    page.find(tid("next")).click()
    assert page.wait_text(tid("where"), "second page").text == "second page"
    assert page.url == site + "next.html"


def test_cookies_include_http_only_ones(page):
    [probe] = [c for c in page.cookies() if c["name"] == "probe"]
    assert probe["value"] == "p1" and probe["httpOnly"] is True and probe["sameSite"] == "Strict"
    assert page.execute("return document.cookie;") == ""  # the page's scripts cannot read it


def test_click_changes_the_page_and_attributes_are_read(page):
    button = page.find(tid("inc"))
    assert button.attribute("data-count") == "0"
    button.click()
    button.click()
    assert page.find(tid("out")).text == "clicked 2"
    assert button.attribute("data-count") == "2"
    assert page.wait_attr(tid("inc"), "data-count", "Number(v) >= 2") == "2"
    assert button.attribute("no-such-attribute") is None
    assert button.tag_name == "button"


def test_click_by_selector_survives_a_re_render(page):
    old = page.find(tid("swap"))
    # the page replaces the button (as a live view re-renders a row): the old reference is stale
    page.execute("const b = arguments[0]; b.replaceWith(b.cloneNode(true));", old)
    with pytest.raises(WebDriverError) as err:
        old.click()
    assert err.value.error == "stale element reference"
    page.click(tid("swap"))
    assert page.execute("return window.__swapClicks;") == 1
    with pytest.raises(WaitTimeout):
        page.click(tid("no-such-button"), timeout=0.3)


def test_send_keys_and_change_event(page):
    field = page.find(tid("name"))
    field.send_keys("Ada")
    assert field.prop("value") == "Ada"
    field.send_keys("\ue004")  # Tab: blur fires change
    page.wait_text(tid("echo"), "name=Ada")
    field.clear()
    assert field.prop("value") == ""


def test_reading_by_selector(page):
    assert page.text_of(tid("title")) == "Hello there"
    assert page.attr(tid("inc"), "data-count") == "0"
    assert page.attr(tid("inc"), "no-such") is None
    assert page.attrs("li.item", "data-n") == ["1", "2"]
    assert page.attrs(".nothing", "data-n") == []
    with pytest.raises(LookupError, match="missing"):
        page.attr(tid("missing"), "x")
    with pytest.raises(LookupError, match="missing"):
        page.text_of(tid("missing"))


def test_find_all_and_find_within(page):
    items = page.find_all("li.item")
    assert [i.text for i in items] == ["one", "two"]
    assert [i.attribute("data-n") for i in items] == ["1", "2"]
    ul = page.find("ul")
    assert ul.find("li[data-n='2']").text == "two"
    assert len(ul.find_all("li")) == 2
    assert page.find_all(".nothing") == []
    with pytest.raises(WebDriverError) as err:
        page.find(tid("missing"))
    assert err.value.error == "no such element"


def test_execute_returns_values_and_elements(page):
    assert page.execute("return arguments[0] + arguments[1];", 2, 3) == 5
    assert page.execute("return {a: [1, 'x', null]};") == {"a": [1, "x", None]}
    el = page.execute("return document.querySelector('h1');")
    assert el.text == "Hello there"
    assert page.execute("return arguments[0].tagName;", el) == "H1"
    assert page.execute("return typeof window.__notThere;") == "undefined"
    with pytest.raises(WebDriverError) as err:
        page.execute("throw new Error('boom');")
    assert "boom" in str(err.value)


def test_wait_is_answered_by_a_dom_change_and_times_out_naming_the_condition(page):
    page.find(tid("later")).click()
    el = page.wait_css(tid("late"), timeout=5)
    assert el.text == "arrived"
    # a condition no DOM mutation signals: the slow re-check finds it
    page.execute("setTimeout(() => { window.__flag = 7; }, 100);")
    assert page.wait_js("return window.__flag;", timeout=5) == 7
    with pytest.raises(WaitTimeout, match="never-there"):
        page.wait_css(tid("never-there"), timeout=0.5)
    with pytest.raises(WaitTimeout, match="'Hello there'"):
        page.wait_text(tid("title"), "Goodbye", timeout=0.3)


def test_wait_follows_a_navigation(page, site):
    # the page is replaced while the wait runs: the wait starts again on the new document
    page.execute("setTimeout(() => { location.href = '/next.html'; }, 200);")
    assert page.wait_text(tid("where"), "second page", timeout=10).text == "second page"


def test_wait_until_polls_python_state():
    box = []
    threading.Timer(0.1, box.append, args=(1,)).start()
    assert Browser.wait_until(lambda: box, timeout=5) == [1]
    with pytest.raises(WaitTimeout, match="never"):
        Browser.wait_until(lambda: False, timeout=0.2, what="never")


def test_screenshot_is_a_png_of_the_asked_size_showing_the_page(page, tmp_path):
    for w, h in ((800, 600), (1366, 768)):
        page.set_viewport(w, h)
        path = page.screenshot(str(tmp_path / ("shot-%dx%d.png" % (w, h))))
        assert png_size(path) == (w, h)
        assert check_png(path) == (w, h)
        width, height, rows = read_png(path)
        assert (width, height) == (w, h)
        # the page's red background, at the bottom-right corner (outside the text)
        assert rows[h - 1][(w - 1) * 3:(w - 1) * 3 + 3] == b"\xff\x00\x00"
    page.set_viewport(800, 600)
    full = page.screenshot(str(tmp_path / "full.png"), full_page=True)
    width, height = png_size(full)
    assert width == 800 and height >= 3000  # the 3000 px tall block is in it
    read_png(full)


def test_png_checks_reject_a_file_that_is_not_one_or_is_damaged(page, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"GIF89a....")
    for check in (read_png, check_png, png_size):
        with pytest.raises(ValueError, match="not a PNG"):
            check(str(bad))
    good = page.screenshot(str(tmp_path / "good.png"))
    with open(good, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the image data
    damaged = tmp_path / "damaged.png"
    damaged.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad CRC"):
        check_png(str(damaged))


def test_quit_ends_the_browser_and_the_driver(site):
    require_chromium()
    b = Browser(width=640, height=480)
    proc = b._proc
    b.get(site)
    assert b.title == "client test"
    b.quit()
    assert proc.poll() is not None, "chromedriver still runs after quit"
    b.quit()  # twice is fine
    with pytest.raises(WebDriverError, match="quit"):
        b.find("h1")


def test_a_driver_that_cannot_start_leaves_nothing_behind(tmp_path):
    require_chromium()
    fake = tmp_path / "chromedriver"
    fake.write_text("#!/bin/sh\necho 'no port here'\nexit 3\n")
    os.chmod(str(fake), 0o755)
    with pytest.raises(RuntimeError, match="chromedriver exited"):
        Browser(driver=str(fake))


def test_find_binaries_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DCC_FLOW_CHROMEDRIVER", str(tmp_path / "d"))
    monkeypatch.setenv("DCC_FLOW_CHROMIUM", str(tmp_path / "c"))
    assert find_binaries() == (str(tmp_path / "d"), str(tmp_path / "c"))


def test_missing_chromium_fails_under_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.delenv("DCC_FLOW_CHROMEDRIVER", raising=False)
    monkeypatch.delenv("DCC_FLOW_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="chromium-driver"):
        require_chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="BROWSER TESTS NOT RUN"):
        require_chromium()


def test_a_driver_start_whose_port_was_taken_is_made_again(tmp_path, monkeypatch):
    """chromedriver --port=0 exits with "IPv4 port not available" when the port it picked was
    taken before it bound it: Browser starts it again (a stand-in driver fails twice, then starts),
    and gives up with that error after 5 such starts."""
    count = tmp_path / "starts"
    fake = tmp_path / "chromedriver"
    fake.write_text(
        "#!/bin/sh\n"
        "n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s\n"
        "echo 'Starting ChromeDriver 156 on port 0'\n"
        "if [ $n -le $FAILS ]; then echo 'IPv4 port not available. Exiting...'; exit 1; fi\n"
        "echo 'ChromeDriver was started successfully on port 4242.'\n"
        "exec sleep 30\n" % (count, count))
    fake.chmod(0o755)
    for fails, want in ((2, 4242), (5, None)):
        count.write_text("0")
        monkeypatch.setenv("FAILS", str(fails))
        b = Browser.__new__(Browser)
        b._log_path = str(tmp_path / "driver.log")
        b._proc, b._session = None, None
        try:
            if want is None:
                with pytest.raises(RuntimeError, match="port not available"):
                    b._start_driver(str(fake), 10.0)
                assert count.read_text().strip() == "5"
            else:
                assert b._start_driver(str(fake), 10.0) == want
                assert count.read_text().strip() == "3"
        finally:
            if b._proc is not None and b._proc.poll() is None:
                b._proc.kill()
                b._proc.wait()
