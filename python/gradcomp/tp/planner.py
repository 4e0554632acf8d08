"""AccTFM's partition search for :mod:`gradcomp.tp` (:func:`plan`): how finely to chunk each
parallel layer's exchanged tensor so that the exchange of one chunk overlaps the compute of the
next, from times measured here and the given link."""

from __future__ import annotations

import math
import time
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from .._core import best_chunking, pipeline_seconds, plan_layer
from .exchange import AccTFM
from .layers import RowParallelLinear, _ParallelLinear


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
