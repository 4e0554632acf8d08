"""The CUDA-only tests: the build's CUDA report, argument errors of device states, a device's
late error report where the CPU has no twin, and the DDP hooks and FSDP2 over NCCL. The tests
that run one body per device (the CPU, and CUDA against the CPU's bytes) take the ``device``
parameter in test_core.py, test_sharded.py and test_ddp.py. Tests marked ``gpu``
(``pytest -m gpu``) skip without a CUDA device or without a CUDA build of the extension
(conftest.py)."""

import socket

import numpy as np
import pytest
import torch

import gradcomp

import dist_util

INFO = gradcomp.build_info()
HAVE_GPU = INFO["cuda"] and torch.cuda.is_available()
gpu = pytest.mark.gpu


def test_build_info():
    assert set(INFO) == {"cuda", "cuda_version", "cuda_architectures", "cuda_codecs", "cpu_isa", "cpu_isa_active"}
    assert isinstance(INFO["cuda"], bool)
    assert INFO["cpu_isa"][0] == "baseline" and INFO["cpu_isa_active"] in INFO["cpu_isa"]
    if INFO["cuda"]:
        assert INFO["cuda_version"].count(".") == 1 and INFO["cuda_architectures"]
        assert {"fp32", "bf16", "int8", "int4", "topk", "topk_int8", "sign", "piecewise4"} <= set(INFO["cuda_codecs"])
        assert not {"threshold", "randomk", "acctfm", "dct_topk", "int4_rotated", "int2_rotated"} & set(INFO["cuda_codecs"])
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trains_like(got, plain):
    """The loss falls below 0.8 of its start, and its last 10 steps' mean is within 0.15 of
    plain training's."""
    assert got[-1] < 0.8 * got[0]
    assert abs(np.mean(got[-10:]) - np.mean(plain[-10:])) < 0.15, (got[-10:], plain[-10:])


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
        losses = dist_util.fit(net, 60)
        return losses, state, model

    plain, _, _ = run(False)
    hooked, state, model = run(True)
    assert state.calls > 0 and state.bytes_sent > 0
    _trains_like(hooked, plain)
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


# --- TAGC-2 on CUDA tensors ---------------------------------------------------------------

NT = 100_005  # odd, a multiple of 3 and 5: every shard of W = 1, 3, 5 has NT / W elements


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
    return dist_util.fit(net, steps), state, model


@gpu
def test_tagc_hook_trains_on_nccl(nccl_group):
    """TAGC's DDP hook on NCCL (world size 1): sum-safe bitmaps chosen from the backend, device
    states, plain DDP's loss, and a state dict that round-trips."""
    from gradcomp import ddp

    plain, _, _ = _train_cuda("plain")
    hooked, state, model = _train_cuda("tagc")
    assert state.codec.config["bitmap"] == "sum_safe"
    assert all(st.device == "cuda:0" for st in state.states.values()) and state.states
    _trains_like(hooked, plain)
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
        losses = dist_util.fit(net, 60)
        return losses, owner

    plain, _ = run(None)
    got, owner = run(codec)
    assert owner.calls > 0 and all(st.device == "cuda:0" for st in owner.states.values())
    _trains_like(got, plain)
    owner.codec.check()
    sd = owner.state_dict()
    assert set(sd["states"]) == set(owner.states)


# --- The sharded path on CUDA tensors -------------------------------------------------------


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
        losses = dist_util.fit(net, 30, rank, world)
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
