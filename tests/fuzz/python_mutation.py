#!/usr/bin/env python3
"""Byte-mutation fuzzing of gradcomp's Python entry points.

The libFuzzer targets in tests/fuzz drive the C++ decoders directly; this harness drives them
through the Python bindings (and gradcomp.restart's file checks), where the arrays, the
exception translation and the argument checks sit on top. For every entry point that decodes
bytes it makes valid inputs first (real frames, slots, reduced buffers, checkpoints, files),
then, per execution, mutates one with a seeded RNG and calls the entry point:

* mutations, one to six stacked: bit flips; a byte, or a run of bytes, set to 0, 0xff or
  random; truncation; extension (zeros, 0xff, random bytes, the input doubled); a chunk
  erased, inserted, or duplicated; splices with a second valid input (a prefix of one and a
  suffix of the other, or a chunk of one written over the other); edits of the format's length
  and count fields (frame headers, slot heads, checkpoint headers and records, the restart
  file header: +-1, +-small, 0, all ones, doubled, the input's length, powers of two); edits of
  an aligned 4- or 8-byte word. Half the mutated inputs are re-sealed: their CRC32Cs (of each
  frame whose header parses, of a checkpoint, of nested checkpoints, of a restart file's
  header) recomputed, so that mutations reach the checks behind the checksum. Some executions
  also change the call's other arguments (the output's type and size, ``slot_bytes``, which
  rank restores, whether a phase buffer is the whole buffer or this rank's shard, the list of
  saved checkpoints).
* the property: the call returns, or raises ``gradcomp.Error`` with a known ``.code`` (the
  restart files: ``gradcomp.restart.CheckpointError``; a phase buffer whose byte length is not
  a whole number of elements, passed as a byte tensor: the documented ``TypeError``); it never
  raises anything else, never crashes the interpreter, never hangs; the input is never
  written; and when it raises, the output tensor and the state are exactly as they were
  (output bits compared with a copy; states by their checkpoint bytes, step, stage and
  residuals).

Usage:
  python tests/fuzz/python_mutation.py [--runs N] [--seconds S] [--seed S] [-j JOBS] [--out FILE]
      [--crash-dir DIR] [--timeout S] [--rss-limit-mb MB] [--in-process] [ENTRY ...]
  python tests/fuzz/python_mutation.py --list
  python tests/fuzz/python_mutation.py --replay DIR/<entry>-it<i>.json

  --runs N        executions per entry point (default 10,000,000; unlimited when only
                  --seconds is given)
  --seconds S     a time limit per entry point (on top of --runs when both are given)
  --seed S        the campaign's seed (default 1): execution i of entry point E mutates with
                  an RNG seeded from (S, E, i), so any execution can be replayed alone
  -j JOBS         entry points fuzzed at once, each in a worker process (default 1)
  --out FILE      also write the Markdown report there
  --crash-dir DIR where reproducers go (default build/fuzz-python-crashes)
  --timeout S     a call that takes longer is a hang (default 10)
  --rss-limit-mb  a worker above this resident size is out of memory (default 4096)
  --in-process    no worker processes (a crash ends the run without a reproducer)
  ENTRY           only these entry points (shell patterns on the names --list prints)

Each entry point runs in a worker process that records, before each call, the execution's
number and its input in a shared file; the parent watches it: a worker that dies (a crash), stops
advancing for --timeout seconds (a hang, killed) or grows past the memory limit (killed) leaves
its input in --crash-dir (<entry>-it<i>.bin and .json: seed, execution, violation, the input in
hex), and fuzzing goes on in a new worker from the next execution. A wrong exception, a written
input or an output changed on error is found in the worker, which saves the input the same way
and goes on. After a worker dies, the outcomes of at most the last 63 executions before it
are missing from the split (successes, errors), not from the executions.

Exit status: 0, 1 on any property violation, 2 on a usage or setup error.

Standard library, torch and gradcomp only; python/tests/test_fuzz_smoke.py runs every entry
point briefly in-process; tests/fuzz/campaign.sh --python PY runs it with the campaign's RUNS.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import datetime
import fnmatch
import functools
import hashlib
import json
import mmap
import os
import platform
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch

import gradcomp

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


# --------------------------------------------------------------------------------------------
# Formats: CRC re-sealing and the offsets of length and count fields, per kind of input.

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


GCST_FIELDS = ((4, 2), (6, 2), (8, 4), (12, 4), (16, 8), (24, 8), (32, 8), (40, 8), (48, 8))
GCTC_FIELDS = ((4, 2), (6, 2), (8, 4), (12, 4), (16, 8), (24, 4), (28, 4), (32, 8), (40, 4), (44, 4), (48, 8))
GCSH_FIELDS = ((4, 2), (6, 1), (7, 1), (8, 4), (12, 4), (16, 8), (24, 8), (32, 4), (36, 4), (40, 8))
RESTART_FIELDS = ((8, 4), (12, 4), (16, 4), (20, 4), (24, 8), (32, 8), (44, 4))


def _gcsh_records(b):
    """(offset of the length field, record start, record bytes) of a sharded checkpoint."""
    out = []
    if len(b) < 52:
        return out
    world = min(_u(b, 32, 4), 64)
    at, end = 48, len(b) - 4
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
            if size >= 56:
                out += [(start + off, w) for off, w in GCST_FIELDS]
        return out
    if kind == "restart":
        return list(RESTART_FIELDS)
    return []


# --------------------------------------------------------------------------------------------
# Mutations.

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


# --------------------------------------------------------------------------------------------
# Entry points: each a Target that makes valid inputs, mutates them and checks the property.

def _grad(seed: int, n: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(torch.uint8).flatten().tolist())


def _tensor(b: bytearray, dtype=torch.uint8) -> torch.Tensor:
    """A fresh (64-byte aligned) tensor holding b's bytes."""
    if not b:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(b, dtype=torch.uint8).clone().view(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16) if t.element_size() == 2 else t


class Target:
    """One entry point. Subclasses set name, kind, fixed_size and implement build(), params(),
    valid(params), call(blobs, params), untouched() and reset()."""

    name = ""
    kind = ""
    fixed_size = False
    multi = False  # the input is a list of byte strings (restore_elastic)

    def __init__(self) -> None:
        self.built = False
        self.mutator = Mutator(self.fixed_size)
        self._fields: Dict[Tuple[int, int], Tuple[bytes, List[Tuple[int, int]]]] = {}
        self.inputs: List[Tuple[torch.Tensor, bytearray]] = []  # tensors handed to the call, and their bytes

    def ensure_built(self) -> None:
        if not self.built:
            self.build()
            self.built = True

    # -- what subclasses provide
    def build(self) -> None:
        raise NotImplementedError

    def params(self, rng: random.Random) -> dict:
        return {}

    def valid(self, params: dict) -> List[bytes]:
        raise NotImplementedError

    def slot(self, params: dict) -> int:
        return 0

    def call(self, blobs: List[bytearray], params: dict) -> None:
        raise NotImplementedError

    def allowed(self, params: dict, blobs: List[bytearray]) -> tuple:
        return (gradcomp.Error,)

    def untouched(self, params: dict) -> Optional[str]:
        """None when the outputs and the state are as reset() left them, else what changed."""
        return None

    def reset(self, params: dict) -> None:
        """Makes the outputs and the state fresh again (after a success, which changes them)."""

    def may_reseal(self, b: bytearray, params: dict) -> bool:
        return True

    # -- the mutated input
    def mutate_one(self, rng: random.Random, data: bytes, other: bytes, params: dict) -> bytearray:
        # The field offsets of the valid inputs, computed once (the cache holds the input, so that
        # its id stays its own); of other inputs (a list's already mutated member), every time.
        key = (id(data), self.slot(params))
        got = self._fields.get(key)
        if got is None or got[0] is not data:
            got = (data, fields(self.kind, data, self.slot(params)))
            if len(self._fields) < 64:
                self._fields[key] = got
        b = self.mutator(rng, data, other, got[1])
        if rng.randrange(2) and self.may_reseal(b, params):
            reseal(self.kind, b, self.slot(params))
        return b

    def make_input(self, rng: random.Random, params: dict) -> List[bytearray]:
        good = self.valid(params)
        i = rng.randrange(len(good))
        j = rng.randrange(len(good) - 1)
        return [self.mutate_one(rng, good[i], good[j + (j >= i)], params)]

    def arg(self, b: bytearray, dtype=torch.uint8) -> torch.Tensor:
        t = _tensor(b, dtype)
        self.inputs.append((t, b))
        return t


