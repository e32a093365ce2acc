"""The web UI in a real headless Chromium (issue #22): the scenarios a studio lives by, driven
through the DOM contract (stable ``data-testid`` attributes) against ``Engine.serve(ui=...)``.

- the runs page shows a running foreach's progress advance live, without a reload; its filters
  and its paging (``runs-more``);
- a run page approves and rejects a gate (with the name typed in the header) and shows the
  outcome; cancel (the confirm dialog's cancel button really cancels nothing), pause and unpause,
  resume of a failed run;
- a step output or error holding ``<script>`` / ``<img onerror>`` shows as text, nothing runs;
- a workflow's versions and graph, a schedule's fires, disabling a schedule;
- at the HTTP level, a POST without the CSRF header (or with a foreign ``Origin``) is 403; with a
  token, the API is 401 without it, the page's sign-in form (a POST, never the token in a URL)
  opens a session of this browser's own and its sign-out button ends it; off loopback without a
  token the UI does not start;
- scale: 10,000 runs (the runs page within 300 ms), a 10,000-item foreach (the page stays live);
- the start page: a form of the workflow's inputs, the engine's problems shown next to their
  fields, then the new run's page;
- screenshots of the runs, run, failed run (its step selected), workflows, workflow, schedules
  and start (a bad value shown) pages at 1366x768 and 2560x1440: into
  docs/guide/ui/ with ``UPDATE_SCREENSHOTS=1``, into a temporary directory otherwise.

One browser per module, one engine (its own database, its own UI port) per test. Host tools run on
the worker pool and block on ``threading`` primitives the test releases, so a run stays running
exactly as long as a scenario needs it to.
"""

import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from browser import Browser, check_png, png_size, require_chromium, tid
from dcc_flow import Engine, InvalidInputError, StepStatus, WorkflowStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = ((1366, 768), (2560, 1440))
TIMEOUT = 15.0  # seconds a UI change may take to show (SSE updates are coalesced to 250 ms)


# One pytest-xdist worker runs this file (make test-py): one start of its headless Chromium, not one
# per worker, and no two of them loading the machine at once.
pytestmark = pytest.mark.xdist_group("test_ui_browser")


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    b = Browser(width=1366, height=768)
    try:
        yield b
    finally:
        b.quit()


