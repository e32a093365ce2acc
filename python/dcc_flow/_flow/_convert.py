"""Converting Python values to spec JSON while tracing: references become ``{{…}}`` templates (or
JSONPath for foreach items and branch conditions) and are recorded as the step's data flow."""

import enum
import json
import math
import os
from typing import Any, Dict, Mapping

from ._base import Site, _fail
from ._refs import Ref, Unmapped, _Template
from ._trace import _Block, _FlowCallable, _Step, _Tracer


class _Converter:
    """Turns argument values into JSON, references into templates, and records the steps used."""

    def __init__(self, tracer: _Tracer, site: Site, step: _Step) -> None:
        self.tracer = tracer
        self.site = site
        self.step = step

    def ref(self, ref: Ref, where: str) -> None:
        self.tracer.check_ref(ref, self.site, where)
        if ref._kind == "step":
            self.step.refs.add(ref._root)

    def value(self, value: Any, where: str) -> Any:
        if isinstance(value, Ref):
            self.ref(value, where)
            return value._template()
        if isinstance(value, _Block):
            return self.value(value.output, where)
        if isinstance(value, _Template):
            for ref in value._refs:
                self.ref(ref, where)
            return str.__str__(value)
        if isinstance(value, enum.Enum):
            return self.value(value.value, where)
        if isinstance(value, str):
            return str.__str__(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                _fail("%s is %r, which JSON cannot hold" % (where, value), self.site, self.step.id)
            return float(value)
        if isinstance(value, Mapping):
            out: Dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    _fail("%s has a key of type %s; JSON keys are strings" % (where, type(key).__name__),
                          self.site, self.step.id)
                out[key] = self.value(item, "%s[%r]" % (where, key))
            return out
        if isinstance(value, (list, tuple)):
            return [self.value(item, "%s[%d]" % (where, i)) for i, item in enumerate(value)]
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, Unmapped):
            _fail("%s is unmapped(...), which only means something in task.map(...)" % where, self.site,
                  self.step.id)
        if isinstance(value, _FlowCallable):  # a Task or a Workflow
            _fail("%s is the task/workflow %r itself; call it and pass its result" % (where, value),
                  self.site, self.step.id)
        _fail(
            "%s is a %s, not a JSON value (str, number, bool, None, list, dict) or a reference"
            % (where, type(value).__name__),
            self.site,
            self.step.id,
        )

    def selector(self, value: Any, where: str) -> Any:
        """foreach ``items`` / branch ``on``: a reference becomes JSONPath; strings and literals pass."""
        if isinstance(value, _Block):
            value = value.output
        if isinstance(value, Ref):
            self.ref(value, where)
            return value._jsonpath()
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, (Ref, _Template, _Block)):
                    _fail(
                        "%s is a literal list holding references; iterate a reference to a list instead "
                        "(for example the output of a task that builds it)" % where,
                        self.site,
                        self.step.id,
                    )
        return self.value(value, where)


def _literal(value: Any, where: str, site: Site) -> Any:
    """A JSON value that must not hold references (defaults, policy fields)."""
    if isinstance(value, (Ref, _Template, _Block)):
        _fail("%s cannot be a reference" % where, site)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _fail("%s is not a JSON value: %s" % (where, exc), site)
    return json.loads(json.dumps(value))
