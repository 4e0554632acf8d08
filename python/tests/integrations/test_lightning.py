"""PyTorch Lightning at 2 CPU ranks (gloo): GradcompDDPStrategy trains through gradcomp's hook
close to plain DDP, and so does FSDP2 under ModelParallelStrategy with gradcomp.fsdp.attach in
configure_model(); a plain DDPStrategy given gradcomp's hook on CPU drops it, and
check_strategy says so. GradcompDDPStrategy takes gradcomp's and Lightning's options as keywords
and checks gradcomp's when it is made."""

import warnings

import pytest

L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: E402

import gradcomp  # noqa: E402
import gradcomp.fsdp  # noqa: E402
from gradcomp import models  # noqa: E402
from gradcomp.integrations.lightning import LIGHTNING_ARGUMENTS, GradcompDDPStrategy, check_strategy  # noqa: E402

import dist_util  # noqa: E402
import trainer_util  # noqa: E402

STEPS = 20


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = models.TinyTransformer()

    def training_step(self, batch, index):
        x, y = batch
        return F.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class ShardedModule(Module):
    """FSDP2 through ModelParallelStrategy: the reduce-scatter is attached where the model is sharded."""

    reduce_scatter = None

    def configure_model(self):
        if isinstance(self.net, FSDPModule):  # Lightning may call configure_model again
            return
        mesh = self.device_mesh["data_parallel"]
        for block in self.net.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(self.net, mesh=mesh)
        self.reduce_scatter = gradcomp.fsdp.attach(self.net, "int8")


class HookName(L.Callback):
    """Records the hook DDP reports while the model is wrapped (fit unwraps it at the end), and
    the DDP module's find_unused_parameters."""

    name = unused = None

    def on_train_start(self, trainer, module):
        self.name = trainer_util.hook_name(trainer.strategy.model)
        self.unused = getattr(trainer.strategy.model, "find_unused_parameters", None)


def _recorded(trainer, what="name"):
    return next(getattr(c, what) for c in trainer.callbacks if isinstance(c, HookName))


def _data(world):
    xs, ys = zip(*trainer_util.batches(STEPS * world))
    return DataLoader(TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=8)


def _trainer(strategy, world, steps=STEPS):
    return L.Trainer(accelerator="cpu", devices=world, strategy=strategy, max_steps=steps, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[HookName()])


def _module(cls=Module):
    L.seed_everything(0, verbose=False)
    return cls()


def _train(rank, world):
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        # int8's options: one of gradcomp's (the hook state's), one of Lightning's (DDP's).
        int8 = GradcompDDPStrategy("int8", min_compress_numel=1024, find_unused_parameters=False)
        for label, strategy in [("fp32", L.strategies.DDPStrategy()), ("int8", int8)]:
            module, trainer = _module(), _trainer(strategy, world)
            check_strategy(trainer)  # passes: no hook, or gradcomp's strategy
            trainer.fit(module, _data(world))
            params = torch.cat([p.detach().flatten() for p in module.parameters()])
            out[label] = {"loss": trainer_util.held_out_loss(module.net), "same": dist_util.all_same(params),
                          "hook": _recorded(trainer), "numel": params.numel()}
            if label == "int8":
                st = strategy.hook_state
                out[label].update(bytes=st.bytes_sent, calls=st.calls, paths=set(st.paths.values()),
                                  small=st.min_compress_numel, ddp=_recorded(trainer, "unused"))

        module = _module(ShardedModule)
        trainer = _trainer(L.strategies.ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1), world)
        trainer.fit(module, _data(world))
        rs = module.reduce_scatter
        out["fsdp:int8"] = {"loss": trainer_util.held_out_loss(module.net), "bytes": rs.bytes_sent, "calls": rs.calls}

        # The trap: DDPStrategy keeps the hook but registers it on CUDA only.
        module = _module()
        state = gradcomp.ddp.HookState(module, "int8")
        trainer = _trainer(L.strategies.DDPStrategy(ddp_comm_state=state, ddp_comm_hook=gradcomp.ddp.compress_hook),
                           world, steps=2)
        try:
            check_strategy(trainer)
            out["check"] = None
        except RuntimeError as e:
            out["check"] = str(e)
        trainer.fit(module, _data(world))
        out["dropped"] = {"calls": state.calls, "hook": _recorded(trainer)}
    return out


