"""The dashboard's file pages (issue #36) in a real headless Chromium, through the DOM contract
(``data-testid`` attributes) against ``Engine.serve(ui=...)``:

- a step's panel lists the files its attempts read and wrote (role, path, state, short hash), paths
  as text — a file named like HTML stays a name —, each a link to the file's page;
- the file page draws the lineage: the file, the attempt that made it (tool, links to its run and to
  its step on the run page), the files that attempt read, recursively; what each is now
  (unchanged, changed, missing) shown distinctly, and whether the file is stale and why;
- the stale page lists the stale outputs under a directory with their reasons;
- an unrecorded path is the API's 404 shown as an error; bad input to the routes is a 400;
- screenshots of a step's files, the file page and the stale page at 1366x768 and 2560x1440: into docs/guide/ui/
  with ``UPDATE_SCREENSHOTS=1``, into a temporary directory otherwise.

The tools run on a worker pool and say what they read and wrote with ``current_call().reads()`` and
``writes()``.
"""

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request

import pytest

from browser import Browser, check_png, png_size, require_chromium, tid
from dcc_flow import Engine, current_call

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = ((1366, 768), (2560, 1440))
TIMEOUT = 15.0

# One pytest-xdist worker runs this file: one headless Chromium for its tests.
pytestmark = pytest.mark.xdist_group("test_ui_assets")

# A file name a tool may well report: HTML in it must stay text.
EVIL_NAME = "<img src=x onerror=window.__pwned=1>.usda"

SHOT = """
name: shot_build
description: "Import the layout, assemble the shot, render it."
inputs:
  dir: {type: string, required: true}
steps:
  - {id: import_layout, tool: import_layout, args: {src: "{{inputs.dir}}/vendor/layout.abc", extra: "{{inputs.dir}}/vendor/%s", out: "{{inputs.dir}}/work/layout.usda"}}
  - {id: assemble, tool: assemble_shot, args: {layout: "{{inputs.dir}}/work/layout.usda", props: "{{inputs.dir}}/assets/props.usda", out: "{{inputs.dir}}/shots/sh010.usda"}}
  - {id: render, tool: render_shot, args: {scene: "{{inputs.dir}}/shots/sh010.usda", out: "{{inputs.dir}}/renders/sh010.exr"}}
""" % EVIL_NAME


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    b = Browser(width=1366, height=768)
    try:
        yield b
    finally:
        b.quit()


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _concat(out, *inputs):
    call = current_call()
    text = ""
    for p in inputs:
        with open(p, encoding="utf-8") as f:
            text += f.read()
        call.reads(p)
    _write(out, text)
    call.writes(out)
    return {"out": out}


