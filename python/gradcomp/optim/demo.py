"""DeMo (decoupled momentum, Peng et al. 2024): each rank's own momentum, its largest DCT
coefficients exchanged every step, sign steps (docs/optimizers.md)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .._exchange import GatherFlow
from ._replicas import Flat, check, join_replicas, make_codec, replica_params, ReplicaOptimizer

_DEMO_CODEC = {"cols": 4096, "k_per_row": 32, "dct_block": 64}  # DeMo's 32 of 64 x 64, as rows


class DeMo(ReplicaOptimizer):
    """DeMo, decoupled momentum (Peng et al. 2024): each rank keeps its own momentum and every
    step sends only its fast components, the largest DCT coefficients.

    Per parameter group, as one flat vector: ``d = decay * d + lr * g`` (the local gradient);
    ``q = compress(d)`` with the codec (default ``dct_topk``: the orthonormal DCT-II of blocks of
    ``dct_block`` values, the ``k_per_row`` largest coefficients of each row of ``cols`` values,
    bf16 values); ``d -= decode(q)`` (what was sent leaves the momentum, which thereby is the
    error feedback); every rank's ``q`` is all-gathered and decoded into the mean ``u``; then
    ``p *= 1 - lr * weight_decay`` and ``p -= lr * sign(u)`` (or ``lr * u`` with
    ``sign=False``). The published setting is chunks of 64 x 64 with the top 32: here the DCT
    runs along the flat vector in blocks of 64 and the top 32 is taken per row of 4096, the same
    density (1/128).

    Args:
        params: the replica's parameters (float32 CPU tensors; an iterable of tensors or of param
            group dicts, or a module, not wrapped in DDP), rank 0's broadcast at the start.
        lr (float): the learning rate (default 1e-3).
        momentum_decay (float): the momentum's decay in [0, 1) (default 0.999, DeMo's).
        weight_decay (float): decoupled decay of the parameters (default 0).
        sign (bool): step by the sign of the mean (default True, DeMo's) or by the mean.
        codec (str): a codec of :func:`gradcomp.codecs` (default ``"dct_topk"``; any other codec
            sends the momentum its way, e.g. ``"topk"``).
        process_group (ProcessGroup, optional): the replicas (default: the world).
        **codec_options: the codec's options (default for ``dct_topk``: ``cols=4096``,
            ``k_per_row=32``, ``dct_block=64``). ``error_feedback`` must stay off: the momentum
            keeps what was not sent.

    Only the gather path: a rank subtracts exactly what it sent, which the sharded path's
    owners would re-encode (docs/optimizers.md).

    Raises:
        ValueError: an option out of its domain (named in the message), an unknown codec,
            error feedback in the codec, parameters that are not float32 CPU tensors, a DDP model.
    """

    def __init__(self, params, lr: float = 1e-3, momentum_decay: float = 0.999, weight_decay: float = 0.0,
                 sign: bool = True, codec: str = "dct_topk", process_group: Optional[dist.ProcessGroup] = None,
                 **codec_options) -> None:
        params = replica_params(params, "DeMo exchanges the momentum itself")
        if not (0.0 <= momentum_decay < 1.0):
            raise ValueError(f"gradcomp.optim: momentum_decay must be in [0, 1), not {momentum_decay!r}")
        check(lr, weight_decay, codec, "gather")
        if codec_options.get("error_feedback"):
            raise ValueError("gradcomp.optim: DeMo's momentum is its error feedback: error_feedback must be off")
        options = dict(_DEMO_CODEC if codec == "dct_topk" else {}, **codec_options)
        options["error_feedback"] = False
        super().__init__(params, dict(lr=lr, momentum_decay=momentum_decay, weight_decay=weight_decay, sign=bool(sign)))
        for group in self.param_groups:
            check(group["lr"], group["weight_decay"], codec, "gather")
        self.codec, self.codec_options, self.process_group = codec, options, process_group
        self._codec = make_codec(codec, "gather", options)
        self._ex = join_replicas(self.param_groups, process_group)  # bytes_sent, wire_bytes: its counts
        self._world, self._rank = self._ex.transport.world, self._ex.transport.rank
        self._flats = [self._flat(group) for group in self.param_groups]
        self.steps = 0

    def _flat(self, group) -> Flat:
        n = sum(p.numel() for p in group["params"])
        sent = torch.zeros(n)  # this rank's frame decoded: what it sent
        fl = Flat(group["params"], False, GatherFlow(self._codec, n, self._world, self._rank, sent=sent))
        fl.sent = sent
        return fl

    def __repr__(self) -> str:
        g = self.param_groups[0]
        opts = "".join(f", {k}={v!r}" for k, v in sorted(self.codec_options.items()))
        return (f"gradcomp.optim.DeMo(lr={g['lr']}, momentum_decay={g['momentum_decay']}, weight_decay={g['weight_decay']}, "
                f"sign={g['sign']}, codec={self.codec!r}{opts}; step {self.steps}, world {self._world})")

    def _step(self) -> None:
        for group, fl in zip(self.param_groups, self._flats):
            lr, wd = float(group["lr"]), group["weight_decay"]
            d = fl.m.mul(group["momentum_decay"]).add_(fl.grads(), alpha=lr)
            self._ex.run(fl.flow, d, fl.mean)  # raises on every rank before anything changes
            fl.m.copy_(d.sub_(fl.sent))
            update = fl.mean.sign() if group["sign"] else fl.mean.div(self._world)
            for p, u in zip(fl.params, fl.views(update)):
                if wd != 0:
                    p.mul_(1 - lr * wd)
                p.add_(u, alpha=-lr)
        self.steps += 1

    def state_dict(self) -> dict:
        """The optimizer's state (a collective: every rank calls it): ``format``, ``identity``,
        ``world_size``, ``steps``, ``bytes_sent``, ``wire_bytes``, ``param_groups``, ``momenta``
        (group index -> every rank's momentum, [world, n]) and ``codec_states`` (group index ->
        every rank's codec state bytes, as uint8 tensors)."""
        gathered = []
        for fl in self._flats:
            rows = [fl.m.clone() for _ in range(self._world)]
            if self._world > 1:
                dist.all_gather(rows, fl.m, group=self.process_group)
            gathered.append(torch.stack(rows))
        return self._saved(momenta={str(i): g for i, g in enumerate(gathered)})

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict` at the saved world size (the run continues bit for bit).

        Raises:
            ValueError: another format, codec, options, world size or parameter layout.
            gradcomp.Error: a corrupted codec state; nothing changes then.
        """
        sd = state_dict
        momenta = sd.get("momenta", {})
        fresh = self._restored(sd, [momenta[str(i)].shape[-1] for i in range(len(momenta))])
        for i, fl in enumerate(fresh):
            fl.m.copy_(momenta[str(i)][self._rank])
        self._commit(sd, fresh)

    def _identity(self) -> str:
        opts = ",".join(f"{k}={v!r}" for k, v in sorted(self.codec_options.items()))
        return f"DeMo:{self.codec}:{opts}"
