"""Constants and the exception the workers raise for a property violation."""

from __future__ import annotations


DEFAULT_RUNS = 10_000_000
CODES = frozenset({
    "invalid_argument", "buffer_too_small", "size_mismatch", "truncated", "bad_magic", "unsupported_version",
    "bad_header", "codec_mismatch", "checksum_mismatch", "count_too_large", "index_out_of_range",
    "index_not_ascending", "non_finite_value", "device_error", "bad_meta"})
RESTART_CODES = frozenset({"truncated", "bad_magic", "unsupported_version", "bad_header", "size_mismatch",
                           "checksum_mismatch"})
MAX_INPUT = 1 << 20  # inputs never grow beyond this (doubling stops)


class Violation(Exception):
    """A property violation found in the worker: kind ("exception", "output modified", ...) and
    detail."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
