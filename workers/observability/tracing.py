"""OpenTelemetry spans around commands and projection batches, when the application uses
OpenTelemetry (``opentelemetry-api`` imported and a tracer provider set): nothing otherwise,
and the package is never imported by memstream itself.

A command's span (``memstream.command <kind>``, a producer span) puts its W3C trace context
in the ``traceparent`` header of every event it writes; a projector's batch span
(``memstream.project``, a consumer span) is the child of the first traced event's command
and links the others, so a command and its projection share one trace across processes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

TRACEPARENT = "traceparent"
TRACER_NAME = "memstream"


def tracing() -> bool:
    """Whether spans are made (see :func:`tracer`); cheap when OpenTelemetry is not imported."""
    return "opentelemetry.trace" in sys.modules and tracer() is not None


def tracer() -> Any | None:
    """The application's tracer, or None when it does not trace (OpenTelemetry not imported,
    or no tracer provider set)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer(TRACER_NAME)


@contextmanager
def command_span(kind: str, subject: str) -> Iterator[tuple[Any, str]]:
    """A span around one command: ``(span, traceparent)`` (``(None, "")`` untraced)."""
    traced = tracer()
    if traced is None:
        yield None, ""
        return
    from opentelemetry import propagate, trace

    with traced.start_as_current_span(
        f"memstream.command {kind}",
        kind=trace.SpanKind.PRODUCER,
        attributes={"messaging.system": "nats", "messaging.destination.name": subject},
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield span, carrier.get(TRACEPARENT, "")


@contextmanager
def batch_span(
    consumer: str, headers: Sequence[Mapping[str, str]], first: int, last: int
) -> Iterator[None]:
    """A span around one projection batch (the events' headers give its parent and links)."""
    traced = tracer()
    if traced is None:
        yield
        return
    from opentelemetry import propagate, trace

    contexts = []
    seen: set[str] = set()
    for header in headers:
        parent = header.get(TRACEPARENT)
        if parent and parent not in seen:
            seen.add(parent)
            contexts.append(propagate.extract({TRACEPARENT: parent}))
    parent_context = contexts[0] if contexts else None
    links = [
        trace.Link(trace.get_current_span(context).get_span_context()) for context in contexts[1:]
    ]
    with traced.start_as_current_span(
        "memstream.project",
        context=parent_context,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "nats",
            "messaging.consumer.group.name": consumer,
            "messaging.batch.message_count": len(headers),
            "memstream.first_seq": first,
            "memstream.last_seq": last,
        },
    ):
        yield
