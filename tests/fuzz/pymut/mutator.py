"""Mutations: the seeded edits of one input, stacked, re-sealed half the time."""

from __future__ import annotations

import random
from typing import Sequence, Tuple

from .common import MAX_INPUT
from .formats import FRAME_HEADER, _u


INTERESTING = (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 1024, 4095, 4096,
               0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1,
               1 << 63, (1 << 64) - 1)


def _new_value(rng: random.Random, v: int, width: int, size: int, at: int) -> int:
    mask = (1 << (8 * width)) - 1
    k = rng.randrange(11)
    if k == 0:
        x = v + rng.choice((1, -1))
    elif k == 1:
        x = v + rng.randint(-64, 64)
    elif k == 2:
        x = v * 2
    elif k == 3:
        x = v // 2
    elif k == 4:
        x = 0
    elif k == 5:
        x = mask
    elif k == 6:
        x = rng.choice(INTERESTING)
    elif k == 7:
        x = rng.choice((size, size - at, size + 1, size - at - 1, size * 2))
    elif k == 8:
        x = v ^ (1 << rng.randrange(8 * width))
    elif k == 9:
        x = v + rng.choice((8, -8, 4, -4, 88, -88))
    else:
        x = rng.getrandbits(8 * width)
    return x & mask


class Mutator:
    """Stacked mutations of a valid input, `other` a second valid input for splices."""

    def __init__(self, fixed_size: bool) -> None:
        # (operation, weight); inputs of a fixed size see fewer length changes.
        change = 1 if fixed_size else 4
        self.ops = [(self.bitflip, 8), (self.byte, 8), (self.run, 4), (self.field, 8), (self.word, 4),
                    (self.overwrite_chunk, 3), (self.splice_same_offset, 3),
                    (self.truncate, change), (self.extend, change), (self.erase, change), (self.insert, change),
                    (self.duplicate, change), (self.splice, change)]
        self.total = sum(w for _, w in self.ops)

    def __call__(self, rng: random.Random, data: bytes, other: bytes, flds: Sequence[Tuple[int, int]]) -> bytearray:
        b = bytearray(data)
        for _ in range(rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 6))):
            x = rng.randrange(self.total)
            for op, w in self.ops:
                if x < w:
                    op(rng, b, other, flds)
                    break
                x -= w
        return b

    @staticmethod
    def _pos(rng, b):
        return rng.randrange(len(b)) if b else 0

    def bitflip(self, rng, b, other, flds):
        if b:
            b[self._pos(rng, b)] ^= 1 << rng.randrange(8)

    def byte(self, rng, b, other, flds):
        if b:
            b[self._pos(rng, b)] = rng.choice((0, 0xFF, rng.randrange(256)))

    def run(self, rng, b, other, flds):
        if b:
            at = self._pos(rng, b)
            n = min(rng.randint(2, 16), len(b) - at)
            k = rng.randrange(4)
            b[at:at + n] = bytes(n) if k == 0 else b"\xff" * n if k == 1 else bytes([rng.randrange(256)]) * n \
                if k == 2 else rng.randbytes(n)

    def field(self, rng, b, other, flds):
        if not flds:
            return self.word(rng, b, other, flds)
        at, w = rng.choice(flds)
        if at + w <= len(b):
            v = _new_value(rng, _u(b, at, w), w, len(b), at)
            b[at:at + w] = v.to_bytes(w, "little")

    def word(self, rng, b, other, flds):
        w = rng.choice((4, 8))
        if len(b) >= w:
            at = rng.randrange(len(b) // w) * w
            v = _new_value(rng, _u(b, at, w), w, len(b), at)
            b[at:at + w] = v.to_bytes(w, "little")

    def overwrite_chunk(self, rng, b, other, flds):  # a chunk of the input copied over another place
        if len(b) >= 2:
            n = rng.randint(1, min(64, len(b) // 2))
            src, dst = rng.randrange(len(b) - n + 1), rng.randrange(len(b) - n + 1)
            b[dst:dst + n] = b[src:src + n]

    def splice_same_offset(self, rng, b, other, flds):  # a chunk of the other input at the same place
        m = min(len(b), len(other))
        if m:
            at = rng.randrange(m)
            n = min(rng.randint(1, 256), m - at)
            b[at:at + n] = other[at:at + n]

    def truncate(self, rng, b, other, flds):
        k = rng.randrange(4)
        cut = rng.randrange(len(b) + 1) if k == 0 else len(b) - rng.randint(1, 8) if k == 1 else \
            len(b) & ~7 if k == 2 else len(b) - rng.choice((4, 8, 16, FRAME_HEADER))
        del b[max(0, cut):]

    def extend(self, rng, b, other, flds):
        k = rng.randrange(5)
        n = rng.choice((1, 4, 8, rng.randint(1, 64)))
        if k == 0:
            b += bytes(n)
        elif k == 1:
            b += b"\xff" * n
        elif k == 2:
            b += rng.randbytes(n)
        elif k == 3 and len(b) <= MAX_INPUT // 2:
            b.extend(bytes(b))
        else:
            b += other[:n]

    def erase(self, rng, b, other, flds):
        if b:
            at = self._pos(rng, b)
            del b[at:at + rng.choice((1, 4, 8, rng.randint(1, 128)))]

    def insert(self, rng, b, other, flds):
        n = rng.choice((1, 4, 8, rng.randint(1, 64)))
        at = rng.randrange(len(b) + 1)
        b[at:at] = bytes(n) if rng.randrange(2) else rng.randbytes(n)

    def duplicate(self, rng, b, other, flds):
        if b and len(b) <= MAX_INPUT // 2:
            at = self._pos(rng, b)
            n = rng.randint(1, min(len(b) - at, 512))
            to = rng.randrange(len(b) + 1)
            b[to:to] = b[at:at + n]

    def splice(self, rng, b, other, flds):  # a prefix of one, a suffix of the other
        i, j = rng.randrange(len(b) + 1), rng.randrange(len(other) + 1)
        if rng.randrange(2):
            b[i:] = other[j:]
        else:
            b[:] = other[:j] + b[i:]