class Studio:
    """One engine with a database file, its tools on a worker pool and its web UI on a free port.
    ``hold()`` and ``hold_event()`` make gates a tool can block on (a semaphore the test releases
    one call at a time, an event that lets every call go); all are opened before the engine closes."""

    def __init__(self, tmp_path):
        self.engine = Engine(db=str(tmp_path / "flow.db"))
        self._gates = []
        self._events = []
        self._serving = False
        self.url = ""

    def hold(self):
        gate = threading.Semaphore(0)
        self._gates.append(gate)
        return gate

    def hold_event(self):
        event = threading.Event()
        self._events.append(event)
        return event

    def serve(self, workers=4, scheduler=False):
        """Start the tool workers and the UI; returns the UI's base URL (ends with "/")."""
        self.engine.serve_tools(workers=workers)
        info = self.engine.serve(scheduler=scheduler, ui="127.0.0.1:0")
        self._serving = True
        url = info["ui_url"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/"), info
        self.url = url
        return url

    def page(self, route):
        return self.url + "#/" + route

    def status(self, run_id):
        return self.engine.get_status(run_id, all_steps=True)

    def wait_status(self, run_id, *statuses, timeout=TIMEOUT):
        want = {WorkflowStatus(s) for s in statuses}

        def reached():
            result = self.status(run_id)
            return result if result.status in want else None

        return Browser.wait_until(reached, timeout=timeout, what="run %s to be %s" % (run_id, "/".join(statuses)))

    def stop_serving(self, timeout=10.0):
        """``engine.stop_serving()``; returns the seconds it took (fails after ``timeout``)."""
        took = []
        t = threading.Thread(target=lambda: (self.engine.stop_serving(), took.append(time.monotonic() - t0)),
                             daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(timeout)
        assert took, "stop_serving did not return within %.0f s" % timeout
        self._serving = False
        return took[0]

    def close(self):
        for gate in self._gates:
            for _ in range(1000):
                gate.release()
        for event in self._events:
            event.set()
        try:
            if self._serving:
                self.engine.stop_serving()
        finally:
            self.engine.close()


@pytest.fixture()
def studio(tmp_path, request):
    s = Studio(tmp_path)
    try:
        yield s
    finally:
        if "browser" in request.fixturenames:
            browser = request.getfixturevalue("browser")
            rep = getattr(request.node, "rep_call", None)
            if rep is not None and rep.failed:
                _save_page(browser, str(tmp_path))
            try:
                browser.get("about:blank")  # leave the page: its live stream closes first
            except Exception:
                pass
        s.close()


def _save_page(browser, folder):
    """After a failed test: the page as it was (screenshot, DOM, URL) in the test's tmp folder."""
    try:
        browser.screenshot(os.path.join(folder, "failed-page.png"))
        with open(os.path.join(folder, "failed-page.html"), "w", encoding="utf-8") as f:
            f.write("<!-- %s -->\n" % browser.url)
            f.write(browser.execute("return document.documentElement.outerHTML;"))
        print("the page at the failure: %s/failed-page.png and failed-page.html" % folder)
    except Exception as e:  # the browser itself may be what failed
        print("could not save the page at the failure: %s" % e)


def _confirm(browser, ok=True, by="Test Wrangler"):
    """Answer the confirm dialog; every action is recorded with a name, so when the dialog's name
    field (pre-filled from the header's actor-name) is empty, type ``by`` first."""
    if ok:
        field = browser.wait_css(tid("confirm-dialog") + " " + tid("confirm-by"))
        if not field.prop("value"):
            field.send_keys(by)
    browser.click(tid("confirm-dialog") + " " + tid("confirm-ok" if ok else "confirm-cancel"))
    browser.wait_js("const d = document.querySelector(args[0]);"
                    "return !d || !(d.getBoundingClientRect().width || d.getBoundingClientRect().height) "
                    "|| d.open === false;", tid("confirm-dialog"), what="the confirm dialog to close")


def _toast_ok(browser):
    browser.wait_css(tid("toast"))
    classes = (browser.attr(tid("toast"), "class") or "").split()
    assert "error" not in classes, "the action failed: %s" % browser.text_of(tid("toast"))


def _set_actor(browser, name):
    field = browser.wait_css(tid("actor-name"))
    field.clear()
    field.send_keys(name)
    field.send_keys("\ue004")  # Tab: leave the field, as a user does (fires change)
    assert field.prop("value") == name


# -- the runs page -------------------------------------------------------------------------------

SHOTS = """
name: shots
steps:
  - id: each
    kind: foreach
    items: [sh010, sh020, sh030, sh040, sh050, sh060]
    concurrency: 1
    steps:
      - {id: render, tool: render, args: {shot: "{{item}}"}}
"""


def test_runs_page_shows_a_running_foreach_advance_live(studio, browser):
    gate = studio.hold()
    started = []

    @studio.engine.tool(thread="worker")
    def render(shot):
        started.append(shot)
        assert gate.acquire(timeout=60), "the test never let %s finish" % shot
        return {"shot": shot}

    studio.serve()
    run_id = studio.engine.submit(SHOTS).run_id
    Browser.wait_until(lambda: started, what="the first render to start")

    browser.get(studio.page("runs"))
    browser.wait_css(tid("runs-table"))
    row_sel = tid("run-row", run_id=run_id)
    browser.wait_css(row_sel, timeout=TIMEOUT)
    assert browser.attr(row_sel, "data-workflow") == "shots"
    assert browser.attr(row_sel, "data-status") == "running"
    assert browser.text_of(row_sel + " " + tid("run-status")).strip() == "running"
    assert browser.attr(row_sel + " " + tid("run-link"), "href").endswith("#/runs/" + run_id)
    progress_sel = row_sel + " " + tid("run-progress")
    done0 = int(browser.attr(progress_sel, "data-done"))
    total = int(browser.wait_attr(progress_sel, "data-total", "Number(v) > 0"))
    assert studio.status(run_id).progress == (done0, total)
    browser.execute("window.__sameDocument = 'yes';")  # a reload would clear it

    for released in (2, 3):  # let items finish in two batches; the page follows each
        for _ in range(released):
            gate.release()
        target = done0 + (2 if released == 2 else 5)
        Browser.wait_until(lambda t=target: studio.status(run_id).progress[0] >= t,
                           what="the engine to complete %d step instances" % target)
        done = browser.wait_attr(progress_sel, "data-done", "Number(v) >= %d" % target, timeout=TIMEOUT)
        assert int(done) <= total
    assert browser.execute("return window.__sameDocument;") == "yes", "the page reloaded"

    gate.release()  # the last item: the run completes
    studio.wait_status(run_id, "completed")
    browser.wait_attr(row_sel, "data-status", "v === 'completed'", timeout=TIMEOUT)
    browser.wait_text(row_sel + " " + tid("run-status"), "completed", timeout=TIMEOUT)
    browser.wait_attr(progress_sel, "data-done", "Number(v) === %d" % total, timeout=TIMEOUT)
    assert browser.execute("return window.__sameDocument;") == "yes", "the page reloaded"
    # the live stream the open page holds does not keep the server from stopping
    assert studio.stop_serving() < 5.0


def test_runs_page_filters_by_status_and_workflow(studio, browser):
    @studio.engine.tool(thread="worker")
    def ok():
        return 1

    @studio.engine.tool(thread="worker")
    def bad():
        raise RuntimeError("exporter crashed")

    studio.serve()
    good = studio.engine.submit("name: alpha\nsteps: [{id: a, tool: ok}]\n").run_id
    failed = studio.engine.submit("name: beta\nsteps: [{id: b, tool: bad}]\n").run_id
    studio.wait_status(good, "completed")
    studio.wait_status(failed, "failed")

    browser.get(studio.page("runs"))
    browser.wait_css(tid("run-row", run_id=good))
    browser.wait_css(tid("run-row", run_id=failed))
    browser.click(tid("filter-status") + " option[value=failed]", visible=False)  # a user's pick: fires change
    browser.wait_gone(tid("run-row", run_id=good), timeout=TIMEOUT)
    browser.wait_css(tid("run-row", run_id=failed))
    assert browser.attr(tid("run-row", run_id=failed), "data-status") == "failed"

    # a link with the filter in the hash opens the page filtered
    browser.get(studio.page("runs?workflow=alpha"))
    browser.wait_css(tid("run-row", run_id=good), timeout=TIMEOUT)
    browser.wait_gone(tid("run-row", run_id=failed), timeout=TIMEOUT)
    assert browser.attrs(tid("run-row"), "data-workflow") == ["alpha"]

    # the search (docs/reference/cli/inspecting.md "runs"): an error text, a tool, with their boxes filled in
    browser.get(studio.page("runs?error_text=EXPORTER%20crashed"))
    browser.wait_css(tid("run-row", run_id=failed), timeout=TIMEOUT)
    assert browser.attrs(tid("run-row"), "data-run-id") == [failed]
    assert browser.attr(tid("filter-error-text"), "value") == "EXPORTER crashed"
    browser.get(studio.page("runs?tool=ok"))
    browser.wait_css(tid("run-row", run_id=good), timeout=TIMEOUT)
    assert browser.attrs(tid("run-row"), "data-run-id") == [good]


def test_runs_page_loads_older_runs_on_demand(studio, browser):
    @studio.engine.tool(thread="worker")
    def ok(i):
        return i

    studio.serve()
    runs = [studio.engine.submit("name: many\nsteps: [{id: a, tool: ok, args: {i: %d}}]\n" % i) for i in range(60)]
    for run in runs:
        studio.wait_status(run.run_id, "completed")
    browser.get(studio.page("runs"))
    browser.wait_css(tid("run-row", run_id=runs[-1].run_id))  # newest first
    first_page = len(browser.attrs(tid("run-row"), "data-run-id"))
    assert 0 < first_page < 60, first_page
    while len(browser.attrs(tid("run-row"), "data-run-id")) < 60:
        shown = len(browser.attrs(tid("run-row"), "data-run-id"))
        browser.click(tid("runs-more"))
        browser.wait_js("return document.querySelectorAll(args[0]).length > args[1];", tid("run-row"), shown,
                        timeout=TIMEOUT, what="more than %d run rows" % shown)
    ids = browser.attrs(tid("run-row"), "data-run-id")
    assert ids == [r.run_id for r in reversed(runs)]  # every run once, newest first


# -- a run's page: approve, cancel, resume ---------------------------------------------------------

PUBLISH = """
name: publish
steps:
  - {id: prep, tool: prep}
  - {id: gate, kind: approve, prompt: "Publish hero.ma to Unreal?"}
  - {id: push, tool: push}
"""


def test_run_page_approves_a_gate_and_shows_the_run_complete(studio, browser):
    pushed = []

    @studio.engine.tool(thread="worker")
    def prep():
        return {"scene": "hero.ma"}

    @studio.engine.tool(thread="worker")
    def push():
        pushed.append(1)
        return {"pushed": True}

    studio.serve()
    run_id = studio.engine.submit(PUBLISH).run_id
    studio.wait_status(run_id, "waiting")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_css(tid("run-title"))
    title = browser.text_of(tid("run-title"))
    assert "publish" in title and run_id in title, title
    # the run's status word is "waiting" (its gate step's is "waiting_approval"; the contract's
    # status filter names the latter): either is the truth shown to a producer
    browser.wait_js("const e = document.querySelector(args[0]);"
                    "return e && ['waiting', 'waiting_approval'].includes(e.textContent.trim());",
                    tid("run-status"), what="run-status 'waiting'")
    _set_actor(browser, "Ada Producer")

    approval = tid("approval", step="gate") + " "
    browser.wait_css(approval + tid("approval-comment")).send_keys("colours signed off")
    browser.click(approval + tid("approve-button"))
    _confirm(browser)
    _toast_ok(browser)
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)
    browser.wait_gone(tid("approval", step="gate"))

    result = studio.status(run_id)
    assert result.status is WorkflowStatus.COMPLETED and pushed == [1]
    resolved = [ev["detail"] for ev in studio.engine.events(run_id=run_id, timeout=0)
                if ev["type"] == "approve_resolved"]
    assert len(resolved) == 1 and resolved[0]["approved"] is True
    assert resolved[0]["by"] == "Ada Producer"
    assert "colours signed off" in resolved[0].get("reason", "")
    # the name typed in the header is kept for the next visit
    browser.refresh()
    assert browser.wait_css(tid("actor-name")).prop("value") == "Ada Producer"


def test_run_page_cancels_a_running_run_only_once_confirmed(studio, browser):
    gate = studio.hold()
    started = studio.hold_event()

    @studio.engine.tool(thread="worker")
    def simulate(frames):
        started.set()
        gate.acquire(timeout=60)
        return {"frames": frames}

    studio.serve()
    run_id = studio.engine.submit("name: sim\nsteps: [{id: sim, tool: simulate, args: {frames: 240}}]\n").run_id
    assert started.wait(TIMEOUT)

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "running")
    browser.click(tid("cancel-button"))
    _confirm(browser, ok=False)  # the dialog's cancel: nothing happens
    assert studio.status(run_id).status is WorkflowStatus.RUNNING

    browser.click(tid("cancel-button"))
    _confirm(browser)
    _toast_ok(browser)
    browser.wait_text(tid("run-status"), "cancelled", timeout=TIMEOUT)
    assert studio.wait_status(run_id, "cancelled").status is WorkflowStatus.CANCELLED
    browser.wait_gone(tid("cancel-button"))  # shown only when it applies


