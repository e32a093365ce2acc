"""Retry policies of ``@task``: ``Retry`` and the delay lists it accepts, compiled to the spec's
``retry`` block."""

import math
from typing import Any, Optional, Sequence

from .._spec import RetryPolicy


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, type) and issubclass(value, BaseException):
        kind = getattr(value, "kind", None)
        if isinstance(kind, str) and kind:
            return kind
        for cls, name in (
            (TimeoutError, "timeout"),
            (ConnectionError, "transient"),
            (PermissionError, "permission"),
            (FileNotFoundError, "not_found"),
            (ValueError, "invalid_input"),
            (TypeError, "invalid_input"),
        ):
            if issubclass(value, cls):
                return name
        return "error"
    raise TypeError("retry_on takes error kinds (str) or exception classes; got %r" % (value,))


def _ms(seconds: Any, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise TypeError("%s must be a number of seconds; got %r" % (what, seconds))
    if seconds < 0:
        raise ValueError("%s must be >= 0; got %r" % (what, seconds))
    return int(round(seconds * 1000))


class Retry:
    """How a task's retries are spaced (the ``retry`` block of the spec, in seconds).

    ``Retry(backoff="exponential", initial_delay_seconds=0.5, max_delay_seconds=None, jitter=0.0,
    retry_on=None, multiplier=None)``: ``backoff`` is ``fixed``, ``linear`` or ``exponential``
    (``multiplier``, 1 to 100, is its growth factor; ``None`` = 2); ``max_delay_seconds``
    defaults to 10 (or the initial delay when that is larger); ``jitter`` is relative, in [0, 1];
    ``retry_on`` lists error kinds (``"transient"``, ``"timeout"``, …) or exception classes
    (``ConnectionError`` → ``transient``…); ``None`` keeps the default rule. Give it as
    ``@task(retries=N, retry_delay_seconds=Retry(...))``.
    """

    __slots__ = ("backoff", "initial_delay_ms", "max_delay_ms", "jitter", "retry_on", "multiplier")

    def __init__(
        self,
        backoff: str = "exponential",
        initial_delay_seconds: float = 0.5,
        max_delay_seconds: Optional[float] = None,
        jitter: float = 0.0,
        retry_on: Optional[Sequence[Any]] = None,
        multiplier: Optional[float] = None,
    ) -> None:
        self.multiplier = multiplier
        self.initial_delay_ms = _ms(initial_delay_seconds, "Retry(initial_delay_seconds=)")
        if max_delay_seconds is None:
            self.max_delay_ms = max(10000, self.initial_delay_ms)
        else:
            self.max_delay_ms = _ms(max_delay_seconds, "Retry(max_delay_seconds=)")
        self.backoff = str(getattr(backoff, "value", backoff))
        self.jitter = jitter
        if retry_on is not None and isinstance(retry_on, (str, bytes)):
            raise TypeError("Retry(retry_on=) takes a list of error kinds, not a single string")
        self.retry_on = None if retry_on is None else [_kind_of(k) for k in retry_on]
        self.policy(2)  # validate now

    def policy(self, max_attempts: int) -> RetryPolicy:
        """The spec's retry policy with ``max_attempts`` attempts in all."""
        return RetryPolicy(
            max_attempts,
            backoff=self.backoff,
            initial_delay_ms=self.initial_delay_ms,
            max_delay_ms=self.max_delay_ms,
            jitter=self.jitter,
            retry_on=self.retry_on,
            multiplier=self.multiplier,
        )

    def __repr__(self) -> str:
        return "Retry(backoff=%r, initial_delay_seconds=%g, max_delay_seconds=%g, jitter=%r, retry_on=%r%s)" % (
            self.backoff,
            self.initial_delay_ms / 1000.0,
            self.max_delay_ms / 1000.0,
            self.jitter,
            self.retry_on,
            "" if self.multiplier is None else ", multiplier=%r" % (self.multiplier,),
        )


def _retry_from_list(delays: Sequence[Any]) -> Retry:
    ms = [_ms(d, "retry_delay_seconds[%d]" % i) for i, d in enumerate(delays)]
    if not ms:
        raise ValueError("retry_delay_seconds=[] gives no delays; leave it out for the default backoff")
    first = ms[0]
    if all(d == first for d in ms):
        return Retry("fixed", first / 1000.0)
    if first > 0 and all(d == first * (2 ** i) for i, d in enumerate(ms)):
        return Retry("exponential", first / 1000.0, ms[-1] / 1000.0)
    if first > 0 and all(d == first * (i + 1) for i, d in enumerate(ms)):
        return Retry("linear", first / 1000.0, ms[-1] / 1000.0)
    raise ValueError(
        "retry_delay_seconds=%r cannot be expressed by the engine: delays are fixed (d, d, d…), linear "
        "(d, 2d, 3d…) or doubling (d, 2d, 4d…), clamped at the last one; use Retry(...)" % (list(delays),)
    )
