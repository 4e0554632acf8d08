"""The tensor-parallel transformer of :mod:`gradcomp.tp`: :class:`ParallelBlock` (attention
heads and MLP features split over the ranks) and :class:`GPT`, a
:class:`gradcomp.models.TinyTransformer` split so."""

from __future__ import annotations

from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models import TinyTransformer
from .exchange import Exchange
from .layers import ColumnParallelLinear, RowParallelLinear, _ParallelLinear, _split


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