def _outs(n: int, seed: int, sizes=(0, -1, 1)) -> Dict[Tuple[str, int], Tuple[torch.Tensor, torch.Tensor]]:
    """Output tensors (float32 and bfloat16, n values, and n -+ 1 float32 ones), each with the
    reference copy it must equal when a call fails."""
    out = {}
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for d in sizes if dtype == torch.float32 else (0,):
            if n + d < 0:
                continue
            ref = _grad(seed + d, n + d, dtype)
            out[(name, d)] = (ref.clone(), ref)
    return out


class OutputMixin:
    outs: Dict[Tuple[str, int], Tuple[torch.Tensor, torch.Tensor]]

    def pick_out(self, rng: random.Random, p: dict, bf16: bool = True) -> None:
        p["dtype"] = "bf16" if bf16 and rng.randrange(4) == 0 else "f32"
        p["size"] = rng.choice((-1, 1)) if p["dtype"] == "f32" and rng.randrange(32) == 0 else 0

    def out_of(self, p: dict) -> torch.Tensor:
        return self.outs[(p["dtype"], p["size"])][0]

    def out_untouched(self, p: dict) -> Optional[str]:
        out, ref = self.outs[(p["dtype"], p["size"])]
        if not torch.equal(_bits(out), _bits(ref)):
            return f"the output ({p['dtype']}, {out.numel()} values) was written"
        return None

    def out_reset(self, p: dict) -> None:
        out, ref = self.outs[(p["dtype"], p["size"])]
        out.copy_(ref)


N = 1024  # Compressor targets: 4 chunks (chunk_bytes 1024) of 256 values
CODECS = [("topk", {"density": 0.1}), ("int8", {}), ("qsgd", {}), ("threshold", {"density": 0.1}),
          ("acctfm", {"cols": 64, "density": 0.1}), ("bf16", {})]


def _label(codec: str, opts: dict) -> str:
    extra = "".join(f",{k}={v}" for k, v in opts.items() if k == "cols")
    return f"{codec}{extra}"


class CompressorFixture:
    """Payloads of one codec: float32 gradients at steps 0 and 1, a bfloat16 one; the state
    checkpoints after steps 1 and 2."""

    def __init__(self, codec: str, opts: dict) -> None:
        self.codec = gradcomp.Compressor(codec, chunk_bytes=1024, **opts)
        c = self.codec
        st = c.make_state(N)

        def payload(g, state):
            out = torch.empty(c.max_payload_bytes(N, g.dtype), dtype=torch.uint8)
            return _bytes(out[:c.compress(g, state, out)])

        a = payload(_grad(1, N), st)
        self.checkpoint_1 = st.checkpoint()
        b = payload(_grad(2, N), st)
        self.checkpoint_2 = st.checkpoint()
        c16 = payload(_grad(3, N, torch.bfloat16), c.make_state(N))
        self.payloads = [a, b, c16]
        self.slot = max(c.max_payload_bytes(N), c.max_payload_bytes(N, torch.bfloat16))


_compressor_fixtures: Dict[str, CompressorFixture] = {}


def _compressor_fixture(codec: str, opts: dict) -> CompressorFixture:
    key = _label(codec, opts)
    if key not in _compressor_fixtures:
        _compressor_fixtures[key] = CompressorFixture(codec, opts)
    return _compressor_fixtures[key]


class CompressorDecode(OutputMixin, Target):
    """Compressor(codec).decompress / accumulate / accumulate_gathered."""

    def __init__(self, codec: str, opts: dict, method: str) -> None:
        self.codec_name, self.opts, self.method = codec, opts, method
        self.name = f"Compressor({_label(codec, opts)}).{method}"
        self.kind = "gathered" if method == "accumulate_gathered" else "frames"
        super().__init__()

    def build(self) -> None:
        f = _compressor_fixture(self.codec_name, self.opts)
        self.c = f.codec
        self.outs = _outs(N, 100)
        a, b, c16 = f.payloads
        if self.method == "accumulate_gathered":
            self.slot_bytes = f.slot
            pad = lambda p, fill: p + (bytes(f.slot - len(p)) if fill is None else  # noqa: E731
                                       random.Random(fill).randbytes(f.slot - len(p)))
            self.good = {"packed": [a + b + c16, c16 + a + b],
                         "slots": [pad(a, None) + pad(b, None) + pad(c16, None), pad(c16, 1) + pad(a, 2) + pad(b, 3)]}
        else:
            self.good = {"packed": [a, b, c16]}

    def params(self, rng):
        p: dict = {}
        self.pick_out(rng, p)
        if self.method == "accumulate_gathered":
            p["mode"] = "slots" if rng.randrange(2) else "packed"
            s = self.slot_bytes if p["mode"] == "slots" else 0
            if rng.randrange(16) == 0:  # another slot size
                s = rng.choice((s + 1, s - 1, s + 8, s - 8, 0, 1, 3 * self.slot_bytes, 1 << 63, (1 << 64) - 1, 88))
            p["slot_bytes"] = max(0, s)
        else:
            p["mode"] = "packed"
        return p

    def valid(self, p):
        return self.good[p["mode"]]

    def slot(self, p):
        return self.slot_bytes if p["mode"] == "slots" else 0

    def call(self, blobs, p):
        payload, out = self.arg(blobs[0]), self.out_of(p)
        if self.method == "decompress":
            self.c.decompress(payload, out)
        elif self.method == "accumulate":
            self.c.accumulate(payload, out)
        else:
            self.c.accumulate_gathered(payload, out, p["slot_bytes"])

    def untouched(self, p):
        return self.out_untouched(p)

    def reset(self, p):
        self.out_reset(p)


class CompressorMany(Target):
    """Compressor(codec).accumulate_many: three ranks' blocks, two outputs, the sizes in each
    block's head (all or nothing on the CPU)."""

    kind = "blocks"

    def __init__(self, codec: str, opts: dict) -> None:
        self.codec_name, self.opts = codec, opts
        self.name = f"Compressor({_label(codec, opts)}).accumulate_many"
        super().__init__()

    def build(self) -> None:
        f = _compressor_fixture(self.codec_name, self.opts)
        self.c = f.codec
        self.half = _align8(f.slot)
        self.block = 8 + 2 * self.half

        def block(p0, p1):
            b = struct.pack("<II", len(p0), len(p1)) + p0 + bytes(self.half - len(p0)) + p1 + bytes(self.half - len(p1))
            return b

        a, b, c16 = f.payloads
        self.good = [block(a, b) + block(b, a) + block(a, c16), block(c16, a) + block(b, b) + block(a, b)]
        self.refs = [_grad(200, N), _grad(201, N)]
        self.outs = [r.clone() for r in self.refs]

    def params(self, rng):
        block = self.block
        if rng.randrange(16) == 0:  # another block size
            block = rng.choice((block + 8, block - 8, 8, 16, 3 * block, 1 << 63, (1 << 64) - 1))
        return {"block": block}

    def valid(self, p):
        return self.good

    def slot(self, p):
        return self.block

    def call(self, blobs, p):
        self.c.accumulate_many(self.arg(blobs[0]), p["block"], self.outs, [8, 8 + self.half])

    def untouched(self, p):
        for out, ref in zip(self.outs, self.refs):
            if not torch.equal(_bits(out), _bits(ref)):
                return "an output was written"
        return None

    def reset(self, p):
        for out, ref in zip(self.outs, self.refs):
            out.copy_(ref)


