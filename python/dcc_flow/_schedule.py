"""The scheduler's declarative surface: schedules, triggers, schedules.yaml parsing, HMAC helpers.

Schedules are validated by the engine (``engine/internal/schedule``): ``ScheduleSpec.validate()``
and ``parse_schedules_yaml`` raise ``ValidationError`` (a ``ValueError``) listing every problem
with its file, line and schedule id.
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _ffi

__all__ = [
    "TriggerSpec",
    "ScheduleSpec",
    "parse_schedules_yaml",
    "hmac_sha256_hex",
    "verify_hub_signature_256",
    "timestamped_signature",
]

_TRIGGER_FIELDS = ("kind", "expression", "timezone", "jitter_secs", "every", "path", "secret_env", "signature",
                   "tolerance_secs")


class _Frozen:
    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("%s is immutable; build a new one" % type(self).__name__)

    def __delattr__(self, name: str) -> None:
        raise AttributeError("%s is immutable" % type(self).__name__)


class TriggerSpec(_Frozen):
    """When a schedule fires: ``TriggerSpec.cron``, ``.interval`` or ``.webhook``."""

    __slots__ = _TRIGGER_FIELDS

    kind: str
    expression: Optional[str]
    timezone: Optional[str]
    jitter_secs: int
    every: Optional[str]
    path: Optional[str]
    secret_env: Optional[str]
    signature: Optional[str]
    tolerance_secs: int

    def __init__(self, kind: str, expression: Optional[str] = None, timezone: Optional[str] = None,
                 jitter_secs: int = 0, every: Optional[str] = None, path: Optional[str] = None,
                 secret_env: Optional[str] = None, signature: Optional[str] = None, tolerance_secs: int = 0) -> None:
        values = (kind, expression, timezone, jitter_secs, every, path, secret_env, signature, tolerance_secs)
        for name, value in zip(_TRIGGER_FIELDS, values):
            object.__setattr__(self, name, value)

    @classmethod
    def cron(cls, expression: str, timezone: str = "UTC", jitter_secs: int = 0) -> "TriggerSpec":
        """A 6-field cron expression with seconds first (``"0 0 3 * * *"`` = 03:00 daily) or a
        descriptor (``"@daily"``), evaluated in the IANA ``timezone``, delayed by up to
        ``jitter_secs`` seconds."""
        return cls("cron", expression=expression, timezone=timezone, jitter_secs=int(jitter_secs))

    @classmethod
    def interval(cls, every: str) -> "TriggerSpec":
        """Every ``every`` (a duration such as ``"15m"`` or ``"1h30m"``, at least ``"1s"``)."""
        return cls("interval", every=every)

    @classmethod
    def webhook(cls, path: str, secret_env: Optional[str] = None, signature: Optional[str] = None,
                tolerance_secs: int = 0) -> "TriggerSpec":
        """A POST to ``path``; with ``secret_env``, signed with HMAC-SHA256: ``signature="github"``
        (the default: X-Hub-Signature-256 over the body) or ``"timestamped"`` (X-Dcc-Flow-Signature
        ``t=<unix>,v1=<hex>`` over ``"<t>.<body>"``, refused outside ``tolerance_secs``, default
        300; resists replay, see ``timestamped_signature``)."""
        return cls("webhook", path=path, secret_env=secret_env, signature=signature, tolerance_secs=int(tolerance_secs))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TriggerSpec":
        return cls(**{k: d[k] for k in _TRIGGER_FIELDS if k in d and d[k] is not None})

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": self.kind}
        for name in _TRIGGER_FIELDS[1:]:
            value = getattr(self, name)
            if value not in (None, 0, ""):
                out[name] = value
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TriggerSpec) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        return "TriggerSpec(%s)" % ", ".join("%s=%r" % kv for kv in self.to_dict().items())


class ScheduleSpec(_Frozen):
    """One schedule: start ``workflow`` with ``inputs`` when ``trigger`` fires.

    ``inputs`` is a mapping or a JSON object text; strings in it may use
    ``{{trigger.payload.x}}``, ``{{trigger.schedule_id}}``, ``{{trigger.workflow}}`` and
    ``{{trigger.fired_at}}``. ``max_concurrent`` (default 1, 0 = unlimited) caps the runs of this
    schedule that are not finished; ``catchup`` fires once at start after a missed fire.
    """

    __slots__ = ("id", "workflow", "trigger", "inputs", "enabled", "max_concurrent", "catchup", "source", "line")

    id: str
    workflow: str
    trigger: TriggerSpec
    inputs: Dict[str, Any]
    enabled: bool
    max_concurrent: int
    catchup: bool
    source: Optional[str]
    line: Optional[int]

    def __init__(self, id: str, workflow: str, trigger: TriggerSpec,
                 inputs: Union[None, str, Mapping[str, Any]] = None, enabled: bool = True,
                 max_concurrent: int = 1, catchup: bool = False, source: Optional[str] = None,
                 line: Optional[int] = None) -> None:
        if not isinstance(trigger, TriggerSpec):
            raise TypeError("trigger must be a TriggerSpec (TriggerSpec.cron/interval/webhook); got %s"
                            % type(trigger).__name__)
        if isinstance(inputs, str):
            decoded = json.loads(inputs) if inputs.strip() else {}
            if not isinstance(decoded, dict):
                raise ValueError("inputs must be a JSON object; got %s" % type(decoded).__name__)
            inputs = decoded
        values = (id, workflow, trigger, dict(inputs or {}), bool(enabled), int(max_concurrent), bool(catchup),
                  source, line)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ScheduleSpec":
        return cls(id=d["id"], workflow=d["workflow"], trigger=TriggerSpec.from_dict(d.get("trigger") or {}),
                   inputs=d.get("inputs"), enabled=d.get("enabled", True),
                   max_concurrent=d.get("max_concurrent", 1), catchup=d.get("catchup", False),
                   source=d.get("source"), line=d.get("line"))

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "workflow": self.workflow, "inputs": dict(self.inputs), "enabled": self.enabled,
                "max_concurrent": self.max_concurrent, "catchup": self.catchup, "trigger": self.trigger.to_dict()}

    def validate(self) -> None:
        """Raise ``ValidationError`` listing every problem of this schedule; None when valid."""
        _ffi.call("dccflow_schedules_validate", 0, {"schedules": [self.to_dict()]})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScheduleSpec) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        return "ScheduleSpec(id=%r, workflow=%r, trigger=%r)" % (self.id, self.workflow, self.trigger)


def parse_schedules_yaml(text: Union[str, bytes], path_hint: Optional[str] = None) -> List[ScheduleSpec]:
    """Parse and validate a ``*.schedules.yaml`` document (``schedules: [...]``).

    Raises ``ValidationError`` (a ``ValueError``) with every problem, each naming the file
    (``path_hint``), line and schedule id.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if not isinstance(text, str):
        raise TypeError("parse_schedules_yaml needs str or bytes; got %s" % type(text).__name__)
    out = _ffi.call("dccflow_schedules_parse", 0, {"text": text, "source": path_hint or ""}, path_hint)
    return [ScheduleSpec.from_dict(d) for d in out.get("schedules") or ()]