class Shot:
    """An engine with a database file, three tools on a worker pool that read and write real files
    under ``dir``, its UI on a free port, and one completed run of SHOT."""

    def __init__(self, tmp_path, base=None):
        self.dir = os.path.realpath(os.path.join(base or str(tmp_path), "proj"))
        _write(os.path.join(self.dir, "vendor", "layout.abc"), "layout v1\n")
        _write(os.path.join(self.dir, "vendor", EVIL_NAME), "notes\n")
        _write(os.path.join(self.dir, "assets", "props.usda"), "props v1\n")
        self.engine = Engine(db=str(tmp_path / "flow.db"), environment={"dcc": "usd", "version": "25.11"})
        self.url = ""
        engine = self.engine

        @engine.tool(thread="worker")
        def import_layout(src, extra, out):
            return _concat(out, src, extra)

        @engine.tool(thread="worker")
        def assemble_shot(layout, props, out):
            return _concat(out, layout, props)

        @engine.tool(thread="worker")
        def render_shot(scene, out):
            return _concat(out, scene)

    def serve(self):
        self.engine.serve_tools(workers=2)
        info = self.engine.serve(ui="127.0.0.1:0")
        self.url = info["ui_url"]
        result = self.engine.run(SHOT, {"dir": self.dir}, timeout=60)
        assert result.status == "completed", result
        self.run_id = result.run_id
        return self

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def page(self, route):
        return self.url + "#/" + route

    def file_page(self, path, depth=None):
        return self.page("files?path=" + urllib.parse.quote(path, safe="") + ("&depth=%d" % depth if depth else ""))

    def get(self, route):
        """GET an API route: (status, JSON)."""
        try:
            with urllib.request.urlopen(self.url + route.lstrip("/"), timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def close(self):
        try:
            self.engine.stop_serving()
        finally:
            self.engine.close()


@pytest.fixture()
def shot(tmp_path, request):
    base = None
    if "screenshots" in request.node.name:
        # a short path, as a studio's: the screenshots show it (removed with tmp_path's)
        base = tempfile.mkdtemp(prefix="show-")
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    s = Shot(tmp_path, base).serve()
    try:
        yield s
    finally:
        if "browser" in request.fixturenames:
            browser = request.getfixturevalue("browser")
            rep = getattr(request.node, "rep_call", None)
            if rep is not None and rep.failed:
                try:
                    browser.screenshot(os.path.join(str(tmp_path), "failed-page.png"))
                    print("the page at the failure: %s/failed-page.png" % tmp_path)
                except Exception:
                    pass
            try:
                browser.get("about:blank")
            except Exception:
                pass
        s.close()


def _nows(browser):
    """{path: data-now} of every file box of the lineage graph."""
    return dict(browser.execute(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " n => [n.getAttribute('data-path'), n.getAttribute('data-now')]);", tid("lineage-file")))


def test_step_panel_lists_an_attempts_files_and_links_to_their_lineage(shot, browser):
    browser.get(shot.page("runs/" + shot.run_id))
    browser.wait_text(tid("run-status"), "completed")
    browser.click(tid("step-row", step_key="import_layout"))
    browser.wait_css(tid("step-files"))
    rows = browser.execute(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " r => [r.getAttribute('data-role'), r.getAttribute('data-path'), r.getAttribute('data-state'), r.textContent]);",
        tid("step-file"))
    got = {(role, path, state) for role, path, state, _ in rows}
    assert got == {("read", shot.path("vendor", "layout.abc"), "ok"), ("read", shot.path("vendor", EVIL_NAME), "ok"),
                   ("write", shot.path("work", "layout.usda"), "ok")}, rows
    # the short hash: 12 hex digits of the BLAKE3 hash
    assert all(any(len(w) == 12 and all(c in "0123456789abcdef" for c in w) for w in text.split()) or "ok" in text
               for _, _, _, text in rows), rows
    # a path that looks like HTML is a path: no element was made from it, nothing ran
    assert EVIL_NAME in browser.text_of(tid("step-files"))
    assert browser.execute("return document.querySelectorAll(arguments[0] + ' img').length;", tid("step-files")) == 0
    assert browser.execute("return typeof window.__pwned;") == "undefined"

    link = tid("step-file", role="write") + " " + tid("step-file-link")
    assert browser.attr(link, "href").endswith("#/files?path=" + urllib.parse.quote(shot.path("work", "layout.usda"), safe=""))
    browser.click(link)
    browser.wait_css(tid("lineage-graph") + " " + tid("lineage-making"), timeout=TIMEOUT)
    assert browser.text_of(tid("file-title")) == shot.path("work", "layout.usda")
    assert browser.attr(tid("lineage-making"), "data-tool") == "import_layout"


def test_file_page_draws_the_lineage_and_shows_what_changed(shot, browser):
    render = shot.path("renders", "sh010.exr")
    browser.get(shot.file_page(render))
    browser.wait_css(tid("lineage-graph") + " " + tid("lineage-file"), timeout=TIMEOUT)
    makings = browser.execute(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " m => [m.getAttribute('data-tool'), m.getAttribute('data-step-key'), m.getAttribute('data-run-id')]);",
        tid("lineage-making"))
    assert makings == [["render_shot", "render", shot.run_id], ["assemble_shot", "assemble", shot.run_id],
                       ["import_layout", "import_layout", shot.run_id]], makings
    nows = _nows(browser)
    assert nows == {render: "unchanged", shot.path("shots", "sh010.usda"): "unchanged",
                    shot.path("work", "layout.usda"): "unchanged", shot.path("assets", "props.usda"): "unchanged",
                    shot.path("vendor", "layout.abc"): "unchanged", shot.path("vendor", EVIL_NAME): "unchanged"}, nows
    browser.wait_css(tid("file-fresh"))
    assert browser.execute("return typeof window.__pwned;") == "undefined"
    assert browser.execute("return document.querySelectorAll(arguments[0] + ' img').length;", tid("lineage-graph")) == 0

    # depth 1: the scene's own making is not looked for; a link says there is more
    browser.get(shot.file_page(render, depth=1))
    browser.wait_css(tid("lineage-more"), timeout=TIMEOUT)
    assert len(browser.find_all(tid("lineage-making"))) == 1

    # the vendor's layout changes, the render is deleted: each shown as it is, and the render stale
    _write(shot.path("vendor", "layout.abc"), "layout v2, the vendor's fix\n")
    os.remove(render)
    browser.get(shot.file_page(render))
    browser.wait_css(tid("file-stale"), timeout=TIMEOUT)
    nows = _nows(browser)
    assert nows[render] == "missing" and nows[shot.path("vendor", "layout.abc")] == "changed", nows
    assert nows[shot.path("assets", "props.usda")] == "unchanged", nows
    assert browser.text_of(tid("file-now")) == "missing"
    assert "deleted since it was made" in browser.text_of(tid("file-stale"))
    classes = browser.execute("return Array.from(document.querySelectorAll(arguments[0]), n => n.className);",
                              tid("lineage-file"))
    assert any("now-missing" in c for c in classes) and any("now-changed" in c for c in classes), classes

    # the step link goes to the run page with that step selected
    step_link = tid("lineage-making", step_key="assemble") + " " + tid("lineage-step")
    assert browser.attr(step_link, "href").endswith("#/runs/%s?step=assemble" % shot.run_id)
    browser.click(step_link)
    browser.wait_css(tid("step-files"), timeout=TIMEOUT)
    assert browser.execute("return document.querySelector(arguments[0]).textContent;", tid("step-detail")).count("assemble") >= 1
    assert browser.attr("tr.selected", "data-step-key") == "assemble"


def test_stale_page_lists_the_stale_outputs_under_a_directory_with_why(shot, browser):
    browser.get(shot.page("stale?path=" + urllib.parse.quote(shot.dir, safe="")))
    browser.wait_css(tid("stale-empty"), timeout=TIMEOUT)
    assert browser.text_of(tid("stale-count")).startswith("0 stale")

    _write(shot.path("assets", "props.usda"), "props v2\n")
    browser.get(shot.page("files"))  # the Files tab: its form leads to the stale view
    box = browser.wait_css(tid("stale-path-input"))
    box.send_keys(shot.dir)
    box.send_keys("\ue007")  # Enter
    browser.wait_css(tid("stale-row"), timeout=TIMEOUT)
    rows = browser.execute(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " r => [r.getAttribute('data-path'), r.querySelector(arguments[1]).textContent]);",
        tid("stale-row"), tid("stale-reason"))
    assert rows == [[shot.path("renders", "sh010.exr"), "made from stale " + shot.path("shots", "sh010.usda")],
                    [shot.path("shots", "sh010.usda"), "input changed: " + shot.path("assets", "props.usda")]], rows
    # the reason's path is a link to that file's page
    browser.click(tid("stale-row", path=shot.path("shots", "sh010.usda")) + " " + tid("stale-reason") + " a")
    browser.wait_text(tid("file-title"), shot.path("assets", "props.usda"), timeout=TIMEOUT)
    assert _nows(browser) == {shot.path("assets", "props.usda"): "changed"}  # a source: read, never written


def test_an_unrecorded_path_is_not_found_and_bad_input_is_refused(shot, browser):
    nope = shot.path("nope.usd")
    browser.get(shot.file_page(nope))
    browser.wait_js("const e = document.querySelector('.error-box'); return e && e.textContent.includes('not_found');",
                    what="the not_found error")
    assert "no recorded attempt read or wrote " + nope in browser.text_of(".error-box")

    assert shot.get("/api/lineage?path=" + urllib.parse.quote(nope, safe=""))[0] == 404
    status, body = shot.get("/api/lineage")
    assert status == 400 and body["error"]["code"] == "invalid_input" and "path is empty" in body["error"]["message"]
    status, body = shot.get("/api/lineage?depth=0&path=" + urllib.parse.quote(shot.path("renders", "sh010.exr"), safe=""))
    assert status == 400 and "from 1 to 100" in body["error"]["message"], body
    status, body = shot.get("/api/stale?path=" + urllib.parse.quote(shot.dir, safe=""))
    assert status == 200 and body == {"stale": []}, body


# -- screenshots for docs/guide/ui.md --------------------------------------------------------------

def _shots_dir(tmp_path_factory):
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        return os.path.join(ROOT, "docs", "guide", "ui")
    return str(tmp_path_factory.mktemp("ui-screenshots"))


def test_screenshots_of_the_file_pages(shot, browser, tmp_path_factory):
    out = _shots_dir(tmp_path_factory)
    # an evening later: the vendor re-delivered the layout, so the shot and its render are stale
    _write(shot.path("vendor", "layout.abc"), "layout v2\n")
    pages = (
        ("file", "files?path=" + urllib.parse.quote(shot.path("renders", "sh010.exr"), safe=""),
         tid("lineage-graph") + " " + tid("lineage-making")),
        ("stale", "stale?path=" + urllib.parse.quote(shot.dir, safe=""), tid("stale-row")),
        ("run-files", "runs/%s?step=assemble" % shot.run_id, tid("step-files") + " " + tid("step-file")),
    )
    written = []
    try:
        for width, height in SIZES:
            browser.set_viewport(width, height)
            for name, route, ready in pages:
                browser.get(shot.page(route))
                browser.wait_css(ready, timeout=TIMEOUT)
                browser.execute("window.scrollTo(0, 0);")  # a hash change keeps the scroll
                if name == "file":
                    browser.wait_css(tid("file-stale"), timeout=TIMEOUT)
                if name == "run-files":  # the step panel's files in view
                    browser.execute("document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
                                    tid("step-files"))
                path = os.path.join(out, "%s-%dx%d.png" % (name, width, height))
                browser.screenshot(path)
                written.append(path)
                assert check_png(path) == (width, height)
    finally:
        browser.set_viewport(1366, 768)
    assert [png_size(p) for p in written] == [s for s in SIZES for _ in pages]
