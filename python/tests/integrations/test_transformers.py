"""The Transformers Trainer at 2 CPU ranks (gloo, use_cpu under torchrun's environment):
gradcomp's hook, registered by attach()'s callback on trainer.model_wrapped, trains close to
plain DDP; a model that is not DDP at train begin raises, a single process warns, a bad codec or
option is a ValueError when the callback is made."""

import tempfile
import types

import pytest

transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gradcomp import models  # noqa: E402
from gradcomp.integrations.transformers import GradcompCallback, attach  # noqa: E402

import dist_util  # noqa: E402
import trainer_util  # noqa: E402

STEPS = 20


class LM(torch.nn.Module):
    """The test model with the Trainer's calling convention: keyword inputs, a dict with the loss."""

    def __init__(self):
        super().__init__()
        self.net = models.TinyTransformer()

    def forward(self, input_ids, labels):
        return {"loss": F.cross_entropy(self.net(input_ids).flatten(0, 1), labels.flatten())}


def _trainer(world, out_dir):
    torch.manual_seed(0)
    model = LM()
    data = [{"input_ids": x, "labels": y} for xs, ys in trainer_util.batches(STEPS * world) for x, y in zip(xs, ys)]
    args = transformers.TrainingArguments(
        output_dir=out_dir, use_cpu=True, ddp_backend="gloo", per_device_train_batch_size=8, max_steps=STEPS,
        lr_scheduler_type="constant", report_to="none", save_strategy="no", logging_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, ddp_find_unused_parameters=False, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, None))


class HookName(transformers.TrainerCallback):
    """Records the hook DDP reports for the wrapped model at the first step."""

    def __init__(self, trainer):
        self.trainer, self.name = trainer, None

    def on_step_begin(self, args, state, control, **kwargs):
        self.name = trainer_util.hook_name(self.trainer.model_wrapped)


def _train(rank, world):
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for codec in (None, "int8"):
            model, trainer = _trainer(world, d)
            seen = HookName(trainer)
            trainer.add_callback(seen)
            callback = attach(trainer, codec) if codec else None
            trainer.train()
            params = torch.cat([p.detach().flatten() for p in model.parameters()])
            out[codec or "fp32"] = {
                "loss": trainer_util.held_out_loss(model.net), "same": dist_util.all_same(params),
                "numel": params.numel(), "hook": seen.name, "type": type(trainer.model_wrapped).__name__,
                "state": callback and {"bytes": callback.state.bytes_sent, "calls": callback.state.calls}}
            if codec:  # a second train() reuses the DDP module, its hook and its state
                state = callback.state
                trainer.train()
                out["again"] = callback.state is state and state.calls == 2 * STEPS

        # Not DDP at train begin: before train() the Trainer's model_wrapped is the bare model.
        model, trainer = _trainer(world, d)
        callback = attach(trainer, "int8")
        try:
            callback.on_train_begin(trainer.args, trainer.state, trainer.control, model=model)
        except RuntimeError as e:
            out["bare"] = str(e)
    return out


def test_trainer_callback():
    res = trainer_util.run(2, _train)
    fp32, int8 = res["fp32"], res["int8"]
    assert fp32["type"] == int8["type"] == "DistributedDataParallel"
    assert fp32["hook"] == "" and int8["hook"] == "compress_hook", (fp32["hook"], int8["hook"])
    assert int8["state"]["calls"] > 0
    # int8 puts about a quarter of fp32's bytes into the gather slot (plus raw small parameters).
    assert 0 < int8["state"]["bytes"] < 0.5 * 4 * int8["numel"] * STEPS, int8["state"]
    assert fp32["same"] and int8["same"]
    assert abs(int8["loss"] - fp32["loss"]) < 0.01, (int8["loss"], fp32["loss"])
    assert res["again"]
    assert "GradcompCallback (world size 2)" in res["bare"] and "LM, not a DistributedDataParallel" in res["bare"]


def test_trainer_callback_single_process_warns():
    trainer = types.SimpleNamespace(model_wrapped=LM(), add_callback=lambda cb: None)
    callback = attach(trainer, "int8")
    assert isinstance(callback, GradcompCallback)
    with pytest.warns(UserWarning, match="single process"):
        callback.on_train_begin(types.SimpleNamespace(world_size=1), None, None)
    assert callback.state is None


def test_trainer_callback_checks_codec_and_options():
    added = []
    trainer = types.SimpleNamespace(model_wrapped=LM(), add_callback=added.append)
    for codec, options, match in [("int9", {}, "unknown codec"), ("topk", {"density": 0}, "density"),
                                  ("tagc", {"preset": "v9"}, "preset")]:
        with pytest.raises(ValueError, match=match):
            attach(trainer, codec, **options)
        with pytest.raises(ValueError, match="GradcompCallback: codec"):
            GradcompCallback(trainer, codec, **options)
    assert added == []  # nothing was added to the trainer
