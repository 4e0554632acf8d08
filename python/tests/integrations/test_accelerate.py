"""Hugging Face Accelerate at 2 CPU ranks (gloo, Accelerator(cpu=True) under torchrun's
environment): gradcomp's hook registered on the prepared DDP model trains close to plain DDP;
an unprepared model raises, an FSDP plugin ignored on CPU and a single process warn; local steps
and 1-bit Adam on an unprepared model (every rank a replica) train and end identical. The
launches: `accelerate launch --multi_gpu --num_processes 2` starts 2 CPU processes, `--cpu
--num_processes 2` one, and register's warning says so; a bad codec or option is a ValueError."""

import json
import textwrap
import warnings

import pytest

accelerate = pytest.importorskip("accelerate")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gradcomp import models  # noqa: E402
from gradcomp.integrations import accelerate as gc_accelerate  # noqa: E402
from gradcomp.localsteps import LocalSteps  # noqa: E402
from gradcomp.optim import OneBitAdam  # noqa: E402

import dist_util  # noqa: E402
import trainer_util  # noqa: E402

STEPS = 20


def _fit(accelerator, rank, world, codec):
    torch.manual_seed(0)
    net = models.TinyTransformer()
    model, opt = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    state = gc_accelerate.register(accelerator, model, codec) if codec else None
    for step, (x, y) in enumerate(trainer_util.batches(STEPS * world)):
        if step % world != rank:  # rank r trains on batches r, r + W, ...
            continue
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"loss": trainer_util.held_out_loss(net), "same": dist_util.all_same(params), "numel": params.numel(),
            "hook": trainer_util.hook_name(model), "state": None if state is None else
            {"bytes": state.bytes_sent, "calls": state.calls}}


def _train(rank, world):
    accelerator = accelerate.Accelerator(cpu=True)
    out = {"type": str(accelerator.distributed_type)}
    for codec in (None, "int8"):
        out[codec or "fp32"] = _fit(accelerator, rank, world, codec)
    try:  # forgot accelerator.prepare
        gc_accelerate.register(accelerator, models.TinyTransformer(), "int8")
    except RuntimeError as e:
        out["unprepared"] = str(e)

    # An FSDP plugin on CPU: Accelerate wraps in DDP anyway; register warns and registers.
    accelerate.state.AcceleratorState._reset_state()
    accelerator = accelerate.Accelerator(cpu=True, fsdp_plugin=accelerate.FullyShardedDataParallelPlugin(fsdp_version=2))
    net = models.TinyTransformer()
    model = accelerator.prepare(net)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = gc_accelerate.register(accelerator, model, "int8")
    out["fsdp"] = {"type": type(model).__name__, "warned": [str(w.message) for w in caught], "state": type(state).__name__}
    return out


def test_accelerate_register():
    res = trainer_util.run(2, _train)
    assert res["type"] == "DistributedType.MULTI_CPU", res["type"]
    fp32, int8 = res["fp32"], res["int8"]
    assert fp32["hook"] == "" and int8["hook"] == "compress_hook", (fp32["hook"], int8["hook"])
    assert int8["state"]["calls"] > 0
    # int8 puts about a quarter of fp32's bytes into the gather slot (plus raw small parameters).
    assert 0 < int8["state"]["bytes"] < 0.5 * 4 * int8["numel"] * STEPS, int8["state"]
    assert fp32["same"] and int8["same"]
    assert abs(int8["loss"] - fp32["loss"]) < 0.01, (int8["loss"], fp32["loss"])
    assert "TinyTransformer, not a DistributedDataParallel" in res["unprepared"], res["unprepared"]
    fsdp = res["fsdp"]
    assert fsdp["type"] == "DistributedDataParallel" and fsdp["state"] == "HookState", fsdp
    assert any("ignores the FSDP plugin" in w for w in fsdp["warned"]), fsdp["warned"]


