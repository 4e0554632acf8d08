"""The entry points' base: a Target makes valid inputs, mutates them and checks the property."""

from __future__ import annotations

import random
from typing import Dict, List, Optional, Tuple

import torch

import gradcomp

from .formats import fields, reseal
from .mutator import Mutator


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


class RestoreTarget(Target):
    """A codec's load_checkpoint (rank 1's checkpoint, into a fresh state of that rank) or, with
    ``elastic``, restore_elastic (every saved rank's, into a fresh state of rank 0 or 1 of two).
    A subclass gives the fixture (a codec and checkpoints of every rank after one and two steps,
    saved_1 and saved_2) and the state's snapshot."""

    def __init__(self, elastic: bool) -> None:
        self.elastic = elastic
        self.multi = elastic
        super().__init__()

    def fixture(self):
        raise NotImplementedError

    def snapshot(self, st) -> tuple:
        raise NotImplementedError

    def same(self, a: tuple, b: tuple) -> bool:
        return a == b

    def build(self) -> None:
        self.f = self.fixture()
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
        return mutate_list(self, rng, p, self.lists)

    def call(self, blobs, p):
        st = self.states[p["rank"]][0]
        if self.elastic:
            self.c.restore_elastic(st, [bytes(b) for b in blobs])
        else:
            self.c.load_checkpoint(st, bytes(blobs[0]))

    def untouched(self, p):
        st, ref = self.states[p["rank"]]
        if not self.same(self.snapshot(st), ref):
            return f"the state changed (step {st.step})"
        return None

    def reset(self, p):
        world = 2 if self.elastic else self.f.world
        st = self.c.make_state(self.f.n, world, p["rank"])
        self.states[p["rank"]] = (st, self.snapshot(st))


def mutate_list(t: Target, rng: random.Random, p: dict, lists: List[List[bytes]]) -> List[bytearray]:
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
