"""gradcomp: gradient compression for distributed training.

Compressors by name on torch tensors (or any DLPack / buffer-protocol array), without copies::

    import torch, gradcomp
    c = gradcomp.Compressor("topk", density=0.01)          # top-k 1%, bf16 values, error feedback
    g = torch.randn(1 << 20)
    st = c.make_state(g.numel())
    out = torch.empty(c.max_payload_bytes(g.numel()), dtype=torch.uint8)
    n = c.compress(g, st, out)                               # frames in out[:n]
    s = torch.zeros_like(g); c.accumulate(out[:n], s)        # s += decoded

Summable codecs run in phases whose buffers the transport reduces (gradcomp.Tagc: TAGC-2;
gradcomp.SummableCast). DDP communication hooks live in gradcomp.ddp (the TAGC hook too), TAGC
as FSDP2's reduce-scatter in gradcomp.fsdp (docs/integrations.md).
"""

from ._core import Compressor, Error, PhaseCodec, PhaseState, State, SummableCast, Tagc, codecs

__all__ = ["Compressor", "Error", "PhaseCodec", "PhaseState", "State", "SummableCast", "Tagc", "codecs", "ddp", "fsdp", "tagc"]


def __getattr__(name):  # these import torch.distributed: load them on first use
    if name in ("ddp", "fsdp", "tagc"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(name)