def _replicas(rank, world):
    # Local steps and 1-bit Adam need every rank to be a replica: the model is not prepared (no
    # DDP); the Accelerator only starts the processes' group.
    accelerator = accelerate.Accelerator(cpu=True)
    out = {}
    for name in ("localsteps", "onebit"):
        torch.manual_seed(0)
        net = models.TinyTransformer()
        if name == "localsteps":
            opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
            sync = LocalSteps(net, "int4", path="sharded", period=4, error_feedback=True)
        else:
            opt = sync = OneBitAdam(net.parameters(), lr=3e-3, warmup_steps=5)
        for step, (x, y) in enumerate(trainer_util.batches(STEPS * world)):
            if step % world != rank:
                continue
            loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            if name == "localsteps":
                sync.step()
        sync.finish() if name == "localsteps" else sync.synchronize()
        params = torch.cat([p.detach().flatten() for p in net.parameters()])
        out[name] = {"loss": trainer_util.held_out_loss(net), "same": dist_util.all_same(params),
                     "bytes": sync.bytes_sent, "numel": params.numel()}
    out["start"] = trainer_util.held_out_loss(models.TinyTransformer())
    return out


def test_local_steps_and_one_bit_adam_beside_accelerate():
    res = trainer_util.run(2, _replicas)
    for name in ("localsteps", "onebit"):
        r = res[name]
        assert r["same"], name  # the replicas end identical
        assert 0 < r["bytes"] < 0.5 * 4 * r["numel"] * STEPS, (name, r)  # well below fp32 every step
        assert r["loss"] < 0.8 * res["start"], (name, r["loss"], res["start"])  # it trains


def test_accelerate_single_process_warns():
    accelerate.state.AcceleratorState._reset_state(True)
    try:
        accelerator = accelerate.Accelerator(cpu=True)
        model = accelerator.prepare(models.TinyTransformer())
        with pytest.warns(UserWarning, match="single process"):
            assert gc_accelerate.register(accelerator, model, "int8") is None
    finally:
        accelerate.state.AcceleratorState._reset_state(True)


def test_register_checks_codec_and_options():
    accelerate.state.AcceleratorState._reset_state(True)
    try:
        accelerator = accelerate.Accelerator(cpu=True)
        model = accelerator.prepare(models.TinyTransformer())
        for codec, options, match in [("int9", {}, "unknown codec"), ("int4", {"densty": 0.1}, "option 'densty'")]:
            with pytest.raises(ValueError, match=match):  # in a single process too, before its warning
                gc_accelerate.register(accelerator, model, codec, **options)
    finally:
        accelerate.state.AcceleratorState._reset_state(True)


_SCRIPT = """
    import json, os, sys, warnings
    import torch, torch.nn.functional as F
    import accelerate
    from gradcomp import models, testing
    from gradcomp.integrations import accelerate as gc_accelerate

    accelerator = accelerate.Accelerator(cpu=True)
    net = models.TinyTransformer()
    model, opt = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = gc_accelerate.register(accelerator, model, "int8")
    x, y = testing.MarkovTask().batch(accelerator.process_index, 8, 32)
    accelerator.backward(F.cross_entropy(model(x).flatten(0, 1), y.flatten()))
    opt.step()
    with open(os.path.join(sys.argv[1], f"rank{accelerator.process_index}.json"), "w") as f:
        json.dump({"processes": accelerator.num_processes, "type": str(accelerator.distributed_type),
                   "calls": state and state.calls, "warned": [str(w.message) for w in caught]}, f)
    os._exit(0)  # past gloo's teardown at exit (dist_util says why)
"""


def test_accelerate_launch_on_cpu(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    launch = ["-m", "accelerate.commands.launch", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no", "--num_processes", "2"]

    def results(name, *flags):  # what each process of the launch wrote
        (tmp_path / name).mkdir()
        out = trainer_util.launch([*launch, *flags, str(script), str(tmp_path / name)])
        files = sorted((tmp_path / name).iterdir())
        return [json.loads(f.read_text()) for f in files], out

    # --multi_gpu: accelerate's torchrun launcher, 2 processes; Accelerator(cpu=True) makes them CPU ranks.
    ranks, out = results("multi_gpu", "--multi_gpu", "--main_process_port", str(dist_util._free_port()))
    assert len(ranks) == 2, out[-6000:]
    for r in ranks:
        assert r["processes"] == 2 and r["type"] == "DistributedType.MULTI_CPU" and r["calls"] > 0, r
    # --cpu: the simple launcher runs the script once; register says how to start 2.
    (one,), _ = results("cpu", "--cpu")
    assert one["processes"] == 1 and one["calls"] is None, one
    (warning,) = one["warned"]
    assert "started this one process" in warning and "torchrun --nproc-per-node N" in warning, warning
    assert "accelerate launch --multi_gpu --num_processes N" in warning, warning