class StateRestore(Target):
    """State.restore of a codec's checkpoint, into a fresh state of the same codec and size."""

    kind = "gcst"

    def __init__(self, codec: str, opts: dict) -> None:
        self.codec_name, self.opts = codec, opts
        self.name = f"State({_label(codec, opts)}).restore"
        super().__init__()

    def build(self) -> None:
        f = _compressor_fixture(self.codec_name, self.opts)
        self.c = f.codec
        self.good = [f.checkpoint_2, f.checkpoint_1]
        self.reset({})

    def valid(self, p):
        return self.good

    def call(self, blobs, p):
        self.state.restore(bytes(blobs[0]))

    def untouched(self, p):
        if self.state.checkpoint() != self.ref:
            return f"the state changed (step {self.state.step})"
        return None

    def reset(self, p):
        self.state = self.c.make_state(N)
        self.ref = self.state.checkpoint()


# --- The sharded path.

class ShardedFixture:
    """One all-reduce (or reduce-scatter) step of W = 3 simulated ranks, twice (gradients A and
    B), and a second step of A: what rank 1 receives in each phase, and checkpoints."""

    n, world, rank = 700, 3, 1

    def __init__(self, codec: str, mode: str, opts: dict) -> None:
        self.codec = gradcomp.Sharded(codec, mode=mode, chunk_bytes=1024, **opts)
        c, n, w = self.codec, self.n, self.world
        self.ga = [_grad(10 + r, n) for r in range(w)]
        gb = [_grad(20 + r, n) for r in range(w)]
        sa, sb = self.fresh_all(), self.fresh_all()
        got_a, got_b = self.scatter(sa, self.ga), self.scatter(sb, gb)
        self.got_a = got_a
        self.scattered = [_bytes(got_a[self.rank]), _bytes(got_b[self.rank])]
        self.p0 = c.describe(0, sa[0])
        if mode == "all_reduce":
            for states, got in ((sa, got_a), (sb, got_b)):
                for st, recv in zip(states, got):
                    c.receive(0, st, recv)
            self.p1 = c.describe(1, sa[0])
            gathered_a, gathered_b = self.gather(sa), self.gather(sb)
            self.gathered = [_bytes(gathered_a), _bytes(gathered_b)]
            for st in sa:
                c.receive(1, st, gathered_a, torch.empty(n))
        else:
            for st, recv in zip(sa, got_a):
                c.receive(0, st, recv, torch.empty(st.shard[1]))
        self.saved_1 = [c.checkpoint(st) for st in sa]
        got = self.scatter(sa, [_grad(30 + r, n) for r in range(w)])  # step 2
        if mode == "all_reduce":
            for st, recv in zip(sa, got):
                c.receive(0, st, recv)
            every = self.gather(sa)
            for st in sa:
                c.receive(1, st, every, torch.empty(n))
        else:
            for st, recv in zip(sa, got):
                c.receive(0, st, recv, torch.empty(st.shard[1]))
        self.saved_2 = [c.checkpoint(st) for st in sa]

    def fresh_all(self):
        return [self.codec.make_state(self.n, self.world, r) for r in range(self.world)]

    def scatter(self, states, grads):
        slot = self.codec.describe(0, states[0])["slot_bytes"]
        sent = []
        for g, st in zip(grads, states):
            buf = torch.empty(self.codec.describe(0, st)["send_bytes"], dtype=torch.uint8)
            self.codec.encode(0, g, st, buf)
            sent.append(buf.view(self.world, slot))
        return [torch.cat([sent[r][j] for r in range(self.world)]) for j in range(self.world)]

    def gather(self, states):
        sent = []
        for st in states:
            buf = torch.empty(self.codec.describe(1, st)["send_bytes"], dtype=torch.uint8)
            self.codec.encode(1, None, st, buf)
            sent.append(buf)
        return torch.cat(sent)

    def at_stage(self, k: int):
        """A fresh state of rank 1 that expects receive(k) of step 0."""
        c = self.codec
        st = c.make_state(self.n, self.world, self.rank)
        c.encode(0, self.ga[self.rank], st, torch.empty(self.p0["send_bytes"], dtype=torch.uint8))
        if k == 1:
            c.receive(0, st, self.got_a[self.rank])
            c.encode(1, None, st, torch.empty(self.p1["send_bytes"], dtype=torch.uint8))
        return st


_sharded_fixtures: Dict[Tuple[str, str], ShardedFixture] = {}


def _sharded_fixture(codec: str, mode: str, opts: dict) -> ShardedFixture:
    if (codec, mode) not in _sharded_fixtures:
        _sharded_fixtures[(codec, mode)] = ShardedFixture(codec, mode, opts)
    return _sharded_fixtures[(codec, mode)]


def _sharded_snapshot(codec, st) -> tuple:
    return (st.stage, st.step, codec.checkpoint(st))


class ShardedReceive(OutputMixin, Target):
    """Sharded.receive(k): rank 1's received slots (phase 0: the all-to-all's, phase 1: the
    all-gather's)."""

    kind = "slots"
    fixed_size = True

    def __init__(self, codec: str, mode: str, opts: dict, k: int) -> None:
        self.codec_name, self.mode, self.opts, self.k = codec, mode, opts, k
        label = codec + ("" if mode == "all_reduce" else f",{mode}")
        self.name = f"Sharded({label}).receive({k})"
        super().__init__()

    def build(self) -> None:
        self.f = _sharded_fixture(self.codec_name, self.mode, self.opts)
        self.c = self.f.codec
        self.good = self.f.scattered if self.k == 0 else self.f.gathered
        self.slot_bytes = (self.f.p0 if self.k == 0 else self.f.p1)["slot_bytes"]
        # receive(0) in all-reduce mode keeps the sum in the state (no output); in reduce-scatter
        # mode it writes this rank's shard; receive(1) writes the whole sum.
        count = self.f.n if self.k == 1 else self.c.make_state(self.f.n, self.f.world, self.f.rank).shard[1]
        self.has_out = not (self.k == 0 and self.mode == "all_reduce")
        self.outs = _outs(count, 200)
        self.reset({})

    def params(self, rng):
        p: dict = {"dtype": "f32", "size": 0}
        if self.has_out:
            self.pick_out(rng, p)
        return p

    def valid(self, p):
        return self.good

    def slot(self, p):
        return self.slot_bytes

    def call(self, blobs, p):
        self.c.receive(self.k, self.state, self.arg(blobs[0]), self.out_of(p) if self.has_out else None)

    def untouched(self, p):
        if self.has_out and (why := self.out_untouched(p)):
            return why
        if _sharded_snapshot(self.c, self.state) != self.ref:
            return f"the state changed (stage {self.state.stage}, step {self.state.step})"
        return None

    def reset(self, p):
        if self.has_out and p:
            self.out_reset(p)
        self.state = self.f.at_stage(self.k)
        self.ref = _sharded_snapshot(self.c, self.state)