def test_lightning_ddp_strategy():
    res = trainer_util.run(2, _train)
    fp32, int8 = res["fp32"], res["int8"]
    assert fp32["hook"] == "" and int8["hook"] == "compress_hook", (fp32["hook"], int8["hook"])
    assert int8["calls"] > 0 and int8["paths"] == {"gather"}
    assert int8["small"] == 1024 and int8["ddp"] is False  # each keyword reached its side
    # int8 puts about a quarter of fp32's bytes into the gather slot (plus raw small parameters).
    assert 0 < int8["bytes"] < 0.5 * 4 * int8["numel"] * STEPS, int8["bytes"]
    assert fp32["same"] and int8["same"]
    assert abs(int8["loss"] - fp32["loss"]) < 0.01, (int8["loss"], fp32["loss"])
    fsdp = res["fsdp:int8"]  # FSDP2's own reduce-scatter ends where DDP's fp32 does
    assert fsdp["calls"] > 0 and 0 < fsdp["bytes"] < 0.5 * 4 * int8["numel"] * STEPS, fsdp
    assert abs(fsdp["loss"] - fp32["loss"]) < 0.01, (fsdp["loss"], fp32["loss"])
    assert res["check"] is not None and "GradcompDDPStrategy" in res["check"], res["check"]
    assert res["dropped"] == {"calls": 0, "hook": ""}, res["dropped"]


def test_strategy_options_and_checks():
    # gradcomp's options and Lightning's as keywords, told apart by name.
    s = GradcompDDPStrategy("int4", error_feedback=True, path="gather", find_unused_parameters=True, static_graph=False,
                            process_group_backend="gloo")
    assert s.codec == "int4" and s.options == {"error_feedback": True, "path": "gather"}
    assert s._ddp_kwargs == {"find_unused_parameters": True, "static_graph": False}
    assert s.process_group_backend == "gloo"
    tagc = GradcompDDPStrategy("tagc", preset="tagc2", min_compress_numel=4096, bucket_cap_mb=10)
    assert tagc.options == {"preset": "tagc2", "min_compress_numel": 4096} and tagc._ddp_kwargs == {"bucket_cap_mb": 10}
    # The one name both sides take goes to both: DDP and the hook reduce over the same group.
    shared = GradcompDDPStrategy("int8", process_group=None)
    assert shared.options == {"process_group": None} and shared._ddp_kwargs == {"process_group": None}
    # No codec option of any codec (nor TAGC's) is a Lightning or DDP argument but process_group.
    names = {"path", "min_compress_numel", "process_group", "error_feedback", "preset", "select"}
    names |= set(gradcomp.Tagc("default").config)
    for codec in gradcomp.codecs():
        names |= set(gradcomp.Compressor(codec, **({"cols": 64} if codec in ("acctfm", "dct_topk") else {})).options)
    assert names & LIGHTNING_ARGUMENTS == {"process_group"}, names & LIGHTNING_ARGUMENTS

    # Mistakes are reported here, before fit launches anything.
    for codec, options, match in [("int9", {}, "unknown codec 'int9'"), ("int4", {"densty": 0.1}, "option 'densty'"),
                                  ("topk", {"density": 2.0}, "density"), ("int8", {"path": "ring"}, "path"),
                                  ("tagc", {"preset": "v9"}, "preset")]:
        with pytest.raises(ValueError, match=match) as e:
            GradcompDDPStrategy(codec, **options)
        assert str(e.value).startswith(f"GradcompDDPStrategy: codec {codec!r}"), str(e.value)
    with pytest.raises(ValueError, match="ddp_comm_hook"):
        GradcompDDPStrategy("int8", ddp_comm_hook=gradcomp.ddp.compress_hook)
