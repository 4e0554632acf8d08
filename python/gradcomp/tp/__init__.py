"""Tensor (intra-layer) parallelism whose exchanges go through gradcomp: Megatron-style layers,
a tensor-parallel GPT, and AccTFM's compressed, pipelined exchange.

Every rank of the tensor-parallel group holds a slice of each layer. A
:class:`ColumnParallelLinear` holds a block of output rows (its input is replicated, its output
split); a :class:`RowParallelLinear` holds the matching block of input columns (its input split,
its output a partial sum that the ranks add up). Each transformer block has two such sums in the
forward pass (after attention's output projection and after the MLP) and two in the backward
pass (the gradients of the inputs of the QKV projection and of the MLP's first layer). Those
four tensors, ``[tokens, hidden]``, are what an :class:`Exchange` sums:

* :class:`AllReduce`: float32 or bfloat16 all-reduce (the uncompressed baselines);
* :class:`AccTFM`: AccTFM's hybrid codec (token-level top-k, piecewise 4-bit values) on the
  gather path: each rank compresses its partial sum, the ranks all-gather the payloads, and
  every rank adds all of them, its own included, so every rank holds the same sum bit for bit.

With ``chunks`` set on a layer (by hand or by :func:`plan`, AccTFM's partition search), the
layer computes its exchanged tensor in chunks of token rows and starts each chunk's exchange as
soon as the chunk is computed, so the exchange of one chunk overlaps the compute of the next
(forward: the row-parallel matrix product; backward: the column-parallel input gradient, with
the weight gradient computed while the chunks travel).

Example (every rank runs it; the process group is initialised)::

    >>> dense = gradcomp.models.TinyTransformer(d=64, heads=4)
    >>> model = gradcomp.tp.GPT.from_dense(dense, gradcomp.tp.AccTFM(density=1 / 8))
    >>> loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    >>> loss.backward(); opt.step()            # no gradient all-reduce: every rank is exact
"""

from __future__ import annotations

from .exchange import AccTFM, AllReduce, Exchange, make_exchange
from .layers import ColumnParallelLinear, RowParallelLinear
from .model import GPT, ParallelBlock
from .planner import plan

__all__ = ["AccTFM", "AllReduce", "ColumnParallelLinear", "Exchange", "GPT", "ParallelBlock", "RowParallelLinear",
           "make_exchange", "plan"]