class ShardedRestore(Target):
    """Sharded.load_checkpoint (rank 1's checkpoint, into a fresh state of rank 1) and
    Sharded.restore_elastic (the three ranks' checkpoints, into a fresh state of rank 0 or 1 of
    two)."""

    kind = "gcsh"

    def __init__(self, codec: str, opts: dict, elastic: bool) -> None:
        self.codec_name, self.opts, self.elastic = codec, opts, elastic
        self.multi = elastic
        self.name = f"Sharded({codec}).{'restore_elastic' if elastic else 'load_checkpoint'}"
        super().__init__()

    def build(self) -> None:
        self.f = _sharded_fixture(self.codec_name, "all_reduce", self.opts)
        self.c = self.f.codec
        self.lists = [self.f.saved_2, self.f.saved_1]
        self.good = [self.f.saved_2[self.f.rank], self.f.saved_1[self.f.rank]]
        self.states: dict = {}
        for r in (0, 1):
            self.reset({"rank": r})

    def params(self, rng):
        return {"rank": rng.randrange(2) if self.elastic else self.f.rank}

    def valid(self, p):
        return self.good

    def make_input(self, rng, p):
        if not self.elastic:
            return super().make_input(rng, p)
        return _mutate_list(self, rng, p, self.lists)

    def call(self, blobs, p):
        st = self.states[p["rank"]][0]
        if self.elastic:
            self.c.restore_elastic(st, [bytes(b) for b in blobs])
        else:
            self.c.load_checkpoint(st, bytes(blobs[0]))

    def untouched(self, p):
        st, ref = self.states[p["rank"]]
        if _sharded_snapshot(self.c, st) != ref:
            return f"the state changed (step {st.step})"
        return None

    def reset(self, p):
        world = 2 if self.elastic else self.f.world
        st = self.c.make_state(self.f.n, world, p["rank"])
        self.states[p["rank"]] = (st, _sharded_snapshot(self.c, st))


def _mutate_list(t: Target, rng: random.Random, p: dict, lists: List[List[bytes]]) -> List[bytearray]:
    """Every saved rank's checkpoint, one or two of them mutated; sometimes the list itself
    changed (a checkpoint missing, repeated, of another step, the order reversed, empty)."""
    base = rng.randrange(len(lists))
    blobs = [bytearray(b) for b in lists[base]]
    mutated = set()
    for _ in range(rng.choice((1, 1, 1, 2))):
        i = rng.randrange(len(blobs))
        other = rng.choice(lists[1 - base] if rng.randrange(2) else lists[base])
        blobs[i] = t.mutate_one(rng, bytes(blobs[i]) if i in mutated else lists[base][i], other, p)
        mutated.add(i)
    if rng.randrange(6) == 0:
        k = rng.randrange(5)
        if k == 0:
            del blobs[rng.randrange(len(blobs))]
        elif k == 1:
            blobs.append(bytearray(rng.choice(blobs)))
        elif k == 2:
            i = rng.randrange(len(blobs))
            blobs[i] = bytearray(lists[1 - base][i])
        elif k == 3:
            blobs.reverse()
        else:
            blobs = []
    return blobs


# --- TAGC and the summable casts (phase codecs).

class TagcFixture:
    """One TAGC step of W = 3 simulated ranks with gradients A (and the reduced bitmap of
    gradients B), then a second step: rank 1's reduced buffers and every rank's checkpoints."""

    n, world, rank = 2048, 3, 1

    def __init__(self, cfg: dict) -> None:
        self.codec = c = gradcomp.Tagc(**cfg)
        n, w = self.n, self.world
        self.ga = [_grad(40 + r, n) for r in range(w)]
        gb = [_grad(50 + r, n) for r in range(w)]
        sa, sb = self.fresh_all(), self.fresh_all()
        red_a, red_b = self.bitmap(sa, self.ga), self.bitmap(sb, gb)
        self.red_a = red_a
        self.bits = [_bytes(red_a), _bytes(red_b)]
        for st in sa:
            c.receive(0, st, red_a)
        p1 = c.describe(1, sa[0])
        self.cell_type = torch.bfloat16 if p1["type"] == "bf16" else torch.float32
        self.shard_count = p1["shard_count"]
        cells = []
        for g, st in zip(self.ga, sa):
            buf = torch.empty(p1["count"], dtype=self.cell_type)
            c.encode(1, g, st, buf)
            cells.append(buf)
        whole = sum(x.float() for x in cells).to(self.cell_type)
        partial = (cells[0].float() + cells[1].float()).to(self.cell_type)
        s, r = self.shard_count, self.rank
        self.cells = {"whole": [_bytes(whole), _bytes(partial)],
                      "shard": [_bytes(whole[r * s:(r + 1) * s]), _bytes(partial[r * s:(r + 1) * s])]}
        for st in sa:
            c.receive(1, st, whole, torch.empty(n))
            c.finish_step(st)
        self.saved_1 = [c.checkpoint(st) for st in sa]
        self.step(sa, [_grad(60 + r, n) for r in range(w)])
        self.saved_2 = [c.checkpoint(st) for st in sa]

    def fresh_all(self):
        return [self.codec.make_state(self.n, self.world, r) for r in range(self.world)]

    def bitmap(self, states, grads):
        c = self.codec
        p0 = c.describe(0, states[0])
        bits = []
        for g, st in zip(grads, states):
            b = torch.zeros(p0["count"], dtype=torch.int32)
            c.encode(0, g, st, b)
            bits.append(b)
        red = bits[0].clone()
        for b in bits[1:]:
            red = red | b if p0["op"] == "bor" else red + b
        return red

    def step(self, states, grads):
        c = self.codec
        red = self.bitmap(states, grads)
        for st in states:
            c.receive(0, st, red)
        p1 = c.describe(1, states[0])
        cells = []
        for g, st in zip(grads, states):
            buf = torch.empty(p1["count"], dtype=self.cell_type)
            c.encode(1, g, st, buf)
            cells.append(buf)
        whole = sum(x.float() for x in cells).to(self.cell_type)
        for st in states:
            c.receive(1, st, whole, torch.empty(self.n))
            c.finish_step(st)

    def at_phase(self, k: int):
        """A fresh state of rank 1 that expects receive(k) of step 0 (gradients A)."""
        c = self.codec
        st = c.make_state(self.n, self.world, self.rank)
        c.encode(0, self.ga[self.rank], st, torch.empty(c.describe(0, st)["count"], dtype=torch.int32))
        if k == 1:
            c.receive(0, st, self.red_a)
            c.encode(1, self.ga[self.rank], st, torch.empty(c.describe(1, st)["count"], dtype=self.cell_type))
        return st


_tagc_fixtures: Dict[str, TagcFixture] = {}


def _tagc_fixture(cfg: dict) -> TagcFixture:
    key = repr(sorted(cfg.items()))
    if key not in _tagc_fixtures:
        _tagc_fixtures[key] = TagcFixture(cfg)
    return _tagc_fixtures[key]


def _phase_snapshot(codec, st, tagc: bool) -> tuple:
    if tagc:  # the checkpoint holds the residual, the thresholds, the step and the sampling key
        return (st.step, st.rows, st.stats, codec.checkpoint(st))
    return (st.step, _bits(torch.from_dlpack(st.residual)).clone())


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def _phase_arg(t: Target, b: bytearray, dtype: torch.dtype, p: dict) -> torch.Tensor:
    """The reduced buffer: of the phase's element type, or, when the bytes are not a whole number
    of elements, a byte tensor (refused with the documented TypeError)."""
    size = torch.empty(0, dtype=dtype).element_size()
    if len(b) % size:
        p["bytes"] = True
        return t.arg(b)
    return t.arg(b, dtype)


