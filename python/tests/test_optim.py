"""gradcomp.optim (1-bit Adam, 0-1 Adam, DeMo) on 2, 3 and 4 gloo ranks: the warm-up equal to
torch.optim.Adam on the mean gradient bit for bit; replicas bit-identical after every exchange
(sharded and gather paths, local steps); the two-sided error feedback's conservation exact on
dyadic values (and on 8 simulated ranks); a state_dict resumed bit for bit; a corrupted payload
raising gradcomp.Error on every rank with the parameters and the momentum untouched; bad options
named in a ValueError. DeMo: its step against a reference written here in torch (the DCT as a
matrix product, per-row top-k, the sign of the mean), the momentum keeping exactly what was not
sent, replicas identical, resume and corruption as above."""

import io
from functools import partial

import pytest
import torch
import torch.distributed as dist

import gradcomp
from gradcomp.optim import DeMo, OneBitAdam, ZeroOneAdam

import dist_util


def _net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def _backward(net, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    for p in net.parameters():
        p.grad = None
    (net(x) - y).square().mean().backward()


def _flat(net):
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def _train(rank, world, make, warmup, steps):
    # Warm-up: every step against torch.optim.Adam fed the mean gradient, computed as the
    # optimizer does (one fp32 all-reduce of the flat gradients, then / W: the order of gloo's
    # sum is the same for the same buffer, so the means agree bit for bit). Then: replicas equal
    # after every exchange.
    net, ref = _net(seed=rank), _net()  # different on purpose: the optimizer broadcasts rank 0's
    opt = make(net)
    kw = {k: opt.defaults[k] for k in ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay")}
    ref_opt = torch.optim.Adam(ref.parameters(), **kw)
    warm_equal, same = [], []
    for step in range(steps):
        _backward(net, rank, step)
        before = opt.exchanges
        opt.step()
        if step < warmup:
            _backward(ref, rank, step)
            g = torch.cat([p.grad.flatten() for p in ref.parameters()])
            dist.all_reduce(g)
            g.div_(world)
            for p, v in zip(ref.parameters(), g.split([p.numel() for p in ref.parameters()])):
                p.grad.copy_(v.view_as(p))
            ref_opt.step()
            warm_equal.append(torch.equal(_flat(net).view(torch.int32), _flat(ref).view(torch.int32)))
        if opt.exchanges > before or step < warmup:
            same.append(dist_util.all_same(_flat(net)) and dist_util.all_same(opt._flats[0].m))
    opt.synchronize()
    same.append(dist_util.all_same(_flat(net)))
    return warm_equal, same, opt.exchanges, opt.var_updates, opt.wire_bytes


@pytest.mark.parametrize("world", [2, 3, 4])
def test_one_bit_adam_warmup_is_adam_and_replicas_stay_identical(world):
    make = partial(OneBitAdam, lr=0.01, weight_decay=0.01, warmup_steps=4)
    warm, same, exchanges, updates, wire = dist_util.run(world, _train, make, 4, 10)
    assert warm == [True] * 4
    assert all(same) and len(same) == 11
    assert (exchanges, updates) == (6, 4) and wire > 0


def _full_steps_bytes(rank, world, full_steps):
    net = _net()
    opt = OneBitAdam(net, lr=0.01, warmup_steps=3, full_steps=full_steps)
    for step in range(3):
        _backward(net, rank, step)
        opt.step()
    return opt.wire_bytes, dist_util.all_same(_flat(net)), _flat(net)


def test_bf16_full_steps_send_half_and_keep_the_replicas_identical():
    w32, same32, p32 = dist_util.run(2, _full_steps_bytes, "fp32")
    w16, same16, p16 = dist_util.run(2, _full_steps_bytes, "bf16")
    assert same32 and same16 and 2 * w16 == w32
    # The bf16 mean changes the steps, but an Adam step moves a parameter by about lr at most:
    # 3 steps of lr 0.01 each apart by less than twice that.
    assert 0 < (p16 - p32).abs().max() < 2 * 3 * 0.01


# 1-bit: variance at steps 1 to 3, exchanges at 4 to 13. 0-1: variance at steps 1, 2, 4; exchanges
# at 3, 5, 6, then every 3rd step (9, 12) and synchronize() at the end.
@pytest.mark.parametrize("make,counts", [
    (partial(OneBitAdam, lr=0.01, weight_decay=0.01, decoupled_weight_decay=True, warmup_steps=3, codec="int4",
             path="gather", error_feedback=True), (3, 10)),
    (partial(ZeroOneAdam, lr=0.01, weight_decay=0.01, decoupled_weight_decay=True, var_freeze_step=6,
             var_update_scaler=1, sync_every=3, codec="int8"), (3, 6))], ids=["onebit-int4-gather", "zeroone-int8-local"])
def test_other_codecs_paths_and_local_steps(make, counts):
    warm, same, exchanges, updates, _ = dist_util.run(3, _train, make, 2, 13)
    assert warm == [True, True]  # steps 1 and 2 are full steps in both
    assert all(same)
    assert (updates, exchanges) == counts


def test_zero_one_adam_variance_schedule():
    net = _net()
    opt = ZeroOneAdam(net, var_freeze_step=40, var_update_scaler=2)
    due = []
    for step in range(1, 50):
        _backward(net, 0, step)
        before = opt.var_updates
        opt.step()
        if opt.var_updates > before:
            due.append(step)
    assert due == [1, 2, 4, 6, 8, 12, 16, 24, 32]  # interval 1, 2, 4, 8, 16 (48 is past the freeze)
    assert opt.frozen


def _residuals(st, world):
    return torch.cat([torch.as_tensor(st.sender_residual(j)).clone() for j in range(world)]), torch.as_tensor(st.owner_residual).clone()


def _conservation(rank, world):
    # Dyadic gradients, beta1 = 1/2, W a power of two and scale groups of 2 (each scale adds one
    # bit; groups of 128 add seven a step and leave fp32's 24 bits after the first exchange):
    # every float operation is exact, so sum_r (sent_r - change of sender residual_r) - change of
    # the owners' residuals = the mean, bit for bit.
    n = 1024
    p = torch.nn.Parameter(torch.zeros(n))
    opt = OneBitAdam([p], lr=2.0 ** -10, betas=(0.5, 0.75), warmup_steps=1, group=2)
    fl, checks = opt._flats[0], []
    for step in range(5):
        g = torch.Generator().manual_seed(10 * step + rank)
        p.grad = torch.randint(-8, 9, (n,), generator=g).float() / 8
        sent = fl.m.lerp(p.grad, 0.5) / world
        e0, o0 = _residuals(fl.state, world)
        opt.step()
        if step == 0:
            continue
        e1, o1 = _residuals(fl.state, world)
        rows = [torch.empty(3 * n) for _ in range(world)]
        dist.all_gather(rows, torch.cat([sent, e1 - e0, torch.nn.functional.pad(o1 - o0, (0, n - o0.numel()))]))
        total = sum(r[:n] - r[n:2 * n] for r in rows)
        owners = torch.cat([r[2 * n:2 * n + n // world] for r in rows])
        checks.append(torch.equal(total - owners, fl.m) and dist_util.all_same(fl.m))
        checks.append(bool((e1 != 0).any()) and bool((o1 != 0).any()))  # the feedback did hold something
    return checks


@pytest.mark.parametrize("world", [2, 4])
def test_two_sided_error_feedback_conserves_the_momentum_exactly(world):
    assert all(dist_util.run(world, _conservation))


def test_two_sided_error_feedback_conservation_on_8_simulated_ranks():
    # OneBitAdam's compressed step (m_r = lerp(m, g_r, 1/2), m_r / W through the sharded codec, the
    # mean the new m) on 8 in-process codec states, 4 steps, exact as above
    world, n = 8, 2048
    codec = gradcomp.Sharded("sign", "all_reduce", error_feedback=True, group=2)
    states = [codec.make_state(n, world, r) for r in range(world)]
    m = torch.zeros(n)
    for step in range(4):
        gs = [torch.randint(-8, 9, (n,), generator=torch.Generator().manual_seed(100 * step + r)).float() / 8
              for r in range(world)]
        xs = [m.lerp(g, 0.5) / world for g in gs]
        before = [_residuals(st, world) for st in states]
        outs = dist_util.simulate_sharded(codec, states, xs)
        after = [_residuals(st, world) for st in states]
        total = sum(x - (a[0] - b[0]) for x, a, b in zip(xs, after, before))
        owners = torch.cat([a[1] - b[1] for a, b in zip(after, before)])
        assert all(torch.equal(o, outs[0]) for o in outs)
        assert torch.equal(total - owners, outs[0])
        assert any(bool((a[0] != 0).any()) for a in after)
        m = outs[0]


def _resume(rank, world, make):
    # k steps, a state_dict (through torch.save / torch.load(weights_only=True), as
    # gradcomp.restart.Checkpointer stores it), more steps; then fresh objects restored from it
    # take the same steps: identical bits.
    net = _net()
    opt = make(net)
    for step in range(7):
        _backward(net, rank, step)
        opt.step()
    buf = io.BytesIO()
    torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buf)
    for step in range(7, 14):
        _backward(net, rank, step)
        opt.step()
    whole = _flat(net).clone()
    net2 = _net(seed=5)
    opt2 = make(net2)
    sd = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    net2.load_state_dict(sd["model"])
    opt2.load_state_dict(sd["opt"])
    for step in range(7, 14):
        _backward(net2, rank, step)
        opt2.step()
    return torch.equal(whole.view(torch.int32), _flat(net2).view(torch.int32)), opt.wire_bytes == opt2.wire_bytes


def test_a_state_dict_resumes_bit_for_bit():
    make = partial(ZeroOneAdam, lr=0.01, var_freeze_step=5, var_update_scaler=1, sync_every=3)  # saved mid-window
    assert dist_util.run(2, _resume, make) == (True, True)
    make = partial(OneBitAdam, lr=0.01, warmup_steps=3, codec="int4", path="gather", error_feedback=True)
    assert _resume(0, 1, make) == (True, True)  # one process, no torch.distributed
    with pytest.raises(ValueError, match="checkpoint of"):
        OneBitAdam(_net(), warmup_steps=2).load_state_dict(ZeroOneAdam(_net()).state_dict())


def _corrupted(rank, world):
    net = _net()
    opt = OneBitAdam(net, lr=0.01, warmup_steps=1)
    _backward(net, rank, 0)
    opt.step()
    _backward(net, rank, 1)
    before, m = _flat(net).clone(), opt._flats[0].m.clone()
    code = dist_util.with_damaged_receive(rank, opt.step, at=40)
    every = [None] * world
    dist.all_gather_object(every, (code, torch.equal(before, _flat(net)) and torch.equal(m, opt._flats[0].m)))
    return every


def test_a_corrupted_payload_raises_on_every_rank_and_leaves_the_parameters():
    (code0, untouched0), (code1, untouched1) = dist_util.run(2, _corrupted)
    assert code0 in ("checksum_mismatch", "bad_header", "bad_magic", "codec_mismatch") and code1 == "peer_error"
    assert untouched0 and untouched1


@pytest.mark.parametrize("kwargs,name", [
    ({"lr": -1.0}, "lr"), ({"betas": (0.9, 1.0)}, "betas"), ({"eps": 0.0}, "eps"), ({"weight_decay": -0.1}, "weight_decay"),
    ({"warmup_steps": 0}, "warmup_steps"), ({"warmup_steps": 2.5}, "warmup_steps"), ({"codec": "int9"}, "codec"),
    ({"path": "ring"}, "path"), ({"density": 0.1}, "density"), ({"group": 3}, "group")])
def test_bad_options_raise_a_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        OneBitAdam(_net(), **kwargs)


@pytest.mark.parametrize("kwargs,name", [({"var_freeze_step": 0}, "var_freeze_step"),
                                         ({"var_update_scaler": 0}, "var_update_scaler"), ({"sync_every": 0}, "sync_every")])
def test_bad_zero_one_options_raise_a_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ZeroOneAdam(_net(), **kwargs)


def test_refuses_other_parameters_and_ddp():
    with pytest.raises(ValueError, match="float32"):
        OneBitAdam(_net().double())
    with pytest.raises(ValueError, match="float32"):
        OneBitAdam(_net().bfloat16())
    ddp = object.__new__(torch.nn.parallel.DistributedDataParallel)  # the type is what is checked
    with pytest.raises(ValueError, match="DDP"):
        OneBitAdam(ddp)


# --- DeMo


def _dct_matrix(b):
    # The orthonormal DCT-II as a matrix, in double: row k, column i.
    k, i = torch.arange(b, dtype=torch.float64)[:, None], torch.arange(b, dtype=torch.float64)[None, :]
    c = torch.cos(torch.pi * (2 * i + 1) * k / (2 * b)) * (2.0 / b) ** 0.5
    c[0] /= 2 ** 0.5
    return c


def _demo_reference(d, cols, k, block):
    """What one rank sends of a momentum d (n a multiple of cols and cols of block), in double:
    the DCT of each block, the k largest coefficients of each row by magnitude, back."""
    c = _dct_matrix(block)
    coeff = (d.double().view(-1, block) @ c.T).view(-1, cols)
    keep = coeff.abs().topk(k, dim=1).indices
    kept = torch.zeros_like(coeff).scatter_(1, keep, coeff.gather(1, keep))
    return (kept.view(-1, block) @ c).view(-1)


def _demo(rank, world, steps):
    torch.manual_seed(0)
    n, cols, k, block = 4096 * 2, 1024, 16, 64
    p = torch.nn.Parameter(torch.randn(n))
    opt = DeMo([p], lr=0.01, momentum_decay=0.9, cols=cols, k_per_row=k, dct_block=block)
    fl, results = opt._flats[0], []
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        p.grad = torch.cumsum(torch.randn(n, generator=g), 0) / 64  # smooth: the DCT's case
        d = fl.m * 0.9 + 0.01 * p.grad
        before = p.detach().clone()
        opt.step()
        mine = _demo_reference(d, cols, k, block)
        # the momentum keeps what was not sent (to bf16 rounding of the sent values)
        results.append(float((fl.m.double() - (d.double() - mine)).abs().max() / d.abs().max()))
        sent = [torch.empty(n, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(sent, mine)
        mean = sum(sent) / world
        moved = (before - p.detach()) / 0.01  # the step: lr * sign(mean)
        agree = (moved.sign() == mean.sign()) | (mean.abs() < 1e-3 * mean.abs().max())
        results.append(float(agree.double().mean()))
        results.append(float(dist_util.all_same(p.detach())))
    return results, opt.wire_bytes, fl.flow.slot


@pytest.mark.parametrize("world", [2, 3, 4])
def test_demo_against_a_reference_step(world):
    results, wire, slot = dist_util.run(world, _demo, 4)
    for step in range(4):
        kept_err, agree, same = results[3 * step:3 * step + 3]
        assert kept_err < 1e-2  # bf16 values: relative rounding 2^-9 of each sent coefficient
        assert agree > 0.999
        assert same == 1.0
    assert slot < 4 * 4096 * 2 / 30  # about 1/128 of the values, bf16 plus their indices
    assert wire == 4 * ((world - 1) * slot + 8 * (world - 1) // world)


def test_demo_resumes_bit_for_bit_corruption_and_options():
    make = partial(DeMo, lr=0.01, cols=64, k_per_row=4, dct_block=16)
    assert dist_util.run(2, _resume, make) == (True, True)
    assert _resume(0, 1, make) == (True, True)
    (code0, untouched0), (code1, untouched1) = dist_util.run(2, _demo_corrupted)
    assert code0 in ("checksum_mismatch", "bad_header", "bad_magic", "codec_mismatch") and code1 == "peer_error"
    assert untouched0 and untouched1
    for kwargs, name in [({"lr": -1.0}, "lr"), ({"momentum_decay": 1.0}, "momentum_decay"), ({"codec": "int9"}, "codec"),
                         ({"error_feedback": True}, "error_feedback"), ({"dct_block": 3}, "dct_block"),
                         ({"weight_decay": -1.0}, "weight_decay")]:
        with pytest.raises(ValueError, match=name):
            DeMo(_net(), **kwargs)
    with pytest.raises(ValueError, match="DDP"):
        DeMo(object.__new__(torch.nn.parallel.DistributedDataParallel))
    with pytest.raises(ValueError, match="checkpoint of"):
        make(_net()).load_state_dict(DeMo(_net(), codec="topk").state_dict())


def _demo_corrupted(rank, world):
    net = _net()
    opt = DeMo(net, lr=0.01, cols=64, k_per_row=4, dct_block=16)
    _backward(net, rank, 0)
    opt.step()
    _backward(net, rank, 1)
    before, m = _flat(net).clone(), opt._flats[0].m.clone()
    code = dist_util.with_damaged_receive(rank, opt.step, at=40, collective="all_gather_into_tensor")
    every = [None] * world
    dist.all_gather_object(every, (code, torch.equal(before, _flat(net)) and torch.equal(m, opt._flats[0].m)))
    return every
