"""The exchange layer: how the package's replicas (local steps, the optimizers, torchft's process
group) sum a tensor over the ranks through a gradcomp codec.

A **flow** is a codec on a path with its state, seen as phases: ``phase_count``; ``describe(k)``,
a :class:`Phase` or a dict of the same (the collective, the buffers' element type, the bytes sent
and received); ``encode(k, x, send)``; ``receive(k, recv, out)`` (the last phase leaves the sum
in ``out``).
:func:`make_flow` adapts the library's codecs: the summable path (a ``SummableCast``: one SUM
all-reduce of the cast's buffer), the gather path (a ``Compressor``: every rank's frame in an
8-byte-aligned slot, all-gathered, decoded in rank order) and the sharded path (``Sharded`` in
all_reduce mode: all-to-all, then all-gather). Any other object with these four members (a
per-fragment C++ flow: bind its fragment, ``describe(k) = describe(f, k)``) runs the same way.

:class:`Exchange` runs flows over a transport (:class:`TorchTransport`: torch.distributed on a
process group; any object with ``world``, ``all_reduce``, ``all_gather``, ``all_to_all``, each
returning a work with ``wait()``). It owns the buffers (allocated once per size and key), counts
the bytes (``bytes_sent``: handed to the collectives; ``wire_bytes``: the ring model, an
all-reduce 2 (W - 1) / W of its buffer, an all-to-all (W - 1) / W, an all-gather W - 1 slots) and
makes every rank agree on a failed decode: after each receive one int32 MAX all-reduce tells every
rank whether any rank's decode failed, and every rank raises :class:`gradcomp.Error` (its own, or
code ``"peer_error"``) before anything is applied. :meth:`Exchange.start` returns a :class:`Job`
that advances one collective at a time (an exchange overlapped with compute);
:meth:`Exchange.run` waits for all. At world size 1 no collective runs.
"""

from __future__ import annotations

from functools import partial
from typing import List, NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist

from ._checkpoint import owed_share, owed_total
from ._core import Compressor, Error, Sharded, SummableCast

_TYPES = {"u8": torch.uint8, "u32": torch.int32, "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def align8(n: int) -> int:
    """n rounded up to a multiple of 8 (a gather slot's size)."""
    return (n + 7) & ~7


class Phase(NamedTuple):
    """One phase of a flow: ``collective`` (``"all_reduce"``, ``"all_gather"`` or ``"all_to_all"``),
    ``dtype`` of its buffers (a torch dtype or a name: ``"u8"``, ``"u32"``, ``"f32"``, ``"bf16"``,
    ``"f16"``), the bytes a rank sends and receives, and the all-reduce's ``op`` (``"sum"``,
    ``"max"`` or ``"bor"``)."""
    collective: str
    dtype: object
    send_bytes: int
    receive_bytes: int
    op: str = "sum"


def wire(collective: str, nbytes: int, world: int) -> int:
    """The bytes a rank puts on the wire for a collective of ``nbytes`` sent (ring model)."""
    if collective == "all_reduce":
        return 2 * (world - 1) * nbytes // world
    return (world - 1) * nbytes // world if collective == "all_to_all" else (world - 1) * nbytes


class TorchTransport:
    """torch.distributed over ``group`` (None: the world); a single process without it."""

    def __init__(self, group=None):
        self.group = group
        on = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size(group) if on else 1
        self.rank = dist.get_rank(group) if on else 0

    def all_reduce(self, t, op="sum"):
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "bor": dist.ReduceOp.BOR}
        return dist.all_reduce(t, op=ops[op], group=self.group, async_op=True)

    def all_gather(self, recv, send):
        return dist.all_gather_into_tensor(recv, send, group=self.group, async_op=True)

    def all_to_all(self, recv, send):
        return dist.all_to_all_single(recv, send, group=self.group, async_op=True)

    def broadcast(self, tensors) -> None:
        """Rank 0's tensors to every rank (the replicas start equal)."""
        if self.world == 1:
            return
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t.data, src, group=self.group)