class PhaseReceive(OutputMixin, Target):
    """Tagc(...).receive(k) and SummableCast(...).receive(0) of a reduced buffer (the whole
    buffer, or this rank's shard of a shardable phase), into a state that expects it."""

    kind = "phase"
    fixed_size = True

    def __init__(self, label: str, cfg: Optional[dict], k: int, cast: Optional[str] = None) -> None:
        self.cfg, self.k, self.cast = cfg, k, cast
        self.name = f"SummableCast({cast}).receive(0)" if cast else f"Tagc({label}).receive({k})"
        super().__init__()

    def build(self) -> None:
        if self.cast:
            self.c = c = gradcomp.SummableCast(self.cast, feedback=True)
            self.n, world, self.rank = 1000, 2, 0
            grads = [_grad(70 + r, self.n) for r in range(world)]
            states = [c.make_state(self.n, world, r) for r in range(world)]
            p = c.describe(0, states[0])
            self.dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[p["type"]]
            bufs = []
            for g, st in zip(grads, states):
                b = torch.empty(p["count"], dtype=self.dtype)
                c.encode(0, g, st, b)
                bufs.append(b)
            whole = (bufs[0].float() + bufs[1].float()).to(self.dtype)
            s = p["shard_count"]
            self.good = {"whole": [_bytes(whole), _bytes(bufs[1])], "shard": [_bytes(whole[:s]), _bytes(bufs[1][:s])]}
            self.shard_size = s
            self.grads = grads
        else:
            f = self.f = _tagc_fixture(self.cfg)
            self.c, self.n, self.rank = f.codec, f.n, f.rank
            if self.k == 0:
                self.dtype = torch.int32
                self.good = {"whole": f.bits}
            else:
                self.dtype = f.cell_type
                self.good = f.cells
                size = -(-self.n // f.world)
                self.shard_size = min(self.n, (self.rank + 1) * size) - min(self.n, self.rank * size)
        self.has_out = self.cast is not None or self.k == 1
        self.outs = {}
        if self.has_out:
            self.outs.update(_outs(self.n, 300, sizes=(0, 1)))
            shard = _outs(self.shard_size, 400, sizes=(0, 1))
            self.outs.update({(("shard",) + key): v for key, v in shard.items()})
        self.reset({})

    def params(self, rng):
        p: dict = {"part": "whole", "dtype": "f32", "size": 0}
        if self.has_out:
            p["part"] = "shard" if rng.randrange(2) else "whole"
            p["size"] = 1 if rng.randrange(32) == 0 else 0
        return p

    def out_of(self, p):
        return self.outs[(("shard",) if p["part"] == "shard" else ()) + ("f32", p["size"])][0]

    def out_untouched(self, p):
        out, ref = self.outs[(("shard",) if p["part"] == "shard" else ()) + ("f32", p["size"])]
        return None if torch.equal(_bits(out), _bits(ref)) else f"the output ({out.numel()} values) was written"

    def out_reset(self, p):
        out, ref = self.outs[(("shard",) if p["part"] == "shard" else ()) + ("f32", p["size"])]
        out.copy_(ref)

    def valid(self, p):
        return self.good[p["part"]]

    def make_input(self, rng, p):
        blobs = super().make_input(rng, p)
        size = torch.empty(0, dtype=self.dtype).element_size()
        if rng.randrange(8):  # mostly whole elements; else, maybe, a byte tensor (the documented TypeError)
            del blobs[0][len(blobs[0]) - len(blobs[0]) % size:]
        return blobs

    def allowed(self, p, blobs):
        return (gradcomp.Error, TypeError) if p.get("bytes") else (gradcomp.Error,)

    def call(self, blobs, p):
        reduced = _phase_arg(self, blobs[0], self.dtype, p)
        self.c.receive(self.k, self.state, reduced, self.out_of(p) if self.has_out else None)

    def untouched(self, p):
        if self.has_out and (why := self.out_untouched(p)):
            return why
        if not _same(_phase_snapshot(self.c, self.state, not self.cast), self.ref):
            return f"the state changed (step {self.state.step})"
        return None

    def reset(self, p):
        if self.has_out and p:
            self.out_reset(p)
        if self.cast:
            self.state = self.c.make_state(self.n, 2, self.rank)
            self.c.encode(0, self.grads[self.rank], self.state, torch.empty(self.n, dtype=self.dtype))
        else:
            self.state = self.f.at_phase(self.k)
        self.ref = _phase_snapshot(self.c, self.state, not self.cast)


class TagcRestore(Target):
    """Tagc().load_checkpoint (rank 1's, into a fresh state of rank 1 of 3) and
    Tagc().restore_elastic (every rank's, into a fresh state of rank 0 or 1 of 2)."""

    kind = "gctc"

    def __init__(self, elastic: bool) -> None:
        self.elastic = elastic
        self.multi = elastic
        self.name = f"Tagc().{'restore_elastic' if elastic else 'load_checkpoint'}"
        super().__init__()

    def build(self) -> None:
        self.f = _tagc_fixture({})
        self.c = self.f.codec
        self.lists = [self.f.saved_2, self.f.saved_1]
        self.good = [self.f.saved_2[self.f.rank], self.f.saved_1[self.f.rank]]
        self.states: dict = {}
        for r in (0, 1):
            self.reset({"rank": r})

    def params(self, rng):
        return {"rank": rng.randrange(2) if self.elastic else self.f.rank}

    def valid(self, p):
        return self.good

    def make_input(self, rng, p):
        if not self.elastic:
            return super().make_input(rng, p)
        return _mutate_list(self, rng, p, self.lists)

    def call(self, blobs, p):
        st = self.states[p["rank"]][0]
        if self.elastic:
            self.c.restore_elastic(st, [bytes(b) for b in blobs])
        else:
            self.c.load_checkpoint(st, bytes(blobs[0]))

    def untouched(self, p):
        st, ref = self.states[p["rank"]]
        if not _same(_phase_snapshot(self.c, st, True), ref):
            return f"the state changed (step {st.step})"
        return None

    def reset(self, p):
        world = 2 if self.elastic else self.f.world
        st = self.c.make_state(self.f.n, world, p["rank"])
        self.states[p["rank"]] = (st, _phase_snapshot(self.c, st, True))


# --- gradcomp.restart's checkpoint files.

class RestartFile(Target):
    """gradcomp.restart.verify / load of a checkpoint file (Checkpointer.save's, of a small
    model, steps 1 and 2), mutated, written under the step-1 file's name."""

    kind = "restart"

    def __init__(self, fn: str) -> None:
        self.fn = fn
        self.name = f"restart.{fn}"
        super().__init__()

    def build(self) -> None:
        import gradcomp.restart as restart

        self.restart = restart
        self.dir = tempfile.mkdtemp(prefix="gradcomp-pyfuzz-", dir=_scratch())
        atexit.register(shutil.rmtree, self.dir, True)
        torch.manual_seed(5)
        model = torch.nn.Linear(4, 4)
        ckpt = restart.Checkpointer(os.path.join(self.dir, "made"), {"model": model}, every=1, keep=None, rng=False)
        first = ckpt.save(1)
        with torch.no_grad():
            model.weight.add_(1.0)
        second = ckpt.save(2)
        self.good = []
        for path in (first, second):
            with open(path, "rb") as f:
                self.good.append(f.read())
        self.payloads = {g[48:] for g in self.good}
        self.path = os.path.join(self.dir, restart.file_name(1, 0, 1))

    def valid(self, p):
        return self.good

    def may_reseal(self, b, p):
        # verify: always. load: only a header change (a re-sealed payload change is tampering, which
        # the CRC does not claim to find; torch.load would then parse arbitrary bytes).
        return self.fn == "verify" or bytes(b[48:]) in self.payloads

    def allowed(self, p, blobs):
        return (self.restart.CheckpointError,)

    def call(self, blobs, p):
        with open(self.path, "wb") as f:
            f.write(blobs[0])
        got = getattr(self.restart, self.fn)(self.path)
        if self.fn == "load" and not (isinstance(got, dict) and got.get("format") == 1):
            raise Violation("wrong result", f"load returned {type(got).__name__} without format 1")


# --- The harness's own check: an entry point that misbehaves on purpose.

class SelfTest(OutputMixin, Target):
    """Not gradcomp: a fake entry point that, about once in `every` executions each, does one of
    the things the harness must report (``kinds``: "crash" (os.abort), "hang", "exception" (a
    KeyError), "modified" (writes its output, then raises gradcomp.Error), "input" (writes its
    input), "code" (a gradcomp.Error without a known code)); otherwise it succeeds or raises
    gradcomp.Error("truncated"). Listed when GRADCOMP_PYFUZZ_SELFTEST names the kinds
    (comma-separated); python/tests/test_fuzz_smoke.py uses it directly."""

    kind = "frames"

    def __init__(self, kinds: Sequence[str], every: int = 50) -> None:
        self.kinds, self.every = [k for k in kinds if k], every
        self.name = "selftest(" + ",".join(self.kinds) + ")"
        super().__init__()

    def build(self) -> None:
        self.good = [bytes(range(64)), bytes(64)]
        self.outs = _outs(16, 500, sizes=(0,))

    def params(self, rng):
        x = rng.randrange(self.every * max(1, len(self.kinds)))
        return {"dtype": "f32", "size": 0, "act": self.kinds[x] if x < len(self.kinds) else "normal"}

    def valid(self, p):
        return self.good

    def call(self, blobs, p):
        act, payload, out = p["act"], self.arg(blobs[0]), self.out_of(p)
        if act == "crash":
            os.abort()
        if act == "hang":
            time.sleep(3600)
        if act == "exception":
            raise KeyError("selftest")
        if act == "input" and payload.numel():
            payload[0] ^= 1
            return
        if act in ("modified", "code") or len(blobs[0]) % 2:
            if act == "modified":
                out[0] += 1
            e = gradcomp.Error("selftest")
            e.code = "no_such_code" if act == "code" else "truncated"
            raise e
        out.fill_(0.0)

    def untouched(self, p):
        return self.out_untouched(p)

    def reset(self, p):
        self.out_reset(p)


def _scratch() -> Optional[str]:
    """Where temporary files go: the parent's folder (which it removes, also after a worker
    crashed), else /dev/shm where writable."""
    if os.environ.get("GRADCOMP_PYFUZZ_TMP"):
        return os.environ["GRADCOMP_PYFUZZ_TMP"]
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


# --- The list.

def all_targets() -> List[Target]:
    out: List[Target] = []
    for codec, opts in CODECS:
        for method in ("decompress", "accumulate", "accumulate_gathered"):
            out.append(CompressorDecode(codec, opts, method))
    for codec, opts in CODECS:
        out.append(CompressorMany(codec, opts))
    for codec, opts in CODECS:
        out.append(StateRestore(codec, opts))
    topk = {"density": 0.2}
    out += [ShardedReceive("topk_int8", "all_reduce", topk, 0), ShardedReceive("topk_int8", "all_reduce", topk, 1),
            ShardedReceive("int8", "reduce_scatter", {}, 0),
            ShardedRestore("topk_int8", topk, False), ShardedRestore("topk_int8", topk, True)]
    sum_safe = {"bitmap": "sum_safe", "cells": "fp32"}
    out += [PhaseReceive("", {}, 0), PhaseReceive("", {}, 1),
            PhaseReceive("bitmap=sum_safe,cells=fp32", sum_safe, 0), PhaseReceive("bitmap=sum_safe,cells=fp32", sum_safe, 1),
            TagcRestore(False), TagcRestore(True), PhaseReceive("", None, 0, cast="bf16"),
            RestartFile("verify"), RestartFile("load")]
    if os.environ.get("GRADCOMP_PYFUZZ_SELFTEST"):
        out.append(SelfTest(os.environ["GRADCOMP_PYFUZZ_SELFTEST"].split(",")))
    return out


def entry_names() -> List[str]:
    return [t.name for t in all_targets()]


def select(patterns: Sequence[str]) -> List[Target]:
    targets = all_targets()
    if not patterns:
        return targets
    picked = [t for t in targets if any(fnmatch.fnmatchcase(t.name, p) or p == t.name for p in patterns)]
    if not picked:
        raise SystemExit(f"error: no entry point matches {list(patterns)}; --list prints them")
    return picked


# --------------------------------------------------------------------------------------------
# Executions.

@functools.lru_cache(maxsize=None)
def _base_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:6], "little")


