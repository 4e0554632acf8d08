"""gradcomp: gradient compression for distributed training.

Compressors by name on torch tensors (or any CPU DLPack / buffer-protocol array), without
copies::

    >>> import torch, gradcomp
    >>> c = gradcomp.Compressor("topk", density=0.01)      # top-k 1%, bf16 values, error feedback
    >>> g = torch.randn(1 << 20)
    >>> st = c.make_state(g.numel())
    >>> out = torch.empty(c.max_payload_bytes(g.numel()), dtype=torch.uint8)
    >>> n = c.compress(g, st, out)                           # frames in out[:n]
    >>> s = torch.zeros_like(g); c.accumulate(out[:n], s)    # s += decoded

Every compressor also runs on the sharded path, :class:`Sharded` (a reduce-scatter or an
all-reduce by all-to-all and all-gather of fixed-size slots, whose bytes per rank do not grow
with the world size). Summable codecs run in phases whose buffers the transport reduces
(:func:`Tagc`: TAGC-2; :func:`SummableCast`), both :class:`PhaseCodec`\\ s.

Submodules (imported on first use; they import ``torch.distributed``):

* :mod:`gradcomp.ddp`: DDP communication hooks, one module per algorithm:
  :func:`gradcomp.ddp.compress_hook` with :class:`gradcomp.ddp.HookState` (codecs by name, on
  the gather or the sharded path; summable casts all-reduced) and :func:`gradcomp.ddp.tagc_hook`
  with :class:`gradcomp.ddp.TagcHookState` (TAGC-2);
* :mod:`gradcomp.localsteps`: local steps (DiLoCo, Streaming DiLoCo, SparseLoCo): every rank a
  replica, pseudo-gradients through any codec every H steps, :class:`gradcomp.localsteps.LocalSteps`;
* :mod:`gradcomp.optim`: 1-bit Adam and 0-1 Adam, optimizers whose momentum is averaged through
  any codec (every rank a replica, no DDP), :class:`gradcomp.optim.OneBitAdam`,
  :class:`gradcomp.optim.ZeroOneAdam`;
* :mod:`gradcomp.fsdp`: any codec (sharded reduce-scatter) or TAGC-2 as FSDP2's reduce-scatter,
  :func:`gradcomp.fsdp.attach`;
* :mod:`gradcomp.tagc`: what the two TAGC paths share;
* :mod:`gradcomp.restart`: checkpoints every N steps from every rank, atomic and checksummed,
  and the resume from the newest one every rank verifies;
* :mod:`gradcomp.tp`: tensor parallelism (Megatron-style layers, a GPT block) whose exchanges
  go through AccTFM's hybrid codec, optionally pipelined by :func:`plan_layer`;
* :mod:`gradcomp.models`: the tests' and benchmarks' model and task;
* :mod:`gradcomp.testing`: their training loops.

The hook states, the FSDP2 owners and TAGC's states share one checkpoint module
(``gradcomp._checkpoint``: every rank's states gathered, restored at the same or another world
size). docs/python.md in the repository is the package's manual.
"""

__version__ = "0.1.0"  # the library's version (tests/packaging/versions.cmake holds every copy equal)

from ._core import Compressor, Error, PhaseCodec, PhaseState, Sharded, ShardedState, State, SummableCast, Tagc, best_chunking, build_info, codecs, crc32c, pipeline_seconds, plan_layer

__all__ = ["Compressor", "Error", "PhaseCodec", "PhaseState", "Sharded", "ShardedState", "State", "SummableCast", "Tagc",
           "best_chunking", "build_info", "codecs", "crc32c", "pipeline_seconds", "plan_layer", "ddp", "fsdp", "localsteps", "models", "optim", "restart", "tagc", "testing", "tp"]

_SUBMODULES = ("ddp", "fsdp", "localsteps", "models", "optim", "restart", "tagc", "testing", "tp")


def __getattr__(name: str):  # the submodules import torch.distributed: load them on first use
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'gradcomp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
