"""gradcomp.localsteps.LocalSteps on 2, 3 and 4 gloo ranks: H = 1, outer lr 1, no momentum and fp32
equal data-parallel SGD; replicas bit-identical after every sync on every path; the outer step
against a plain reference; a checkpoint resumed bit for bit and restored at another world size;
a corrupted payload raising gradcomp.Error on every rank with the parameters untouched; bad options
named in a ValueError. (A rank killed under torchrun and resumed: test_restart.py, variant
"localsteps".)"""

import pytest
import torch
import torch.distributed as dist

import gradcomp
from gradcomp.localsteps import LocalSteps

import dist_util


def _net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def _inner_step(net, opt, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    loss = (net(x) - y).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _flat(net):
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def _data_parallel_sgd(rank, world):
    # The synchroniser with H = 1, outer lr 1 and no momentum over fp32 against SGD on the mean
    # gradient (computed here from every rank's gradient, as DDP would).
    net, ref = _net(), _net()
    sync = LocalSteps(net, "fp32", period=1, outer_lr=1.0, outer_momentum=0.0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(6):
        _inner_step(net, opt, rank, step)
        sync.step()
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        ref_opt.zero_grad()
        (ref(x) - y).square().mean().backward()
        for p in ref.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        ref_opt.step()
        assert dist_util.all_same(_flat(net))
    return (_flat(net) - _flat(ref)).abs().max().item(), _flat(ref).abs().max().item(), sync.syncs


@pytest.mark.parametrize("world", [2, 3, 4])
def test_one_step_fp32_averaging_is_data_parallel_sgd(world):
    diff, scale, syncs = dist_util.run(world, _data_parallel_sgd)
    assert diff <= 1e-6 * scale, diff
    assert syncs == 6


PATHS = [("bf16", "summable", {}), ("int4", "gather", {"error_feedback": True}), ("int8", "sharded", {}),
         ("topk", "sharded", {"density": 0.05, "error_feedback": True, "feedback_scale": 0.9})]


def _replicas(rank, world, codec, path, options, fragments, overlap, mix):
    net = _net(seed=rank)  # different on purpose: LocalSteps starts every rank from rank 0's parameters
    sync = LocalSteps(net, codec, path=path, period=4, fragments=fragments, overlap=overlap, mix=mix, **options)
    assert dist_util.all_same(_flat(net))
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    same_after_apply = []
    for step in range(13):
        _inner_step(net, opt, rank, step)
        before = sync.syncs
        sync.step()
        if sync.syncs > before and fragments == 1 and mix == 0:
            same_after_apply.append(dist_util.all_same(_flat(net)))
        else:
            same_after_apply.append(True)
    sync.finish()
    return all(same_after_apply), dist_util.all_same(_flat(net)), sync.syncs, sync.wire_bytes


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("codec,path,options", PATHS)
def test_replicas_are_identical_after_every_sync(world, codec, path, options):
    same, end_same, syncs, wire = dist_util.run(world, _replicas, codec, path, options, 1, 0, 0.0)
    assert same and end_same
    assert syncs == 3 + 1  # steps 4, 8, 12 and finish()
    assert wire > 0


@pytest.mark.parametrize("codec,path,options", PATHS[1:3])
def test_streaming_fragments_with_overlap_end_identical(codec, path, options):
    same, end_same, syncs, _ = dist_util.run(2, _replicas, codec, path, options, 2, 1, 0.5)
    assert end_same
    assert syncs == 2 * 3 + 2  # each fragment applied 3 times in 13 steps, and once more by finish()


def test_outer_nesterov_step_matches_a_plain_reference():
    # One rank: the pseudo-gradient is anchor - local; torch's SGD with Nesterov on the anchor.
    net = _net()
    sync = LocalSteps(net, "fp32", period=2, outer_lr=0.7, outer_momentum=0.9)
    anchor = [p.detach().clone().requires_grad_() for p in net.parameters()]
    outer = torch.optim.SGD(anchor, lr=0.7, momentum=0.9, nesterov=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(8):
        _inner_step(net, opt, 0, step)
        if (step + 1) % 2 == 0:
            for a, p in zip(anchor, net.parameters()):
                a.grad = a.detach() - p.detach()
            outer.step()
        sync.step()
        if (step + 1) % 2 == 0:
            want = torch.cat([a.detach().flatten() for a in anchor])
            assert torch.allclose(_flat(net), want, rtol=0, atol=1e-6)


def _resume(rank, world, directory, path, stop):
    # Trains 12 inner steps with checkpoints every 3 through gradcomp.restart; with `stop`, the run
    # ends after step `stop` and a second LocalSteps resumes from the newest checkpoint.
    def build():
        net = _net()
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        sync = LocalSteps(net, "int4", path=path, period=3, fragments=3, overlap=1, error_feedback=True)
        ck = gradcomp.restart.Checkpointer(directory, {"model": net, "opt": opt, "sync": sync}, every=3)
        return net, opt, sync, ck

    net, opt, sync, ck = build()
    start = ck.resume()
    for step in range(start, stop or 12):
        _inner_step(net, opt, rank, step)
        sync.step()
        ck.maybe_save(step + 1)
    if stop:
        net, opt, sync, ck = build()
        start = ck.resume()
        assert start == stop - stop % 3
        for step in range(start, 12):
            _inner_step(net, opt, rank, step)
            sync.step()
    sync.finish()
    return _flat(net), sync.wire_bytes


@pytest.mark.parametrize("path", ["gather", "sharded"])
def test_a_checkpoint_resumes_bit_for_bit(path, tmp_path):
    whole, wire = dist_util.run(2, _resume, str(tmp_path / "a"), path, 0)
    resumed, wire2 = dist_util.run(2, _resume, str(tmp_path / "b"), path, 7)
    assert torch.equal(whole.view(torch.int32), resumed.view(torch.int32))
    assert wire == wire2


def _save(rank, world, path):
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    sync = LocalSteps(net, "int4", path=path, period=2, error_feedback=True)
    for step in range(5):
        _inner_step(net, opt, rank, step)
        sync.step()
    return sync.state_dict()


def _restore(rank, world, path, sd):
    net = _net()
    sync = LocalSteps(net, "int4", path=path, period=2, error_feedback=True)
    sync.load_state_dict(sd)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(5, 9):
        _inner_step(net, opt, rank, step)
        sync.step()
    sync.finish()
    return dist_util.all_same(_flat(net)), sync.steps, [fr.anchor.clone() for fr in sync._frags]


@pytest.mark.parametrize("path", ["gather", "sharded"])
def test_a_checkpoint_restores_at_another_world_size(path):
    sd = dist_util.run(3, _save, path)
    same, steps, _ = dist_util.run(2, _restore, path, sd)
    assert same and steps == 9
    with pytest.raises(ValueError, match="checkpoint of"):
        LocalSteps(_net(), "int8", path=path, period=2).load_state_dict(sd)


def _corrupted(rank, world):
    net = _net()
    sync = LocalSteps(net, "int8", path="sharded", period=2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    _inner_step(net, opt, rank, 0)
    sync.step()
    _inner_step(net, opt, rank, 1)
    before = _flat(net).clone()
    code = dist_util.with_damaged_receive(rank, sync.step)
    return code, torch.equal(before, _flat(net)), rank


def test_a_corrupted_payload_raises_on_every_rank_and_leaves_the_parameters():
    # dist_util.run returns rank 0's result; every rank asserts through all_same inside the helper
    code, untouched, _ = dist_util.run(2, _corrupted)
    assert code in ("checksum_mismatch", "bad_header", "bad_magic")
    assert untouched
    code1, untouched1 = dist_util.run(2, _peer_view)
    assert code1 == "peer_error" and untouched1


def _peer_view(rank, world):
    code, untouched, _ = _corrupted(rank, world)
    gathered = [None] * world
    dist.all_gather_object(gathered, (code, untouched))
    return gathered[1]


@pytest.mark.parametrize("kwargs,name", [
    ({"period": 0}, "period"), ({"period": 4, "fragments": 5}, "fragments"), ({"period": 4, "overlap": 4}, "overlap"),
    ({"mix": 1.0}, "mix"), ({"outer_lr": 0.0}, "outer_lr"), ({"outer_momentum": 1.0}, "outer_momentum"),
    ({"path": "ring"}, "path"), ({"codec": "int9"}, "codec"), ({"codec": "int8", "path": "summable"}, "summable"),
    ({"codec": "bf16", "density": 0.1}, "error_feedback"), ({"period": 2.5}, "period")])
def test_bad_options_raise_a_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LocalSteps(_net(), **kwargs)
    with pytest.raises(ValueError, match="float32"):
        LocalSteps(_net().double(), "int8")


def _trained(rank, steps, *args, **kwargs):
    # 9 inner steps of SGD with a LocalSteps made with these arguments: the parameters.
    net = _net()
    sync = LocalSteps(net, *args, **kwargs)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(steps):
        _inner_step(net, opt, rank, step)
        sync.step()
    return _flat(net)


def _outer_optimizers(rank, world):
    # The same run with the built-in outer step and with a torch optimizer over the anchors.
    out = {}
    for codec, path, kw in (("fp32", "summable", {}), ("int8", "sharded", {"fragments": 2, "overlap": 1})):
        plain = _trained(rank, 9, codec, path=path, period=2, outer_lr=1.0, outer_momentum=0.0, **kw)
        sgd = _trained(rank, 9, codec, path=path, period=2, outer_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0), **kw)
        out[f"sgd:{codec}"] = torch.equal(plain.view(torch.int32), sgd.view(torch.int32))
        ref = _trained(rank, 9, codec, path=path, period=2, outer_lr=0.7, outer_momentum=0.9, nesterov=True, **kw)
        nesterov = _trained(rank, 9, codec, path=path, period=2, outer_optimizer=lambda ps: torch.optim.SGD(
            ps, lr=0.7, momentum=0.9, nesterov=True), **kw)
        out[f"nesterov:{codec}"] = float((ref - nesterov).abs().max())
    return out


def test_a_torch_outer_optimizer_equals_the_built_in_rule():
    got = dist_util.run(2, _outer_optimizers)
    assert got["sgd:fp32"] and got["sgd:int8"]  # SGD, lr 1, no momentum: plain averaging, bit for bit
    assert got["nesterov:fp32"] <= 1e-6 and got["nesterov:int8"] <= 1e-6, got  # to rounding


def _adam_outer(rank, world, directory):
    # Adam as the outer optimizer: the replicas stay identical and the loss falls; a state_dict
    # taken mid-run (an exchange in flight, Adam's moments) resumes bit for bit.
    def make():
        net = _net()
        sync = LocalSteps(net, "int4", path="gather", period=3, overlap=1, error_feedback=True,
                          outer_optimizer=lambda ps: torch.optim.Adam(ps, lr=0.02))
        return net, sync, torch.optim.SGD(net.parameters(), lr=0.05)

    def loss(net, step, rank):
        x = torch.randn(64 if step < 0 else 8, 16, generator=torch.Generator().manual_seed(1000 * step + rank))
        return (net(x) - torch.sin(x[:, :4])).square().mean()

    def train(net, sync, opt, steps, same):
        for step in steps:
            opt.zero_grad()
            loss(net, step, rank).backward()
            opt.step()
            before = sync.syncs
            sync.step()
            if step == 14:  # an exchange in flight
                torch.save({"model": net.state_dict(), "sync": sync.state_dict()}, f"{directory}/{rank}.pt")
            if sync.syncs > before:
                same.append(dist_util.all_same(_flat(net)))
        sync.finish()
        return _flat(net)

    net, sync, opt = make()
    first, same = loss(net, -1, 0).item(), []
    whole = train(net, sync, opt, range(30), same)
    learns = loss(net, -1, 0).item() < 0.7 * first
    net2, sync2, opt2 = make()
    sd = torch.load(f"{directory}/{rank}.pt", weights_only=False)
    net2.load_state_dict(sd["model"])  # after the synchroniser, which broadcasts rank 0's parameters
    sync2.load_state_dict(sd["sync"])
    resumed = torch.equal(whole.view(torch.int32), train(net2, sync2, opt2, range(15, 30), []).view(torch.int32))
    return all(same) and len(same) == 9 and dist_util.all_same(whole), learns, resumed, sync.wire_bytes == sync2.wire_bytes


def test_adam_as_the_outer_optimizer_trains_identical_replicas_and_resumes(tmp_path):
    got = dist_util.run(2, _adam_outer, str(tmp_path))
    assert got == (True, True, True, True), got


def test_bad_outer_optimizer_combinations_raise():
    sgd = lambda ps: torch.optim.SGD(ps, lr=1.0)  # noqa: E731
    for kw in ({"outer_lr": 0.7}, {"outer_momentum": 0.0}, {"nesterov": False}):
        with pytest.raises(ValueError, match="outer_optimizer"):
            LocalSteps(_net(), "fp32", outer_optimizer=sgd, **kw)
    with pytest.raises(ValueError, match="outer_optimizer"):
        LocalSteps(_net(), "fp32", outer_optimizer=lambda ps: ps)
    with pytest.raises(ValueError, match="outer_optimizer"):
        LocalSteps(_net(), "fp32", outer_optimizer=torch.optim.SGD(_net().parameters(), lr=1.0))
    with pytest.raises(ValueError, match="outer step"):
        LocalSteps(_net(), "fp32", period=2, outer_optimizer=sgd).load_state_dict(LocalSteps(_net(), "fp32", period=2).state_dict())
    sync = LocalSteps(_net(), "fp32", period=2, outer_optimizer=sgd)
    assert "outer_optimizer=SGD" in repr(sync) and isinstance(sync.outer_optimizer, torch.optim.SGD)


def _cast_checkpoints(rank, world, sd):
    # The summable path with error feedback (bf16): a state_dict resumed at the same world size
    # bit for bit; with `sd` (saved at another world size) restored, what the residuals owe
    # summed over the new ranks against the saved ranks' sum.
    def make(net):
        return LocalSteps(net, "bf16", period=2, outer_momentum=0.0, error_feedback=True)

    if sd is not None:
        sync = make(_net())
        sync.load_state_dict(sd)
        mine = torch.as_tensor(sync._frags[0].flow.residual()).double()
        total = mine.clone()
        dist.all_reduce(total)
        saved = sum(torch.frombuffer(bytearray(t.numpy().tobytes()), dtype=torch.float32).double()
                    for t in sd["codec_states"]["0"])
        return float((total - saved).abs().max()), float(saved.abs().max()), dist_util.all_same(mine)
    net = _net()
    sync, opt = make(net), torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(5):
        _inner_step(net, opt, rank, step)
        sync.step()
    mid, model = sync.state_dict(), {k: v.clone() for k, v in net.state_dict().items()}
    for step in range(5, 9):
        _inner_step(net, opt, rank, step)
        sync.step()
    net2 = _net()
    sync2, opt2 = make(net2), torch.optim.SGD(net2.parameters(), lr=0.05)
    net2.load_state_dict(model)  # after the synchroniser, which broadcasts rank 0's parameters
    sync2.load_state_dict(mid)
    for step in range(5, 9):
        _inner_step(net2, opt2, rank, step)
        sync2.step()
    return torch.equal(_flat(net).view(torch.int32), _flat(net2).view(torch.int32)), mid


def test_the_summable_path_resumes_and_restores_at_another_world_size():
    resumed, sd = dist_util.run(3, _cast_checkpoints, None)
    assert resumed
    diff, scale, same = dist_util.run(2, _cast_checkpoints, sd)
    assert scale > 0 and diff <= 1e-6 * scale and same  # the total owed kept, the same share on every rank