def test_run_page_resumes_a_failed_run(studio, browser):
    calls = {"prep": 0, "export": 0}

    @studio.engine.tool(thread="worker")
    def prep():
        calls["prep"] += 1
        return {"scene": "hero.ma"}

    @studio.engine.tool(thread="worker")
    def export(scene):
        calls["export"] += 1
        if calls["export"] == 1:
            raise RuntimeError("license server unreachable")
        return {"fbx": scene.replace(".ma", ".fbx")}

    studio.serve()
    spec = ("name: export_hero\nsteps:\n  - {id: prep, tool: prep}\n"
            "  - {id: export, tool: export, args: {scene: \"{{steps.prep.output.scene}}\"}}\n")
    run_id = studio.engine.submit(spec).run_id
    studio.wait_status(run_id, "failed")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "failed")
    browser.click(tid("step-row", step_key="export"))
    browser.wait_js("const e = document.querySelector(args[0]);"
                    "return e && e.textContent.includes('license server unreachable');",
                    tid("step-detail") + " " + tid("step-error"), what="the step error of export")

    browser.click(tid("resume-button"))
    browser.wait_css(tid("resume-force"))  # the dialog offers forcing steps; none here
    _confirm(browser)
    _toast_ok(browser)
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)
    result = studio.wait_status(run_id, "completed")
    assert result.step("export").status is StepStatus.COMPLETED
    assert calls == {"prep": 1, "export": 2}  # prep's result was reused


def test_run_page_pauses_and_unpauses_a_foreach(studio, browser):
    gate = studio.hold()
    started = []

    @studio.engine.tool(thread="worker")
    def render(shot):
        started.append(shot)
        assert gate.acquire(timeout=60)
        return {"shot": shot}

    studio.serve()
    run_id = studio.engine.submit(SHOTS).run_id
    Browser.wait_until(lambda: started, what="the first render to start")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "running")
    browser.click(tid("pause-button"))
    _confirm(browser)
    _toast_ok(browser)
    browser.wait_text(tid("run-status"), "paused", timeout=TIMEOUT)
    studio.wait_status(run_id, "paused")
    gate.release()  # the item in flight finishes; no other starts while paused
    Browser.wait_until(lambda: studio.status(run_id).progress[0] >= 1, what="the item in flight to finish")
    assert started == ["sh010"]

    browser.click(tid("unpause-button"))
    _confirm(browser)
    browser.wait_text(tid("run-status"), "running", timeout=TIMEOUT)
    for _ in range(5):
        gate.release()
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)
    assert len(started) == 6
    details = [ev["detail"] for ev in studio.engine.events(run_id=run_id, timeout=0)
               if ev["type"] in ("run_paused", "run_unpaused")]
    assert len(details) == 2 and all(d.get("by") for d in details), details


