"""Pools of servers (issue #18: "a list of URLs is one pool of remote servers", docs/guide/pools.md):
a ``url`` list in the remotes config makes one pool of streamable HTTP MCP servers. The servers
here are real dcc-flow engines serving MCP on loopback ports; no mock of the pool."""

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus


@pytest.fixture()
def servers():
    """Two engines serving MCP over HTTP, each with a workflow ``where`` that works 300 ms and
    answers its name."""
    engines = {}
    for name in ("A", "B"):
        e = dcc_flow.Engine()
        e.register_workflow({"name": "where", "steps": [{"id": "work", "tool": "flow__sleep", "args": {"ms": 300}},
                                                        {"id": "e", "tool": "flow__echo", "args": {"server": name}}]})
        url = e.serve(mcp="http://127.0.0.1:0")["mcp_url"]
        engines[name] = (e, url)
    yield engines
    for e, _ in engines.values():
        e.close()


def batch(n, retry=None):
    step = {"id": "call", "kind": "tool_remote", "dcc": "farm", "tool": "workflows_run",
            "args": {"workflow": "where", "wait_secs": 30}}
    if retry:
        step["retry"] = retry
    return {"name": "farm_batch", "steps": [{"id": "each", "kind": "foreach", "items": list(range(n)),
                                             "concurrency": 4, "steps": [step]}]}


def served_by(result):
    return [it["call"]["outputs"]["e"]["server"] for it in result.outputs["each"]]


def test_a_url_list_is_one_pool_spread_over_its_servers_and_listed(servers):
    (_, url_a), (_, url_b) = servers["A"], servers["B"]
    config = {"remotes": {"farm": {"url": [url_a, url_b], "workers_per_url": 2}}}
    with dcc_flow.Engine(config=config) as engine:
        result = engine.run(batch(8))
        assert result.status is WorkflowStatus.COMPLETED, result.error
        # 8 calls of 300 ms, 4 at a time on 2 servers × 2 sessions: both servers served.
        assert sorted(set(served_by(result))) == ["A", "B"]
        steps = engine.get_status(result.run_id, all_steps=True).steps
        workers = {s.worker for s in steps if s.step_id == "call"}
        assert workers == {"farm/" + url_a, "farm/" + url_b}  # the step record names the server

        (pool,) = engine.pools()
        assert pool["name"] == "farm" and pool["command"] is None and pool["urls"] == [url_a, url_b]
        assert pool["workers"] == 4 and pool["lost"] == 0
        assert pool["running"] and all(w["pid"] is None and w["url"] in (url_a, url_b) for w in pool["running"])
        assert all(w["state"] == "idle" for w in pool["running"])


def test_a_server_that_goes_away_fails_its_calls_worker_lost_and_they_are_retried_on_another(servers):
    (a, url_a), (b, url_b) = servers["A"], servers["B"]
    config = {"remotes": {"farm": {"url": [url_a, url_b], "workers_per_url": 2}}}
    with dcc_flow.Engine(config=config) as engine:
        warm = engine.run(batch(8))
        assert warm.status is WorkflowStatus.COMPLETED and "A" in served_by(warm)  # sessions open on A
        a.close()  # server A stops

        result = engine.run(batch(8, retry={"max_attempts": 3, "initial_delay_ms": 10}))
        assert result.status is WorkflowStatus.COMPLETED, result.error
        assert served_by(result) == ["B"] * 8
        steps = engine.get_status(result.run_id, all_steps=True).steps
        retried = [s for s in steps if s.step_id == "call" and s.attempt > 1]
        assert retried and all(s.worker == "farm/" + url_b for s in retried)
        events = [ev for ev in engine.events(run_id=result.run_id, timeout=5, until_terminal=True)
                  if ev["type"] == "step_retry"]
        assert events and all(ev["detail"]["error"]["kind"] == "worker_lost" for ev in events)
        assert all(ev["detail"]["worker"] == "farm/" + url_a for ev in events)
        assert all(url_a in ev["detail"]["error"]["message"] for ev in events)
        assert engine.pools()[0]["lost"] >= 1

        # With no retry policy, a call that finds no server fails with that kind and names the URL.
        b.close()
        failed = engine.run(batch(1))
        assert failed.status is WorkflowStatus.FAILED
        step = [s for s in engine.get_status(failed.run_id, all_steps=True).steps if s.step_id == "call"][0]
        assert step.error["kind"] == "worker_lost" and url_b in step.error["message"], step.error


def test_dcc_flow_pools_lists_and_warms_a_pool_of_servers(servers, tmp_path):
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (_, url_a), (_, url_b) = servers["A"], servers["B"]
    (tmp_path / "remotes.json").write_text(json.dumps({"farm": {"url": [url_a, url_b]}}))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    proc = subprocess.run([sys.executable, "-m", "dcc_flow", "pools", "--remotes", "remotes.json", "--warm"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "farm: 2 workers max, %s %s" % (url_a, url_b)
    assert lines[1].split() == ["ID", "STATE", "URL", "CALLS", "UPTIME"]
    assert sorted(line.split()[2] for line in lines[2:]) == sorted([url_a, url_b])
    assert all(line.split()[1] == "idle" for line in lines[2:])
