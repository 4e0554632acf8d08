"""The CUDA path: codecs on CUDA tensors against the CPU byte for byte, the device report, bad
input, device states, and the DDP hooks over NCCL. Tests marked ``gpu`` (``pytest -m gpu``)
skip without a CUDA device or without a CUDA build of the extension (conftest.py)."""

import os
import socket

import numpy as np
import pytest
import torch

import gradcomp

INFO = gradcomp.build_info()
HAVE_GPU = INFO["cuda"] and torch.cuda.is_available()
gpu = pytest.mark.gpu
SPARSE = ("topk", "topk_fp32", "topk_int8")
N = 100_003  # odd: bf16 sections end in padding; several chunks below


def test_build_info():
    assert set(INFO) == {"cuda", "cuda_version", "cuda_architectures", "cuda_codecs", "cpu_isa", "cpu_isa_active"}
    assert isinstance(INFO["cuda"], bool)
    assert INFO["cpu_isa"][0] == "baseline" and INFO["cpu_isa_active"] in INFO["cpu_isa"]
    if INFO["cuda"]:
        assert INFO["cuda_version"].count(".") == 1 and INFO["cuda_architectures"]
        assert {"fp32", "bf16", "int8", "int4", "topk", "topk_int8", "sign", "piecewise4"} <= set(INFO["cuda_codecs"])
        assert not {"threshold", "randomk", "acctfm"} & set(INFO["cuda_codecs"])
    else:
        assert INFO["cuda_version"] is None and INFO["cuda_codecs"] == []


def test_cuda_tensors_without_cuda_say_so():
    if HAVE_GPU:
        pytest.skip("this machine runs the CUDA path")
    c = gradcomp.Compressor("int8")
    with pytest.raises(gradcomp.Error) as e:
        c.make_state(16, device="cuda")
    assert e.value.code == "device_error"
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Tagc().make_state(16, 1, 0, device="cuda")
    assert e.value.code == "device_error"


def _pair(name, **options):
    """The same codec twice (CPU, GPU); sparse frames as u32 lists, which the GPU writes."""
    opts = {"chunk_bytes": 65536, **options}
    if name in SPARSE:
        opts.update(compact_indices=False, density=0.01)
    return gradcomp.Compressor(name, **opts), gradcomp.Compressor(name, **opts)


def _bits(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy()


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", INFO["cuda_codecs"])
def test_payloads_equal_the_cpu(name, dtype):
    for feedback in (False, True):
        cpu, dev = _pair(name, error_feedback=feedback)
        s_cpu, s_dev = cpu.make_state(N), dev.make_state(N, device="cuda")
        g = torch.Generator().manual_seed(7)
        for step in range(3):
            grad = (torch.randn(N, generator=g) * 10.0 ** (step - 2)).to(dtype)
            out_cpu = torch.zeros(cpu.max_payload_bytes(N, dtype), dtype=torch.uint8)
            out_dev = torch.zeros(cpu.max_payload_bytes(N, dtype), dtype=torch.uint8, device="cuda")
            n_cpu = cpu.compress(grad, s_cpu, out_cpu)
            n_dev = dev.compress(grad.cuda(), s_dev, out_dev)
            assert n_dev == n_cpu, (name, feedback, step)
            assert torch.equal(out_dev[:n_dev].cpu(), out_cpu[:n_cpu]), (name, feedback, step)
            assert s_dev.step == s_cpu.step == step + 1
            if s_cpu.residual.shape[0]:
                assert np.array_equal(_bits(s_dev.residual), np.asarray(s_cpu.residual).view(np.int32))
            for add in (False, True):
                start = torch.randn(N, generator=g).to(dtype)
                want, got = start.clone(), start.cuda()
                (cpu.accumulate if add else cpu.decompress)(out_cpu[:n_cpu], want)
                (dev.accumulate if add else dev.decompress)(out_dev[:n_dev], got)
                assert np.array_equal(_bits(got), _bits(want)), (name, feedback, step, add)
        dev.check()


@gpu
@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32"])
def test_summable_casts_equal_the_cpu(name):
    c = gradcomp.Compressor(name)
    wire = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]
    src = torch.randn(N, generator=torch.Generator().manual_seed(3)) * 1e-3
    src[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40])
    codes, dcodes = torch.empty(N, dtype=wire), torch.empty(N, dtype=wire, device="cuda")
    c.encode_cast(src, codes, 0.25)
    c.encode_cast(src.cuda(), dcodes, 0.25)
    assert np.array_equal(_bits(dcodes), _bits(codes))
    dst, ddst = torch.ones(N), torch.ones(N, device="cuda")
    c.decode_cast(codes, dst, add=True)
    c.decode_cast(dcodes, ddst, add=True)
    assert np.array_equal(_bits(ddst), _bits(dst))