def iteration_rng(seed: int, name: str, i: int) -> random.Random:
    return random.Random((_base_seed(seed, name) << 40) + i)


class Stats:
    def __init__(self, name: str) -> None:
        self.name = name
        self.executions = 0
        self.successes = 0
        self.errors: collections.Counter = collections.Counter()
        self.violations: List[dict] = []
        self.seconds = 0.0
        self.unrecorded = 0  # executions whose outcome a dead worker did not report

    def as_dict(self) -> dict:
        return {"name": self.name, "executions": self.executions, "successes": self.successes,
                "errors": dict(self.errors), "violations": self.violations, "seconds": self.seconds,
                "unrecorded": self.unrecorded}

    def add(self, d: dict) -> None:
        self.executions += d["executions"]
        self.successes += d["successes"]
        self.errors.update(d["errors"])
        self.violations += d["violations"]
        self.seconds += d["seconds"]
        self.unrecorded += d.get("unrecorded", 0)


def execute(t: Target, rng: random.Random, blobs_override: Optional[List[bytes]] = None):
    """One execution: returns (params, blobs, outcome); outcome is None (success), an error code
    (or exception name), or a Violation."""
    p = t.params(rng)
    blobs = t.make_input(rng, p)
    if blobs_override is not None:
        blobs = [bytearray(b) for b in blobs_override]
    return p, blobs, run_call(t, p, blobs)


def run_call(t: Target, p: dict, blobs: List[bytearray]):
    t.inputs = []
    copies = [bytes(b) for b in blobs]
    outcome = None
    try:
        t.call(blobs, p)
    except Violation as v:
        outcome = v
    except Exception as e:  # noqa: BLE001 -- anything but the allowed types is the finding
        if not isinstance(e, t.allowed(p, blobs)):
            outcome = Violation("exception", f"{type(e).__module__}.{type(e).__qualname__}: {e}")
        else:
            code = getattr(e, "code", None) if isinstance(e, gradcomp.Error) else type(e).__name__
            known = RESTART_CODES if isinstance(t, RestartFile) else CODES
            if isinstance(e, gradcomp.Error) and code not in known:
                outcome = Violation("unknown code", f"gradcomp.Error with code {code!r}: {e}")
            elif (why := t.untouched(p)) is not None:
                outcome = Violation("modified on error", f"{why} (the call raised {code}: {e})")
            else:
                outcome = code
    for (tensor, b) in t.inputs:
        if tensor.numel() and not torch.equal(tensor.view(torch.uint8).flatten(), torch.frombuffer(b, dtype=torch.uint8)):
            outcome = Violation("input written", "the call wrote its input tensor")
    if [bytes(b) for b in blobs] != copies:
        outcome = Violation("input written", "the call wrote its input bytes")
    t.inputs = []
    if not isinstance(outcome, str):  # a success or a violation: outputs and state fresh again
        t.reset(p)
    return outcome


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name).strip("_")


