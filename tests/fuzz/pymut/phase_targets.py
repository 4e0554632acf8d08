"""Entry points of the phase codecs: TAGC and the summable casts."""

from __future__ import annotations

from typing import Dict, Optional

import torch

import gradcomp

from .target import OutputMixin, RestoreTarget, Target, _bits, _bytes, _grad, _outs


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

    def encode(self, k: int, states, grads, dtype) -> list:
        """Phase k's buffer of every rank."""
        out, count = [], self.codec.describe(k, states[0])["count"]
        for g, st in zip(grads, states):
            buf = torch.zeros(count, dtype=dtype)
            self.codec.encode(k, g, st, buf)
            out.append(buf)
        return out

    def bitmap(self, states, grads):
        c = self.codec
        p0 = c.describe(0, states[0])
        bits = self.encode(0, states, grads, torch.int32)
        red = bits[0].clone()
        for b in bits[1:]:
            red = red | b if p0["op"] == "bor" else red + b
        return red

    def step(self, states, grads):
        c = self.codec
        red = self.bitmap(states, grads)
        for st in states:
            c.receive(0, st, red)
        cells = self.encode(1, states, grads, self.cell_type)
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


class TagcRestore(RestoreTarget):
    """Tagc().load_checkpoint (rank 1's, into a fresh state of rank 1 of 3) and
    Tagc().restore_elastic (every rank's, into a fresh state of rank 0 or 1 of 2)."""

    kind = "gctc"

    def __init__(self, elastic: bool) -> None:
        self.name = f"Tagc().{'restore_elastic' if elastic else 'load_checkpoint'}"
        super().__init__(elastic)

    def fixture(self):
        return _tagc_fixture({})

    def snapshot(self, st) -> tuple:
        return _phase_snapshot(self.c, st, True)

    def same(self, a: tuple, b: tuple) -> bool:
        return _same(a, b)