@gpu
@pytest.mark.parametrize("name", ["int8", "topk"])
def test_a_corrupted_payload_raises_at_the_next_check_and_leaves_the_output(name):
    c = gradcomp.Compressor(name, density=0.01) if name == "topk" else gradcomp.Compressor(name)
    grad = torch.randn(N, device="cuda")
    st = c.make_state(N, device="cuda")
    out = torch.empty(c.max_payload_bytes(N), dtype=torch.uint8, device="cuda")
    n = c.compress(grad, st, out)
    bad = out[:n].clone()
    bad[n // 2] ^= 4
    acc = torch.randn(N, device="cuda")
    before = acc.clone()
    c.accumulate(bad, acc)  # queued: nothing is raised yet
    with pytest.raises(gradcomp.Error) as e:
        c.check()
    assert e.value.code == "checksum_mismatch"
    assert torch.equal(acc, before)
    c.check()  # the report was read and cleared
    c.accumulate(out[:n], acc)
    c.check()
    assert not torch.equal(acc, before)


@gpu
def test_the_report_is_read_every_check_interval_calls():
    c = gradcomp.Compressor("int8")
    c.check_interval = 2
    st = c.make_state(1000, device="cuda")
    out = torch.empty(c.max_payload_bytes(1000), dtype=torch.uint8, device="cuda")
    n = c.compress(torch.randn(1000, device="cuda"), st, out)  # call 1
    out[100] ^= 1
    with pytest.raises(gradcomp.Error) as e:
        c.decompress(out[:n], torch.zeros(1000, device="cuda"))  # call 2: the interval's check
    assert e.value.code == "checksum_mismatch"


@gpu
def test_non_finite_gradients_are_reported_and_change_nothing():
    c = gradcomp.Compressor("topk", density=0.1, allow_non_finite=False)
    st = c.make_state(4096, device="cuda")
    grad = torch.randn(4096, device="cuda")
    grad[17] = float("nan")
    out = torch.empty(c.max_payload_bytes(4096), dtype=torch.uint8, device="cuda")
    c.compress(grad, st, out)
    with pytest.raises(gradcomp.Error) as e:
        c.check()
    assert e.value.code == "non_finite_value"
    assert st.step == 0 and not st.residual.any()


@gpu
def test_bad_input_gets_a_clear_error():
    c = gradcomp.Compressor("int8")
    n = 1000
    st = c.make_state(n, device="cuda")
    g = torch.randn(n, device="cuda")
    out = torch.empty(c.max_payload_bytes(n) + 8, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="one device"):
        c.compress(g, st, out.cpu())
    with pytest.raises(ValueError, match="made for cuda"):
        c.compress(g.cpu(), st, out.cpu())
    with pytest.raises(ValueError, match="made for cpu"):
        c.compress(g, c.make_state(n), out)
    with pytest.raises(TypeError):
        c.compress(g.half(), st, out)
    with pytest.raises(ValueError, match="8-byte"):
        c.compress(g, st, out[1:])
    with pytest.raises(ValueError, match="contiguous"):
        c.compress(torch.randn(n, 2, device="cuda")[:, 0], st, out)
    with pytest.raises(gradcomp.Error) as e:
        c.compress(torch.randn(n + 1, device="cuda"), st, out)
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        c.compress(g, gradcomp.Compressor("int4").make_state(n, device="cuda"), out)
    assert e.value.code == "codec_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        c.compress(g, st, out[:16])
    assert e.value.code == "buffer_too_small"
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Compressor("threshold").make_state(n, device="cuda")
    assert e.value.code == "invalid_argument" and "no CUDA kernels" in str(e.value)
    with pytest.raises(gradcomp.Error) as e:
        c.make_state(n, device=torch.cuda.device_count())
    assert e.value.code == "device_error"
    with pytest.raises(ValueError, match="CPU arrays only"):
        c.accumulate_gathered(out, g)
    c.check()  # none of these queued anything


@gpu
def test_device_states_checkpoint_to_any_device():
    c = gradcomp.Compressor("topk", density=0.05)
    n = 5000
    st = c.make_state(n, device="cuda")
    out = torch.empty(c.max_payload_bytes(n), dtype=torch.uint8, device="cuda")
    for _ in range(3):
        c.compress(torch.randn(n, device="cuda"), st, out)
    assert st.step == 3 and st.device.startswith("cuda")
    blob = st.checkpoint()
    host = c.make_state(n)
    host.restore(blob)
    assert host.step == 3 and np.array_equal(np.asarray(host.residual), st.residual.cpu().numpy())
    back = c.make_state(n, device="cuda")
    back.restore(host.checkpoint())
    assert back.step == 3 and torch.equal(back.residual, st.residual)
    with pytest.raises(gradcomp.Error):
        back.restore(blob[:-1])
    assert back.step == 3 and torch.equal(back.residual, st.residual)
    back.step = 9
    assert back.step == 9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fit(net, steps, rank=0, world=1):
    """SGD with momentum on the test task's batches (rank r of W draws batch step * W + r), on
    CUDA: the losses."""
    from gradcomp import testing

    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    task = testing.MarkovTask()
    losses = []
    for step in range(steps):
        x, y = task.batch(step * world + rank, 8, 32)
        loss = torch.nn.functional.cross_entropy(net(x.cuda()).flatten(0, 1), y.cuda().flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def nccl_group():
    import torch.distributed as dist

    if not HAVE_GPU or not dist.is_nccl_available():
        pytest.skip("needs a CUDA device, a CUDA build of gradcomp and NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# Mean of the last 10 losses against plain DDP's, measured with the same loop on the CPU (gloo,
# one rank): top-k 10% + error feedback +0.051, int8 and bf16 +0.0000; top-k 10% without error
# feedback (a codec that loses too much) +0.38. The margin sits between.
@gpu
@pytest.mark.parametrize("codec,options", [("topk", {"density": 0.1}), ("int8", {}), ("bf16", {}),
                                           ("int8", {"path": "sharded"}), ("topk", {"density": 0.1, "path": "sharded"})])
def test_ddp_hook_trains_on_nccl(nccl_group, codec, options):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, testing

    def run(hooked: bool):
        torch.manual_seed(0)
        model = testing.TinyTransformer().cuda()
        net = DDP(model, device_ids=[0])
        state = None
        if hooked:
            state = ddp.HookState(model, codec, **options)
            net.register_comm_hook(state, ddp.compress_hook)
        losses = _fit(net, 60)
        return losses, state, model

    plain, _, _ = run(False)
    hooked, state, model = run(True)
    assert state.calls > 0 and state.bytes_sent > 0
    assert hooked[-1] < 0.8 * hooked[0]
    assert abs(np.mean(hooked[-10:]) - np.mean(plain[-10:])) < 0.15, (hooked[-10:], plain[-10:])
    if not state.compressor.summable:
        state.compressor.check()
        assert all(st.device.startswith("cuda") for st in state.states.values())
        assert all(st.device.startswith("cuda") for st in state.sharded_states.values())
        assert bool(state.sharded_states) == (options.get("path") == "sharded")
        sd = state.state_dict()
        fresh = ddp.HookState(model, codec, **options)
        fresh.load_state_dict(sd)
        for name, st in state.states.items():
            assert fresh.states[name].step == st.step
            assert torch.equal(fresh.states[name].residual, st.residual)


@gpu
@pytest.mark.parametrize("name", ["topk", "int8", "bf16"])
def test_many_buffers_on_cuda_equal_the_cpu(name):
    """compress_many / accumulate_many on CUDA tensors: the CPU's bytes, states and sums."""
    cpu, dev = _pair(name, error_feedback=True)
    sizes = [1000, 70_001, 3]
    grads = [torch.randn(n, generator=torch.Generator().manual_seed(n)) for n in sizes]
    caps = [cpu.max_payload_bytes(n) for n in sizes]
    offsets = [16 + sum((c + 7) // 8 * 8 for c in caps[:j]) for j in range(len(sizes))]
    block = (offsets[-1] + caps[-1] + 7) // 8 * 8
    out_cpu = torch.zeros(block, dtype=torch.uint8)
    out_dev = torch.zeros(block, dtype=torch.uint8, device="cuda")
    s_cpu = [cpu.make_state(n) for n in sizes]
    s_dev = [dev.make_state(n, device="cuda") for n in sizes]
    got_cpu = cpu.compress_many(grads, s_cpu, out_cpu, offsets)
    got_dev = dev.compress_many([g.cuda() for g in grads], s_dev, out_dev, offsets)
    assert got_dev == got_cpu
    for j in range(len(sizes)):
        a = offsets[j]
        assert torch.equal(out_dev[a:a + got_dev[j]].cpu(), out_cpu[a:a + got_cpu[j]])
        if s_cpu[j].residual.shape[0]:
            assert np.array_equal(_bits(s_dev[j].residual), np.asarray(s_cpu[j].residual).view(np.int32))
    out_cpu[:12].view(torch.int32)[:] = torch.tensor(got_cpu, dtype=torch.int32)
    sums_cpu = [torch.zeros(n) for n in sizes]
    sums_dev = [torch.zeros(n, device="cuda") for n in sizes]
    cpu.accumulate_many(out_cpu.repeat(3), block, sums_cpu, offsets)
    dev.accumulate_many(out_dev.repeat(3), block, sums_dev, offsets, got_dev)
    dev.check()
    for a, b in zip(sums_dev, sums_cpu):
        assert np.array_equal(_bits(a), _bits(b))


# --- TAGC-2 on CUDA tensors ---------------------------------------------------------------

NT = 100_005  # odd, a multiple of 3 and 5: every shard of W = 1, 3, 5 has NT / W elements


def _tagc_step(codec, states, grads, dtype):
    """One TAGC step of len(states) simulated ranks. The reductions run on the CPU (OR / SUM of
    the bitmaps, the cells summed in float32 in rank order and rounded to the cell type), so
    both backends get the same reduced bytes. Returns each rank's bitmap, cells and whole output,
    and the reduced cells."""
    dev = grads[0].device
    p0 = codec.describe(0, states[0])
    bits = [torch.zeros(p0["count"], dtype=torch.int32, device=dev) for _ in states]
    for g, st, b in zip(grads, states, bits):
        codec.encode(0, g, st, b)
    red = bits[0].cpu()
    for b in bits[1:]:
        red = red | b.cpu() if p0["op"] == "bor" else red + b.cpu()
    for st in states:
        codec.receive(0, st, red.to(dev))
    p1 = codec.describe(1, states[0])
    cells = [torch.empty(p1["count"], dtype=dtype, device=dev) for _ in states]
    for g, st, c in zip(grads, states, cells):
        codec.encode(1, g, st, c)
    summed = sum(c.cpu().float() for c in cells).to(dtype).to(dev)
    outs = []
    for st in states:
        out = torch.full((NT,), 7.0, device=dev)
        codec.receive(1, st, summed, out)
        outs.append(out)
    return bits, cells, outs, summed


@gpu
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("options", [{}, {"bitmap": "sum_safe"}, {"cells": "fp32", "preset": "tagc2"}])
def test_tagc_phases_on_cuda_equal_the_cpu(world, options):
    """Every TAGC phase on CUDA states: the CPU's bitmap words, each shard's first rows x block
    cells (the rest of the padded shard zero), outputs, residuals, thresholds and checkpoints."""
    opts = dict(options)
    codec = gradcomp.Tagc(opts.pop("preset", "default"), density=0.01, **opts)
    dtype = torch.float32 if codec.config["cells"] == "fp32" else torch.bfloat16
    block = codec.config["block"]
    s_cpu = [codec.make_state(NT, world, r) for r in range(world)]
    s_dev = [codec.make_state(NT, world, r, device="cuda") for r in range(world)]
    assert s_dev[0].device == "cuda:0" and s_dev[0].device_bytes > 0
    g = torch.Generator().manual_seed(world)
    for step in range(3):
        grads = [torch.randn(NT, generator=g) * 10.0 ** (step - 1) for _ in range(world)]
        b_cpu, c_cpu, o_cpu, _ = _tagc_step(codec, s_cpu, grads, dtype)
        b_dev, c_dev, o_dev, _ = _tagc_step(codec, s_dev, [x.cuda() for x in grads], dtype)
        rows = s_cpu[0].rows
        for r in range(world):
            assert torch.equal(b_dev[r].cpu(), b_cpu[r]), (step, r)
            assert s_dev[r].rows == rows
            padded = c_dev[r].cpu().view(world, -1)
            assert padded.shape[1] >= rows * block
            assert np.array_equal(_bits(padded[:, :rows * block]), _bits(c_cpu[r].view(world, rows * block))), (step, r)
            assert not padded[:, rows * block:].float().abs().sum()
            assert np.array_equal(_bits(o_dev[r]), _bits(o_cpu[r])), (step, r)
        for a, b in zip(s_dev, s_cpu):
            codec.finish_step(a)
            codec.finish_step(b)
            assert a.step == b.step == step + 1 and a.stats == b.stats
            assert np.array_equal(_bits(a.residual), np.asarray(b.residual).view(np.int32))
            assert np.array_equal(_bits(a.thresholds), np.asarray(b.thresholds).view(np.int32))
            assert codec.checkpoint(a) == codec.checkpoint(b)
    codec.check()
    # A CPU checkpoint continues on the device, and the device's on the CPU.
    moved = codec.make_state(NT, world, 0, device="cuda")
    codec.load_checkpoint(moved, codec.checkpoint(s_cpu[0]))
    assert moved.step == 3 and codec.checkpoint(moved) == codec.checkpoint(s_cpu[0])
    back = codec.make_state(NT, world, 0)
    codec.load_checkpoint(back, codec.checkpoint(s_dev[0]))
    assert np.array_equal(np.asarray(back.residual), s_dev[0].residual.cpu().numpy())


@gpu
def test_tagc_shard_receive_on_cuda_equals_the_cpu():
    """receive(1) of a rank's shard (a reduce-scatter's output): the padded shard of R x block
    cells on the device, the packed one on the CPU; the same decoded shard."""
    world, codec = 3, gradcomp.Tagc(density=0.02)
    block = codec.config["block"]
    s_cpu = [codec.make_state(NT, world, r) for r in range(world)]
    s_dev = [codec.make_state(NT, world, r, device="cuda") for r in range(world)]
    grads = [torch.randn(NT, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    for states, gs in ((s_cpu, grads), (s_dev, [x.cuda() for x in grads])):
        p0 = codec.describe(0, states[0])
        bits = [torch.zeros(p0["count"], dtype=torch.int32, device=gs[0].device) for _ in states]
        for x, st, b in zip(gs, states, bits):
            codec.encode(0, x, st, b)
        red = bits[0].cpu()
        for b in bits[1:]:
            red = red | b.cpu()
        for st in states:
            codec.receive(0, st, red.to(gs[0].device))
        p1 = codec.describe(1, states[0])
        cells = [torch.empty(p1["count"], dtype=torch.bfloat16, device=gs[0].device) for _ in states]
        for x, st, c in zip(gs, states, cells):
            codec.encode(1, x, st, c)
        summed = sum(c.cpu().float() for c in cells).to(torch.bfloat16).to(gs[0].device)
        outs = []
        for r, st in enumerate(states):
            s = p1["shard_count"]
            out = torch.zeros(NT // world, device=gs[0].device)
            codec.receive(1, st, summed[r * s:(r + 1) * s].clone(), out)
            codec.finish_step(st)
            outs.append(out.cpu())
        if states is s_cpu:
            want = outs
        else:
            assert s_dev[0].rows == s_cpu[0].rows and p1["shard_count"] >= s_cpu[0].rows * block
            for a, b in zip(outs, want):
                assert np.array_equal(_bits(a), _bits(b))
    codec.check()


@gpu
@pytest.mark.parametrize("bitmap", ["or", "sum_safe"])
def test_tagc_bad_union_raises_at_the_next_check_and_changes_nothing(bitmap):
    """A reduced bitmap with every bit set (more positions than the ranks can keep): the CPU
    raises at receive(0); the device finishes the step doing nothing (output, residual and
    thresholds untouched) and check() raises the CPU's code."""
    codec = gradcomp.Tagc(density=0.01, bitmap=bitmap)
    cpu, dev = codec.make_state(NT, 1, 0), codec.make_state(NT, 1, 0, device="cuda")
    g = torch.randn(NT, generator=torch.Generator().manual_seed(3))
    p0 = codec.describe(0, cpu)
    bad = torch.full((p0["count"],), -1, dtype=torch.int32)
    codec.encode(0, g, cpu, torch.empty_like(bad))
    with pytest.raises(gradcomp.Error) as want:
        codec.receive(0, cpu, bad)
    codec.encode(0, g.cuda(), dev, torch.empty_like(bad).cuda())
    residual, thresholds = dev.residual.clone(), dev.thresholds.clone()
    codec.receive(0, dev, bad.cuda())
    cells = torch.empty(codec.describe(1, dev)["count"], dtype=torch.bfloat16, device="cuda")
    codec.encode(1, g.cuda(), dev, cells)
    out = torch.full((NT,), 7.0, device="cuda")
    codec.receive(1, dev, cells, out)
    codec.finish_step(dev)
    with pytest.raises(gradcomp.Error) as got:
        codec.check()
    assert got.value.code == want.value.code
    assert torch.equal(out, torch.full((NT,), 7.0, device="cuda"))
    assert torch.equal(dev.residual, residual) and torch.equal(dev.thresholds, thresholds)
    codec.check()  # cleared


@gpu
def test_tagc_device_states_refuse_bad_input():
    codec = gradcomp.Tagc(density=0.01)
    st = codec.make_state(NT, 1, 0, device="cuda")
    bits = torch.empty(codec.describe(0, st)["count"], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="state is on cuda:0"):
        codec.encode(0, torch.zeros(NT), st, bits.cpu())
    with pytest.raises(ValueError, match="one device"):
        codec.encode(0, torch.zeros(NT), st, bits)
    with pytest.raises(TypeError):
        codec.encode(0, torch.zeros(NT, device="cuda"), st, bits.float())
    with pytest.raises(TypeError):
        codec.encode(0, torch.zeros(NT, device="cuda", dtype=torch.bfloat16), st, bits)
    with pytest.raises(gradcomp.Error) as e:
        codec.encode(0, torch.zeros(NT - 1, device="cuda"), st, bits)
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, st, bits)  # before encode(0)
    with pytest.raises(ValueError, match="state is on cpu"):
        codec.encode(0, torch.zeros(NT, device="cuda"), codec.make_state(NT, 1, 0), bits)
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Tagc(density=0.02).describe(0, st)
    assert e.value.code == "codec_mismatch"
    codec.check()


_CAST_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@gpu
@pytest.mark.parametrize("wire", ["fp32", "bf16", "fp16"])
def test_summable_cast_states_on_cuda_equal_the_cpu(wire):
    """SummableCast with CUDA states: the CPU's codes, residuals and decoded sums (whole and a
    rank's shard), with and without feedback, at 1 and 3 ranks."""
    n = NT - 1  # the last shard of 3 is one element short: its code is padding
    for feedback in (False, True):
        codec = gradcomp.SummableCast(wire, feedback=feedback)
        for world in (1, 3):
            s_cpu = [codec.make_state(n, world, r) for r in range(world)]
            s_dev = [codec.make_state(n, world, r, device="cuda") for r in range(world)]
            g = torch.Generator().manual_seed(world)
            count = codec.describe(0, s_cpu[0])["count"]
            for step in range(3):
                grads = [torch.randn(n, generator=g) * 10.0 ** (step - 1) for _ in range(world)]
                c_cpu = [torch.empty(count, dtype=_CAST_DTYPES[wire]) for _ in range(world)]
                c_dev = [torch.empty(count, dtype=_CAST_DTYPES[wire], device="cuda") for _ in range(world)]
                for r in range(world):
                    codec.encode(0, grads[r], s_cpu[r], c_cpu[r])
                    codec.encode(0, grads[r].cuda(), s_dev[r], c_dev[r])
                    assert np.array_equal(_bits(c_dev[r]), _bits(c_cpu[r])), (wire, feedback, world, step, r)
                summed = sum(c.float() for c in c_cpu).to(_CAST_DTYPES[wire])
                shard = count // world
                for r in range(world):
                    want, got = torch.zeros(n), torch.zeros(n, device="cuda")
                    codec.receive(0, s_cpu[r], summed, want)
                    codec.receive(0, s_dev[r], summed.cuda(), got)
                    assert np.array_equal(_bits(got), _bits(want))
                    size = min(n, (r + 1) * shard) - r * shard
                    want, got = torch.zeros(size), torch.zeros(size, device="cuda")
                    codec.receive(0, s_cpu[r], summed[r * shard:(r + 1) * shard].clone(), want)
                    codec.receive(0, s_dev[r], summed[r * shard:(r + 1) * shard].cuda(), got)
                    assert np.array_equal(_bits(got), _bits(want))
                    codec.finish_step(s_cpu[r])
                    codec.finish_step(s_dev[r])
                    assert s_dev[r].step == s_cpu[r].step == step + 1
                    assert np.array_equal(s_dev[r].residual.cpu().numpy(), np.asarray(s_cpu[r].residual))
            codec.check()
    # A buffer whose padding is not zero (a misrouted shard): the CPU raises at once, the device
    # writes nothing and check() raises the same code.
    codec = gradcomp.SummableCast(wire)
    cpu, dev = codec.make_state(n, 3, 2), codec.make_state(n, 3, 2, device="cuda")
    bad = torch.zeros(codec.describe(0, cpu)["count"], dtype=_CAST_DTYPES[wire])
    bad[-1] = 1
    with pytest.raises(gradcomp.Error) as want:
        codec.receive(0, cpu, bad, torch.zeros(n))
    out = torch.full((n,), 7.0, device="cuda")
    codec.receive(0, dev, bad.cuda(), out)
    with pytest.raises(gradcomp.Error) as got:
        codec.check()
    assert got.value.code == want.value.code
    assert torch.equal(out, torch.full((n,), 7.0, device="cuda"))
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, dev, bad.cuda(), torch.zeros(n - 1, device="cuda"))
    assert e.value.code == "size_mismatch"


def _train_cuda(hook: str, steps: int = 60):
    """TinyTransformer under DDP on cuda:0 with plain all-reduce, or TAGC's hook; the losses."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, testing

    torch.manual_seed(0)
    model = testing.TinyTransformer().cuda()
    net = DDP(model, device_ids=[torch.cuda.current_device()])
    state = None
    if hook == "tagc":
        state = ddp.TagcHookState(model, density=0.1)
        net.register_comm_hook(state, ddp.tagc_hook)
    return _fit(net, steps), state, model


@gpu
def test_tagc_hook_trains_on_nccl(nccl_group):
    """TAGC's DDP hook on NCCL (world size 1): sum-safe bitmaps chosen from the backend, device
    states, plain DDP's loss, and a state dict that round-trips."""
    from gradcomp import ddp

    plain, _, _ = _train_cuda("plain")
    hooked, state, model = _train_cuda("tagc")
    assert state.codec.config["bitmap"] == "sum_safe"
    assert all(st.device == "cuda:0" for st in state.states.values()) and state.states
    assert hooked[-1] < 0.8 * hooked[0]
    assert abs(np.mean(hooked[-10:]) - np.mean(plain[-10:])) < 0.15, (hooked[-10:], plain[-10:])
    sd = state.state_dict()
    fresh = ddp.TagcHookState(model, density=0.1)
    fresh.load_state_dict(sd)
    for name, st in state.states.items():
        assert fresh.states[name].step == st.step
        assert torch.equal(fresh.states[name].residual, st.residual)


@gpu
@pytest.mark.parametrize("codec", ["tagc", "int8", "topk"])
def test_fsdp2_trains_on_one_gpu(nccl_group, codec):
    """FSDP2 (fully_shard) on cuda:0 over NCCL with TAGC or a codec on the sharded path as its
    reduce-scatter: device states, and the loss of FSDP's own reduce-scatter."""
    from torch.distributed.fsdp import fully_shard

    from gradcomp import fsdp, testing

    def run(codec):
        torch.manual_seed(0)
        net = testing.TinyTransformer().cuda()
        for b in net.blocks:
            fully_shard(b)
        fully_shard(net)
        options = {"density": 0.1} if codec in ("tagc", "topk") else {}
        owner = fsdp.attach(net, codec, **options) if codec else None
        losses = _fit(net, 60)
        return losses, owner

    plain, _ = run(None)
    got, owner = run(codec)
    assert owner.calls > 0 and all(st.device == "cuda:0" for st in owner.states.values())
    assert got[-1] < 0.8 * got[0]
    assert abs(np.mean(got[-10:]) - np.mean(plain[-10:])) < 0.15, (got[-10:], plain[-10:])
    owner.codec.check()
    sd = owner.state_dict()
    assert set(sd["states"]) == set(owner.states)


def _gloo_on_cuda(rank, world, hook):
    """A rank of the 2-rank gloo run on CUDA tensors (both ranks on cuda:0)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, testing

    import dist_util

    torch.manual_seed(0)
    model = testing.TinyTransformer().cuda()
    net = DDP(model, device_ids=[0])
    if hook == "tagc":
        state = ddp.TagcHookState(model, density=0.1)
        net.register_comm_hook(state, ddp.tagc_hook)
    else:
        state = ddp.HookState(model, hook)
        net.register_comm_hook(state, ddp.compress_hook)
    losses = _fit(net, 20, rank, world)
    same = all(dist_util.all_same(p.data.cpu()) for p in model.parameters())
    return {"losses": losses, "same": same, "calls": state.calls}


@gpu
@pytest.mark.parametrize("hook", ["topk", "int8", "tagc"])
def test_hooks_on_gloo_over_cuda_tensors(hook):
    """Two gloo ranks whose gradients are CUDA tensors (gloo stages them through the host): the
    hooks run on the device, the ranks keep identical parameters, and the loss falls."""
    import dist_util

    if not HAVE_GPU:
        pytest.skip("needs a CUDA device and a CUDA build of gradcomp")
    got = dist_util.run(2, _gloo_on_cuda, hook)
    assert got["same"] and got["calls"] > 0
    assert got["losses"][-1] < 0.9 * got["losses"][0], got["losses"]


# --- The sharded path on CUDA tensors -------------------------------------------------------


def _sharded_step(codec, states, grads, out_dtype):
    """One step of len(states) simulated ranks of a gradcomp.Sharded codec on the grads' device:
    the all-to-all and all-gather by slicing. Returns each rank's sends and outputs."""
    world, dev = len(states), grads[0].device
    p0 = codec.describe(0, states[0])
    slot = p0["slot_bytes"]
    sends = []
    for g, st in zip(grads, states):
        buf = torch.empty(p0["send_bytes"], dtype=torch.uint8, device=dev)
        codec.encode(0, g, st, buf)
        sends.append(buf)
    outs = []
    for j, st in enumerate(states):
        recv = torch.cat([sends[r].view(world, slot)[j] for r in range(world)])
        if codec.mode == "reduce_scatter":
            out = torch.full((st.shard[1],), 7.0, dtype=out_dtype, device=dev)
            codec.receive(0, st, recv, out)
            outs.append(out)
        else:
            codec.receive(0, st, recv)
    if codec.mode == "all_reduce":
        p1 = codec.describe(1, states[0])
        gathered = []
        for st in states:
            buf = torch.empty(p1["send_bytes"], dtype=torch.uint8, device=dev)
            codec.encode(1, None, st, buf)
            gathered.append(buf)
            sends.append(buf)
        every = torch.cat(gathered)
        for st in states:
            out = torch.full((st.size,), 7.0, dtype=out_dtype, device=dev)
            codec.receive(1, st, every, out)
            outs.append(out)
    return sends, outs


@gpu
@pytest.mark.parametrize("mode", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("name", ["int8", "topk", "bf16", "int4"])
def test_sharded_on_cuda_equals_the_cpu(name, mode):
    """The sharded path with CUDA states: the CPU's slot bytes, outputs, residuals and
    checkpoints, at 1 and 3 ranks, float32 and bfloat16 gradients."""
    opts = {"density": 0.01, "compact_indices": False} if name in SPARSE else {}
    for world in (1, 3):
        for dtype in (torch.float32, torch.bfloat16):
            codec = gradcomp.Sharded(name, mode, **opts)
            s_cpu = [codec.make_state(NT, world, r, dtype) for r in range(world)]
            s_dev = [codec.make_state(NT, world, r, dtype, "cuda") for r in range(world)]
            g = torch.Generator().manual_seed(world)
            for step in range(3):
                grads = [(torch.randn(NT, generator=g) * 10.0 ** (step - 1)).to(dtype) for _ in range(world)]
                b_cpu, o_cpu = _sharded_step(codec, s_cpu, grads, dtype)
                b_dev, o_dev = _sharded_step(codec, s_dev, [x.cuda() for x in grads], dtype)
                for a, b in zip(b_dev, b_cpu):
                    assert torch.equal(a.cpu(), b), (name, mode, world, dtype, step)
                for a, b in zip(o_dev, o_cpu):
                    assert np.array_equal(_bits(a), _bits(b)), (name, mode, world, dtype, step)
                for a, b in zip(s_dev, s_cpu):
                    assert a.step == b.step and a.stage == b.stage
                    for j in range(world):
                        assert np.array_equal(a.sender_residual(j).cpu().numpy(), np.asarray(b.sender_residual(j)))
                    assert np.array_equal(a.owner_residual.cpu().numpy(), np.asarray(b.owner_residual))
                    assert codec.checkpoint(a) == codec.checkpoint(b)
            codec.check()
            moved = codec.make_state(NT, world, 0, dtype, "cuda")
            codec.load_checkpoint(moved, codec.checkpoint(s_cpu[0]))
            assert moved.step == 3 and codec.checkpoint(moved) == codec.checkpoint(s_cpu[0])


@gpu
def test_sharded_bad_slot_on_cuda_raises_at_the_next_check():
    """A received slot with a flipped payload byte: the CPU raises at receive(0); on the device the
    call writes nothing and check() raises the CPU's code."""
    codec = gradcomp.Sharded("int8", "reduce_scatter")
    grads = [torch.randn(NT, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    for device in ("cpu", "cuda"):
        states = [codec.make_state(NT, 2, r, None, None if device == "cpu" else device) for r in range(2)]
        p0 = codec.describe(0, states[0])
        sends = []
        for g, st in zip(grads, states):
            buf = torch.empty(p0["send_bytes"], dtype=torch.uint8, device=device)
            codec.encode(0, g.to(device), st, buf)
            sends.append(buf.view(2, -1))
        recv = torch.cat([sends[0][0], sends[1][0]])
        recv[p0["slot_bytes"] + 40] ^= 0x10
        out = torch.full((states[0].shard[1],), 7.0, device=device)
        if device == "cpu":
            with pytest.raises(gradcomp.Error) as want:
                codec.receive(0, states[0], recv, out)
        else:
            codec.receive(0, states[0], recv, out)
            with pytest.raises(gradcomp.Error) as got:
                codec.check()
            assert got.value.code == want.value.code
            codec.check()  # cleared
        assert torch.equal(out.cpu(), torch.full((states[0].shard[1],), 7.0))


@gpu
def test_sharded_device_states_refuse_bad_input():
    codec = gradcomp.Sharded("int8")
    st = codec.make_state(NT, 1, 0, None, "cuda")
    assert st.device == "cuda:0" and st.device_bytes > 0
    send = torch.empty(codec.describe(0, st)["send_bytes"], dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="state is on cuda:0"):
        codec.encode(0, torch.zeros(NT), st, send.cpu())
    with pytest.raises(ValueError, match="one device"):
        codec.encode(0, torch.zeros(NT), st, send)
    with pytest.raises(TypeError):
        codec.encode(0, torch.zeros(NT, device="cuda", dtype=torch.bfloat16), st, send)
    with pytest.raises(ValueError, match="8-byte"):
        codec.encode(0, torch.zeros(NT, device="cuda"), st, torch.empty(send.numel() + 1, dtype=torch.uint8, device="cuda")[1:])
    with pytest.raises(gradcomp.Error) as e:
        codec.encode(0, torch.zeros(NT - 1, device="cuda"), st, send)
    assert e.value.code == "size_mismatch"
    with pytest.raises(ValueError, match="state is on cpu"):
        codec.encode(0, torch.zeros(NT, device="cuda"), codec.make_state(NT, 1, 0), send)
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Sharded("threshold").make_state(NT, 1, 0, None, "cuda")
    assert e.value.code == "invalid_argument"
    codec.check()


# --- One process per GPU over NCCL ----------------------------------------------------------


def _nccl_rank(rank, world, port, kind, codec, out):
    """A rank of a run with one process per GPU: 30 steps of the test model, its batches drawn
    per rank; saves rank 0's losses and whether the replicas (DDP) stayed identical."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, fsdp, testing

    import dist_util

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = testing.TinyTransformer().cuda()
        options = {"density": 0.1} if codec in ("tagc", "topk") else {}
        if kind == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for b in model.blocks:
                fully_shard(b)
            fully_shard(model)
            fsdp.attach(model, codec, **options)
            net = model
        else:
            net = DDP(model, device_ids=[rank])
            if codec == "tagc":
                net.register_comm_hook(ddp.TagcHookState(model, **options), ddp.tagc_hook)
            else:
                net.register_comm_hook(ddp.HookState(model, codec, path=kind, **options), ddp.compress_hook)
        losses = _fit(net, 30, rank, world)
        same = kind == "fsdp" or all(dist_util.all_same(p.data) for p in model.parameters())
        if rank == 0:
            torch.save({"losses": losses, "same": same}, out)
    finally:
        dist.destroy_process_group()


@gpu
@pytest.mark.parametrize("kind,codec", [("gather", "topk"), ("sharded", "int8"), ("gather", "tagc"), ("fsdp", "tagc"),
                                        ("fsdp", "int8")])
def test_hooks_on_nccl_one_process_per_gpu(kind, codec, tmp_path):
    """Every GPU present, one process each, NCCL: the hooks and FSDP2 train, and DDP's replicas
    stay bit-identical. Needs two GPUs or more."""
    import torch.multiprocessing as mp

    if not HAVE_GPU or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices or more and a CUDA build of gradcomp")
    world, out = torch.cuda.device_count(), str(tmp_path / "rank0.pt")
    mp.spawn(_nccl_rank, args=(world, _free_port(), kind, codec, out), nprocs=world)
    got = torch.load(out)
    assert got["same"]
    assert got["losses"][-1] < 0.9 * got["losses"][0], got["losses"]
