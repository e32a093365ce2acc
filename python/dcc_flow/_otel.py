"""OpenTelemetry in the processes that run tools (docs/guide/tracing.md). Optional throughout:
``dcc_flow`` never requires ``opentelemetry-api`` or ``-sdk``, and imports them only when the
process already did (``enter``) or when the environment asks for export (``setup_export``).

- ``enter``/``leave``: around each tool call that has a ``traceparent`` (the engine traces), the
  call's span is the current OpenTelemetry context, so a tool's
  ``tracer.start_as_current_span("scene open")`` is a child of it with no set-up code. Only when
  the process has imported ``opentelemetry.context`` (a tool or the DCC uses OpenTelemetry):
  otherwise a dictionary lookup.
- ``setup_export``: ``dcc-flow worker`` calls it at start. Where ``opentelemetry-sdk`` and
  ``opentelemetry-exporter-otlp-proto-http`` are installed and the ``OTEL_*`` variables ask for
  export, it sets up the SDK's tracer provider with a batching OTLP/HTTP exporter, so that a TD's
  spans reach the collector with no set-up code either.
"""

import atexit
import importlib
import os
import sys
from typing import Any, Mapping, Optional, Tuple

__all__ = ["enter", "leave", "export_asked", "setup_export"]


def enter(traceparent: Optional[str]) -> Any:
    """Make the span of ``traceparent`` the current OpenTelemetry context of this thread, when
    the process uses OpenTelemetry; return what ``leave`` takes (``None`` when nothing was done).
    Never fails: OpenTelemetry's own errors are swallowed (the call runs untraced)."""
    if not traceparent or "opentelemetry.context" not in sys.modules:
        return None
    try:
        context = sys.modules["opentelemetry.context"]
        propagate = importlib.import_module("opentelemetry.propagate")
        return context.attach(propagate.extract({"traceparent": traceparent}))
    except Exception:  # noqa: BLE001 - tracing must never fail a tool call
        return None


def leave(token: Any) -> None:
    """Restore the context ``enter`` replaced."""
    if token is None:
        return
    try:
        sys.modules["opentelemetry.context"].detach(token)
    except Exception:  # noqa: BLE001
        pass


def export_asked(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """Whether the environment asks for the OTLP export of traces, as the OpenTelemetry SDKs read
    it: ``(endpoint, "")`` when ``OTEL_SDK_DISABLED`` is not ``true`` (any case),
    ``OTEL_TRACES_EXPORTER`` is unset, empty or a comma-separated list holding ``otlp`` (its
    default; ``none`` asks for no exporter), and ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (not blank; the SDKs' default endpoint,
    localhost:4318, does not count: every process would export to it). Otherwise ``("", why
    not)``. ``dcc-flow worker`` sets up its Python export by it (``setup_export``), and
    ``dcc-flow run``, ``resume``, ``unpause``, ``serve`` and ``worker --db`` turn the engine's tracing on by it
    (docs/guide/tracing.md)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "", "OTEL_SDK_DISABLED is true"
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if exporters and "otlp" not in exporters:
        return "", "OTEL_TRACES_EXPORTER is %r" % env.get("OTEL_TRACES_EXPORTER")
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
    if not endpoint:
        return "", "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    return endpoint, ""


def setup_export(environ: Optional[Mapping[str, str]] = None) -> str:
    """Set up OTLP/HTTP export of this process's OpenTelemetry spans, when the environment asks
    for it (``export_asked``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    set, ``OTEL_TRACES_EXPORTER`` unset or naming ``otlp``, ``OTEL_SDK_DISABLED`` not ``true``). The SDK reads the
    other ``OTEL_*`` variables itself (``OTEL_SERVICE_NAME``, headers, ``OTEL_BSP_*``). The spans
    still queued are exported when the process exits.

    Returns what it did, one line: ``"exporting to URL"``, or why it did nothing (not asked, the
    packages are missing, a tracer provider is set already, the SDK failed)."""
    endpoint, why_not = export_asked(environ)
    if not endpoint:
        return "not set up: " + why_not
    try:
        trace = importlib.import_module("opentelemetry.trace")
        sdk_trace = importlib.import_module("opentelemetry.sdk.trace")
        export = importlib.import_module("opentelemetry.sdk.trace.export")
        otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError as exc:
        return "not set up: %s (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http)" % exc
    try:
        if isinstance(trace.get_tracer_provider(), sdk_trace.TracerProvider):
            return "not set up: this process has an OpenTelemetry SDK tracer provider already"
        provider = sdk_trace.TracerProvider()  # its resource reads OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        provider.add_span_processor(export.BatchSpanProcessor(otlp.OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        atexit.register(provider.shutdown)
    except Exception as exc:  # noqa: BLE001 - a worker serves its tools untraced rather than not at all
        return "not set up: the OpenTelemetry SDK failed: %s: %s" % (type(exc).__name__, exc)
    return "exporting to %s" % endpoint
