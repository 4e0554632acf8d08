"""gradcomp codecs in torchft's fault-tolerant all-reduce (DiLoCo, Streaming DiLoCo, LocalSGD).

torchft's ``Manager.allreduce`` is where DiLoCo's pseudo-gradients go: it waits for the quorum,
zeroes the tensor of a replica that does not participate, runs ``pg.allreduce`` with SUM on the
manager's process group and divides by the number of participants; an exception in the
collective is reported to the manager, which then skips the step (``should_commit`` is False).
:class:`CompressedProcessGroup` wraps that process group and runs the SUM through a gradcomp
codec, so the manager's fault handling stays torchft's own::

    >>> from torchft import Manager, ProcessGroupGloo
    >>> from torchft.local_sgd import DiLoCo
    >>> from gradcomp.integrations.torchft import CompressedProcessGroup
    >>> pg = CompressedProcessGroup(ProcessGroupGloo(), "int8")
    >>> manager = Manager(pg=pg, min_replica_size=1, ...)
    >>> with DiLoCo(manager, [model], inner_opt, outer_opt, sync_every=20):
    ...     train()
    >>> pg.bytes_sent, pg.raw_bytes   # what went through the codec, and its fp32 size

Each compressed tensor is compressed on every replica into a fixed-size slot
(``max_payload_bytes``), the slots are all-gathered on the wrapped process group, and every
replica decodes every slot in rank order: the replicas get the same sum bit for bit. The call
waits for the all-gather (the manager's future is complete when it returns).

Limits: no error feedback. torchft hands the process group fresh tensors (the pseudo-gradient
is recomputed at every sync) with nothing that names the parameter, and a recovering replica
joins with none of the others' history, so a residual could not be kept per parameter; a codec
is therefore run stateless (``error_feedback=True`` raises ``ValueError``). Quantizers (int8,
int4, fp8, bf16) suit this; top-k without feedback loses what it drops. The gather path sends
(W - 1) slots per replica, which pays over a ring all-reduce of fp32 at small replica counts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import List

import torch
from torch.distributed import ReduceOp
from torch.distributed.distributed_c10d import AllgatherOptions, AllreduceOptions

from torchft.process_group import ProcessGroup, ProcessGroupWrapper
from torchft.work import _DummyWork

from .._core import Compressor, codecs
from .._exchange import ByteCounts, Exchange, GatherFlow

__all__ = ["CompressedProcessGroup"]

_COMPRESSIBLE = (torch.float32, torch.bfloat16)


class _Transport:
    """The exchange layer's collectives on the process group a wrapper wraps (read at each call,
    as its size: the manager reconfigures it)."""

    def __init__(self, wrapper: ProcessGroupWrapper):
        self.wrapper = wrapper

    @property
    def world(self) -> int:
        return self.wrapper.size()

    def all_gather(self, recv, send):
        return self.wrapper.parent.allgather([list(recv.view(self.world, -1).unbind(0))], [send], AllgatherOptions())

    def all_reduce(self, t, op="sum"):
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX if op == "max" else ReduceOp.SUM
        return self.wrapper.parent.allreduce([t], opts)


class CompressedProcessGroup(ByteCounts, ProcessGroupWrapper):
    """A torchft process group whose floating-point SUM / AVG all-reduces go through a gradcomp
    codec (the gather path); every other collective is the wrapped group's.

    Args:
        pg (torchft.process_group.ProcessGroup): the reconfigurable group to wrap
            (``ProcessGroupGloo()``, ...); the manager configures it through this wrapper.
        codec (str): a codec of :func:`gradcomp.codecs` (``"int8"``, ``"int4"``,
            ``"fp8_e4m3"``, ``"bf16"``, ...).
        min_compress_numel (int): tensors with fewer elements are all-reduced as they are.
        timeout (timedelta): passed to ``ProcessGroupWrapper``.
        **options: the codec's options, as for :class:`gradcomp.Compressor` (not
            ``error_feedback``).

    Raises:
        ValueError: an unknown codec, ``error_feedback=True``, or ``pg`` not a torchft process group.
        gradcomp.Error: an invalid codec option.

    Attributes:
        calls (int): all-reduces that went through the codec.
        bytes_sent (int): bytes of the slots this replica handed to the all-gather.
        raw_bytes (int): fp32 bytes of the same tensors (what an uncompressed all-reduce sends).
        wire_bytes (int): bytes this replica put on the wire ((W - 1) slots per tensor).
    """

    def __init__(self, pg: ProcessGroup, codec: str, min_compress_numel: int = 1024,
                 timeout: timedelta = timedelta(seconds=60), **options) -> None:
        if codec not in codecs():
            raise ValueError(f"gradcomp.integrations.torchft: codec {codec!r} is not one of gradcomp.codecs(): "
                             f"{sorted(codecs())}")
        if options.get("error_feedback"):
            raise ValueError("gradcomp.integrations.torchft: error_feedback is not supported: torchft's all-reduce "
                             "passes fresh tensors with no parameter identity, so no residual can be kept per parameter")
        if not isinstance(pg, ProcessGroup):
            raise ValueError(f"gradcomp.integrations.torchft: pg must be a torchft ProcessGroup, not {type(pg).__name__}")
        super().__init__(timeout=timeout, pg=pg)
        self.codec_name = codec
        self.options = {**options, "error_feedback": False}
        self.codec = Compressor(codec, **self.options)
        self.min_compress_numel = min_compress_numel
        # A failed decode raises here; torchft's manager reports it and skips the step.
        self._ex = Exchange(_Transport(self), "gradcomp.integrations.torchft", agree=False)
        self.calls = self.raw_bytes = 0

    def __repr__(self) -> str:
        return (f"CompressedProcessGroup({self.codec_name!r}, calls={self.calls}, bytes_sent={self.bytes_sent}, "
                f"raw_bytes={self.raw_bytes})")

    def getBackendName(self) -> str:
        return f"gradcomp-{self.codec_name}+{super().getBackendName()}"

    def _compressible(self, t: torch.Tensor) -> bool:
        return (t.dtype in _COMPRESSIBLE and t.device.type == "cpu" and t.is_contiguous()
                and t.numel() >= self.min_compress_numel)

    def allreduce(self, tensors: List[torch.Tensor], opts: object) -> torch.distributed.Work:
        op = getattr(opts, "reduceOp", opts)
        summed, average = op == ReduceOp.SUM, op == ReduceOp.AVG  # ==, not `in`: a ReduceOp is not a RedOpType
        if not (summed or average) or not all(self._compressible(t) for t in tensors):
            return super().allreduce(tensors, opts)  # other reductions, small or integer tensors: as they are
        for t in tensors:
            self._allreduce_one(t, average)
        return _DummyWork(tensors)

    def _allreduce_one(self, t: torch.Tensor, average: bool) -> None:
        # Stateless: a fresh codec state each call. Every replica decodes the same bytes in rank
        # order: the same sum everywhere.
        world, flat = self.size(), t.view(-1)
        total = torch.empty(flat.numel(), dtype=torch.float32)
        self._ex.run(GatherFlow(self.codec, flat.numel(), world, dtype=flat.dtype), flat, total)
        if average:
            total /= world
        flat.copy_(total)
        self.calls += 1
        self.raw_bytes += flat.numel() * 4
