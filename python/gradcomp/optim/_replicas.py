"""What the optimizers of gradcomp.optim share: a flat view of a parameter group, the
replicas' checks and start, every rank's state gathered, the option checks and the step's
preamble."""

from __future__ import annotations

import math
from typing import List

import torch

from .._checkpoint import check_identity, every_rank
from .._core import Compressor, Error, Sharded, codecs
from .._exchange import Exchange, FlatParams, Replica, TorchTransport

FORMAT = 1  # of the optimizers' state_dict
PATHS = ("sharded", "gather")


class Flat(FlatParams):
    """One parameter group as flat vectors: Adam's moments, the frozen denominator, the local
    window's state and the flow (the codec state) of the exchange."""

    def __init__(self, params: List[torch.Tensor], local_steps: bool, flow):
        super().__init__(params)
        self.m, self.v, self.denom = torch.zeros(self.n), torch.zeros(self.n), torch.zeros(self.n)
        self.mean = torch.zeros(self.n)                            # the received mean
        self.acc = torch.zeros(self.n)                             # the window's lr-weighted mean momentum
        self.lrsum, self.decay = 0.0, 1.0                          # the window's sum of lr, decoupled decay
        self.anchor = self.read() if local_steps else None        # the parameters at the last exchange
        self.flow = flow

    @property
    def state(self):
        """The codec state."""
        return self.flow.state


def replica_params(params, why: str):
    """The parameters of a replica: a DDP model refused (the optimizer exchanges, ``why``), a
    module's parameters taken."""
    if isinstance(params, torch.nn.parallel.DistributedDataParallel):
        raise ValueError(f"gradcomp.optim: params is a DDP model; {why}: pass the unwrapped model's parameters "
                         "(every rank a full replica)")
    return params.parameters() if isinstance(params, torch.nn.Module) else params


def join_replicas(param_groups, process_group) -> Exchange:
    """Checks that every parameter is a whole float32 CPU tensor and that there is one, then
    broadcasts rank 0's parameters so that the replicas start equal; returns the exchange over
    the process group."""
    for group in param_groups:
        for p in group["params"]:
            if type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor":
                raise ValueError("gradcomp.optim: a sharded (FSDP2 / DTensor) parameter: the optimizer needs every "
                                 "rank to hold the whole parameter (docs/optimizers.md)")
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"gradcomp.optim: parameters must be float32 CPU tensors (a {p.dtype} tensor on {p.device})")
    if not any(group["params"] for group in param_groups):
        raise ValueError("gradcomp.optim: no parameters")
    transport = TorchTransport(process_group)
    transport.broadcast([p for group in param_groups for p in group["params"]])
    return Exchange(transport, "gradcomp.optim")


def make_codec(codec: str, path: str, options: dict):
    """The codec of ``path`` (a Sharded in all_reduce mode or a Compressor); an invalid option
    raises ValueError."""
    try:
        return Sharded(codec, "all_reduce", **options) if path == "sharded" else Compressor(codec, **options)
    except Error as e:  # an unknown option or a value out of its domain
        raise ValueError(f"gradcomp.optim: codec {codec!r} with {options}: {e}") from None


def check_int(name: str, value, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"gradcomp.optim: {name} must be an int >= {least}, not {value!r}")


def check(lr, weight_decay, codec, path, betas=(0.0, 0.0), eps=1.0) -> None:
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
        raise ValueError(f"gradcomp.optim: lr must be a finite float >= 0, not {lr!r}")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"gradcomp.optim: betas must be two floats in [0, 1), not {betas!r}")
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"gradcomp.optim: eps must be finite and > 0, not {eps!r}")
    if not (weight_decay >= 0 and math.isfinite(weight_decay)):
        raise ValueError(f"gradcomp.optim: weight_decay must be finite and >= 0, not {weight_decay!r}")
    if codec not in codecs():
        raise ValueError(f"gradcomp.optim: codec {codec!r} is not one of gradcomp.codecs(): {sorted(codecs())}")
    if path not in PATHS:
        raise ValueError(f"gradcomp.optim: path must be one of {PATHS}, not {path!r}")



class ReplicaOptimizer(Replica, torch.optim.Optimizer):
    """What the optimizers here share: every rank a full replica whose step the optimizer
    exchanges itself. ``step()`` runs the closure and checks the groups, then ``_step()``."""

    @torch.no_grad()
    def step(self, closure=None):
        """One optimizer step (a collective: every rank calls it at the same steps).

        Raises:
            gradcomp.Error: a payload failed its checks on some rank (on every rank; the
                parameters and the optimizer's state are as before the call).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if len(self._flats) != len(self.param_groups):
            raise ValueError("gradcomp.optim: param groups added after construction are not supported")
        self._step()
        return loss

    def _step(self) -> None:
        raise NotImplementedError

    # --- what the state dicts share

    def _saved(self, **state) -> dict:
        """The state dict: ``state`` and what every optimizer here saves (a collective)."""
        states = every_rank({str(i): fl.flow.checkpoint() for i, fl in enumerate(self._flats)}, self._world,
                            self.process_group)
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        return {"format": FORMAT, "identity": self._identity(), "world_size": self._world, "steps": self.steps,
                "bytes_sent": self.bytes_sent, "wire_bytes": self.wire_bytes, "param_groups": hyper, **state,
                "codec_states": states}

    def _restored(self, sd: dict, sizes) -> list:
        """Checks a state dict of :meth:`_saved` (with ``sizes``, the saved groups' sizes) and
        returns new groups whose codec states are the saved ones; the caller then restores the
        rest (all or nothing: a corrupted codec state raises before anything changes)."""
        check_identity(sd, FORMAT, self._identity(), "gradcomp.optim")
        if sd["world_size"] != self._world:
            raise ValueError(f"gradcomp.optim: checkpoint of {sd['world_size']} ranks, this run has {self._world} "
                             "(another world size is not supported)")
        if len(sizes) != len(self._flats) or any(n != fl.n for n, fl in zip(sizes, self._flats)):
            raise ValueError("gradcomp.optim: checkpoint of another parameter layout")
        fresh = [self._flat(g) for g in self.param_groups]
        for i, fl in enumerate(fresh):
            fl.flow.restore(bytes(sd["codec_states"][str(i)][self._rank].numpy().tobytes()))
        return fresh

    def _commit(self, sd: dict, fresh: list) -> None:
        for g, h in zip(self.param_groups, sd["param_groups"]):
            g.update(h)
        self._flats = fresh
        self.steps, self.bytes_sent, self.wire_bytes = int(sd["steps"]), int(sd["bytes_sent"]), int(sd["wire_bytes"])
