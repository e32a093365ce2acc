"""The OpenLineage events the engine writes (docs/guide/openlineage.md), checked against the
OpenLineage Python client's model of the spec.

No registry reachable from the build ships the published OpenLineage JSON schemas
(engine/internal/openlineage/testdata/README.md), but the client ``openlineage-python`` (pinned in
the Makefile's venv) ships ``openlineage.client.generated``: attrs classes generated from those
schemas (``RunEvent``, ``Run``, ``Job``, ``InputDataset``, one class per facet), with the spec's
required fields, types, enums and a few formats (UUID run ids, ISO date-times). ``structure``
below builds those classes from an event strictly: a field the class does not have, a required
field missing, a value of the wrong type, an unknown eventType, a facet under a key the spec does
not give it, or a ``schemaURL``/``_schemaURL`` other than the one the client stamps for that class
fails. The dcc-flow facet ``dccFlow_attempt`` is structured into a RunFacet subclass written here
from its own schema (engine/internal/openlineage/facets/1-0-0/DccFlowAttemptRunFacet.json), which
the test keeps equal to the schema's properties.

The events come from a real engine writing its JSON-lines file (the ``file`` of the engine config's
``openlineage`` section) for a workflow whose first task reads a scene and writes an export and
whose second reads the export and fails; the COMPLETE event the guide shows
(engine/internal/openlineage/testdata/example_complete.json, kept equal to what the Go encoder
writes by a Go test) is checked too.
"""

import enum
import json
import os
import types
import typing
from typing import Any, Dict, List, Optional

import pytest

import dcc_flow
from dcc_flow import WorkflowStatus

_MISSING = ("openlineage-python==1.54.0 is not installed here: the Makefile's venv target installs it (Python 3.10+); "
            "without its model of the spec the engine's OpenLineage events cannot be checked")
attr = pytest.importorskip("attr", reason=_MISSING)
client = pytest.importorskip("openlineage.client", reason=_MISSING)

from openlineage.client.generated import base  # noqa: E402
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet  # noqa: E402
from openlineage.client.generated.error_message_run import ErrorMessageRunFacet  # noqa: E402
from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet  # noqa: E402
from openlineage.client.generated.job_type_job import JobTypeJobFacet  # noqa: E402
from openlineage.client.generated.output_statistics_output_dataset import (  # noqa: E402
    OutputStatisticsOutputDatasetFacet,
)
from openlineage.client.generated.parent_run import ParentRunFacet  # noqa: E402
from openlineage.client.serde import Serde  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "engine", "internal", "openlineage")
ATTEMPT_SCHEMA = os.path.join(PKG, "facets", "1-0-0", "DccFlowAttemptRunFacet.json")
ATTEMPT_URL = ("https://raw.githubusercontent.com/dcc-flow/dcc-flow/main/engine/internal/openlineage/facets/1-0-0/"
               "DccFlowAttemptRunFacet.json#/$defs/DccFlowAttemptRunFacet")


@attr.define
class DccFlowAttemptRunFacet(base.RunFacet):
    """The dcc-flow facet, as its schema file defines it (test_the_attempt_facet_class_is_its_schema)."""

    runId: str  # noqa: N815
    stepKey: str  # noqa: N815
    attempt: int
    workflow: Optional[str] = attr.field(default=None)
    tool: Optional[str] = attr.field(default=None)
    parentRunId: Optional[str] = attr.field(default=None)  # noqa: N815
    environment: Optional[Dict[str, Any]] = attr.field(default=None)
    inputsOmitted: Optional[int] = attr.field(default=None)  # noqa: N815
    outputsOmitted: Optional[int] = attr.field(default=None)  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return ATTEMPT_URL