def test_run_page_rejects_a_gate(studio, browser):
    @studio.engine.tool(thread="worker")
    def prep():
        return {"scene": "hero.ma"}

    @studio.engine.tool(thread="worker")
    def push():
        raise AssertionError("push ran after a rejection")

    studio.serve()
    run_id = studio.engine.submit(PUBLISH).run_id
    studio.wait_status(run_id, "waiting")
    browser.get(studio.page("runs/" + run_id))
    _set_actor(browser, "Lead Lighter")
    approval = tid("approval", step="gate") + " "
    browser.wait_css(approval + tid("approval-comment")).send_keys("key light too hot")
    browser.click(approval + tid("reject-button"))
    _confirm(browser)
    browser.wait_text(tid("run-status"), "failed", timeout=TIMEOUT)
    result = studio.wait_status(run_id, "failed")
    assert result.step("gate").status is StepStatus.FAILED
    [resolved] = [ev["detail"] for ev in studio.engine.events(run_id=run_id, timeout=0)
                  if ev["type"] == "approve_resolved"]
    assert resolved["approved"] is False and resolved["by"] == "Lead Lighter"


# -- nothing from a run is HTML ----------------------------------------------------------------------

EVIL = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"><b>bold?</b>'


def test_step_output_and_error_with_html_show_as_text(studio, browser):
    @studio.engine.tool(thread="worker")
    def evil_out():
        return {"note": EVIL}

    @studio.engine.tool(thread="worker")
    def evil_err():
        raise RuntimeError('<img src="y" onerror="window.__pwned = 3">broken')

    studio.serve()
    run_id = studio.engine.submit("name: evil\nsteps:\n  - {id: out, tool: evil_out}\n  - {id: err, tool: evil_err}\n"
                                  ).run_id
    studio.wait_status(run_id, "failed")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "failed")
    browser.click(tid("step-row", step_key="out"))
    browser.wait_css(tid("step-output"))
    assert browser.execute("return document.querySelector(arguments[0]).tagName;", tid("step-output")) == "PRE"
    text = browser.text_of(tid("step-output"))
    assert "<script>window.__pwned = 1</script>" in text, text
    assert '<img src=\\"x\\" onerror=' in text or '<img src="x" onerror=' in text, text

    browser.click(tid("step-row", step_key="err"))
    browser.wait_js("const e = document.querySelector(args[0]); return e && e.textContent.includes('broken');",
                    tid("step-error"), what="the step error of err")
    assert '<img src="y" onerror="window.__pwned = 3">broken' in browser.text_of(tid("step-error"))

    # no element was made from the text: no script ran, no image failed to load into a handler
    assert browser.execute("return document.querySelectorAll("
                           "'[data-testid=step-detail] script, [data-testid=step-detail] img, "
                           "[data-testid=step-detail] b').length;") == 0
    assert browser.execute("return typeof window.__pwned;") == "undefined"


# -- schedules -------------------------------------------------------------------------------------


def test_schedules_page_disables_a_schedule(studio, browser):
    @studio.engine.tool(thread="worker")
    def turntable():
        return 1

    studio.engine.schedule("name: turntables\nsteps: [{id: t, tool: turntable}]\n", cron="0 0 3 * * *",
                           id="nightly_turntables")
    studio.serve(scheduler=True)
    browser.get(studio.page("schedules"))
    row_sel = tid("schedule-row", schedule_id="nightly_turntables")
    browser.wait_css(row_sel)
    assert browser.attr(row_sel, "data-enabled") == "true"
    browser.click(row_sel + " " + tid("schedule-toggle"))
    _confirm(browser)
    _toast_ok(browser)
    browser.wait_attr(row_sel, "data-enabled", "v === 'false'", timeout=TIMEOUT)
    [sched] = [s for s in studio.engine.schedules() if s["id"] == "nightly_turntables"]
    assert sched["enabled"] is False


def test_workflow_page_shows_versions_and_graph(studio, browser):
    studio.engine.register_workflow("name: turntables\nsteps: [{id: render, tool: turntable}]\n")
    studio.engine.register_workflow("name: turntables\nsteps: [{id: render, tool: turntable}, "
                                    "{id: upload, tool: upload}]\n")
    studio.serve()
    browser.get(studio.page("workflows"))
    browser.click(tid("workflow-row", workflow="turntables"))
    browser.wait_css(tid("workflow-graph"))
    browser.wait_js("return document.querySelectorAll(args[0]).length === 2;",
                    tid("workflow-versions") + " " + tid("version-row"), what="two version rows")
    browser.wait_js("const g = document.querySelector(args[0]);"
                    "return g && (g.textContent.includes('upload') || g.querySelector('[data-step=upload]'));",
                    tid("workflow-graph"), what="the current version's graph to show its upload step")


def test_schedule_page_lists_fires(studio, browser):
    @studio.engine.tool(thread="worker")
    def turntable():
        return 1

    studio.engine.schedule("name: turntables\nsteps: [{id: t, tool: turntable}]\n", every="1s", id="spin")
    studio.serve(scheduler=True)
    Browser.wait_until(lambda: len(studio.engine.schedule_fires("spin")) >= 2, timeout=TIMEOUT,
                       what="two fires")
    browser.get(studio.page("schedules/spin"))
    browser.wait_js("return document.querySelectorAll(args[0]).length >= 2;",
                    tid("schedule-fires") + " " + tid("fire-row"), timeout=TIMEOUT, what="two fire rows")


# -- HTTP-level guards (the browser-side security is the UI's own Go tests) ---------------------------


TURNTABLE = """
name: turntable
description: render a turntable of an asset
inputs:
  asset: {type: string, required: true, description: "the asset to render, e.g. hero_chair"}
  frames: {type: integer, default: 120, description: "frames in one turn"}
  quality: {type: string, enum: [draft, final], default: draft}
  preview: {type: boolean, default: false}
  tags: {type: array}
steps:
  - {id: render, tool: turntable, args: {asset: "{{inputs.asset}}", frames: "{{inputs.frames}}", quality: "{{inputs.quality}}"}}
"""


def _field(name):
    return tid("start-form") + " " + tid("start-field", input=name)


