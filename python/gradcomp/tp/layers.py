"""Megatron-style tensor-parallel linear layers of :mod:`gradcomp.tp`: a
:class:`ColumnParallelLinear` holds a block of output rows, a :class:`RowParallelLinear` the
matching block of input columns; each sums its partial results through an exchange, chunk by
chunk when ``chunks`` is set (:func:`gradcomp.tp.plan`)."""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn

from .exchange import Exchange


def _row_chunks(rows: int, chunks: Optional[Sequence[int]]) -> List[tuple[int, int]]:
    """Row ranges of a layer's chunks: the given row counts (the last one stretched or cut to
    cover ``rows``, since the batch may differ from the planned one), or one chunk."""
    if not chunks:
        return [(0, rows)]
    out, r0 = [], 0
    for c in chunks:
        if r0 >= rows:
            break
        out.append((r0, min(rows, r0 + int(c))))
        r0 = out[-1][1]
    if r0 < rows:
        out[-1] = (out[-1][0], rows)
    return out


def _exchanged(x_rows: torch.Tensor, compute: Callable[[torch.Tensor], torch.Tensor], exchange: Exchange,
               chunks) -> torch.Tensor:
    """``sum over ranks of compute(x_rows)``, chunk by chunk, each chunk's exchange started
    before the next chunk is computed."""
    waits = [exchange.start(compute(x_rows[a:b]).contiguous()) for a, b in _row_chunks(x_rows.shape[0], chunks)]
    outs = [w() for w in waits]
    return outs[0] if len(outs) == 1 else torch.cat(outs)


class _RowParallel(torch.autograd.Function):
    """y = sum over ranks of x_local @ w_local^T (forward exchange); backward needs none: the
    output gradient is the same on every rank."""

    @staticmethod
    def forward(ctx, x, weight, exchange, chunks):
        ctx.save_for_backward(x, weight)
        return _exchanged(x, lambda rows: rows @ weight.t(), exchange, chunks)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x, None, None


class _ColumnParallel(torch.autograd.Function):
    """y_local = x @ w_local^T (the input is replicated); backward sums the input gradient over
    the ranks (the backward exchange) and computes the weight gradient while it travels."""

    @staticmethod
    def forward(ctx, x, weight, exchange, chunks):
        ctx.save_for_backward(x, weight)
        ctx.exchange, ctx.chunks = exchange, chunks
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        waits = [ctx.exchange.start((grad[a:b] @ weight).contiguous()) for a, b in _row_chunks(grad.shape[0], ctx.chunks)]
        grad_weight = grad.t() @ x
        outs = [w() for w in waits]
        return (outs[0] if len(outs) == 1 else torch.cat(outs)), grad_weight, None, None


class _ParallelLinear(nn.Module):
    def __init__(self, weight_shape, bias_size, exchange: Exchange, bias: bool):
        super().__init__()
        self.exchange = exchange
        self.rank, self.world = exchange.rank, exchange.world
        self.weight = nn.Parameter(torch.empty(weight_shape))
        self.bias = nn.Parameter(torch.zeros(bias_size)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        #: Token rows per chunk of the exchanged tensor (None: one chunk); :func:`plan` sets it.
        self.chunks: Optional[List[int]] = None
        #: The planner's decision for this layer (:func:`plan`), or None.
        self.plan: Optional[dict] = None


def _split(total: int, exchange: Exchange, what: str) -> int:
    if not isinstance(exchange, Exchange):
        raise TypeError("exchange: a gradcomp.tp.Exchange (AllReduce, AccTFM) expected")
    world = exchange.world
    if total % world:
        raise ValueError(f"{what} ({total}) must be divisible by the tensor-parallel size ({world})")
    return total // world


class ColumnParallelLinear(_ParallelLinear):
    """A linear layer whose output features are split over the ranks: rank r holds rows
    ``rows`` of the full ``[out_features, in_features]`` weight (by default the r-th block) and
    computes those outputs from the replicated input. The backward pass sums the input's
    gradient over the ranks through ``exchange``.

    Args:
        in_features, out_features (int): the full layer's sizes; ``out_features`` must be
            divisible by the group size.
        exchange (Exchange): the backward exchange.
        bias (bool): a bias (split like the outputs).

    Raises:
        ValueError: ``out_features`` not divisible by the group size.
    """

    def __init__(self, in_features: int, out_features: int, exchange: Exchange, bias: bool = True):
        local = _split(out_features, exchange, "out_features")
        super().__init__((local, in_features), local, exchange, bias)
        self.in_features, self.out_features = in_features, out_features
        self.rows = torch.arange(exchange.rank * local, (exchange.rank + 1) * local)

    def load_dense(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, rows=None) -> None:
        """Copies this rank's rows of a full layer's weight (and bias); ``rows`` (an index
        tensor) overrides the default block."""
        if rows is not None:
            self.rows = torch.as_tensor(rows)
        with torch.no_grad():
            self.weight.copy_(weight[self.rows])
            if self.bias is not None:
                self.bias.copy_(bias[self.rows])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[..., in_features]``, the same on every rank; returns this rank's outputs."""
        lead = x.shape[:-1]
        y = _ColumnParallel.apply(x.reshape(-1, x.shape[-1]), self.weight, self.exchange, self.chunks)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*lead, -1)


class RowParallelLinear(_ParallelLinear):
    """A linear layer whose input features are split over the ranks: rank r holds columns
    ``cols`` of the full weight, multiplies its slice of the input and the ranks' partial
    outputs are summed through ``exchange`` (the forward exchange); the bias is added after the
    sum.

    Args:
        in_features, out_features (int): the full layer's sizes; ``in_features`` must be
            divisible by the group size.
        exchange (Exchange): the forward exchange.
        bias (bool): a bias (replicated).

    Raises:
        ValueError: ``in_features`` not divisible by the group size.
    """

    def __init__(self, in_features: int, out_features: int, exchange: Exchange, bias: bool = True):
        local = _split(in_features, exchange, "in_features")
        super().__init__((out_features, local), out_features, exchange, bias)
        self.in_features, self.out_features = in_features, out_features
        self.cols = torch.arange(exchange.rank * local, (exchange.rank + 1) * local)

    def load_dense(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, cols=None) -> None:
        """Copies this rank's columns of a full layer's weight, and the whole bias."""
        if cols is not None:
            self.cols = torch.as_tensor(cols)
        with torch.no_grad():
            self.weight.copy_(weight[:, self.cols])
            if self.bias is not None:
                self.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[..., in_features / ranks]``, this rank's slice; returns the full output,
        the same on every rank."""
        lead = x.shape[:-1]
        y = _RowParallel.apply(x.reshape(-1, x.shape[-1]).contiguous(), self.weight, self.exchange, self.chunks)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*lead, -1)

