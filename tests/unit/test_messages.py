"""Stored messages decoded back: a large history parses as one array, and leaves the garbage
collector as it found it."""

from __future__ import annotations

import gc
import json

from memstream.domain.messages import decode_messages


def test_a_large_decode_leaves_the_garbage_collector_as_it_found_it() -> None:
    # Given 2,000 stored messages (a large decode pauses the collector while it parses)
    texts = [json.dumps({"id": f"m{i}", "role": "user", "parts": []}) for i in range(2000)]
    for enabled in (True, False):
        # When they are decoded with the collector enabled, then disabled
        if enabled:
            gc.enable()
        else:
            gc.disable()
        try:
            decoded = decode_messages(texts)
            # Then every message comes back, and the collector is as it was
            assert [m["id"] for m in decoded if m] == [f"m{i}" for i in range(2000)]
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
