"""What the optimizers of gradcomp.optim share: a flat view of a parameter group, the
replicas' checks and start, every rank's state gathered, the option checks and the step's
preamble."""

from __future__ import annotations

import math
from typing import List

import torch
import torch.distributed as dist

from .._checkpoint import gather_blobs
from .._core import codecs

FORMAT = 1  # of the optimizers' state_dict
PATHS = ("sharded", "gather")

def align8(n: int) -> int:
    return (n + 7) & ~7


class Flat:
    """One parameter group as flat vectors: Adam's moments, the frozen denominator, the local
    window's state, the codec state and its buffers."""

    def __init__(self, params: List[torch.Tensor], local_steps: bool):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.n = sum(self.sizes)
        self.m, self.v, self.denom = torch.zeros(self.n), torch.zeros(self.n), torch.zeros(self.n)
        self.mean = torch.zeros(self.n)                            # the received mean
        self.acc = torch.zeros(self.n)                             # the window's lr-weighted mean momentum
        self.lrsum, self.decay = 0.0, 1.0                          # the window's sum of lr, decoupled decay
        self.anchor = self.read() if local_steps else None        # the parameters at the last exchange

    def views(self, flat: torch.Tensor):
        return [t.view_as(p) for t, p in zip(flat.split(self.sizes), self.params)]

    def read(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def grads(self) -> torch.Tensor:
        # A missing gradient counts as zero: every rank must send the same number of elements.
        return torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.detach().reshape(-1) for p in self.params])


def replica_params(params, why: str):
    """The parameters of a replica: a DDP model refused (the optimizer exchanges, ``why``), a
    module's parameters taken."""
    if isinstance(params, torch.nn.parallel.DistributedDataParallel):
        raise ValueError(f"gradcomp.optim: params is a DDP model; {why}: pass the unwrapped model's parameters "
                         "(every rank a full replica)")
    return params.parameters() if isinstance(params, torch.nn.Module) else params


def join_replicas(param_groups, process_group):
    """Checks that every parameter is a whole float32 CPU tensor and that there is one, then
    broadcasts rank 0's parameters so that the replicas start equal; returns (world, rank)."""
    for group in param_groups:
        for p in group["params"]:
            if type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor":
                raise ValueError("gradcomp.optim: a sharded (FSDP2 / DTensor) parameter: the optimizer needs every "
                                 "rank to hold the whole parameter (docs/optimizers.md)")
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"gradcomp.optim: parameters must be float32 CPU tensors (a {p.dtype} tensor on {p.device})")
    if not any(group["params"] for group in param_groups):
        raise ValueError("gradcomp.optim: no parameters")
    if not (dist.is_available() and dist.is_initialized()):
        return 1, 0
    world, rank = dist.get_world_size(process_group), dist.get_rank(process_group)
    if world > 1:
        src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        with torch.no_grad():
            for group in param_groups:
                for p in group["params"]:
                    dist.broadcast(p.data, src, group=process_group)
    return world, rank


def every_rank(blobs: dict, world: int, group) -> dict:
    """{name: bytes} of this rank -> {name: [uint8 tensor of every rank]} (a collective)."""
    if world > 1:
        return gather_blobs(blobs, group, ragged=True)
    return {k: [torch.frombuffer(bytearray(v), dtype=torch.uint8)] for k, v in blobs.items()}


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



class ReplicaOptimizer(torch.optim.Optimizer):
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