def test_start_page_starts_a_run_after_showing_bad_inputs_next_to_their_fields(studio, browser):
    rendered = []

    @studio.engine.tool(thread="worker")
    def turntable(asset, frames, quality):
        rendered.append((asset, frames, quality))
        return {"movie": "/renders/%s_%d.mov" % (asset, frames)}

    studio.engine.register_workflow(TURNTABLE)
    studio.serve()
    browser.get(studio.page("runs"))
    _set_actor(browser, "Ada Producer")
    browser.click(tid("start-run-button"))
    browser.click(tid("start-workflow") + " option[value=turntable]", visible=False)  # a user's pick
    browser.wait_css(tid("start-form", workflow="turntable"))
    # The form is the workflow's inputs: defaults prefilled, the enum a select, help text shown.
    assert browser.find(_field("frames") + " " + tid("start-input")).prop("value") == "120"
    assert browser.find(_field("quality") + " " + tid("start-input")).prop("value") == "0"  # draft
    assert browser.find(_field("quality") + " " + tid("start-input")).tag_name == "select"
    assert "the asset to render" in browser.text_of(_field("asset"))
    assert browser.find(tid("start-by")).prop("value") == "Ada Producer"

    # A JSON field that does not hold JSON: said at once, nothing is sent.
    tags = browser.find(_field("tags") + " " + tid("start-input"))
    tags.send_keys('["hero"')
    browser.click(tid("start-submit"))
    browser.wait_js("const e = document.querySelector(args[0]);"
                    "return e && e.textContent.includes('is not JSON');",
                    _field("tags") + " " + tid("field-error"), what="the tags field's error")
    assert studio.engine.runs() == []

    # The asset left out, text in the integer field: the engine's problems, each by its field.
    tags.clear()
    tags.send_keys('["hero", "chair"]')
    frames = browser.find(_field("frames") + " " + tid("start-input"))
    frames.clear()
    frames.send_keys("lots")
    browser.click(tid("start-submit"))
    browser.wait_js("const e = document.querySelector(args[0]);"
                    "return e && e.textContent.includes('must be of type integer');",
                    _field("frames") + " " + tid("field-error"), what="the frames field's error")
    browser.wait_css(_field("asset") + " " + tid("field-error"))
    assert "is required" in browser.text_of(_field("asset") + " " + tid("field-error"))
    for ok in ("quality", "preview", "tags"):
        assert not browser.find(_field(ok) + " " + tid("field-error")).is_displayed(), ok
    assert "#/start/turntable" in browser.url
    assert studio.engine.runs() == []  # nothing was started

    # Fixed: the errors go as the fields are edited, and the run starts.
    frames = browser.find(_field("frames") + " " + tid("start-input"))
    frames.clear()
    frames.send_keys("48")
    assert not browser.find(_field("frames") + " " + tid("field-error")).is_displayed()
    browser.find(_field("asset") + " " + tid("start-input")).send_keys("hero_chair")
    browser.click(_field("quality") + " option[value='1']", visible=False)  # final
    browser.click(tid("start-submit"))

    # It lands on the new run's page, which says who started it.
    browser.wait_css(tid("run-title"))
    url = browser.url
    assert "#/runs/" in url, url
    run_id = url.split("#/runs/", 1)[1]
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)
    assert "Ada Producer" in browser.text_of(tid("run-started-by"))
    result = studio.wait_status(run_id, "completed")
    assert rendered == [("hero_chair", 48, "final")]
    assert result.raw["origin"] == "ui" and result.raw["trigger"] == {"by": "Ada Producer"}
    assert result.raw["inputs"] == {"asset": "hero_chair", "frames": 48, "quality": "final", "preview": False,
                                    "tags": ["hero", "chair"]}


# Window.EventSource held back: each stream the page opens connects only when the test calls
# window.__openStreams() (the page's handlers are attached to the real one then).
_HELD_STREAMS = """
const Real = window.EventSource;
window.__held = [];
window.EventSource = class {
  constructor(url) { this.url = url; this.listeners = []; this.onopen = null; this.onerror = null;
                     this.real = null; this.closed = false; window.__held.push(this); }
  addEventListener(name, fn) { this.listeners.push([name, fn]); if (this.real) this.real.addEventListener(name, fn); }
  close() { this.closed = true; if (this.real) this.real.close(); }
  connect() {
    if (this.closed || this.real) return;
    const es = this.real = new Real(this.url);
    es.onopen = (e) => this.onopen && this.onopen(e);
    es.onerror = (e) => this.onerror && this.onerror(e);
    for (const [name, fn] of this.listeners) es.addEventListener(name, fn);
  }
};
window.__openStreams = () => { for (const s of window.__held) s.connect(); };
"""


def test_run_page_shows_an_end_that_came_before_its_live_stream_opened(studio, browser):
    """The run page reads the run, then opens its event stream, which sends what happens after it
    opened: a run that ended in between stayed 'running' on the page for good (a 70 ms run, under
    pytest-xdist's load). The page reads the run again when its stream opens."""
    go = studio.hold_event()

    @studio.engine.tool(thread="worker")
    def render():
        go.wait(timeout=60)
        return {}

    studio.serve()
    run_id = studio.engine.submit("name: quick\nsteps: [{id: r, tool: render}]\n").run_id
    studio.wait_status(run_id, "running")
    browser.get(studio.page("runs"))
    browser.wait_css(tid("run-row", run_id=run_id))
    browser.execute(_HELD_STREAMS)
    browser.execute("location.hash = arguments[0];", "#/runs/" + run_id)
    browser.wait_text(tid("run-status"), "running")
    go.set()
    studio.wait_status(run_id, "completed")
    browser.execute("window.__openStreams();")
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)


