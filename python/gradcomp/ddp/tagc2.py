"""TAGC-2 as a DDP communication hook: :class:`TagcHookState` (one TAGC state per compressed
parameter) and :func:`tagc_hook`."""

# No `from __future__ import annotations`: DDP's register_comm_hook checks the hooks' annotations
# against dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, not strings.
from typing import Callable, Optional

import torch
import torch.distributed as dist

from ..tagc import TagcStates
from .hook_state import HookState, expect_state, strip


class TagcHookState(TagcStates):
    """State of :func:`tagc_hook`: TAGC-2 with one TAGC state per compressed parameter.

    States are keyed by the parameter's name, so DDP's bucket rebuild changes nothing; the
    phases are batched per bucket. Parameters that are not compressed travel cast to the cell
    type (bf16 by default), as TAGC-2 does. The states live where the parameters do (CPU or
    a CUDA device). The bitmap packing follows the process group's backend unless ``bitmap``
    is given: ``"or"`` (gloo's BOR), ``"sum_safe"`` on NCCL, which has no bitwise OR.

    Args:
        model (torch.nn.Module): the model whose gradients the hook reduces.
        preset (str): ``"default"`` (adaptive sketch), ``"tagc2"`` (ratio 10) or ``"v1"``, as
            for :func:`gradcomp.Tagc`.
        process_group (ProcessGroup, optional): the group to reduce over (default: the world).
        min_compress_numel (int): the default selection's smallest compressed parameter
            (default 1024).
        select (Callable[[str, torch.nn.Parameter], bool], optional): chooses the compressed
            parameters by name and parameter (default: matrices of at least
            ``min_compress_numel`` elements: embeddings, attention and MLP weights, LM head).
        **config: :func:`gradcomp.Tagc`'s options (``density``, ``bitmap``, ``cells``, ...).

    Raises:
        gradcomp.Error: an unknown preset or option, or an invalid value.

    Checkpoints: :meth:`state_dict` gathers every rank's TAGC checkpoint bytes;
    :meth:`load_state_dict` restores each rank's own row at the saved world size, and runs the
    library's elastic restore at another (the residuals' sum is kept, each new rank holding its
    shard of it).

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model, "tagc2")
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """

    def __init__(self, model: torch.nn.Module, preset: str = "default", process_group: Optional[dist.ProcessGroup] = None,
                 min_compress_numel: int = 1024, select: Optional[Callable[[str, torch.nn.Parameter], bool]] = None,
                 **config) -> None:
        super().__init__(preset, process_group, **config)
        self.min_compress_numel = int(min_compress_numel)
        select = select or (lambda name, p: p.dim() >= 2 and p.numel() >= self.min_compress_numel)
        world, rank = self.world(), self.rank()
        self._names = {}
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            self._names[p.data_ptr()] = strip(name)
            if select(strip(name), p):
                self.states[strip(name)] = self.codec.make_state(p.numel(), world, rank, p.device if p.is_cuda else None)
        self._plans = {}  # bucket parameter names -> _TagcPlan

    name_of = HookState.name_of


class _TagcPlan:
    """A bucket's compressed parameters (their bitmap words' offsets) and the others."""

    def __init__(self, state: TagcHookState, names, grads):
        self.big, self.small, at = [], [], 0
        for i, name in enumerate(names):
            if name in state.states:
                words = state.codec.describe(0, state.states[name])["count"]
                self.big.append((i, name, at, words))
                at += words
            else:
                self.small.append(i)
        self.bits = torch.empty(at, dtype=torch.int32, device=grads[0].device)
        self.small_count = sum(grads[i].numel() for i in self.small)


def tagc_hook(state: TagcHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket with TAGC-2.

    Per bucket: the gradient divided by the world size; one all-reduce of every compressed
    parameter's bitmap words (int32, BOR; SUM with ``bitmap="sum_safe"``, the default on NCCL),
    waited for inside the hook; then one SUM all-reduce of every compressed parameter's sketch
    cells followed by the other parameters cast to the cell type. The future decodes each
    parameter's whole buffer on every rank (the same bits everywhere).

    On CUDA gradients the states live on the device and nothing waits for it: on NCCL the
    wait for the bitmap is a stream dependency, and the sketch buffer has its padded size
    (:meth:`gradcomp.PhaseCodec.make_state`). Errors the device finds in a reduced buffer are
    raised by ``state.codec.check()``, which also runs every ``state.codec.check_interval``
    steps of the states together and in :meth:`state_dict`.

    Args:
        state (TagcHookState): the TAGC codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`TagcHookState`, or the bucket is not float32.
        gradcomp.Error: a reduced buffer failed the library's checks.

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model)
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """
    expect_state(state, TagcHookState, "tagc_hook")
    state.calls += 1
    buf, pg, world, c = bucket.buffer(), state.process_group, state.world(), state.codec
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.tagc_hook: float32 buckets expected")
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state.name_of(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _TagcPlan(state, names, grads)
    buf.div_(world)  # the codec sums averages; residuals are in the average's units
    # Phase 0, waited for: the sketch's size follows from the union, and issuing the second
    # collective here (not from a callback) keeps the ranks' collectives in one order. With
    # CUDA states the wait is the stream's (NCCL), not the host's: describe(1) is the padded
    # sketch's, known before the union.
    for i, name, at, words in plan.big:
        c.encode(0, grads[i], state.states[name], plan.bits[at:at + words])
    if plan.big:
        dist.all_reduce(plan.bits, op=state.bitmap_op, group=pg)
    counts = []
    for i, name, at, words in plan.big:
        st = state.states[name]
        c.receive(0, st, plan.bits[at:at + words])
        counts.append(c.describe(1, st)["count"])
    # Phase 1: every compressed parameter's sketch, then the others cast to the cell type.
    sketched = sum(counts)
    cells = torch.empty(sketched + plan.small_count, dtype=state.cell_dtype, device=buf.device)
    at = 0
    for (i, name, _, _), n in zip(plan.big, counts):
        c.encode(1, grads[i], state.states[name], cells[at:at + n])
        at += n
    for i in plan.small:
        n = grads[i].numel()
        cells[at:at + n].copy_(grads[i])  # round to nearest even, as the library's casts
        at += n
    state.bytes_sent += plan.bits.numel() * 4 + cells.numel() * cells.element_size()

    def done(_):
        at = 0
        for (i, name, _, _), n in zip(plan.big, counts):
            st = state.states[name]
            c.receive(1, st, cells[at:at + n], grads[i])
            c.finish_step(st)
            state.count(st)
            at += n
        for i in plan.small:
            n = grads[i].numel()
            grads[i].copy_(cells[at:at + n])
            at += n
        return buf

    return dist.all_reduce(cells, group=pg, async_op=True).get_future().then(done)
