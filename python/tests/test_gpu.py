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
@pytest.mark.parametrize("codec,options", [("topk", {"density": 0.1}), ("int8", {}), ("bf16", {})])
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
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        task = testing.MarkovTask()
        losses = []
        for step in range(60):
            x, y = task.batch(step, 8, 32)
            loss = torch.nn.functional.cross_entropy(net(x.cuda()).flatten(0, 1), y.cuda().flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, state, model

    plain, _, _ = run(False)
    hooked, state, model = run(True)
    assert state.calls > 0 and state.bytes_sent > 0
    assert hooked[-1] < 0.8 * hooked[0]
    assert abs(np.mean(hooked[-10:]) - np.mean(plain[-10:])) < 0.15, (hooked[-10:], plain[-10:])
    if not state.compressor.summable:
        state.compressor.check()
        assert all(st.device.startswith("cuda") for st in state.states.values())
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