def _post(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **headers))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_actions_need_the_csrf_header_and_the_servers_origin(studio):
    gate = studio.hold()

    @studio.engine.tool(thread="worker")
    def hold():
        gate.acquire(timeout=60)
        return 1

    url = studio.serve()
    run_id = studio.engine.submit("name: held\nsteps: [{id: h, tool: hold}]\n").run_id
    studio.wait_status(run_id, "running")
    cancel = url + "api/runs/%s/cancel" % run_id
    body = {"by": "mallory", "reason": "csrf"}
    origin = url.rstrip("/")
    k = "dccflow_csrf_%s" % url.rstrip("/").rsplit(":", 1)[1]  # the CSRF cookie's name ends with the port

    with urllib.request.urlopen(url, timeout=10) as resp:
        assert "default-src 'self'" in resp.headers.get("Content-Security-Policy", "")
        assert resp.headers.get("X-Content-Type-Options") == "nosniff"

    for headers in ({},  # no CSRF header, no cookie
                    {"Cookie": k + "=k1"},  # cookie without the header
                    {"Cookie": k + "=k1", "X-DCC-Flow-CSRF": "k2"},  # they differ
                    {"Cookie": "dccflow_csrf_1=k1", "X-DCC-Flow-CSRF": "k1"},  # another port's cookie
                    {"Cookie": k + "=k1", "X-DCC-Flow-CSRF": "k1", "Origin": "http://evil.example"}):
        status, answer = _post(cancel, body, headers)
        assert status == 403, (headers, status, answer)
        assert answer["error"]["code"] == "forbidden", answer
        assert studio.status(run_id).status is WorkflowStatus.RUNNING

    # the same request with the double-submitted token and the server's own origin is carried out
    status, answer = _post(cancel, body, {"Cookie": k + "=k1", "X-DCC-Flow-CSRF": "k1", "Origin": origin})
    assert status == 200, answer
    studio.wait_status(run_id, "cancelled")


def test_off_loopback_without_a_token_refuses_to_start(studio):
    with pytest.raises(InvalidInputError, match="token"):
        studio.engine.serve(scheduler=False, ui="0.0.0.0:0")


def test_a_token_guards_the_api_and_the_sign_in_form_opens_a_session(studio, browser):
    @studio.engine.tool(thread="worker")
    def ok():
        return 1

    studio.engine.serve_tools(workers=1)
    info = studio.engine.serve(scheduler=False, ui="127.0.0.1:0", token="s3cret-token-0f-the-studio")
    studio._serving = True
    url = studio.url = info["ui_url"]
    run_id = studio.engine.submit("name: guarded\nsteps: [{id: a, tool: ok}]\n").run_id
    studio.wait_status(run_id, "completed")

    def get(path, headers):
        req = urllib.request.Request(url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    status, answer = get("api/runs", {})
    assert status == 401 and answer["error"]["code"] == "unauthorized", answer
    assert get("api/runs", {"Authorization": "Bearer wrong"})[0] == 401
    status, answer = get("api/runs", {"Authorization": "Bearer s3cret-token-0f-the-studio"})
    assert status == 200 and [r["id"] for r in answer["runs"]] == [run_id], answer
    port = url.rstrip("/").rsplit(":", 1)[1]

    # a token in the address signs nobody in: the page asks for it
    browser.get(url + "login?token=s3cret-token-0f-the-studio")
    browser.wait_css(tid("login-token"), timeout=TIMEOUT)
    assert not [c for c in browser.cookies() if c["name"].startswith("dccflow_session")]

    # the page's own form posts the token once; the session cookie carries the API calls after
    browser.get(url)
    browser.wait_css(tid("login-token"), timeout=TIMEOUT).send_keys("s3cret-token-0f-the-studio")
    browser.find(tid("login-submit")).click()
    browser.wait_css(tid("run-row", run_id=run_id), timeout=TIMEOUT)
    [session] = [c for c in browser.cookies() if c["name"] == "dccflow_session_" + port]
    assert session["httpOnly"] is True and session.get("sameSite") == "Strict", session
    assert "s3cret-token" not in session["value"] and "s3cret-token" not in browser.url
    assert get("api/runs", {"Cookie": "dccflow_session_%s=%s" % (port, session["value"])})[0] == 200

    # signing out ends the session on the server: its cookie no longer opens anything
    browser.wait_css(tid("sign-out"), timeout=TIMEOUT).click()
    browser.wait_css(tid("login-token"), timeout=TIMEOUT)
    assert get("api/runs", {"Cookie": "dccflow_session_%s=%s" % (port, session["value"])})[0] == 401


# -- scale: issue #22's figures -------------------------------------------------------------------


@pytest.mark.scale  # timed: run alone by make test-long, never beside other xdist workers
def test_runs_page_with_10000_runs_shows_its_first_page_promptly(studio, browser):
    """The runs page over 10,000 runs shows its first 50 rows in one page's time.

    The goal is 300 ms (128-177 ms measured on an idle 2-core machine, docs/guide/ui.md); the test
    prints the figure and fails only above 1,000 ms, a page that fetches or draws per run: a CI
    machine busy with other suites measured 370-440 ms, and a timed assertion at the goal
    failed a clean-clone CI run for load alone.
    """
    runs = [studio.engine.submit("name: many\nsteps: [{id: a, tool: flow__echo}]\n") for _ in range(10000)]
    for run in runs:
        run.wait(60)
    url = studio.serve()

    api = []
    for _ in range(5):
        t0 = time.monotonic()
        with urllib.request.urlopen(url + "api/runs?limit=50", timeout=10) as resp:
            page = json.loads(resp.read())
        api.append((time.monotonic() - t0) * 1000)
    assert len(page["runs"]) == 50 and page["next_cursor"], "the first page is 50 runs and a cursor"

    loads = []
    for _ in range(3):
        browser.get("about:blank")
        browser.get(studio.page("runs"))
        # milliseconds from the navigation's start to 50 rows on screen
        loads.append(browser.wait_js("return document.querySelectorAll(args[0]).length >= 50 && performance.now();",
                                     tid("run-row"), timeout=TIMEOUT, what="50 run rows"))
    assert browser.attr(tid("run-row"), "data-run-id") == runs[-1].run_id  # newest first
    print("10,000 runs: GET /api/runs?limit=50 median %.1f ms; runs page to 50 rows %s ms"
          % (sorted(api)[2], ", ".join("%.0f" % v for v in loads)))
    assert min(loads) < 1000, loads


@pytest.mark.scale  # timed: run alone by make test-long, never beside other xdist workers
def test_run_page_of_a_10000_item_foreach_stays_responsive(studio, browser):
    go = studio.hold_event()

    @studio.engine.tool(thread="worker")
    def frame(i):
        go.wait(120)
        return i

    studio.serve(workers=8)
    spec = ("name: big_foreach\nsteps:\n  - id: each\n    kind: foreach\n    items: \"{{inputs.items}}\"\n"
            "    concurrency: 8\n    steps: [{id: f, tool: frame, args: {i: \"{{item}}\"}}]\n")
    run_id = studio.engine.submit(spec, {"items": list(range(10000))}).run_id
    Browser.wait_until(lambda: studio.status(run_id).status is WorkflowStatus.RUNNING, what="the run to start")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "running")
    # the longest the page's main thread was busy while 10,000 items finished: a 20 ms heartbeat's
    # largest lateness
    browser.execute("window.__maxStall = 0; let last = performance.now();"
                    "window.__beat = setInterval(() => { const now = performance.now();"
                    " window.__maxStall = Math.max(window.__maxStall, now - last - 20); last = now; }, 20);")
    t0 = time.monotonic()
    go.set()
    studio.wait_status(run_id, "completed", timeout=120)
    engine_secs = time.monotonic() - t0
    total = studio.status(run_id).progress[1]
    browser.wait_text(tid("run-status"), "completed", timeout=TIMEOUT)
    browser.wait_attr(tid("run-progress"), "data-done", "Number(v) === %d" % total, timeout=TIMEOUT)
    shown_secs = time.monotonic() - t0
    stall = browser.execute("clearInterval(window.__beat); return window.__maxStall;")
    print("10,000-item foreach: engine done in %.1f s, page showed it in %.1f s, longest main-thread stall %.0f ms"
          % (engine_secs, shown_secs, stall))
    # The figure is the measurement (printed with -s; quoted in docs/guide/ui.md): 200-600 ms on a loaded
    # 2-core machine. The assertion only catches a frozen page (a page that redraws every row on each
    # message stalls about 2 s): a tight bound here would be a timed test that flakes with load.
    assert stall < 1500, "the page froze for %.0f ms while the foreach ran" % stall


