"""The models and the task of the tests and benchmarks: a tiny GPT-style transformer and a
learnable synthetic token task. Everything is seeded: a batch depends only on its stream number.
:mod:`gradcomp.testing` trains them under the DDP hooks and FSDP2; :class:`gradcomp.tp.GPT`
splits :class:`TinyTransformer` over a tensor-parallel group."""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["Block", "MarkovTask", "TinyTransformer"]


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and a 4x MLP, each residual."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x``: ``[batch, seq, d]``; ``mask``: the additive causal attention mask ``[seq, seq]``."""
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks, LM head.

    Args:
        vocab (int): vocabulary size (default 64).
        d (int): model width (default 64).
        heads (int): attention heads (default 4).
        layers (int): blocks (default 2).
        seq (int): the longest sequence (default 32).
    """

    def __init__(self, vocab=64, d=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        # A plain attribute, not a buffer: DDP then has no buffers to broadcast every step.
        self.mask = torch.triu(torch.full((seq, seq), float("-inf")), 1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]`` of the next token at every position of ``idx``
        (``[batch, seq]`` token ids)."""
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = self.mask[:t, :t].to(idx.device)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


class MarkovTask:
    """Token sequences from a fixed random Markov chain: each token has a few likely
    successors, so the achievable loss (the chain's entropy) is far below log(vocab).

    Args:
        vocab (int): vocabulary size (default 64).
        successors (int): likely successors of each token (default 4).
        seed (int): the chain's seed (default 0).
    """

    def __init__(self, vocab=64, successors=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        probs = torch.zeros(vocab, vocab)
        for a in range(vocab):
            nxt = torch.randperm(vocab, generator=g)[:successors]
            probs[a, nxt] = torch.rand(successors, generator=g) + 0.1
        self.probs = probs / probs.sum(1, keepdim=True)
        self.vocab = vocab

    def batch(self, stream: int, batch: int, seq: int):
        """``(inputs, targets)``, each ``[batch, seq]`` int64, targets shifted by one; the same
        for the same ``stream`` on every rank and run."""
        g = torch.Generator().manual_seed(1_000_003 * (stream + 1))
        x = torch.empty(batch, seq + 1, dtype=torch.long)
        x[:, 0] = torch.randint(self.vocab, (batch,), generator=g)
        for t in range(seq):
            x[:, t + 1] = torch.multinomial(self.probs[x[:, t]], 1, generator=g)[:, 0]
        return x[:, :-1], x[:, 1:]