def save_reproducer(crash_dir: str, name: str, seed: int, i: int, kind: str, detail: str,
                    blobs: Optional[List[bytes]], params: Optional[dict] = None, log: str = "") -> str:
    os.makedirs(crash_dir, exist_ok=True)
    stem = os.path.join(crash_dir, f"{_slug(name)}-it{i}")
    if blobs is not None:
        for k, b in enumerate(blobs):
            with open(f"{stem}.{k}.bin" if len(blobs) > 1 else f"{stem}.bin", "wb") as f:
                f.write(b)
    record = {"entry": name, "seed": seed, "iteration": i, "violation": kind, "detail": detail,
              "params": params, "input_hex": None if blobs is None else [bytes(b).hex() for b in blobs],
              "replay": f"python tests/fuzz/python_mutation.py --replay {stem}.json"}
    if log:
        record["log_tail"] = log[-4000:]
    with open(f"{stem}.json", "w") as f:
        json.dump(record, f, indent=1)
    return f"{stem}.json"


class Recorder:
    """The worker's side of the shared file: before each call, the execution's number and its
    input; every 64 executions and after each violation, the counts so far."""

    # layout: u64 state (0 building, 1 running, 2 done) | u64 execution | u64 counts length |
    # counts JSON (COUNTS bytes) | u32 blob count, then u32 length and bytes per blob
    COUNTS = 1 << 18
    INPUT_AT = 24 + COUNTS
    SIZE = INPUT_AT + 8 * MAX_INPUT

    def __init__(self, path: Optional[str]) -> None:
        self.mm = None
        self.parent = os.getppid()
        if path:
            fd = os.open(path, os.O_RDWR)
            self.mm = mmap.mmap(fd, self.SIZE)
            os.close(fd)

    def orphaned(self) -> bool:
        """The parent is gone (killed with its campaign): the worker stops too."""
        return self.mm is not None and os.getppid() != self.parent

    def state(self, s: int) -> None:
        if self.mm is not None:
            struct.pack_into("<Q", self.mm, 0, s)

    def before(self, i: int, blobs: List[bytearray]) -> None:
        mm = self.mm
        if mm is None:
            return
        at = self.INPUT_AT
        struct.pack_into("<I", mm, at, len(blobs))
        at += 4
        for b in blobs:
            n = min(len(b), self.SIZE - at - 4)
            struct.pack_into("<I", mm, at, n)
            mm[at + 4:at + 4 + n] = b[:n]
            at += 4 + n
        struct.pack_into("<Q", mm, 8, i)

    def counts(self, stats: Stats, next_i: int) -> None:
        if self.mm is None:
            return
        d = stats.as_dict()
        d["next"] = next_i
        d["violations"] = [dict(v, detail=v["detail"][:200]) for v in d["violations"]]
        raw = json.dumps(d).encode()[:self.COUNTS]
        self.mm[24:24 + len(raw)] = raw
        struct.pack_into("<Q", self.mm, 16, len(raw))

    @classmethod
    def read(cls, path: str) -> Tuple[int, int, Optional[dict], List[bytes]]:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), cls.SIZE, access=mmap.ACCESS_READ)
        try:
            state, i, n = struct.unpack_from("<QQQ", mm, 0)
            counts = json.loads(bytes(mm[24:24 + n])) if n else None
            at = cls.INPUT_AT
            count = struct.unpack_from("<I", mm, at)[0]
            at += 4
            blobs = []
            for _ in range(min(count, 64)):
                k = struct.unpack_from("<I", mm, at)[0]
                blobs.append(bytes(mm[at + 4:at + 4 + k]))
                at += 4 + k
            return state, i, counts, blobs
        finally:
            mm.close()


def fuzz(t: Target, seed: int, first: int = 0, runs: Optional[int] = None, seconds: Optional[float] = None,
         crash_dir: Optional[str] = None, recorder: Optional[Recorder] = None,
         max_violations: int = 100) -> Stats:
    """Runs executions first, first + 1, ... of entry point t until `runs` or `seconds`."""
    recorder = recorder or Recorder(None)
    stats = Stats(t.name)
    recorder.state(0)
    t.ensure_built()
    recorder.state(1)
    start = time.monotonic()
    i = first
    end = None if runs is None else first + runs
    while end is None or i < end:
        if (i - first) % 64 == 0 and ((seconds is not None and time.monotonic() - start >= seconds)
                                      or recorder.orphaned()):
            break
        rng = iteration_rng(seed, t.name, i)
        p = t.params(rng)
        blobs = t.make_input(rng, p)
        recorder.before(i, blobs)
        outcome = run_call(t, p, blobs)
        stats.executions += 1
        if outcome is None:
            stats.successes += 1
        elif isinstance(outcome, str):
            stats.errors[outcome] += 1
        else:
            rec = {"iteration": i, "kind": outcome.kind, "detail": outcome.detail[:500]}
            if crash_dir:
                rec["file"] = save_reproducer(crash_dir, t.name, seed, i, outcome.kind, outcome.detail,
                                              [bytes(b) for b in blobs], p)
            stats.violations.append(rec)
            recorder.counts(stats, i + 1)
            if len(stats.violations) >= max_violations:
                i += 1
                break
        i += 1
        if (i - first) % 64 == 0:
            stats.seconds = time.monotonic() - start
            recorder.counts(stats, i)
    stats.seconds = time.monotonic() - start
    recorder.counts(stats, i)
    return stats


def replay(path: str) -> int:
    with open(path) as f:
        rec = json.load(f)
    (t,) = [x for x in all_targets() if x.name == rec["entry"]]
    t.ensure_built()
    rng = iteration_rng(rec["seed"], t.name, rec["iteration"])
    blobs = [bytes.fromhex(h) for h in rec["input_hex"]] if rec.get("input_hex") is not None else None
    p, got, outcome = execute(t, rng, blobs)
    print(f"{t.name}, execution {rec['iteration']} (seed {rec['seed']}), params {p}, "
          f"input {[len(b) for b in got]} bytes")
    if isinstance(outcome, Violation):
        print(f"VIOLATION {outcome.kind}: {outcome.detail}")
        return 1
    print("success" if outcome is None else f"raised the allowed error {outcome}")
    return 0


# --------------------------------------------------------------------------------------------
# The parent: worker processes, watched.

