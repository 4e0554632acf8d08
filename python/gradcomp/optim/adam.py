"""1-bit Adam and 0-1 Adam: Adam whose momentum, once the variance is frozen, is averaged
through a gradcomp codec (the package docstring of gradcomp.optim and docs/optimizers.md have
the method)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .._exchange import make_flow
from ._replicas import Flat, check, check_int, join_replicas, make_codec, replica_params, ReplicaOptimizer

_FULL_STEPS = ("fp32", "bf16")  # the gradient all-reduce of the full (variance-updating) steps


class _CompressedAdam(ReplicaOptimizer):
    """What :class:`OneBitAdam` and :class:`ZeroOneAdam` share (their docstrings have the
    arguments)."""

    _variant = ""

    def __init__(self, params, lr, betas, eps, weight_decay, decoupled_weight_decay, codec, path, process_group,
                 freeze_step, sync_every, full_steps, codec_options):
        params = replica_params(params, f"{self._variant} all-reduces the gradients itself")
        check(lr, weight_decay, codec, path, betas, eps)
        if full_steps not in _FULL_STEPS:
            raise ValueError(f"gradcomp.optim: full_steps must be one of {', '.join(_FULL_STEPS)} (got {full_steps!r})")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=bool(decoupled_weight_decay))
        super().__init__(params, defaults)
        for group in self.param_groups:
            check(group["lr"], group["weight_decay"], codec, path, group["betas"], group["eps"])
        self.codec, self.path, self.codec_options = codec, path, dict(codec_options)
        self.process_group = process_group
        self.freeze_step, self.sync_every, self.full_steps = freeze_step, sync_every, full_steps
        self._codec = make_codec(codec, path, codec_options)
        self._ex = join_replicas(self.param_groups, process_group)  # bytes_sent, wire_bytes: its counts
        self._world, self._rank = self._ex.transport.world, self._ex.transport.rank
        self._flats = [self._flat(group) for group in self.param_groups]
        self.steps = 0          # optimizer steps taken
        self.var_updates = 0    # full steps (variance updates)
        self.frozen = False     # the variance frozen for good
        self.exchanges = 0      # compressed exchanges (per parameter group)

    def _flat(self, group) -> Flat:
        n = sum(p.numel() for p in group["params"])
        return Flat(group["params"], self.sync_every > 1, make_flow(self._codec, self.path, n, self._world, self._rank))

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in sorted(self.codec_options.items()))
        g = self.param_groups[0]
        return (f"gradcomp.optim.{type(self).__name__}(lr={g['lr']}, betas={g['betas']}, eps={g['eps']}, "
                f"weight_decay={g['weight_decay']}, {self._schedule()}, codec={self.codec!r}, path={self.path!r}{opts}; "
                f"step {self.steps}, world {self._world})")

    # --- the schedule (the subclasses')

    def _variance_due(self, t: int) -> bool:
        raise NotImplementedError

    def _variance_updated(self, t: int) -> None:
        pass

    def _schedule(self) -> str:
        raise NotImplementedError

    # --- steps

    def _step(self) -> None:
        t = self.steps + 1
        if not self.frozen and self._variance_due(t):
            for group, fl in zip(self.param_groups, self._flats):
                self._full_step(group, fl, t, self.var_updates + 1)
            self.var_updates += 1
            self._variance_updated(t)
        else:
            local = t > self.freeze_step and (t - self.freeze_step) % self.sync_every != 0
            for group, fl in zip(self.param_groups, self._flats):
                self._compressed_step(group, fl, min(t, self.freeze_step), sync=not local)
        self.steps = t
        if t >= self.freeze_step:
            self.frozen = True

    def _full_step(self, group, fl: Flat, t: int, k: int) -> None:
        """torch.optim.Adam's step (its single-tensor CPU code, parameter by parameter) on the
        mean gradient, which also sets the denominator the compressed steps use."""
        lr, (beta1, beta2), eps, wd = float(group["lr"]), group["betas"], group["eps"], group["weight_decay"]
        g = fl.grads()
        if self.full_steps == "bf16":  # as torch's bf16 hook: each rank's share cast, summed in bf16
            g16 = g.div_(self._world).to(torch.bfloat16)
            self._ex.all_reduce(g16)
            g = g16.float()
        else:
            self._ex.all_reduce(g)
            g.div_(self._world)
        bc1, bc2 = 1 - beta1 ** float(t), 1 - beta2 ** float(k)
        step_size, bc2_sqrt = lr / bc1, bc2 ** 0.5
        for p, gv, mv, vv, dv in zip(fl.params, fl.views(g), fl.views(fl.m), fl.views(fl.v), fl.views(fl.denom)):
            if wd != 0:
                if group["decoupled_weight_decay"]:
                    p.mul_(1 - lr * wd)
                else:
                    gv = gv.add(p, alpha=wd)
            mv.lerp_(gv, 1 - beta1)
            vv.mul_(beta2).addcmul_(gv, gv, value=1 - beta2)
            dv.copy_((vv.sqrt() / bc2_sqrt).add_(eps))
            p.addcdiv_(mv, dv, value=-step_size)
        if fl.anchor is not None:
            fl.anchor.copy_(fl.read())

    def _compressed_step(self, group, fl: Flat, tb: int, sync: bool) -> None:
        """The local momentum; on a sync step its window's lr-weighted mean is averaged through the
        codec and the parameters move from the anchor by the window's whole update."""
        lr, (beta1, _), wd = float(group["lr"]), group["betas"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"] and wd != 0
        bc1 = 1 - beta1 ** float(tb)
        g = fl.grads()
        if wd != 0 and not decoupled:
            g.add_(fl.read(), alpha=wd)
        mloc = fl.m.lerp(g, 1 - beta1)
        lrsum, decay = fl.lrsum + lr, fl.decay * (1 - lr * wd) if decoupled else 1.0
        # The window's lr-weighted mean momentum (its first step: the momentum itself, exactly)
        acc = mloc if fl.lrsum == 0 else fl.acc.lerp(mloc, lr / lrsum)
        if not sync:
            for p, mv, dv in zip(fl.params, fl.views(mloc), fl.views(fl.denom)):
                if decoupled:
                    p.mul_(1 - lr * wd)
                p.addcdiv_(mv, dv, value=-lr / bc1)
            fl.m.copy_(mloc)
            fl.acc.copy_(acc)
            fl.lrsum, fl.decay = lrsum, decay
            return
        self._close_window(fl, acc, lrsum, decay, bc1)

    def _close_window(self, fl: Flat, acc: torch.Tensor, lrsum: float, decay: float, bc1: float) -> None:
        """Averages the window's lr-weighted mean momentum ``acc`` through the codec; every rank
        then moves from the anchor (without local steps: its parameters) by the window's whole
        update and takes the mean as its momentum."""
        self._exchange(fl, acc.div(self._world))  # raises on every rank before anything changes
        base = fl.views(fl.anchor) if fl.anchor is not None else fl.params
        for p, a, mv, dv in zip(fl.params, base, fl.views(fl.mean), fl.views(fl.denom)):
            if a is not p:
                p.copy_(a)
            if decay != 1.0:
                p.mul_(decay)
            p.addcdiv_(mv, dv, value=-lrsum / bc1)
        fl.m.copy_(fl.mean)
        fl.lrsum, fl.decay = 0.0, 1.0
        if fl.anchor is not None:
            fl.anchor.copy_(fl.read())
        self.exchanges += 1

    @torch.no_grad()
    def synchronize(self) -> None:
        """Ends the local window now (:class:`ZeroOneAdam` with ``sync_every > 1``): the
        exchange its next sync step would make, so that every replica holds the same parameters
        and momentum (a collective; call it on every rank at the end of training or before an
        evaluation that needs identical replicas). Nothing to do outside a window."""
        for group, fl in zip(self.param_groups, self._flats):
            if fl.lrsum == 0:
                continue
            beta1 = group["betas"][0]
            self._close_window(fl, fl.acc, fl.lrsum, fl.decay, 1 - beta1 ** float(min(self.steps, self.freeze_step)))

    # --- the exchange

    def _exchange(self, fl: Flat, x: torch.Tensor) -> None:
        """The codec's all-reduce of x: the sum over the ranks in ``fl.mean``."""
        self._ex.run(fl.flow, x, fl.mean)

    # --- checkpoints

    def state_dict(self) -> dict:
        """The optimizer's state for a checkpoint (a collective: every rank calls it).

        Returns:
            dict: ``format``, ``identity`` (optimizer, schedule, codec, path and options),
            ``world_size``, ``steps``, ``var_updates``, ``frozen``, ``schedule`` (the variance
            interval and counter), ``bytes_sent``, ``wire_bytes``, ``exchanges``, ``param_groups``
            (the hyperparameters), ``groups`` (per group: ``m``, ``v``, ``denom``, ``anchor``,
            ``acc``, ``lrsum``, ``decay``) and ``codec_states`` (group index -> every rank's codec
            state bytes, as uint8 tensors).
        """
        groups = [{"m": fl.m.clone(), "v": fl.v.clone(), "denom": fl.denom.clone(),
                   "anchor": None if fl.anchor is None else fl.anchor.clone(), "acc": fl.acc.clone(),
                   "lrsum": fl.lrsum, "decay": fl.decay} for fl in self._flats]
        return self._saved(var_updates=self.var_updates, frozen=self.frozen, schedule=self._schedule_state(),
                           exchanges=self.exchanges, groups=groups)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict` at the saved world size (the run continues bit for bit).

        Raises:
            ValueError: another format, optimizer, codec, path, options, world size or layout.
            gradcomp.Error: a corrupted codec state (``checksum_mismatch``, ...); nothing changes then.
        """
        sd = state_dict
        groups = sd.get("groups", [])
        fresh = self._restored(sd, [s["m"].numel() for s in groups])
        for s, fl in zip(groups, fresh):
            fl.m.copy_(s["m"])
            fl.v.copy_(s["v"])
            fl.denom.copy_(s["denom"])
            fl.acc.copy_(s["acc"])
            if fl.anchor is not None:
                fl.anchor.copy_(s["anchor"])
            fl.lrsum, fl.decay = float(s["lrsum"]), float(s["decay"])
        self._commit(sd, fresh)
        self.var_updates, self.frozen, self.exchanges = int(sd["var_updates"]), bool(sd["frozen"]), int(sd["exchanges"])
        self._load_schedule_state(sd["schedule"])

    def _schedule_state(self) -> dict:
        return {}

    def _load_schedule_state(self, s: dict) -> None:
        pass

    def _identity(self) -> str:
        opts = ",".join(f"{k}={v!r}" for k, v in sorted(self.codec_options.items()))
        return f"{type(self).__name__}:{self._schedule()}:{self.full_steps}:{self.codec}:{self.path}:{opts}"


class OneBitAdam(_CompressedAdam):
    """1-bit Adam: ``warmup_steps`` steps of Adam on the fp32-averaged gradient, then the variance
    frozen and the momentum averaged through a codec (default: 1-bit signs with a scale per group
    of 128 and error feedback on both sides of the sharded path).

    Args:
        params: the replica's parameters (float32, CPU; an iterable of tensors or of param group
            dicts, or a module, not wrapped in DDP), the same on every rank at the start (rank
            0's are broadcast).
        lr (float): the learning rate (default 1e-3).
        betas (tuple): Adam's (beta1, beta2) (default (0.9, 0.999)).
        eps (float): added to the denominator, > 0 (default 1e-8).
        weight_decay (float): L2 penalty added to the gradient, as Adam's (default 0).
        decoupled_weight_decay (bool): AdamW's decay of the parameters instead (default False).
        warmup_steps (int): full-precision Adam steps before the freeze, >= 1 (DeepSpeed's setting
            for BERT: 15 to 25% of the steps).
        codec (str): a codec of :func:`gradcomp.codecs` (``"sign"``, ``"int4"``, ``"int8"``, ...).
        path (str): ``"sharded"`` (all-to-all, re-encoded shards, all-gather) or ``"gather"``
            (every rank's frames all-gathered and decoded).
        process_group (ProcessGroup, optional): the replicas (default: the world).
        full_steps (str): the gradient all-reduce of the full steps: ``"fp32"`` (default; the
            steps are ``torch.optim.Adam``'s bit for bit) or ``"bf16"`` (each rank's share cast
            to bfloat16 and summed in it, as torch's bf16 hook and DeepSpeed's fp16 training:
            half the bytes).
        **codec_options: the codec's options (``error_feedback``, ``group``, ...).

    Raises:
        ValueError: an option out of its domain (named in the message), an unknown codec or path,
            parameters that are not float32 CPU tensors, a DDP model.
    """

    _variant = "OneBitAdam"

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, warmup_steps: int = 100, codec: str = "sign",
                 path: str = "sharded", process_group: Optional[dist.ProcessGroup] = None, full_steps: str = "fp32",
                 **codec_options) -> None:
        check_int("warmup_steps", warmup_steps, 1)
        self.warmup_steps = warmup_steps
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay, codec, path, process_group,
                         warmup_steps, 1, full_steps, codec_options)

    def _variance_due(self, t: int) -> bool:
        return t <= self.warmup_steps

    def _schedule(self) -> str:
        return f"warmup_steps={self.warmup_steps}"


class ZeroOneAdam(_CompressedAdam):
    """0-1 Adam, simplified: the variance updated (by a full-precision step) at steps that grow
    exponentially apart, compressed momentum steps between them, and after the freeze optionally
    local steps between the exchanges.

    The variance-update steps follow DeepSpeed's rule: the interval starts at 1 and doubles after
    every ``var_update_scaler`` updates; step t updates the variance when t is a multiple of the
    interval and t <= ``var_freeze_step`` (``var_update_scaler=1``: steps 1, 2, 4, 8, ...). After
    ``var_freeze_step`` the momentum is exchanged every ``sync_every`` steps: in between, each
    rank steps with its own momentum; at the exchange the window's lr-weighted mean momentum is
    averaged through the codec, every rank moves from the parameters of the last exchange by the
    window's whole update (so the replicas are identical again) and takes the mean as its
    momentum. :meth:`synchronize` ends a window early (at the end of training).

    Not implemented: the paper's growing local-step intervals (``local_step_scaler``,
    ``local_step_clipper``): ``sync_every`` is fixed.

    Args:
        var_freeze_step (int): the last step that may update the variance (>= 1).
        var_update_scaler (int): variance updates between two doublings of their interval (>= 1).
        sync_every (int): steps between two exchanges after the freeze (>= 1; 1: every step).
        others: as :class:`OneBitAdam`'s.
    """

    _variant = "ZeroOneAdam"

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, var_freeze_step: int = 1000, var_update_scaler: int = 16,
                 sync_every: int = 1, codec: str = "sign", path: str = "sharded",
                 process_group: Optional[dist.ProcessGroup] = None, full_steps: str = "fp32", **codec_options) -> None:
        check_int("var_freeze_step", var_freeze_step, 1)
        check_int("var_update_scaler", var_update_scaler, 1)
        check_int("sync_every", sync_every, 1)
        self.var_update_scaler = var_update_scaler
        self.var_interval, self.var_counter = 1, 0
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay, codec, path, process_group,
                         var_freeze_step, sync_every, full_steps, codec_options)

    def _variance_due(self, t: int) -> bool:
        return t <= self.freeze_step and t % self.var_interval == 0

    def _variance_updated(self, t: int) -> None:
        self.var_counter += 1
        if self.var_counter == self.var_update_scaler:
            self.var_counter, self.var_interval = 0, 2 * self.var_interval

    def _schedule(self) -> str:
        return f"var_freeze_step={self.freeze_step}, var_update_scaler={self.var_update_scaler}, sync_every={self.sync_every}"

    def _schedule_state(self) -> dict:
        return {"var_interval": self.var_interval, "var_counter": self.var_counter}

    def _load_schedule_state(self, s: dict) -> None:
        self.var_interval, self.var_counter = int(s["var_interval"]), int(s["var_counter"])