class Job:
    """An exchange in flight: each :meth:`advance` waits for the collective in flight and runs
    the flow to its next collective (or to its end)."""

    def __init__(self, steps):
        self._steps, self._work, self.done = steps, None, False

    def advance(self) -> bool:
        """One collective further; returns whether the exchange is complete."""
        if self._work is not None:
            self._work.wait()
            self._work = None
        try:
            self._work = next(self._steps)
        except StopIteration:
            self.done = True
        return self.done

    def complete(self) -> None:
        while not self.done:
            self.advance()


class Exchange:
    """Runs flows over ``transport``; ``who`` names the caller in errors; ``agree=False`` leaves a
    failed decode to the caller (torchft's manager) instead of the every-rank agreement."""

    def __init__(self, transport, who: str, agree: bool = True):
        self.transport, self.who, self.agree = transport, who, agree
        self.bytes_sent = 0
        self.wire_bytes = 0
        self._buffers = {}

    @property
    def world(self) -> int:
        return self.transport.world

    def buffers(self, flow, key=None) -> list:
        """Each phase's (Phase, send, receive) buffers, allocated once per sizes and ``key`` (flows
        in flight at once need keys of their own)."""
        phases = [_phase(flow.describe(k)) for k in range(flow.phase_count)]
        at = (key, tuple(phases))
        if at not in self._buffers:
            bufs = []
            for p in phases:
                size = torch.empty(0, dtype=p.dtype).element_size()
                send = torch.zeros(p.send_bytes // size, dtype=p.dtype)
                recv = send if p.collective == "all_reduce" else torch.zeros(p.receive_bytes // size, dtype=p.dtype)
                bufs.append((p, send, recv))
            self._buffers[at] = bufs
        return self._buffers[at]

    def start(self, flow, x: Optional[torch.Tensor], out: torch.Tensor, key=None) -> Job:
        """The exchange of ``x`` through ``flow``, its sum over the ranks into ``out``: a
        :class:`Job` to advance (the first collective starts at its first advance)."""
        return Job(self._steps(flow, x, out, self.buffers(flow, key)))

    def run(self, flow, x: Optional[torch.Tensor], out: torch.Tensor, key=None) -> None:
        """:meth:`start`, waited for to its end."""
        self.start(flow, x, out, key).complete()

    def _steps(self, flow, x, out, bufs):
        for k, (p, send, recv) in enumerate(bufs):
            flow.encode(k, x, send)
            yield self._collective(p, send, recv)
            self._agreed(partial(flow.receive, k, recv, out))

    def _collective(self, p: Phase, send, recv, count_bytes: bool = True):
        world, nbytes = self.world, send.numel() * send.element_size()
        self.bytes_sent += nbytes if count_bytes else 0
        self.wire_bytes += wire(p.collective, nbytes, world)
        if world == 1:
            if recv is not send:
                recv.copy_(send)
            return None
        if p.collective == "all_reduce":
            return self.transport.all_reduce(send, p.op)
        return getattr(self.transport, p.collective)(recv, send)

    def all_reduce(self, t: torch.Tensor) -> None:
        """A plain SUM all-reduce of ``t`` in place, counted, waited for."""
        work = self._collective(Phase("all_reduce", t.dtype, 0, 0), t, t)
        if work is not None:
            work.wait()

    def _agreed(self, decode) -> None:
        """Runs ``decode()``; every rank raises when any rank's failed (one int32 MAX all-reduce)."""
        if not self.agree:
            decode()
            return
        error = None
        try:
            decode()
        except Error as e:
            error = e
        if self.world > 1:
            flag = torch.tensor([0 if error is None else 1], dtype=torch.int32)
            self._collective(Phase("all_reduce", torch.int32, 4, 4, "max"), flag, flag, count_bytes=False).wait()
            if error is None and int(flag) != 0:
                error = Error(f"{self.who}: another rank's payload failed its checks")
                error.code = "peer_error"
        if error is not None:
            raise error


def _phase(d) -> Phase:
    """A Phase, or a describe dict with ``collective``, ``send_bytes``, ``receive_bytes`` and
    optionally ``type`` (default ``"u8"``) and ``op`` (the library's dicts carry more keys)."""
    if isinstance(d, dict):
        d = Phase(d["collective"], d.get("type", "u8"), d["send_bytes"], d["receive_bytes"], d.get("op", "sum"))
    return d._replace(dtype=_TYPES.get(d.dtype, d.dtype))


def _counted(name: str, doc: str) -> property:
    return property(lambda self: getattr(self._ex, name), lambda self, v: setattr(self._ex, name, v), doc=doc)


class ByteCounts:
    """``bytes_sent`` and ``wire_bytes`` of the object's exchange (``self._ex``)."""

    bytes_sent = _counted("bytes_sent", "Bytes this rank handed to the collectives.")
    wire_bytes = _counted("wire_bytes", "Bytes this rank put on the wire (ring model).")


class Replica(ByteCounts):
    """:class:`ByteCounts`, and the replicas' number and this one's rank (the transport's)."""

    def world(self) -> int:
        """The number of replicas (the process group's size)."""
        return self._ex.transport.world

    def rank(self) -> int:
        """This replica's rank in the process group."""
        return self._ex.transport.rank


# --- the library's codecs as flows


class _Flow:
    """What the adapters share: the state's checkpoint and its restore from every saved rank's
    bytes, at the saved world size (this rank's row) or at another (:meth:`restore_elastic`)."""

    phase_count = 1

    def __init__(self, codec, state, world: int, rank: int):
        self.codec, self.state, self.world, self.rank = codec, state, world, rank

    def restore_rows(self, rows: List[bytes]) -> None:
        if len(rows) == self.world:
            self.restore(rows[self.rank])
        else:
            self.restore_elastic(rows)

    def restore_elastic(self, rows: List[bytes]) -> None:
        """The residuals owe the sum over the ranks: :func:`gradcomp._checkpoint.owed_share`."""
        mine = self.residual()
        total = owed_total([self.saved_residual(b) for b in rows])
        if total is not None and mine.shape[0]:
            mine[:] = owed_share(total, self.world)


class SummableFlow(_Flow):
    """A summable cast: one all-reduce (the cast's reduction) of its buffer."""

    def __init__(self, codec, n: int, world: int, rank: int):
        super().__init__(codec, codec.make_state(n, world, rank), world, rank)
        self.phase_count = codec.phase_count

    def describe(self, k: int) -> Phase:
        d = self.codec.describe(k, self.state)
        return Phase("all_reduce", d["type"], d["bytes"], d["bytes"], d["op"])

    def encode(self, k, x, send) -> None:
        self.codec.encode(k, x, self.state, send)

    def receive(self, k, recv, out) -> None:
        self.codec.receive(k, self.state, recv, out)
        if k == self.phase_count - 1:
            self.codec.finish_step(self.state)

    def residual(self):
        return self.state.residual

    def checkpoint(self) -> bytes:
        return np.asarray(self.state.residual).tobytes()

    def restore(self, blob: bytes) -> None:
        if len(blob):
            self.state.residual[:] = np.frombuffer(blob, dtype=np.float32)

    def saved_residual(self, blob: bytes):
        return np.frombuffer(blob, dtype=np.float32) if len(blob) else None


class GatherFlow(_Flow):
    """A Compressor on the gather path. ``dtype``: the tensors' (float32 or bfloat16); ``sent``:
    a tensor that takes this rank's own frame decoded (what it sent)."""

    def __init__(self, codec, n: int, world: int, rank: int = 0, dtype=None, sent: Optional[torch.Tensor] = None):
        super().__init__(codec, codec.make_state(n), world, rank)
        self.slot, self.sent = align8(codec.max_payload_bytes(n, dtype)), sent

    def describe(self, k: int) -> Phase:
        return Phase("all_gather", torch.uint8, self.slot, self.world * self.slot)

    def encode(self, k, x, send) -> None:
        send.zero_()
        used = self.codec.compress(x, self.state, send)
        if self.sent is not None:
            self.codec.decompress(send[:used], self.sent)

    def receive(self, k, recv, out) -> None:
        out.zero_()
        self.codec.accumulate_gathered(recv, out, self.slot)

    def residual(self):
        return self.state.residual

    def checkpoint(self) -> bytes:
        return self.state.checkpoint()

    def restore(self, blob: bytes) -> None:
        self.state.restore(blob)

    def saved_residual(self, blob: bytes):
        scratch = self.codec.make_state(self.state.size)
        scratch.restore(blob)
        return np.array(scratch.residual) if scratch.residual.shape[0] else None


class ShardedFlow(_Flow):
    """A Sharded codec in all_reduce mode: all-to-all of the shards' payloads, all-gather of the
    owners' re-encoded shards."""

    phase_count = 2

    def __init__(self, codec, n: int, world: int, rank: int):
        super().__init__(codec, codec.make_state(n, world, rank), world, rank)

    def describe(self, k: int) -> Phase:
        d = self.codec.describe(k, self.state)
        return Phase(d["collective"], torch.uint8, d["send_bytes"], d["receive_bytes"])

    def encode(self, k, x, send) -> None:
        self.codec.encode(k, x if k == 0 else None, self.state, send)

    def receive(self, k, recv, out) -> None:
        if k == 0:
            self.codec.receive(0, self.state, recv)
        else:
            self.codec.receive(1, self.state, recv, out)

    def checkpoint(self) -> bytes:
        return self.codec.checkpoint(self.state)

    def restore(self, blob: bytes) -> None:
        self.codec.load_checkpoint(self.state, blob)

    def restore_elastic(self, rows: List[bytes]) -> None:
        """The library's elastic restore: the sum owed is kept, re-sliced by the new shards."""
        self.codec.restore_elastic(self.state, rows)


CASTS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_codec(name: str, path: str, options: dict):
    """The library's codec for ``path``: a SummableCast (only ``error_feedback`` of the options),
    a Compressor (gather) or a Sharded in all_reduce mode."""
    if path == "summable":
        return SummableCast(name, feedback=bool(options.get("error_feedback", True)))
    return Compressor(name, **options) if path == "gather" else Sharded(name, "all_reduce", **options)


def make_flow(codec, path: str, n: int, world: int, rank: int, **kw):
    """A flow of ``n`` elements for a codec of :func:`make_codec` on ``path``."""
    kind = {"summable": SummableFlow, "gather": GatherFlow, "sharded": ShardedFlow}[path]
    return kind(codec, n, world, rank, **kw)


class FlatParams:
    """A list of parameters seen as one flat float32 vector, or the range ``[offset, offset +
    count)`` of it: :meth:`read`, :meth:`write`, :meth:`views`, :meth:`grads`. ``params`` keeps
    the parameters the range touches."""

    def __init__(self, params, offset: int = 0, count: Optional[int] = None):
        params = list(params)
        self.offset = offset
        self.n = sum(p.numel() for p in params) - offset if count is None else count
        self.slices = []  # (parameter, first element in it, elements, position in the range)
        at = 0
        for p in params:
            lo, hi = max(offset, at), min(offset + self.n, at + p.numel())
            if lo < hi:
                self.slices.append((p, lo - at, hi - lo, lo - offset))
            at += p.numel()
        self.params = [s[0] for s in self.slices]

    def read(self) -> torch.Tensor:
        out = torch.empty(self.n)
        for p, first, k, at in self.slices:
            out[at:at + k].copy_(p.detach().reshape(-1)[first:first + k])
        return out

    def write(self, values: torch.Tensor) -> None:
        with torch.no_grad():
            for p, first, k, at in self.slices:
                p.view(-1)[first:first + k].copy_(values[at:at + k])

    def views(self, flat: torch.Tensor) -> List[torch.Tensor]:
        """``flat``'s pieces, each shaped as its parameter where the range holds it whole."""
        return [flat[at:at + k].view_as(p) if k == p.numel() else flat[at:at + k] for p, _, k, at in self.slices]

    def grads(self) -> torch.Tensor:
        """The gradients as one vector; a missing one counts as zero (every rank sends as many
        elements)."""
        out = torch.zeros(self.n)
        for p, first, k, at in self.slices:
            if p.grad is not None:
                out[at:at + k].copy_(p.grad.detach().reshape(-1)[first:first + k])
        return out