class Worker:
    def __init__(self, name: str, args, first: int, runs: Optional[int], seconds: Optional[float], stats: Stats,
                 tmp: str) -> None:
        self.name, self.args, self.first, self.stats = name, args, first, stats
        self.runs, self.seconds = runs, seconds
        self.shm = os.path.join(tmp, _slug(name) + ".shm")
        with open(self.shm, "wb") as f:
            f.truncate(Recorder.SIZE)
        self.log = os.path.join(tmp, _slug(name) + ".log")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--seed", str(args.seed),
               "--first", str(first), "--shm", self.shm, "--crash-dir", args.crash_dir]
        if runs is not None:
            cmd += ["--runs", str(runs)]
        if seconds is not None:
            cmd += ["--seconds", f"{seconds:.3f}"]
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.logf)
        self.started = time.monotonic()
        self.last_i, self.last_change = (0, 0), time.monotonic()

    def log_text(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def run_workers(targets: List[Target], args) -> List[Stats]:
    tmp = tempfile.mkdtemp(prefix="gradcomp-pyfuzz-", dir=_scratch())
    atexit.register(shutil.rmtree, tmp, True)
    os.environ["GRADCOMP_PYFUZZ_TMP"] = tmp  # the workers' scratch files go there too
    pending = [t.name for t in targets]
    results = {name: Stats(name) for name in pending}
    budget = {name: (args.runs, args.seconds) for name in pending}
    crashes = collections.Counter()
    running: List[Worker] = []

    def start(name: str, first: int) -> None:
        runs, seconds = budget[name]
        running.append(Worker(name, args, first, runs, seconds, results[name], tmp))

    def finish(w: Worker, kind: Optional[str], detail: str) -> None:
        """A worker ended: normally (kind None) or by a crash, hang or memory limit."""
        running.remove(w)
        w.logf.close()
        state, i, counts, blobs = Recorder.read(w.shm)
        done = counts or {"executions": 0, "successes": 0, "errors": {}, "violations": [], "seconds": 0.0,
                          "next": w.first}
        nxt = done.pop("next", w.first)
        if kind is None:
            w.stats.add(done)
            print(f"-- {w.name}: {w.stats.executions} executions in {w.stats.seconds:.0f}s, "
                  f"{len(w.stats.violations)} violation(s)", flush=True)
            return
        if state == 0:  # died or stuck while building its inputs: a setup failure, not a finding
            w.stats.violations.append({"iteration": -1, "kind": "setup failed", "detail": detail + "\n" + w.log_text()[-2000:]})
            print(f"-- {w.name}: setup failed ({detail}); see the report", flush=True)
            return
        # Executions nxt .. i ran (i crashed); their outcomes before i are not known.
        done["executions"] += i + 1 - nxt
        done["unrecorded"] = i - nxt
        done["seconds"] = time.monotonic() - w.started
        w.stats.add(done)
        path = save_reproducer(args.crash_dir, w.name, args.seed, i, kind, detail, blobs, None, w.log_text())
        w.stats.violations.append({"iteration": i, "kind": kind, "detail": detail, "file": path})
        print(f"-- {w.name}: {kind} at execution {i} ({detail}): {path}", flush=True)
        crashes[w.name] += 1
        runs, seconds = budget[w.name]
        runs = None if runs is None else runs - (i + 1 - w.first)
        seconds = None if seconds is None else seconds - (time.monotonic() - w.started)
        budget[w.name] = (runs, seconds)
        if crashes[w.name] < 20 and (runs is None or runs > 0) and (seconds is None or seconds > 0):
            start(w.name, i + 1)

    try:
        watch(pending, running, start, finish, args)
    finally:  # stopped (a signal, an error): no worker outlives the parent
        for w in running:
            w.proc.kill()
            w.proc.wait()
    return [results[t.name] for t in targets]


def watch(pending: List[str], running: List["Worker"], start, finish, args) -> None:
    while pending or running:
        while pending and len(running) < args.jobs:
            start(pending.pop(0), 0)
        time.sleep(0.2)
        for w in list(running):
            rc = w.proc.poll()
            if rc is not None:
                state = Recorder.read(w.shm)[0]
                if rc == 0 and state == 2:
                    finish(w, None, "")
                else:
                    why = f"exit status {rc}"
                    if rc < 0:
                        try:
                            why = f"signal {-rc} ({signal.Signals(-rc).name})"
                        except ValueError:
                            why = f"signal {-rc}"
                    finish(w, "crash", f"the worker died: {why}")
                continue
            with open(w.shm, "rb") as f:
                state, i = struct.unpack("<QQ", f.read(16))
            now = time.monotonic()
            if (state, i) != w.last_i:
                w.last_i, w.last_change = (state, i), now
            limit = args.timeout if state == 1 else max(600.0, args.timeout)
            if now - w.last_change > limit:
                w.proc.kill()
                w.proc.wait()
                finish(w, "timeout", f"no progress for {limit:.0f} s (killed)")
            elif args.rss_limit_mb and _rss_mb(w.proc.pid) > args.rss_limit_mb:
                w.proc.kill()
                w.proc.wait()
                finish(w, "oom", f"resident size above {args.rss_limit_mb} MB (killed)")


# --------------------------------------------------------------------------------------------
# The report.

def _commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (rev or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def report(results: List[Stats], args, seconds: float) -> str:
    asked = []
    if args.runs is not None:
        asked.append(f"{args.runs:,} executions")
    if args.seconds is not None:
        asked.append(f"{args.seconds:g} s")
    lines = [
        "# gradcomp Python entry points: byte-mutation fuzzing",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; commit {_commit()}; "
        f"host {platform.node()} ({os.cpu_count()} CPUs); Python {platform.python_version()}, torch {torch.__version__}, "
        f"gradcomp {gradcomp.__version__} ({os.path.dirname(gradcomp.__file__)})",
        f"- {' or '.join(asked)} asked per entry point; seed {args.seed}; "
        f"{'in-process' if args.in_process else f'{args.jobs} worker process(es)'}; {seconds:.0f} s in all",
        "- errors: the gradcomp.Error codes (and documented TypeErrors) the calls raised; a violation is any other "
        "exception, a crash, a hang, a written input, or an output or state changed by a call that raised",
        "",
        "| entry point | executions | executions/s | successes | errors by code | property violations |",
        "|---|---:|---:|---:|---|---:|",
    ]
    total = Stats("all")
    for s in results:
        rate = s.executions / s.seconds if s.seconds > 0 else 0.0
        errors = ", ".join(f"{k} {v:,}" for k, v in sorted(s.errors.items(), key=lambda kv: -kv[1])) or "-"
        if s.unrecorded:
            errors += f" (+{s.unrecorded:,} unrecorded)"
        lines.append(f"| {s.name} | {s.executions:,} | {rate:,.0f} | {s.successes:,} | {errors} | {len(s.violations)} |")
        total.add(s.as_dict())
    lines.append(f"| all | {total.executions:,} | | {total.successes:,} | | {len(total.violations)} |")
    lines.append("")
    if total.violations:
        lines += ["## Violations", ""]
        for s in results:
            for v in s.violations:
                where = f" `{v['file']}`" if v.get("file") else ""
                lines.append(f"- {s.name}, execution {v['iteration']}: {v['kind']}: {v['detail'][:300]}{where}")
    else:
        lines.append("No property violations.")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(usage=argparse.SUPPRESS, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("entries", nargs="*", metavar="ENTRY")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--crash-dir", default=None)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--rss-limit-mb", type=float, default=4096.0)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--replay")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shm", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.list:
        print("\n".join(entry_names()))
        return 0
    if args.replay:
        return replay(args.replay)
    if args.worker:
        import faulthandler

        faulthandler.enable()  # a crash's traceback goes to the log the parent keeps
        (t,) = [x for x in all_targets() if x.name == args.worker]
        rec = Recorder(args.shm)
        fuzz(t, args.seed, args.first, args.runs, args.seconds, args.crash_dir, rec)
        rec.state(2)
        return 0
    if (args.runs is not None and args.runs < 1) or (args.seconds is not None and args.seconds <= 0) or args.jobs < 1:
        print("error: --runs, --seconds and -j must be positive", file=sys.stderr)
        return 2
    if args.runs is None and args.seconds is None:
        args.runs = DEFAULT_RUNS
    if args.crash_dir is None:
        args.crash_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                                      "fuzz-python-crashes")
    args.crash_dir = os.path.abspath(args.crash_dir)
    try:
        targets = select(args.entries)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # atexit and the workers' cleanup run
    started = time.monotonic()
    if args.in_process:
        results = []
        for t in targets:
            s = fuzz(t, args.seed, 0, args.runs, args.seconds, args.crash_dir)
            print(f"-- {t.name}: {s.executions} executions in {s.seconds:.0f}s, {len(s.violations)} violation(s)",
                  flush=True)
            results.append(s)
    else:
        results = run_workers(targets, args)
    text = report(results, args, time.monotonic() - started)
    print()
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    if any(v["kind"] == "setup failed" for s in results for v in s.violations):
        return 2
    return 1 if any(s.violations for s in results) else 0


if __name__ == "__main__":
    sys.exit(main())
