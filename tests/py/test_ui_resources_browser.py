"""The dashboard in a real headless Chromium shows a step waiting for its scarce resources
(docs/guide/resources.md, "Waiting, visibly"): its row's badge is waiting_resources, live, and
its detail says what it waits for and its place in the queue."""

import os
import threading

import pytest

from browser import Browser, require_chromium, tid
from dcc_flow import Engine

pytestmark = pytest.mark.xdist_group("test_ui_browser")  # one Chromium at a time (make test-py)

SPEC = "name: shot_sim\nsteps:\n  - {id: cook, tool: cook, args: {shot: sh010}, resources: {houdini: 1}}\n"


def test_run_page_shows_a_step_waiting_for_its_resources(tmp_path):
    require_chromium()
    release = threading.Event()
    engine = Engine(db=str(tmp_path / "flow.db"), config={"resources": {"houdini": {"limit": 1}}})
    browser = None
    try:
        @engine.tool(thread="worker")
        def cook(shot):
            assert release.wait(60)
            return {"shot": shot}

        engine.serve_tools(workers=2)
        url = engine.serve(ui="127.0.0.1:0")["ui_url"]
        holder = engine.submit(SPEC).run_id
        Browser.wait_until(lambda: engine.resources()[0]["in_use"] == 1, what="the holder to hold houdini")
        waiter = engine.submit(SPEC).run_id

        browser = Browser(width=1366, height=768)
        browser.get(url + "#/runs/" + waiter)
        browser.wait_text(tid("run-status"), "running")
        row = tid("step-row", step_key="cook")
        browser.wait_js("const e = document.querySelector(args[0]); return e && e.dataset.status === 'waiting_resources';",
                        row, what="the waiting step's row")
        badge = browser.find(row + " .badge")
        assert badge.text == "waiting_resources" and "s-waiting_resources" in badge.attribute("class")
        browser.click(row)
        detail = browser.wait_css(tid("step-waiting"))
        assert detail.text.startswith("houdini ×1: 1st of 1 in this engine's queue, since "), detail.text
        browser.screenshot(os.path.join(str(tmp_path), "waiting.png"))

        release.set()  # the holder ends; the waiter holds houdini and runs: live, without a reload
        browser.wait_text(tid("run-status"), "completed", timeout=30)
        assert engine.get_status(holder).ok
    finally:
        release.set()
        if browser is not None:
            browser.quit()
        engine.stop_serving()
        engine.close()