# -- screenshots for docs/guide/ui.md --------------------------------------------------------------

NIGHTLY = """
name: nightly_intake
description: "Import the vendor drop, export FBX per shot, QC, then push to Unreal once approved."
steps:
  - {id: list, tool: list_drop}
  - id: per_shot
    kind: foreach
    items: "$.list.shots"
    as: shot
    concurrency: 2
    on_any_fail: continue
    steps:
      - {id: export, tool: export_fbx, args: {shot: "{{shot}}"}, retry: {max_attempts: 2, initial_delay_ms: 10}}
      - {id: qc, tool: qc_check, args: {shot: "{{shot}}"}}
  - {id: approve_push, kind: approve, prompt: "Push tonight's drop to Unreal?"}
  - {id: push, tool: push_unreal}
"""

LIGHTING = """
name: lighting_renders
description: "Render lighting passes for one sequence."
inputs:
  sequence: {type: string, default: sq010}
steps:
  - {id: render, tool: render_pass, args: {sequence: "{{inputs.sequence}}"}}
"""


def _shots_dir(tmp_path_factory):
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        return os.path.join(ROOT, "docs", "guide", "ui")
    return str(tmp_path_factory.mktemp("ui-screenshots"))


def _populate(studio):
    """A studio evening: a completed, a waiting and a running nightly intake (each with a retried
    export), a failed lighting render, scheduled lighting renders, a nightly schedule and a
    disabled one with fires. Returns the ids of the running intake and of the failed render (for
    the run pages)."""
    engine = studio.engine
    hold = studio.hold()
    flaky = {"n": 0}
    block = {"on": False}

    @engine.tool(thread="worker")
    def list_drop():
        return {"shots": ["sh%03d" % (10 * i) for i in range(1, 9)]}

    @engine.tool(thread="worker")
    def export_fbx(shot):
        if shot == "sh030":
            flaky["n"] += 1
            if flaky["n"] % 2 == 1:  # the first attempt of each run: retried (transient)
                raise ConnectionError("license server timed out")
        if block["on"] and shot >= "sh050":
            hold.acquire(timeout=120)
        return {"fbx": "/vendor/fbx/%s.fbx" % shot}

    @engine.tool(thread="worker")
    def qc_check(shot):
        return {"ok": True, "shot": shot}

    @engine.tool(thread="worker")
    def push_unreal():
        return {"pushed": 8}

    # The tool's code is compiled as a studio's tools module would be, so the traceback on the run
    # page (and in docs/guide/ui/) names that file, not this test's checkout path.
    studio_code = (
        "def check_frames(sequence):\n"
        "    raise ValueError('%s: 12 frames have NaN transforms (frames 1012-1023 of the camera rig; '\n"
        "                     're-export the rig from the layout scene)' % sequence)\n"
        "\n"
        "def render_pass(sequence):\n"
        "    if sequence == 'sq030':\n"
        "        check_frames(sequence)  # a traceback of two frames on the run page\n"
        "    return {'frames': 240, 'sequence': sequence}\n")
    studio_module = {}
    exec(compile(studio_code, "/studio/pipeline/lighting_tools.py", "exec"), studio_module)
    engine.tool(thread="worker")(studio_module["render_pass"])

    # two versions: an earlier draft, then tonight's (the workflow page lists both)
    engine.register_workflow(NIGHTLY.replace("once approved.", "once approved (draft)."))
    engine.register_workflow(NIGHTLY)
    engine.register_workflow(TURNTABLE)  # the start page's form (its tool is never called)
    engine.schedule(LIGHTING, every="1s", id="lighting_hourly", inputs={"sequence": "sq020"})
    engine.schedule("nightly_intake", cron="0 0 2 * * *", id="nightly_intake")
    studio.serve(workers=4, scheduler=True)
    Browser.wait_until(lambda: len(engine.schedule_fires("lighting_hourly")) >= 2, timeout=TIMEOUT,
                       what="two fires of the interval schedule")
    # the same schedule, hourly and disabled: its fires stay, it stops adding runs
    engine.schedule("lighting_renders", every="1h", id="lighting_hourly", inputs={"sequence": "sq020"},
                    enabled=False)

    done = engine.submit("nightly_intake").run_id
    studio.wait_status(done, "waiting")
    engine.approve(done, "approve_push", by="ada", reason="looks right")
    studio.wait_status(done, "completed")
    failed = engine.submit("lighting_renders", {"sequence": "sq030"}).run_id
    studio.wait_status(failed, "failed")
    waiting = engine.submit("nightly_intake").run_id
    studio.wait_status(waiting, "waiting")
    block["on"] = True
    running = engine.submit("nightly_intake").run_id
    Browser.wait_until(lambda: studio.status(running).progress[0] >= 6, timeout=TIMEOUT,
                       what="the running intake to get half way")
    return running, failed


