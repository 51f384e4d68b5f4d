"""The default body limit follows the item limits: the largest allowed request fits, and a
body is never parsed far past what the item limits could accept.

Item and character limits apply only after the body is parsed (JSON, then validation, on
the event loop), so an oversized body limit is pure cost: parsing 32 MiB of one-character
items took ~0.9 s and ~230 MiB here.
"""

from __future__ import annotations

import json

from embed_server.settings import Settings


def _default(name: str) -> int:
    return int(Settings.model_fields[name].default)


def test_the_largest_request_the_item_limits_allow_fits_the_default_body_limit():
    items, chars = _default("max_items_per_request"), _default("max_text_chars")
    largest = json.dumps(
        {"model_name": "sentence-transformers/all-MiniLM-L6-v2", "text": ["a" * chars] * items}
    ).encode()
    limit = _default("max_body_bytes")
    assert len(largest) <= limit
    assert limit <= 2 * len(largest), f"{limit} bytes parsed for requests of {len(largest)}"
