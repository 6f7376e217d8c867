"""OpenTelemetry (issue 15, item 6): a command's span and its projection's batch span share
one trace, carried in the event's ``traceparent`` header; without a tracer provider, no
header and no spans."""

from __future__ import annotations

import pytest

trace = pytest.importorskip("opentelemetry.trace", reason="opentelemetry-api")
sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from memstream.client import open_memstream  # noqa: E402
from memstream.settings import Settings  # noqa: E402
from memstream.workers.observability.tracing import TRACEPARENT  # noqa: E402

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The process's tracer provider (set once: OpenTelemetry allows one per process)."""
    if not isinstance(trace.get_tracer_provider(), sdk.TracerProvider):
        provider = sdk.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


async def test_a_command_and_its_projection_share_a_trace(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    writer = await open_memstream(settings, workers=False)
    projector = await open_memstream(settings.with_(data_dir=settings.data_dir / "p"), workers=True)
    try:
        seq = await writer.session("traced").append_message(
            {"id": "m1", "role": "user", "content": "hi"}
        )
        stored = await writer.core.log.js.get_msg(settings.stream, seq)
        await projector.session("traced").get_history()  # waits until it is projected there
        await projector.sync("analytics")  # and counted by its analytics worker
    finally:
        await writer.close()
        await projector.close()
    finished = spans.get_finished_spans()
    commands = [s for s in finished if s.name == "memstream.command session"]
    batches = [s for s in finished if s.name == "memstream.project"]
    assert len(commands) == 1
    command = commands[0]
    assert command.kind == trace.SpanKind.PRODUCER
    assert command.attributes["memstream.seq"] >= 1
    ours = [b for b in batches if b.context.trace_id == command.context.trace_id]
    # One batch span per consumer of the projecting client: its projector's and its analytics
    # worker's, each a child of the command
    groups = sorted(str(b.attributes["messaging.consumer.group.name"]) for b in ours)
    assert len(groups) == 2
    assert groups[1] == f"{groups[0]}-analytics"
    for batch in ours:
        assert batch.parent is not None
        assert batch.parent.span_id == command.context.span_id
        assert batch.kind == trace.SpanKind.CONSUMER
    trace_id = f"{command.context.trace_id:032x}"
    assert (stored.headers or {})[TRACEPARENT].split("-")[1] == trace_id


async def test_no_tracer_provider_no_header(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenTelemetry imported but no provider set (what the API gives before one is)
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    ms = await open_memstream(settings, workers=False)
    try:
        seq = await ms.session("plain").append_message({"role": "user", "content": "hi"})
        stored = await ms.core.log.js.get_msg(settings.stream, seq)
    finally:
        await ms.close()
    assert TRACEPARENT not in (stored.headers or {})