def test_screenshots_of_every_page(studio, browser, tmp_path_factory):
    out = _shots_dir(tmp_path_factory)
    running, failed = _populate(studio)
    pages = (
        ("runs", "runs", tid("run-row")),
        ("run", "runs/" + running, tid("run-graph") + " " + tid("step-node")),
        ("run-failed", "runs/" + failed, tid("run-graph") + " " + tid("step-node")),
        ("workflows", "workflows", tid("workflow-row")),
        ("workflow", "workflows/nightly_intake", tid("workflow-versions") + " " + tid("version-row")),
        ("schedules", "schedules", tid("schedule-row")),
        ("start", "start/turntable", tid("start-form", workflow="turntable")),
    )
    written = []
    try:
        for width, height in SIZES:
            browser.set_viewport(width, height)
            for name, route, ready in pages:
                browser.get(studio.page(route))
                browser.wait_css(ready, timeout=TIMEOUT)
                if name == "run":
                    browser.wait_css(tid("run-gantt") + " " + tid("gantt-bar"), timeout=TIMEOUT)
                    nodes = dict(browser.execute(
                        "return Array.from(document.querySelectorAll(arguments[0]),"
                        " n => [n.getAttribute('data-step'), n.getAttribute('data-status')]);", tid("step-node")))
                    assert {"list", "per_shot", "approve_push", "push"} <= set(nodes), nodes  # the spec's graph
                    assert nodes["list"] == "completed", nodes
                    fits = browser.execute("const t = document.querySelector(arguments[0]);"
                                           " return t.scrollWidth <= t.clientWidth + 1;",
                                           ".steps-card .table-wrap")
                    assert fits, "the steps table is wider than its card at %dx%d" % (width, height)
                if name == "run-failed":  # the failed step selected: its error kind, message and traceback
                    browser.click(tid("step-row", step_key="render"))
                    browser.wait_css(tid("step-error-message"), timeout=TIMEOUT)
                    Browser.wait_until(lambda: "12 frames have NaN transforms" in browser.text_of(tid("step-error-message")),
                                       timeout=TIMEOUT, what="the failed step's error message")
                    browser.wait_css(tid("step-traceback"), timeout=TIMEOUT)
                    trace = browser.text_of(tid("step-traceback"))
                    assert "check_frames" in trace and "ValueError" in trace, trace
                    # the error and its traceback in view (below the graph and timeline at 1366x768)
                    browser.execute("document.querySelector(arguments[0]).scrollIntoView({block: 'center'});",
                                    tid("step-error"))
                    labels = browser.execute("return Array.from(document.querySelectorAll(arguments[0]),"
                                             " t => t.textContent);", tid("run-gantt") + " > text:not(.key)")
                    assert len(set(labels)) == len(labels), labels  # the time axis tells its ticks apart
                if name == "workflow":  # the graph and both versions, the newest first and current
                    browser.wait_css(tid("workflow-graph") + " " + tid("step-node"), timeout=TIMEOUT)
                    assert browser.attrs(tid("version-row"), "data-version") == ["2", "1"]
                if name == "start":  # a bad value, shown next to its field by the engine's own check
                    browser.find(_field("asset") + " " + tid("start-input")).send_keys("hero_chair")
                    frames = browser.find(_field("frames") + " " + tid("start-input"))
                    frames.clear()
                    frames.send_keys("lots")
                    by = browser.find(tid("start-by"))
                    by.clear()  # kept from the first size's page
                    by.send_keys("Ada Producer")
                    browser.click(tid("start-submit"))
                    browser.wait_css(_field("frames") + " " + tid("field-error"), timeout=TIMEOUT)
                if name == "runs":  # a long error is clipped in its cell, whole in its title
                    clip = browser.execute(
                        "const td = document.querySelector(arguments[0]);"
                        " const table = td.closest('table').getBoundingClientRect();"
                        " return [td.getBoundingClientRect().right <= table.right + 0.5,"
                        " td.scrollWidth > td.clientWidth, td.title];",
                        tid("run-row", status="failed") + " " + tid("run-error"))
                    assert clip[0], "the ERROR cell runs past the table's right edge"
                    assert "re-export the rig" in clip[2], clip
                path = os.path.join(out, "%s-%dx%d.png" % (name, width, height))
                browser.screenshot(path)
                written.append(path)
                assert check_png(path) == (width, height)
    finally:
        browser.set_viewport(1366, 768)
    assert [png_size(p) for p in written] == [s for s in SIZES for _ in pages]


def test_step_panel_lists_attempts_with_rendered_args_as_text(studio, browser):
    studio.serve()
    run_id = studio.engine.submit(
        "name: flaky\ninputs: {note: {type: string}}\nsteps:\n"
        "  - {id: push, tool: flow__fail, args: {times: 2, kind: transient, note: '{{inputs.note}}', api_token: s3cr3t},"
        " retry: {max_attempts: 3, initial_delay_ms: 1}}\n", {"note": EVIL}).run_id
    studio.wait_status(run_id, "completed")

    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-status"), "completed")
    browser.click(tid("step-row", step_key="push"))
    browser.wait_css(tid("step-attempts"))
    assert browser.execute("return document.querySelectorAll(arguments[0]).length;", tid("step-attempt")) == 3
    attempts = browser.text_of(tid("step-attempts"))
    assert "transient" in attempts and "#3" in attempts, attempts
    args = browser.text_of(tid("step-args"))
    assert "<script>window.__pwned = 1</script>" in args and "[redacted]" in args and "s3cr3t" not in args, args
    declared = browser.text_of(tid("step-inputs"))
    assert "{{inputs.note}}" in declared and "s3cr3t" not in declared, declared

    # resumed (push forced to run again): the run says so, and the step lists all six attempts
    studio.engine.resume(run_id, force_steps=["push"], by="Lead Lighter").wait(timeout=10)
    browser.get(studio.page("runs/" + run_id))
    browser.wait_text(tid("run-resumes"), "Resumed 1×, last by Lead Lighter")
    browser.click(tid("step-row", step_key="push"))
    browser.wait_js("return document.querySelectorAll(args[0]).length === 6;", tid("step-attempt"), what="six attempts")
    assert browser.execute("return typeof window.__pwned;") == "undefined"
