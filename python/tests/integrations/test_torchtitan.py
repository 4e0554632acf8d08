"""gradcomp in torchtitan: its llama3 debug model (2 of its layers, SDPA attention: FlexAttention
has no backward on the CPU), its parallelize function (FSDP2 over a gloo mesh of 2 ranks, the
gradient divide factor set to 1) wrapped by gradcomp.integrations.torchtitan, a few steps.
Asserted: the reduce-scatter ran through the codec (int8 bytes below the fp32 codec's); the
first step's gradient is the SUM over ranks that torchtitan asks for (the fp32 codec against an
unsharded model on both ranks' batches); the loss stays within tolerance of the fp32 run; bad
configurations raise ValueError."""

import pytest

pytest.importorskip("torchtitan")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import dist_util  # noqa: E402

STEPS, BATCH, SEQ, VOCAB = 5, 2, 32, 2048


def _spec():
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import model_registry

    spec = model_registry("debugmodel")
    spec.model.layers = spec.model.layers[:2]
    for layer in spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return spec


def _batch(rank, step):
    # Sequences of a fixed affine rule over the vocabulary: learnable in a few steps.
    g = torch.Generator().manual_seed(100 * step + rank)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    x = (start + 7 * torch.arange(SEQ + 1)) % VOCAB
    return x[:, :-1], x[:, 1:]


def _loss(model, x, y, world):
    # torchtitan divides by the global token count, so the ranks' gradients are summed, not averaged.
    out = model(x, positions=torch.arange(SEQ).repeat(x.shape[0], 1))
    return torch.nn.functional.cross_entropy(out.flatten(0, 1).float(), y.flatten()) / world


def _train(rank, world, codec, options):
    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims

    from gradcomp.integrations.torchtitan import with_gradcomp

    parallel_dims.device_type = "cpu"  # torchtitan picks CUDA whenever torch is a CUDA build
    spec = with_gradcomp(_spec(), codec, **options)
    parallelism = ParallelismConfig(spmd_backend="partial_dtensor")
    with torch.device("meta"):
        model = spec.model.build()
    model = spec.parallelize_fn(model, parallel_dims=ParallelDims.from_config(parallelism, world),
                                training=TrainingConfig(mixed_precision_param="float32"), parallelism=parallelism,
                                compile_config=CompileConfig(), ac_config=None, dump_folder="")
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    # An unsharded copy on every rank: the first step's gradient on both ranks' batches.
    with torch.device("meta"):
        ref = spec.model.build()
    ref.to_empty(device="cpu")
    with torch.no_grad():
        ref.init_weights(buffer_device=None)  # the buffers (RoPE) that the state dict does not hold
    ref.load_state_dict({k: v.full_tensor() for k, v in model.state_dict().items()})
    for r in range(world):
        _loss(ref, *_batch(r, 0), world).backward()

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(STEPS):
        loss = _loss(model, *_batch(rank, step), world)
        opt.zero_grad()
        loss.backward()
        if step == 0:
            got = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
            want = torch.cat([p.grad.flatten() for p in ref.parameters()])
            grad_err = float((got - want).abs().max() / want.abs().max())
        opt.step()
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        losses.append(float(summed))
    owner = spec.parallelize_fn.states[0]
    full = torch.cat([p.detach().full_tensor().flatten() for p in model.parameters()])
    return losses, grad_err, owner.bytes_sent, owner.calls, dist_util.all_same(full)


def test_fsdp_reduce_scatter_through_int8():
    fp32 = dist_util.run(2, _train, "fp32", {})
    int8 = dist_util.run(2, _train, "int8", {})
    losses32, err32, bytes32, calls32, same32 = fp32
    losses8, err8, bytes8, calls8, same8 = int8
    assert same32 and same8
    assert calls8 == calls32 == STEPS * 4  # embeddings, 2 blocks, norm + head
    assert 0 < bytes8 < 0.3 * bytes32, (bytes8, bytes32)
    assert err32 < 1e-5, err32  # the ranks' gradients summed (averaging would be off by 1/2)
    assert err8 < 0.05, err8
    assert losses32[-1] < 0.95 * losses32[0], losses32  # it learns
    assert abs(losses8[-1] - losses32[-1]) < 0.02 * losses32[0], (losses8, losses32)


def test_bad_configurations_raise():
    import torch.distributed as dist
    from torchtitan.config import ParallelismConfig

    from gradcomp import fsdp
    from gradcomp.integrations.torchtitan import wrap_parallelize

    def parallelize(model, **kwargs):
        return model

    with pytest.raises(ValueError, match="enable_fsdp_symm_mem"):
        wrap_parallelize(parallelize, "int8")(torch.nn.Linear(2, 2), parallelism=ParallelismConfig(enable_fsdp_symm_mem=True))
    with pytest.raises(ValueError, match="dp_shard"):
        wrap_parallelize(parallelize, "int8")(torch.nn.Linear(2, 2), parallelism=ParallelismConfig())
    # The codec and its options are checked when the function is wrapped, before any rank starts.
    from gradcomp.integrations.torchtitan import with_gradcomp

    for codec, options, match in [("int9", {}, "unknown codec"), ("int8", {"densty": 0.1}, "option 'densty'"),
                                  ("tagc", {"preset": "v9"}, "preset")]:
        with pytest.raises(ValueError, match=match):
            wrap_parallelize(parallelize, codec, **options)
        with pytest.raises(ValueError, match="gradcomp.integrations.torchtitan: codec"):
            with_gradcomp(_spec(), codec, **options)
    assert wrap_parallelize(parallelize, "tagc", preset="tagc2").states == []
    with pytest.raises(ValueError, match="MAX"):
        fsdp._scale(dist.ReduceOp.MAX, 2)
    assert fsdp._scale(dist.ReduceOp.PREMUL_SUM(1.0), 2) == 1.0  # torchtitan's divide factor 1: a plain sum
