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

import math
import time
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ._core import Compressor, best_chunking, pipeline_seconds, plan_layer
from .models import TinyTransformer

__all__ = ["AccTFM", "AllReduce", "ColumnParallelLinear", "Exchange", "GPT", "ParallelBlock", "RowParallelLinear",
           "make_exchange", "plan"]


def _world(group) -> tuple[int, int]:
    if not dist.is_initialized():
        raise RuntimeError("gradcomp.tp needs an initialised process group (torch.distributed.init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


class Exchange:
    """Sums a ``[rows, cols]`` float32 tensor across the tensor-parallel group; every rank
    gets the same sum, bit for bit.

    Args:
        group (ProcessGroup, optional): the tensor-parallel group (default: the world).

    Attributes:
        bytes_sent (int): bytes this rank has put on the wire for its own contributions
            (payloads and slots as sent; a ring forwards others' bytes too).
        calls (int): exchanges started.
    """

    name = "exchange"

    def __init__(self, group=None):
        self.group = group
        self.rank, self.world = _world(group)
        self.bytes_sent = 0
        self.calls = 0

    def start(self, x: torch.Tensor) -> Callable[[], torch.Tensor]:
        """Starts summing ``x`` (float32, ``[rows, cols]``, contiguous); returns a function that
        waits and returns the sum (float32, ``x``'s shape). Every rank must start the same
        exchanges in the same order."""
        raise NotImplementedError

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of ``x`` over the group (blocking)."""
        return self.start(x)()

    def __repr__(self) -> str:
        return f"gradcomp.tp.{type(self).__name__}({self.name}, world={self.world})"


class AllReduce(Exchange):
    """An all-reduce in ``dtype`` (``torch.float32``, or ``torch.bfloat16``: half the bytes,
    the sum rounded to bfloat16), returned as float32."""

    def __init__(self, dtype: torch.dtype = torch.float32, group=None):
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"AllReduce: dtype must be torch.float32 or torch.bfloat16, not {dtype}")
        super().__init__(group)
        self.dtype = dtype
        self.name = "fp32" if dtype == torch.float32 else "bf16"

    def start(self, x):
        _check_input(x)
        buf = x.to(self.dtype, copy=True)
        work = dist.all_reduce(buf, group=self.group, async_op=True)
        self.bytes_sent += buf.numel() * buf.element_size()
        self.calls += 1

        def wait():
            work.wait()
            return buf.float()

        return wait


class AccTFM(Exchange):
    """AccTFM's hybrid exchange: each token row keeps its largest ``density`` share of values
    (or ``k_per_row`` values), in piecewise 4-bit quantization (the library's ``acctfm`` codec);
    payloads are all-gathered and every rank adds them all in rank order.

    Payload sizes differ per rank and step, and the codec's worst case is about 3.4x a typical
    payload, so the all-gather uses a slot every rank agrees on: each rank sends its size and
    the first ``slot`` bytes of its payload; when some payload is longer, a second all-gather
    carries the rest. After each exchange every rank sets the next slot of that size from the
    sizes it received (the largest, plus 1/8), so all ranks keep agreeing without another
    message.

    Args:
        density (float): the fraction of each row kept, in (0, 1] (default 1/8).
        k_per_row (int): values kept per row instead (0: use ``density``).
        rows_per_frame (int): token rows per frame (default 256).
        group (ProcessGroup, optional): the tensor-parallel group.

    Raises:
        ValueError: ``density`` outside (0, 1] or a negative ``k_per_row``.
    """

    name = "acctfm"

    def __init__(self, density: float = 0.125, k_per_row: int = 0, rows_per_frame: int = 256, group=None):
        if not (isinstance(density, (int, float)) and 0 < density <= 1):
            raise ValueError(f"AccTFM: density must be in (0, 1], not {density!r}")
        if k_per_row < 0 or rows_per_frame < 1:
            raise ValueError("AccTFM: k_per_row must be >= 0 and rows_per_frame >= 1")
        super().__init__(group)
        self.density, self.k_per_row, self.rows_per_frame = float(density), int(k_per_row), int(rows_per_frame)
        self.name = f"acctfm {self.density:g}" if not k_per_row else f"acctfm k={k_per_row}"
        self._codecs: dict = {}  # cols -> Compressor
        self._states: dict = {}  # (cols, n) -> State
        self._slots: dict = {}   # (cols, n) -> agreed slot bytes (size prefix included)

    def codec(self, cols: int) -> Compressor:
        """The compressor for rows of ``cols`` values."""
        if cols not in self._codecs:
            self._codecs[cols] = Compressor("acctfm", cols=cols, density=self.density, k_per_row=self.k_per_row,
                                            chunk_bytes=self.rows_per_frame * cols * 4)
        return self._codecs[cols]

    def start(self, x):
        _check_input(x)
        cols, n = x.shape[1], x.numel()
        comp = self.codec(cols)
        key = (cols, n)
        if key not in self._states:
            self._states[key] = comp.make_state(n)
        most = comp.max_payload_bytes(n) + 8
        slot = self._slots.get(key, most)
        scratch = torch.empty(most, dtype=torch.uint8)
        size = comp.compress(x, self._states[key], scratch[8:])
        scratch[:8].view(torch.int64)[0] = size
        gathered = torch.empty(self.world * slot, dtype=torch.uint8)
        work = dist.all_gather_into_tensor(gathered, scratch[:slot], group=self.group, async_op=True)
        self.bytes_sent += slot
        self.calls += 1

        def wait():
            work.wait()
            slots = gathered.view(self.world, slot)
            sizes = slots[:, :8].contiguous().view(torch.int64).flatten().tolist()
            longest = max(sizes) + 8
            if not all(0 <= s <= most - 8 for s in sizes):
                raise ValueError(f"gradcomp.tp.AccTFM: a rank announced a payload size outside [0, {most - 8}]: {sizes}")
            if longest > slot:  # some payload did not fit: all ranks agree, and gather the rest
                rest = torch.empty(self.world * (longest - slot), dtype=torch.uint8)
                dist.all_gather_into_tensor(rest, scratch[slot:longest], group=self.group)
                self.bytes_sent += longest - slot
                rows = torch.cat([slots, rest.view(self.world, longest - slot)], 1)
            else:
                rows = slots
            payloads = torch.cat([rows[r, 8:8 + sizes[r]] for r in range(self.world)])
            out = torch.zeros(n, dtype=torch.float32)
            comp.accumulate_gathered(payloads, out)
            self._slots[key] = min(most, -(-(longest + longest // 8) // 64) * 64)
            return out.view(x.shape)

        return wait


def make_exchange(name: str, group=None, **options) -> Exchange:
    """An exchange by name: ``"fp32"``, ``"bf16"`` (:class:`AllReduce`) or ``"acctfm"``
    (:class:`AccTFM`, with its options)."""
    if name == "fp32":
        return AllReduce(torch.float32, group, **options)
    if name == "bf16":
        return AllReduce(torch.bfloat16, group, **options)
    if name == "acctfm":
        return AccTFM(group=group, **options)
    raise ValueError(f"unknown exchange {name!r}: 'fp32', 'bf16' or 'acctfm'")


def _check_input(x: torch.Tensor) -> None:
    if x.dtype != torch.float32 or x.dim() != 2 or not x.is_contiguous():
        raise ValueError("an exchange sums contiguous float32 [rows, cols] tensors")


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


class ParallelBlock(nn.Module):
    """A pre-norm transformer block split over the tensor-parallel group: each rank holds
    ``heads / ranks`` attention heads (a fused QKV :class:`ColumnParallelLinear`, the output
    projection a :class:`RowParallelLinear`) and ``4 d / ranks`` MLP features; layer norms are
    replicated. Four exchanges per step: two forward, two backward.

    Raises:
        ValueError: ``d`` or ``heads`` not divisible by the group size, or ``d`` by ``heads``.
    """

    def __init__(self, d: int, heads: int, exchange: Exchange):
        super().__init__()
        if d % heads:
            raise ValueError(f"d ({d}) must be divisible by heads ({heads})")
        _split(d, exchange, "d (the hidden size)")
        self.heads = _split(heads, exchange, "heads")
        self.head_dim = d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = ColumnParallelLinear(d, 3 * d, exchange)
        self.proj = RowParallelLinear(d, d, exchange)
        self.fc1 = ColumnParallelLinear(d, 4 * d, exchange)
        self.fc2 = RowParallelLinear(4 * d, d, exchange)
        # This rank's heads in the fused [q; k; v] weight of a dense block.
        r, local = exchange.rank, self.heads * self.head_dim
        block = torch.arange(r * local, (r + 1) * local)
        self.qkv.rows = torch.cat([block, block + d, block + 2 * d])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x``: ``[batch, seq, d]`` (the same on every rank); ``mask``: additive ``[seq, seq]``."""
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def load_dense(self, block: nn.Module) -> None:
        """Copies this rank's share of a :class:`gradcomp.models.Block`."""
        self.ln1.load_state_dict(block.ln1.state_dict())
        self.ln2.load_state_dict(block.ln2.state_dict())
        self.qkv.load_dense(block.attn.in_proj_weight, block.attn.in_proj_bias)
        self.proj.load_dense(block.attn.out_proj.weight, block.attn.out_proj.bias)
        self.fc1.load_dense(block.mlp[0].weight, block.mlp[0].bias)
        self.fc2.load_dense(block.mlp[2].weight, block.mlp[2].bias)


class GPT(nn.Module):
    """:class:`gradcomp.models.TinyTransformer` split over the tensor-parallel group: the same
    embeddings, layer norms and LM head on every rank, :class:`ParallelBlock` s in between.

    Its weights are those of a TinyTransformer built with ``seed`` (or of ``dense``), the same
    full model on every rank, each rank keeping its share.

    Args:
        exchange (Exchange): every parallel layer's exchange.
        vocab, d, heads, layers, seq (int): as for TinyTransformer.
        seed (int): the dense model's seed (default 0).
        dense (nn.Module, optional): a TinyTransformer to take the weights from instead.
    """

    def __init__(self, exchange: Exchange, vocab=64, d=64, heads=4, layers=2, seq=32, seed=0, dense=None):
        super().__init__()
        self.exchange = exchange
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(ParallelBlock(d, heads, exchange) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.mask = torch.triu(torch.full((seq, seq), float("-inf")), 1)
        if dense is None:
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                dense = TinyTransformer(vocab=vocab, d=d, heads=heads, layers=layers, seq=seq)
        self.tok.load_state_dict(dense.tok.state_dict())
        self.pos.load_state_dict(dense.pos.state_dict())
        self.ln.load_state_dict(dense.ln.state_dict())
        self.head.load_state_dict(dense.head.state_dict())
        for mine, theirs in zip(self.blocks, dense.blocks):
            mine.load_dense(theirs)

    @classmethod
    def from_dense(cls, dense: nn.Module, exchange: Exchange) -> "GPT":
        """This rank's share of a TinyTransformer (the same dense model on every rank)."""
        return cls(exchange, vocab=dense.tok.num_embeddings, d=dense.tok.embedding_dim, heads=dense.blocks[0].attn.num_heads,
                   layers=len(dense.blocks), seq=dense.pos.num_embeddings, dense=dense)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``, the same on every rank."""
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))

    def parallel_layers(self) -> List[_ParallelLinear]:
        """The layers with an exchange: each block's qkv, proj, fc1, fc2."""
        return [m for m in self.modules() if isinstance(m, _ParallelLinear)]


def _seconds(fn, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def plan(model: nn.Module, tokens: int, bytes_per_s: float, latency_s: float = 0.0, max_chunks: int = 16,
         sample: Optional[torch.Tensor] = None) -> List[dict]:
    """AccTFM's partition search for every parallel layer of ``model`` at ``tokens`` token rows:
    each layer's exchanged tensor is chunked as :func:`gradcomp.plan_layer` decides, from the
    layer's compute time, the codec's throughput and the cost of one more chunk (an exchange
    of one row), all measured here, and the given link. Sets each
    layer's ``chunks`` (token rows) and ``plan``; a layer whose exchange is not
    :class:`AccTFM` is chunked for its own all-reduce. A collective: rank 0's measurements are
    broadcast so that every rank sets the same chunks.

    Args:
        model (nn.Module): holds :class:`ColumnParallelLinear` / :class:`RowParallelLinear` s.
        tokens (int): token rows per step (batch x sequence).
        bytes_per_s (float): the link's rate (per direction).
        latency_s (float): per-message latency to add to what the one-row exchange measured
            (default 0: the measurement holds the link's latency when made on that link).
        max_chunks (int): the most chunks per layer.
        sample (Tensor, optional): a float32 ``[tokens, d]`` activation to time the codec on
            (default: normal values with a log-normal scale per token).

    Returns:
        list[dict]: per layer, ``name``, ``compress`` (for an :class:`AccTFM` layer: whether
        compressing beats a bfloat16 all-reduce on this link, as :func:`gradcomp.plan_layer`
        decides; the layer keeps its exchange either way), ``chunks`` (rows), ``predicted_s``
        (the plan's step time of the exchanged tensor), ``unchunked_s`` (the same in one chunk),
        ``compute_s`` (its measured compute) and ``chunk_overhead_s`` (the measured fixed cost
        of one more chunk: an exchange of one row).
    """
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, _ParallelLinear)]
    if not layers:
        raise ValueError("plan: the model has no parallel layers")
    ranks = layers[0][1].world
    gen = torch.Generator().manual_seed(0)
    measured = []
    for _, m in layers:  # compute time of the exchanged tensor, and the codec's path on its shape
        cols = m.out_features if isinstance(m, RowParallelLinear) else m.in_features
        inner = m.weight.shape[1] if isinstance(m, RowParallelLinear) else m.weight.shape[0]
        a = torch.randn(tokens, inner, generator=gen)
        w = m.weight.detach()
        compute = _seconds(lambda: a @ w.t()) if isinstance(m, RowParallelLinear) else _seconds(lambda: a @ w)
        path = None
        if isinstance(m.exchange, AccTFM):
            x = sample if sample is not None and sample.shape[1] == cols else (
                torch.randn(tokens, cols, generator=gen) * torch.randn(tokens, 1, generator=gen).exp())
            path = m.exchange.codec(cols).measure_path(x.contiguous().flatten())
        measured.append((cols, compute, path))
    # A chunk's fixed cost (the collective's round trip, the codec calls, Python), measured by
    # exchanging one token row: the planner's per-chunk compute overhead.
    overheads = {}
    for _, m in layers:
        cols = m.out_features if isinstance(m, RowParallelLinear) else m.in_features
        if (id(m.exchange), cols) not in overheads:
            row = torch.randn(1, cols, generator=gen)
            m.exchange.reduce(row)  # warm up (slots, buffers)
            times = sorted(_seconds(lambda: m.exchange.reduce(row), 1) for _ in range(9))
            overheads[(id(m.exchange), cols)] = times[4]
    measured = [(c, t, p, overheads[(id(m.exchange), c)]) for (_, m), (c, t, p) in zip(layers, measured)]
    if dist.is_initialized() and ranks > 1:
        box = [measured]
        dist.broadcast_object_list(box, src=0, group=layers[0][1].exchange.group)
        measured = box[0]
    out = []
    for (name, m), (cols, compute, path, overhead) in zip(layers, measured):
        n = tokens * cols
        args = dict(granule=cols, compute_s=compute, ranks=ranks, latency_s=latency_s, bytes_per_s=bytes_per_s,
                    chunk_overhead_s=overhead)
        if path is None:  # the layer's own all-reduce (the planner's default path is bf16)
            path = {"wire_bytes_per_element": 4.0} if getattr(m.exchange, "dtype", None) == torch.float32 else None
            compress = False
        else:  # whether bf16 would be faster is reported; the exchange stays the layer's
            compress = plan_layer(n, compressed=path, max_chunks=max_chunks, **args)["compress"]
        best = best_chunking(n, path=path, max_chunks=max_chunks, **args)
        sizes, predicted = best["sizes"], best["seconds"]
        unchunked = pipeline_seconds([n], path=path, **args)
        m.chunks = [s // cols for s in sizes]
        m.plan = {"name": name, "compress": compress, "chunks": list(m.chunks), "predicted_s": predicted,
                  "unchunked_s": unchunked, "compute_s": compute, "chunk_overhead_s": overhead}
        out.append(m.plan)
    return out
