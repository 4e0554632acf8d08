"""Formats: CRC re-sealing and the offsets of length and count fields, per kind of input."""

from __future__ import annotations

import struct
from typing import List, Tuple

import gradcomp


def _crc(data) -> int:
    return gradcomp.crc32c(bytes(data))


def _crc2(first, then) -> int:
    return gradcomp.crc32c(bytes(then), gradcomp.crc32c(bytes(first)))


def _u(b, at: int, width: int) -> int:
    return int.from_bytes(b[at:at + width], "little")


def _align8(x: int) -> int:
    return (x + 7) & ~7


FRAME_HEADER = 88
FRAME_FIELDS = ((4, 2), (6, 2), (8, 4), (12, 1), (13, 1), (14, 2), (16, 4), (20, 4), (24, 8), (32, 8), (40, 8),
                (48, 8), (56, 8), (64, 8), (72, 8), (80, 4))


def _frames(b, at: int, end: int):
    """Yields (start, bytes) of each frame whose header parses enough to size it."""
    while end - at >= FRAME_HEADER and b[at:at + 4] == b"GCFR":
        meta, index, value = struct.unpack_from("<QQQ", b, at + 56)
        size = FRAME_HEADER + _align8(meta) + _align8(index) + _align8(value)
        if size > end - at:
            return
        yield at, size
        at += size


def _reseal_frames(b: bytearray, at: int, end: int) -> None:
    for start, size in list(_frames(b, at, end)):
        struct.pack_into("<I", b, start + 84, _crc2(b[start:start + 84], b[start + FRAME_HEADER:start + size]))


def _frame_fields(b, at: int, end: int) -> List[Tuple[int, int]]:
    return [(start + off, w) for start, _ in _frames(b, at, end) for off, w in FRAME_FIELDS]


def _slots(b, slot: int):
    if slot <= 0:
        return []
    return range(0, len(b) - slot + 1, slot)


def _blocks(b, block: int):
    """accumulate_many's layout: (start, [(begin, end) of payload 0, of payload 1]) per block of
    `block` bytes = 8 bytes of two int32 sizes, then one region of (block - 8) / 2 per payload."""
    out = []
    half = (block - 8) // 2
    for s in _slots(b, block):
        regions = []
        for j in range(2):
            at = s + 8 + j * half
            regions.append((at, min(at + _u(b, s + 4 * j, 4), at + half)))
        out.append((s, regions))
    return out


def _reseal_trailing(b: bytearray) -> None:
    if len(b) >= 8:
        struct.pack_into("<I", b, len(b) - 4, _crc(b[:-4]))


ENVELOPE_FIELDS = ((4, 2), (6, 2), (8, 8))  # version, reserved, payload bytes (docs/wire-format.md)
GCST_FIELDS = ENVELOPE_FIELDS + ((16, 8), (24, 8), (32, 8), (40, 8), (48, 8), (56, 4))
GCTC_FIELDS = ENVELOPE_FIELDS + ((16, 4), (20, 4), (24, 8), (32, 4), (36, 4), (40, 8), (48, 4), (52, 4), (56, 8))
GCSH_FIELDS = ENVELOPE_FIELDS + ((16, 8), (24, 8), (32, 4), (36, 4), (40, 4), (44, 4), (48, 4))
GCST_BYTES = 64  # the smallest compressor checkpoint: the envelope and the payload's fields
RESTART_FIELDS = ((8, 4), (12, 4), (16, 4), (20, 4), (24, 8), (32, 8), (44, 4))


def _gcsh_records(b):
    """(offset of the length field, record start, record bytes) of a sharded checkpoint."""
    out = []
    if len(b) < 56:
        return out
    world = min(_u(b, 32, 4), 64)
    at, end = 52, len(b) - 4
    for _ in range(world + 1):
        if end - at < 8:
            break
        size = _u(b, at, 8)
        if size > end - at - 8:
            break
        out.append((at, at + 8, size))
        at += 8 + size
    return out


def reseal(kind: str, b: bytearray, slot: int = 0) -> None:
    """Recomputes the CRC32Cs of an input of this kind, where its structure still parses."""
    if kind == "frames":
        _reseal_frames(b, 0, len(b))
    elif kind == "slots":  # the sharded path's slots: a 16-byte head, then frames
        for s in _slots(b, slot):
            _reseal_frames(b, s + 16, s + slot)
    elif kind == "gathered":  # accumulate_gathered: payloads back to back, or one per slot
        if slot == 0:
            _reseal_frames(b, 0, len(b))
        else:
            for s in _slots(b, slot):
                _reseal_frames(b, s, s + slot)
    elif kind == "blocks":  # accumulate_many: per rank, two int32 sizes, then two payloads
        for s, regions in _blocks(b, slot):
            for at, end in regions:
                _reseal_frames(b, at, end)
    elif kind in ("gcst", "gctc"):
        _reseal_trailing(b)
    elif kind == "gcsh":
        for _, start, size in _gcsh_records(b):
            if size >= 8:
                struct.pack_into("<I", b, start + size - 4, _crc(b[start:start + size - 4]))
        _reseal_trailing(b)
    elif kind == "restart":
        if len(b) >= 48:
            struct.pack_into("<I", b, 40, _crc2(b[:40], b[48:]))


def fields(kind: str, b, slot: int = 0) -> List[Tuple[int, int]]:
    """(offset, width) of the length, count and identity fields of a valid input."""
    if kind == "frames":
        return _frame_fields(b, 0, len(b))
    if kind == "slots":
        out = []
        for s in _slots(b, slot):
            out += [(s + 4, 4), (s + 8, 4), (s + 12, 4)] + _frame_fields(b, s + 16, s + slot)
        return out
    if kind == "gathered":
        if slot == 0:
            return _frame_fields(b, 0, len(b))
        return [f for s in _slots(b, slot) for f in _frame_fields(b, s, s + slot)]
    if kind == "blocks":
        return [f for s, regions in _blocks(b, slot) for f in [(s, 4), (s + 4, 4)] +
                [g for at, end in regions for g in _frame_fields(b, at, end)]]
    if kind == "gcst":
        return list(GCST_FIELDS)
    if kind == "gctc":
        return list(GCTC_FIELDS)
    if kind == "gcsh":
        out = list(GCSH_FIELDS)
        for at, start, size in _gcsh_records(b):
            out.append((at, 8))
            if size >= GCST_BYTES:
                out += [(start + off, w) for off, w in GCST_FIELDS]
        return out
    if kind == "restart":
        return list(RESTART_FIELDS)
    return []
