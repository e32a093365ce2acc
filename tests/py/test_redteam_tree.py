"""Issue 33, defect 2: a fan-out of sub-workflows had no total bound (20 items four levels
deep started 168,420 runs, all live at once, and the process ran out of memory). Through the
public API: past ``max_tree_runs`` the workflow step that would start the next child fails with
kind ``limit_exceeded`` naming the setting, the failure goes up as any other, nothing stays
running (docs/reference/limits.md "Run limits")."""

import pytest

from dcc_flow import Engine, InvalidRequestError


def _level(k, items):
    return (
        "name: lvl%d\n"
        "steps:\n"
        "  - id: each\n"
        "    kind: foreach\n"
        "    items: %s\n"
        "    concurrency: 10\n"
        "    on_any_fail: continue\n"
        "    steps:\n"
        "      - {id: down, kind: workflow, workflow: lvl%d}\n" % (k, list(range(items)), k + 1)
    )


def test_a_tree_past_max_tree_runs_fails_the_step_that_would_start_the_next_run():
    with Engine(config={"max_tree_runs": 20}) as engine:
        engine.register_workflow("name: lvl2\nsteps:\n  - {id: leaf, tool: flow__echo}\n")
        engine.register_workflow(_level(1, 10))
        result = engine.run(_level(0, 5))
        assert not result.ok
        assert result.error["kind"] == "limit_exceeded"
        for part in ("max_tree_runs", "limit of 20", "21 runs", "up to 10,000,000"):
            assert part in result.error["message"]
        runs = engine.runs()
        assert len(runs) == 20  # the top run, its 5 children and 14 of theirs
        assert all(r.status in ("completed", "failed") for r in runs)
    with pytest.raises(InvalidRequestError, match="max_tree_runs"):
        Engine(config={"max_tree_runs": 10_000_001})
    for key in ("max_tree_instances", "max_tree_parallel"):
        with pytest.raises(InvalidRequestError, match=key):
            Engine(config={key: -1})


def test_the_default_limits_let_a_moderate_tree_run():
    with Engine() as engine:
        engine.register_workflow("name: lvl2\nsteps:\n  - {id: leaf, tool: flow__echo}\n")
        engine.register_workflow(_level(1, 20))
        result = engine.run(_level(0, 20))
        assert result.ok, result.error
        assert len(engine.runs()) == 1 + 20 + 400