def _bytes(value: Union[str, bytes], what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("%s must be bytes or str; got %s" % (what, type(value).__name__))


def hmac_sha256_hex(secret: Union[str, bytes], body: Union[str, bytes]) -> str:
    """The lowercase hex HMAC-SHA256 of ``body`` with ``secret`` (what a webhook sender signs)."""
    import hashlib
    import hmac

    return hmac.new(_bytes(secret, "secret"), _bytes(body, "body"), hashlib.sha256).hexdigest()


def verify_hub_signature_256(secret: Union[str, bytes], body: Union[str, bytes], header: Optional[str]) -> bool:
    """Check an ``X-Hub-Signature-256: sha256=<hex>`` header in constant time.

    A missing header, a bare hex digest without ``sha256=`` or a wrong digest is False.
    """
    if not header or not header.startswith("sha256="):
        return False
    import hmac

    expected = "sha256=" + hmac_sha256_hex(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("ascii", "replace"))


def timestamped_signature(secret: Union[str, bytes], body: Union[str, bytes], timestamp: Optional[int] = None) -> str:
    """The ``X-Dcc-Flow-Signature`` header value of ``body`` for a webhook schedule with
    ``signature: timestamped``: ``"t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">"``, with
    ``timestamp`` (default: now). Sign each request when sending it: the server refuses a ``t``
    more than the schedule's ``tolerance_secs`` from its clock."""
    import time as _time

    t = int(_time.time() if timestamp is None else timestamp)
    return "t=%d,v1=%s" % (t, hmac_sha256_hex(secret, b"%d." % t + _bytes(body, "body")))
