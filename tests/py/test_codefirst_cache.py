"""``@task(cache=...)`` (docs/guide/assets.md, "Caching"): the spec's ``cache`` of a code-first
step, the function's source hash as its version, the options checked, and a second run served
from the cache while the file the task reads is unchanged."""

import pytest

import dcc_flow
from dcc_flow import Engine, task, workflow

CALLS = []


@task(cache=True, reads=["layer"], thread="worker")
def publish(layer: str) -> dict:
    CALLS.append(layer)
    with open(layer, encoding="utf-8") as f:
        return {"chars": len(f.read())}


@task(cache={"version": "3", "ttl_secs": 3600, "key": ["lut-v2"]})
def grade(shot: str) -> dict:
    return {"shot": shot}


@workflow
def publish_layer(layer: str):
    return publish(layer)


def _cache_of(flow, step=0):
    return flow.spec.to_dict()["steps"][step]["cache"]


def test_cache_true_takes_the_source_hash_as_its_version():
    @workflow
    def one(shot: str):
        return grade(shot)

    assert _cache_of(one) == {"version": "3", "ttl_secs": 3600, "key": ["lut-v2"]}
    version = _cache_of(publish_layer)["version"]
    assert version.startswith("src:") and len(version) == len("src:") + 16

    def edited(layer: str) -> dict:  # another body: another version
        return {"chars": 0}

    assert task(edited, cache=True).with_options(name="publish")._policy["cache"]["version"] != version
    assert "cache" not in task(edited)._policy


@pytest.mark.parametrize("options, error, match", [
    ({"cache": True, "idempotency_key": "auto"}, ValueError, "not both"),
    ({"cache": "yes"}, TypeError, "cache must be True, False or a mapping"),
    ({"cache": {"versoin": "2"}}, ValueError, "unknown field"),
    ({"cache": {"ttl_secs": -1}}, ValueError, "ttl_secs"),
])
def test_bad_cache_options_are_refused(options, error, match):
    def fn(shot: str) -> None:
        return None

    with pytest.raises(error, match=match):
        task(fn, **options)


def test_a_cached_task_is_skipped_while_its_input_is_unchanged(tmp_path):
    layer = tmp_path / "chair.usda"
    layer.write_text("#usda 1.0\n", encoding="utf-8")
    del CALLS[:]
    with Engine(db=str(tmp_path / "flow.db")) as engine:
        first = publish_layer.run(engine, layer=str(layer))
        second = publish_layer.run(engine, layer=str(layer))
        assert first.ok and second.ok and len(CALLS) == 1
        assert second.outputs == first.outputs
        assert [s.cached for s in engine.get_status(second.run_id, all_steps=True).steps] == [True]
        layer.write_text("#usda 1.0\n# edited\n", encoding="utf-8")
        assert publish_layer.run(engine, layer=str(layer)).ok and len(CALLS) == 2
    assert dcc_flow.task is task
