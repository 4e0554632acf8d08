"""The package's exchange layer (gradcomp._exchange), which local steps, the optimizers and
torchft's process group run through: the library's codecs as flows on one process (no
collective) and on 2 gloo ranks against a sum computed here; a flow of another kind (its
phases as dicts) run by the same code; byte counts; a flat view of parameters and ranges of it;
the elastic rule of gradcomp._checkpoint."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

import gradcomp
from gradcomp import _checkpoint
from gradcomp._exchange import Exchange, FlatParams, TorchTransport, make_codec, make_flow

import dist_util


class _Plain:
    """A flow that is not the library's: x as float32, all-gathered, summed in rank order
    (describe as a dict, as a bound C++ flow's)."""

    phase_count = 1

    def __init__(self, n, world):
        self.n, self.world = n, world

    def describe(self, k):
        return {"collective": "all_gather", "type": "f32", "send_bytes": 4 * self.n, "receive_bytes": 4 * self.n * self.world}

    def encode(self, k, x, send):
        send.copy_(x)

    def receive(self, k, recv, out):
        out.copy_(recv.view(self.world, self.n).sum(0))


CASES = [("fp32", "summable", {}), ("int8", "gather", {}), ("int8", "sharded", {})]


def _sums(rank, world):
    n, out = 1000, {}
    ex = Exchange(TorchTransport(), "test")
    x = torch.randn(n, generator=torch.Generator().manual_seed(rank))
    every = [torch.empty(n) for _ in range(world)]
    dist.all_gather(every, x)
    want = sum(every)
    for codec, path, options in CASES + [(None, "plain", {})]:
        flow = _Plain(n, world) if codec is None else make_flow(make_codec(codec, path, options), path, n, world, rank)
        got = torch.empty(n)
        before = ex.bytes_sent
        job = ex.start(flow, x, got)
        while not job.advance():  # one collective at a time
            pass
        out[path] = (float((got - want).abs().max() / want.abs().max()), dist_util.all_same(got), ex.bytes_sent - before)
    return out, ex.wire_bytes


def test_every_flow_sums_over_two_ranks():
    got, wire = dist_util.run(2, _sums)
    assert got["summable"][0] == 0.0 and got["plain"][0] < 1e-6  # fp32: exact at 2 ranks
    assert got["gather"][0] < 0.02 and got["sharded"][0] < 0.02  # int8
    assert all(same for _, same, _ in got.values())
    assert got["summable"][2] == 4000 and got["plain"][2] == 4000
    assert wire > 0


def test_one_process_runs_no_collective():
    ex = Exchange(TorchTransport(), "test")  # no process group: world 1
    x = torch.randn(300)
    for codec, path, options in CASES:
        flow = make_flow(make_codec(codec, path, options), path, 300, 1, 0)
        got = torch.empty(300)
        ex.run(flow, x, got)
        assert float((got - x).abs().max()) <= 0.02 * float(x.abs().max()), path
    assert ex.wire_bytes == 0 and ex.bytes_sent > 0


def test_a_failed_decode_raises_the_library_error():
    ex = Exchange(TorchTransport(), "test")
    flow = make_flow(make_codec("int8", "gather", {}), "gather", 300, 1, 0)
    original = flow.encode

    def damaged(k, x, send):
        original(k, x, send)
        send[20] ^= 0x40

    flow.encode = damaged
    with pytest.raises(gradcomp.Error) as e:
        ex.run(flow, torch.randn(300), torch.empty(300))
    assert e.value.code in ("checksum_mismatch", "bad_header", "bad_magic")


def test_flat_params_read_write_views_and_grads_of_a_range():
    a, b = torch.nn.Parameter(torch.arange(6.0).view(2, 3)), torch.nn.Parameter(torch.arange(6.0, 10.0))
    whole, part = FlatParams([a, b]), FlatParams([a, b], 4, 4)
    assert torch.equal(whole.read(), torch.arange(10.0)) and torch.equal(part.read(), torch.arange(4.0, 8.0))
    assert [v.shape for v in whole.views(torch.zeros(10))] == [a.shape, b.shape]
    assert [v.shape for v in part.views(torch.zeros(4))] == [torch.Size([2]), torch.Size([2])]
    part.write(torch.full((4,), -1.0))
    assert torch.equal(whole.read(), torch.tensor([0, 1, 2, 3, -1, -1, -1, -1, 8, 9.0]))
    b.grad = torch.ones(4)
    assert torch.equal(part.grads(), torch.tensor([0, 0, 1, 1.0]))  # a's missing gradient: zeros


def test_the_elastic_rule_keeps_what_is_owed():
    saved = [np.array([1.0, 2.0], np.float32), None, np.array([3.0, -4.0], np.float32)]
    total = _checkpoint.owed_total(saved)
    assert total.tolist() == [4.0, -2.0]
    assert _checkpoint.owed_share(total, 2).tolist() == [2.0, -1.0]  # 2 new ranks: the sum kept
    mean = _checkpoint.owed_total(saved, averaged=True)  # DDP's: the update owes the mean
    assert np.allclose(_checkpoint.owed_share(mean, 5, averaged=True), [4 / 3, -2 / 3])
    assert _checkpoint.owed_total([None, np.zeros(0, np.float32)]) is None
