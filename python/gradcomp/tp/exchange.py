"""The exchanges of :mod:`gradcomp.tp`: what sums a ``[tokens, hidden]`` partial result across
the tensor-parallel group (:class:`AllReduce`, :class:`AccTFM`), every rank getting the same sum
bit for bit."""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from .._core import Compressor


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
