"""Entry points of the sharded path (gradcomp.Sharded)."""

from __future__ import annotations

from typing import Dict, Tuple

import torch

import gradcomp

from .target import OutputMixin, RestoreTarget, Target, _bytes, _grad, _outs


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
        self.receive0(sa, got_a)
        if mode == "all_reduce":
            self.receive0(sb, got_b)
            self.p1 = c.describe(1, sa[0])
            gathered_a, gathered_b = self.gather(sa), self.gather(sb)
            self.gathered = [_bytes(gathered_a), _bytes(gathered_b)]
            self.receive1(sa, gathered_a)
        self.saved_1 = [c.checkpoint(st) for st in sa]
        got = self.scatter(sa, [_grad(30 + r, n) for r in range(w)])  # step 2
        self.receive0(sa, got)
        if mode == "all_reduce":
            self.receive1(sa, self.gather(sa))
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

    def receive0(self, states, got) -> None:
        """Phase 0's receive on every rank (in reduce-scatter mode into an output shard)."""
        for st, recv in zip(states, got):
            if self.codec.mode == "all_reduce":
                self.codec.receive(0, st, recv)
            else:
                self.codec.receive(0, st, recv, torch.empty(st.shard[1]))

    def receive1(self, states, gathered) -> None:
        """Phase 1's receive of the gathered block on every rank."""
        for st in states:
            self.codec.receive(1, st, gathered, torch.empty(self.n))

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


class ShardedRestore(RestoreTarget):
    """Sharded.load_checkpoint (rank 1's checkpoint, into a fresh state of rank 1) and
    Sharded.restore_elastic (the three ranks' checkpoints, into a fresh state of rank 0 or 1 of
    two)."""

    kind = "gcsh"

    def __init__(self, codec: str, opts: dict, elastic: bool) -> None:
        self.codec_name, self.opts = codec, opts
        self.name = f"Sharded({codec}).{'restore_elastic' if elastic else 'load_checkpoint'}"
        super().__init__(elastic)

    def fixture(self):
        return _sharded_fixture(self.codec_name, "all_reduce", self.opts)

    def snapshot(self, st) -> tuple:
        return _sharded_snapshot(self.c, st)