# The facet keys of the spec (each facet schema's top-level property) and dcc-flow's own, by the
# facet base class a facets mapping holds.
FACETS = {
    base.RunFacet: {"parent": ParentRunFacet, "errorMessage": ErrorMessageRunFacet,
                    "dccFlow_attempt": DccFlowAttemptRunFacet},
    base.JobFacet: {"jobType": JobTypeJobFacet},
    base.DatasetFacet: {"version": DatasetVersionDatasetFacet},
    base.InputDatasetFacet: {"inputStatistics": InputStatisticsInputDatasetFacet},
    base.OutputDatasetFacet: {"outputStatistics": OutputStatisticsOutputDatasetFacet},
}

# Required by the spec although the client's classes default them (they stamp their own).
SPEC_REQUIRED = {"producer", "_producer", "schemaURL", "_schemaURL"}


class NotTheSpec(AssertionError):
    pass


def structure(tp: Any, value: Any, path: str) -> Any:
    """Build an instance of type ``tp`` (a client class, a typing annotation) from JSON ``value``,
    strictly; NotTheSpec names the path of the first problem."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise NotTheSpec("%s: a union of %s is not supported here" % (path, options))
        return structure(options[0], value, path)
    if origin is list:
        if not isinstance(value, list):
            raise NotTheSpec("%s: %r is not a list" % (path, value))
        return [structure(args[0], v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise NotTheSpec("%s: %r is not an object" % (path, value))
        facet_classes = FACETS.get(args[1]) if isinstance(args[1], type) else None
        out = {}
        for k, v in value.items():
            if facet_classes is not None:
                if k not in facet_classes:
                    raise NotTheSpec("%s: %r is not a facet key of %s (known: %s)" % (
                        path, k, args[1].__name__, ", ".join(sorted(facet_classes))))
                out[k] = structure(facet_classes[k], v, "%s.%s" % (path, k))
            else:
                out[k] = structure(args[1], v, "%s.%s" % (path, k))
        return out
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise NotTheSpec("%s: %r is not one of %s" % (path, value, [m.value for m in tp])) from None
    if tp in (str, int, float, bool):
        ok = isinstance(value, tp) and not (tp is not bool and isinstance(value, bool))
        if tp is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise NotTheSpec("%s: %r is not a %s" % (path, value, tp.__name__))
        return value
    if isinstance(tp, type) and attr.has(tp):
        return structure_attrs(tp, value, path)
    raise NotTheSpec("%s: no rule for type %r" % (path, tp))


def structure_attrs(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise NotTheSpec("%s: %r is not an object (%s)" % (path, value, cls.__name__))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attr.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise NotTheSpec("%s: %s has no field %s" % (path, cls.__name__, ", ".join(unknown)))
    kwargs = {}
    for f in fields.values():
        if f.name not in value:
            if f.name in SPEC_REQUIRED or (f.init and f.default is attr.NOTHING):
                raise NotTheSpec("%s: %s is missing %s" % (path, cls.__name__, f.name))
            continue
        if not f.init:  # schemaURL, _schemaURL: the one the class stamps
            if value[f.name] != cls._get_schema():
                raise NotTheSpec("%s.%s: %r, but %s stamps %r" % (path, f.name, value[f.name], cls.__name__,
                                                                  cls._get_schema()))
            continue
        kwargs[f.alias] = structure(hints[f.name], value[f.name], "%s.%s" % (path, f.name))
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # the client's validators: run ids, date-times
        raise NotTheSpec("%s: %s refuses it: %s" % (path, cls.__name__, exc)) from None


def without_added_defaults(back: Any, orig: Any) -> Any:
    """``back`` without the empty mappings and lists the client adds as its fields' defaults
    (``facets: {}`` of a parent run) where ``orig`` has no such key."""
    if isinstance(back, dict) and isinstance(orig, dict):
        return {k: without_added_defaults(v, orig.get(k)) for k, v in back.items()
                if k in orig or v not in ({}, [])}
    if isinstance(back, list) and isinstance(orig, list) and len(back) == len(orig):
        return [without_added_defaults(b, o) for b, o in zip(back, orig)]
    return back


def check_event(event: Dict[str, Any]) -> Any:
    """Structure ``event`` into a RunEvent, and check that the client writes it back unchanged."""
    obj = structure(base.RunEvent, event, "event")
    back = without_added_defaults(json.loads(json.dumps(Serde.to_dict(obj))), event)
    assert back == event, "the client's model changes the event:\n%s\n%s" % (event, back)
    return obj


# --- the events an engine writes -----------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_events(tmp_path_factory):
    """The events of one run: export reads a scene and writes an abc; publish reads the abc and
    fails; a third task touches no file (no event)."""
    tmp = tmp_path_factory.mktemp("ol")
    scene, abc, out = tmp / "anim.ma", tmp / "anim.abc", tmp / "lineage.jsonl"
    scene.write_text("//Maya ASCII\n")

    @dcc_flow.task(reads="scene", writes="abc")
    def export_abc(scene: str, abc: str) -> str:
        with open(abc, "w") as f:
            f.write("abc of " + scene)
        return abc

    @dcc_flow.task
    def note(text: str) -> str:
        return text

    @dcc_flow.task(reads="abc")
    def publish(abc: str) -> None:
        raise RuntimeError("no camera named shotCam in " + os.path.basename(abc))

    @dcc_flow.workflow
    def shot_publish(scene: str, abc: str):
        made = export_abc(scene, abc=abc)
        publish(note(made))

    with dcc_flow.Engine(config={"openlineage": {"file": str(out), "namespace": "studio-test"}},
                         environment={"dcc": "maya", "version": "2025.3", "plugins": {"AbcExport": "1.0"}}) as engine:
        result = engine.run(shot_publish, {"scene": str(scene), "abc": str(abc)})
        assert result.status is WorkflowStatus.FAILED
        run_id = result.run_id
    lines = out.read_text().splitlines()
    return run_id, str(scene), str(abc), [json.loads(line) for line in lines]


def test_every_event_the_engine_writes_is_a_runevent_of_the_spec(engine_events):
    run_id, scene, abc, events = engine_events
    assert len(events) == 4, events
    objs = [check_event(ev) for ev in events]
    by_job: Dict[str, List[Any]] = {}
    for obj in objs:
        by_job.setdefault(obj.job.name, []).append(obj)
    assert sorted(by_job) == ["shot_publish.export_abc", "shot_publish.publish"], sorted(by_job)
    start, complete = by_job["shot_publish.export_abc"]
    assert [start.eventType, complete.eventType] == [base.EventType.START, base.EventType.COMPLETE]
    assert start.run.runId == complete.run.runId
    assert [(d.namespace, d.name) for d in complete.inputs] == [("file", scene)]
    assert [(d.namespace, d.name) for d in complete.outputs] == [("file", abc)]
    assert complete.outputs[0].facets["version"].datasetVersion.startswith("blake3:")
    assert complete.outputs[0].outputFacets["outputStatistics"].size == len("abc of " + scene)
    att = complete.run.facets["dccFlow_attempt"]
    assert (att.runId, att.stepKey, att.attempt, att.environment["dcc"]) == (run_id, "export_abc", 1, "maya")
    assert complete.job.namespace == "studio-test"
    assert isinstance(complete.run.facets["parent"], ParentRunFacet)
    start, fail = by_job["shot_publish.publish"]
    assert [start.eventType, fail.eventType] == [base.EventType.START, base.EventType.FAIL]
    err = fail.run.facets["errorMessage"]
    assert isinstance(err, ErrorMessageRunFacet) and "no camera named shotCam" in err.message
    assert err.programmingLanguage == "python" and "Traceback" in (err.stackTrace or "")
    assert [d.name for d in fail.inputs] == [abc] and fail.outputs == []


def test_the_guides_example_event_is_a_runevent_of_the_spec():
    with open(os.path.join(PKG, "testdata", "example_complete.json"), encoding="utf-8") as f:
        event = json.load(f)
    obj = check_event(event)
    assert obj.eventType is base.EventType.COMPLETE and len(obj.inputs) == 2


def test_the_attempt_facet_class_is_its_schema():
    with open(ATTEMPT_SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    own = schema["$defs"]["DccFlowAttemptRunFacet"]["allOf"][1]
    fields = {f.name: f for f in attr.fields(DccFlowAttemptRunFacet) if not f.name.startswith("_")}
    assert sorted(fields) == sorted(own["properties"])
    assert sorted(n for n, f in fields.items() if f.default is attr.NOTHING) == sorted(own["required"])
    assert schema["$id"] + "#/$defs/DccFlowAttemptRunFacet" == ATTEMPT_URL


# --- the check has teeth --------------------------------------------------------------------------


def broken(events: List[Dict[str, Any]], edit) -> Dict[str, Any]:
    ev = json.loads(json.dumps(next(e for e in events if e["eventType"] == "FAIL")))
    edit(ev)
    return ev


def _drop(d, key):
    del d[key]


@pytest.mark.parametrize("name, edit, words", [
    ("unknown top-level field", lambda ev: ev.update(runId="x"), "RunEvent has no field runId"),
    ("unknown eventType", lambda ev: ev.update(eventType="DONE"), "'DONE' is not one of"),
    ("runId not a UUID", lambda ev: ev["run"].update(runId="r-1"), "Run refuses it"),
    ("eventTime not a time", lambda ev: ev.update(eventTime="yesterday"), "RunEvent refuses it"),
    ("job without a name", lambda ev: _drop(ev["job"], "name"), "Job is missing name"),
    ("no producer", lambda ev: _drop(ev, "producer"), "RunEvent is missing producer"),
    ("facet without _producer", lambda ev: _drop(ev["run"]["facets"]["parent"], "_producer"),
     "ParentRunFacet is missing _producer"),
    ("errorMessage without programmingLanguage",
     lambda ev: _drop(ev["run"]["facets"]["errorMessage"], "programmingLanguage"),
     "ErrorMessageRunFacet is missing programmingLanguage"),
    ("facet with another facet's _schemaURL",
     lambda ev: ev["run"]["facets"]["errorMessage"].update(_schemaURL=ev["run"]["facets"]["parent"]["_schemaURL"]),
     "but ErrorMessageRunFacet stamps"),
    ("unknown facet key", lambda ev: ev["run"]["facets"].update(dccFlow_other={}), "'dccFlow_other' is not a facet key"),
    ("statistics under the wrong key",
     lambda ev: ev["inputs"][0].update(inputFacets={"outputStatistics": {}}), "'outputStatistics' is not a facet key"),
    ("dataset version not a string",
     lambda ev: ev["inputs"][0]["facets"]["version"].update(datasetVersion=3), "3 is not a str"),
    ("attempt facet attempt not an integer",
     lambda ev: ev["run"]["facets"]["dccFlow_attempt"].update(attempt="1"), "'1' is not a int"),
    ("attempt facet with an unknown field",
     lambda ev: ev["run"]["facets"]["dccFlow_attempt"].update(attemptNo=1), "DccFlowAttemptRunFacet has no field"),
    ("size not an integer",
     lambda ev: ev["inputs"][0]["inputFacets"]["inputStatistics"].update(size=1.5), "1.5 is not a int"),
    ("a boolean for an integer",
     lambda ev: ev["inputs"][0]["inputFacets"]["inputStatistics"].update(size=True), "True is not a int"),
])
def test_a_broken_event_fails_the_check(engine_events, name, edit, words):
    events = engine_events[3]
    check_event(broken(events, lambda ev: None))  # the unbroken one passes
    with pytest.raises(NotTheSpec) as info:
        structure(base.RunEvent, broken(events, edit), "event")
    assert words in str(info.value), (name, str(info.value))
