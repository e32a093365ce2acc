"""Issue 33, defect 7 (first item): closing an engine while threads keep submitting.

``close()`` must refuse new work at once and finish promptly: a run whose submit was under way
as the close began is stopped with the others (it was not, and the close waited 30 s for it and
failed with code ``internal``), and every submit after the close began fails with code
``closed`` (``EngineClosedError``; a stale handle is one too).
"""

import threading
import time
from typing import List

from dcc_flow import Engine, EngineClosedError

THREADS = 8
SPEC = {"name": "held", "steps": [{"id": "a", "tool": "held"}]}  # a main-lane tool nobody pumps


def _submit_until_closed(engine: Engine, started: threading.Event, errors: List[BaseException],
                         others: List[BaseException], counts: List[int]) -> None:
    while True:
        try:
            engine.submit(SPEC)
            counts.append(1)
            if len(counts) >= THREADS * 4:
                started.set()
        except EngineClosedError as exc:
            errors.append(exc)
            return
        except BaseException as exc:  # noqa: BLE001 - any other error fails the test
            others.append(exc)
            return


def test_close_while_threads_submit_is_prompt_and_refuses_with_closed(tmp_path):
    for round_ in range(3):
        engine = Engine(db=str(tmp_path / ("flow%d.db" % round_)))

        @engine.tool()
        def held() -> dict:  # never runs: nothing pumps the main lane
            return {}

        started = threading.Event()
        errors: List[BaseException] = []
        others: List[BaseException] = []
        counts: List[int] = []
        threads = [threading.Thread(target=_submit_until_closed, args=(engine, started, errors, others, counts),
                                    daemon=True) for _ in range(THREADS)]
        for t in threads:
            t.start()
        assert started.wait(30), "the submitting threads never got going"
        t0 = time.monotonic()
        engine.close()  # must not raise (it raised InternalError after 30 s)
        took = time.monotonic() - t0
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), "a submitting thread is stuck after close"
        assert took < 5, "close took %.1f s while threads submitted (round %d)" % (took, round_)
        assert not others, "submits during the close failed with other errors: %r" % others[:3]
        assert len(errors) == THREADS
        for exc in errors:
            assert exc.code in ("closed", "stale_handle"), exc
