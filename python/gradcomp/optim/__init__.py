"""1-bit Adam, 0-1 Adam and DeMo: optimizers whose momentum travels through a gradcomp codec.

Every rank holds a full replica of the model (no DDP: the optimizer does the exchanges itself;
``OneBitAdam(ddp_model)`` raises ``ValueError``). Both optimizers are one algorithm with two
variance schedules:

* **full steps**, while the variance is live: the gradients are all-reduced in fp32 (their mean:
  the sum divided by W) and the step is ``torch.optim.Adam``'s, bit for bit;
* **compressed steps**: each rank updates its momentum with its LOCAL gradient,
  ``m_r = beta1 m + (1 - beta1) g_r``; ``m_r / W`` goes through the codec's all-reduce (the
  sharded path: error feedback on the sender and on the shard's owner), the mean replaces m on
  every rank and ``p -= lr * (m / bc1) / denom``, with ``denom = sqrt(v / bc2) + eps`` as at
  the last variance update.

:class:`OneBitAdam` (Tang et al. 2021): ``warmup_steps`` full steps, then the variance is frozen
and every step is compressed. :class:`ZeroOneAdam` (after Lu et al. 2022, simplified): full steps
at the variance-update steps (every step at first, the interval doubling after every
``var_update_scaler`` updates) up to ``var_freeze_step``, compressed steps between them; after
``var_freeze_step`` optionally ``sync_every`` local steps between two exchanges, each rank
stepping with its own momentum meanwhile.

    >>> opt = gradcomp.optim.OneBitAdam(net.parameters(), lr=1e-3, warmup_steps=200)   # sign + EF, sharded
    >>> for step in range(steps):
    ...     loss(net, batch(step, rank)).backward()
    ...     opt.step(); opt.zero_grad()

Bias corrections are Adam's, ``bc1 = 1 - beta1^t`` and ``bc2 = 1 - beta2^k`` (k: the variance
updates so far), and stop changing at the freeze. docs/optimizers.md in the repository has the
options, the bytes and what is tested.

:class:`DeMo` (Peng et al. 2024, decoupled momentum) keeps each rank's momentum its own: every
step it sends the largest DCT coefficients of its momentum (codec ``dct_topk``: the DCT of
blocks of 64 values, the top 32 of each row of 4096), subtracts what it sent, and steps by the
sign of the mean of what every rank sent.

Errors: a bad option raises ``ValueError`` naming it; a corrupted or foreign payload raises
:class:`gradcomp.Error` on every rank (a one-word all-reduce after each decode tells every rank)
before the parameters or the moments change.
"""

from .adam import OneBitAdam, ZeroOneAdam
from .demo import DeMo

__all__ = ["DeMo", "OneBitAdam", "ZeroOneAdam"]
