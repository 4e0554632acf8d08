"""Local steps: DiLoCo, Streaming DiLoCo and SparseLoCo with gradcomp's codecs.

Every rank trains a full replica of the model with its own inner optimizer (no DDP). Every
``period`` inner steps (H) a fragment of the parameters is synchronised: each rank sends its
pseudo-gradient, ``(anchor - parameters) / W``, through a gradcomp codec; the outer optimizer
applies the mean to the anchor (the parameters of the last sync) and the fragment becomes the
new anchor. Since the pseudo-gradient sums H steps of progress, it is sent H times less often
than a per-step gradient, and it tolerates coarse codecs.

    >>> sync = gradcomp.localsteps.LocalSteps(net, "int4", path="sharded", period=50, error_feedback=True)
    >>> for step in range(steps):
    ...     loss(net, batch(step)).backward()
    ...     opt.step(); opt.zero_grad()
    ...     sync.step()                   # after every inner step: syncs what is due
    >>> sync.finish()                     # the last syncs: every replica ends on the anchor

* **DiLoCo** (Douillard et al. 2023): ``fragments=1`` and an outer Nesterov step: the paper's
  ``outer_lr=0.7, outer_momentum=0.9`` for periods in the hundreds; the defaults,
  ``outer_lr=1, outer_momentum=0.5``, measured best at H = 5 to 20 (docs/localsteps.md);
  ``outer_lr=1, outer_momentum=0`` is plain averaging.
* **Streaming DiLoCo** (2025): ``fragments=F`` syncs the fragments on a staggered schedule
  (fragment f every H steps, F fragments spread over the period: the peak exchange is one
  fragment); ``overlap=tau`` applies a fragment's mean tau inner steps after its send, the
  exchange running meanwhile; ``mix=alpha`` keeps alpha of the local fragment at the apply.
* **SparseLoCo** (2025): a sparse codec with error feedback whose residual decays
  (``"topk", density=0.02, error_feedback=True, feedback_scale=0.95``: e = 0.95 e + d; send
  top-k of e; e -= sent) and the outer step without momentum (``outer_lr=1,
  outer_momentum=0``): the decayed residual takes the outer momentum's place.

Paths (``path=``): ``"summable"``, the casts ``fp32``, ``bf16``, ``fp16`` all-reduced (SUM);
``"gather"``, any codec's frames all-gathered and every rank's decoded in rank order;
``"sharded"``, any codec by all-to-all and all-gather (:class:`gradcomp.Sharded`, with error
feedback on the owner too); ``"auto"`` (default): summable for casts, sharded otherwise. Every
rank decodes the same bytes in the same order, so the replicas' fragments are bit-identical
after every sync (``mix=0``). The pseudo-gradient and the outer step are the C++ library's
(``gradcomp::localsteps``), for CPU float32 parameters.

Errors: a bad option raises ``ValueError`` naming it; a corrupted or foreign payload raises
:class:`gradcomp.Error` on every rank (a one-word all-reduce after each phase tells every rank)
and leaves the parameters untouched.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.distributed as dist

from . import _core
from ._core import Compressor, Sharded, SummableCast, codecs
from . import _agree
from ._checkpoint import check_identity, gather_blobs

__all__ = ["LocalSteps"]

_CASTS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_PATHS = ("auto", "gather", "sharded", "summable")
_FORMAT = 1


def _align8(n: int) -> int:
    return (n + 7) & ~7


class _Fragment:
    """One fragment: its slices of the parameters, anchor, outer momentum, codec state and buffers."""

    def __init__(self, offset: int, count: int):
        self.offset, self.count = offset, count
        self.slices = []  # (parameter, first element in it, elements, position in the fragment)
        self.anchor = torch.zeros(count)
        self.momentum: Optional[torch.Tensor] = None
        self.delta = torch.zeros(count)  # the pseudo-gradient being sent
        self.mean = torch.zeros(count)   # the received mean
        self.state = None
        self.job = None                  # the exchange in flight (a generator of collective works)
        self.work = None                 # its collective in flight
        self.pending = False             # the mean arrived, the apply is due
        self.syncs = 0

    def read(self) -> torch.Tensor:
        out = torch.empty(self.count)
        for p, first, n, at in self.slices:
            out[at:at + n].copy_(p.detach().view(-1)[first:first + n])
        return out

    def write(self, values: torch.Tensor) -> None:
        with torch.no_grad():
            for p, first, n, at in self.slices:
                p.view(-1)[first:first + n].copy_(values[at:at + n])


class LocalSteps:
    """Synchronises replicas every ``period`` inner steps through a gradcomp codec.

    Args:
        model (torch.nn.Module or iterable of tensors): the replica's parameters (float32, CPU),
            the same on every rank at the start (rank 0's are broadcast).
        codec (str): a codec of :func:`gradcomp.codecs` (``"fp32"``, ``"bf16"``, ``"int8"``,
            ``"int4"``, ``"topk"``, ...).
        path (str): ``"auto"``, ``"summable"``, ``"gather"`` or ``"sharded"`` (module docstring).
        period (int): H, inner steps between two syncs of a fragment.
        fragments (int): parameter fragments on a staggered schedule (1 to period).
        overlap (int): inner steps between a fragment's send and its apply (0 to period - 1).
        mix (float): weight of the local fragment at the apply, in [0, 1).
        outer_lr (float): the outer learning rate (default 1).
        outer_momentum (float): the outer momentum, in [0, 1) (0: none; default 0.5).
        nesterov (bool): Nesterov's form of the outer momentum.
        process_group (ProcessGroup, optional): the replicas (default: the world).
        **options: the codec's options (``error_feedback``, ``feedback_scale``, ``density``,
            ``group``, ...), as for :class:`gradcomp.Compressor`; ``error_feedback`` alone for
            a summable cast.

    Raises:
        ValueError: an option out of its domain (named in the message), an unknown codec or path,
            parameters that are not float32 CPU tensors.
    """

    def __init__(self, model, codec: str = "int4", path: str = "auto", period: int = 50, fragments: int = 1,
                 overlap: int = 0, mix: float = 0.0, outer_lr: float = 1.0, outer_momentum: float = 0.5,
                 nesterov: bool = True, process_group: Optional[dist.ProcessGroup] = None, **options) -> None:
        params = [p for p in (model.parameters() if isinstance(model, torch.nn.Module) else model) if p.requires_grad]
        _check_options(codec, path, period, fragments, overlap, mix, outer_lr, outer_momentum, params, options)
        _core._localsteps_check(period, fragments, overlap, mix, outer_lr, outer_momentum, nesterov)
        self.codec, self.period, self.fragments, self.overlap, self.mix = codec, period, fragments, overlap, mix
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov
        self.path = ("summable" if codec in _CASTS else "sharded") if path == "auto" else path
        self.options = dict(options)
        self.process_group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self._world = dist.get_world_size(process_group) if distributed else 1
        self._rank = dist.get_rank(process_group) if distributed else 0
        self.params = params
        if distributed:
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            with torch.no_grad():
                for p in params:
                    dist.broadcast(p.data, src, group=process_group)
        self._make_codec()
        self.n = sum(p.numel() for p in params)
        self._frags = [self._fragment(f) for f in range(fragments)]
        self.steps = 0        # inner steps taken
        self.bytes_sent = 0   # bytes this rank handed to the collectives
        self.wire_bytes = 0   # bytes this rank puts on the wire (ring model: all-reduce 2 (W - 1) / W)
        self.syncs = 0        # fragment syncs applied

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in sorted(self.options.items()))
        return (f"gradcomp.localsteps.LocalSteps({self.codec!r}, path={self.path!r}, period={self.period}, "
                f"fragments={self.fragments}, overlap={self.overlap}, mix={self.mix}, outer_lr={self.outer_lr}, "
                f"outer_momentum={self.outer_momentum}, nesterov={self.nesterov}{opts})")

    # --- set-up

    def _make_codec(self) -> None:
        if self.path == "summable":
            self._codec = SummableCast(self.codec, feedback=bool(self.options.get("error_feedback", True)))
        elif self.path == "gather":
            self._codec = Compressor(self.codec, **self.options)
        else:
            self._codec = Sharded(self.codec, "all_reduce", **self.options)

    def _fragment(self, f: int) -> _Fragment:
        offset, count = _core._localsteps_fragment(sum(p.numel() for p in self.params), self.fragments, f)
        fr = _Fragment(offset, count)
        at = 0
        for p in self.params:  # the fragment's slices of the flat parameter vector
            lo, hi = max(offset, at), min(offset + count, at + p.numel())
            if lo < hi:
                fr.slices.append((p, lo - at, hi - lo, lo - offset))
            at += p.numel()
        fr.anchor = fr.read()
        if self.outer_momentum > 0:
            fr.momentum = torch.zeros(count)
        w, r, c = self._world, self._rank, self._codec
        if self.path == "summable":
            fr.state = c.make_state(count, w, r)
            d = c.describe(0, fr.state)
            fr.buf = torch.zeros(d["count"], dtype=_CASTS[self.codec])
        elif self.path == "gather":
            fr.state = c.make_state(count)
            fr.slot_bytes = _align8(c.max_payload_bytes(count))
            fr.send = torch.zeros(fr.slot_bytes, dtype=torch.uint8)
            fr.recv = torch.zeros(w * fr.slot_bytes, dtype=torch.uint8)
        else:
            fr.state = c.make_state(count, w, r)
            d0, d1 = c.describe(0, fr.state), c.describe(1, fr.state)
            fr.send0, fr.recv0 = torch.zeros(d0["send_bytes"], dtype=torch.uint8), torch.zeros(d0["receive_bytes"], dtype=torch.uint8)
            fr.send1, fr.recv1 = torch.zeros(d1["send_bytes"], dtype=torch.uint8), torch.zeros(d1["receive_bytes"], dtype=torch.uint8)
        return fr

    def world(self) -> int:
        """The number of replicas (the process group's size)."""
        return self._world

    def rank(self) -> int:
        """This replica's rank in the process group."""
        return self._rank

    # --- the schedule

    def step(self) -> None:
        """Call after every inner optimizer step: advances each exchange in flight by one phase,
        starts the syncs that are due and applies the means that are due (collectives: every rank
        calls it at the same steps)."""
        self.steps += 1
        due = [_core._localsteps_due(self.period, self.fragments, self.overlap, f, self.steps) for f in range(self.fragments)]
        for f, fr in enumerate(self._frags):
            if fr.job is not None and not due[f][1]:
                self._advance(fr)
        for f, fr in enumerate(self._frags):
            if due[f][0]:
                fr.job = self._exchange(fr)
                self._advance(fr)
            if due[f][1]:
                self._complete(fr)
                self._apply(fr, self.mix)

    def finish(self) -> None:
        """The end of training: completes the exchanges in flight, syncs every fragment not synced at
        this step, and leaves every fragment at its anchor, so that the replicas end bit-identical."""
        for f, fr in enumerate(self._frags):
            sends, applies = _core._localsteps_due(self.period, self.fragments, self.overlap, f, self.steps)
            if fr.job is None and not fr.pending and sends and applies:  # synced at this very step
                fr.write(fr.anchor)
                continue
            if fr.job is None and not fr.pending:
                fr.job = self._exchange(fr)
            self._complete(fr)
            self._apply(fr, 0.0)

    # --- one exchange

    def _advance(self, fr: _Fragment) -> None:
        """Waits for the exchange's collective in flight and runs the exchange to its next one (or
        to its end)."""
        if fr.work is not None:
            fr.work.wait()
            fr.work = None
        try:
            fr.work = next(fr.job)
        except StopIteration:
            fr.job = None

    def _complete(self, fr: _Fragment) -> None:
        while fr.job is not None:
            self._advance(fr)

    def _exchange(self, fr: _Fragment):
        """A generator: each ``next`` waits for the previous collective, runs the codec's next step
        and starts the next collective; the last one leaves the mean in ``fr.mean``."""
        w, pg, c, st = self._world, self.process_group, self._codec, fr.state
        _core._localsteps_pseudo_gradient(fr.anchor, fr.read(), w, fr.delta)
        if self.path == "summable":
            c.encode(0, fr.delta, st, fr.buf)
            yield self._collective(dist.all_reduce, fr.buf, 2 * (w - 1) * fr.buf.numel() * fr.buf.element_size() // w)
            self._checked(lambda: c.receive(0, st, fr.buf, fr.mean))
            c.finish_step(st)
        elif self.path == "gather":
            fr.send.zero_()
            c.compress(fr.delta, st, fr.send)
            yield self._collective(dist.all_gather_into_tensor, (fr.recv, fr.send), (w - 1) * fr.slot_bytes)

            def decode():
                fr.mean.zero_()
                c.accumulate_gathered(fr.recv, fr.mean, fr.slot_bytes)

            self._checked(decode)
        else:
            c.encode(0, fr.delta, st, fr.send0)
            yield self._collective(dist.all_to_all_single, (fr.recv0, fr.send0), (w - 1) * fr.send0.numel() // w)
            self._checked(lambda: c.receive(0, st, fr.recv0))
            c.encode(1, None, st, fr.send1)
            yield self._collective(dist.all_gather_into_tensor, (fr.recv1, fr.send1), (w - 1) * fr.send1.numel())
            self._checked(lambda: c.receive(1, st, fr.recv1, fr.mean))
        fr.pending = True

    def _collective(self, fn, tensors, wire: int):
        """Starts a collective (the exchange yields it; _advance waits for it before going on)."""
        args = tensors if isinstance(tensors, tuple) else (tensors,)
        self.bytes_sent += args[-1].numel() * args[-1].element_size()
        self.wire_bytes += wire
        return fn(*args, group=self.process_group, async_op=True) if self._world > 1 else None

    def _checked(self, decode) -> None:
        """Runs a decode; every rank raises gradcomp.Error when any rank's failed (_agree.checked)."""
        self.wire_bytes += _agree.checked(decode, self._world, self.process_group, "gradcomp.localsteps")

    def _apply(self, fr: _Fragment, mix: float) -> None:
        local = fr.read()
        _core._localsteps_apply(fr.mean, fr.anchor, fr.momentum, local, self.outer_lr, self.outer_momentum, self.nesterov, mix)
        fr.write(local)
        fr.pending = False
        fr.syncs += 1
        self.syncs += 1

    # --- checkpoints

    def _codec_blob(self, fr: _Fragment) -> bytes:
        if self.path == "summable":
            return fr.state.residual.numpy().tobytes() if fr.state.residual is not None else b""
        if self.path == "gather":
            return fr.state.checkpoint()
        return self._codec.checkpoint(fr.state)

    def _load_codec_blob(self, fr: _Fragment, blob: bytes) -> None:
        if self.path == "summable":
            if fr.state.residual is not None:
                fr.state.residual.copy_(torch.frombuffer(bytearray(blob), dtype=torch.float32))
        elif self.path == "gather":
            fr.state.restore(blob)
        else:
            self._codec.load_checkpoint(fr.state, blob)

    def state_dict(self) -> dict:
        """The synchroniser's state for a checkpoint (a collective: every rank calls it).

        Exchanges in flight are completed first (their means wait for their apply step as usual),
        so the saved state holds no half-done collective.

        Returns:
            dict: ``format``, ``identity`` (codec, path and options), ``world_size``, ``steps``,
            ``bytes_sent``, ``wire_bytes``, ``syncs``, ``fragments`` (per fragment: ``anchor``,
            ``momentum``, ``mean`` and ``pending``, ``syncs``) and ``codec_states`` (fragment index
            -> every rank's codec state bytes, as uint8 tensors).
        """
        for fr in self._frags:
            self._complete(fr)
        frags = [{"anchor": fr.anchor.clone(), "momentum": None if fr.momentum is None else fr.momentum.clone(),
                  "mean": fr.mean.clone(), "pending": fr.pending, "syncs": fr.syncs} for fr in self._frags]
        blobs = {str(f): self._codec_blob(fr) for f, fr in enumerate(self._frags)}
        if self._world > 1:
            states = gather_blobs(blobs, self.process_group, ragged=True)
        else:
            states = {k: [torch.frombuffer(bytearray(v), dtype=torch.uint8)] for k, v in blobs.items()}
        return {"format": _FORMAT, "identity": self._identity(), "world_size": self._world, "steps": self.steps,
                "bytes_sent": self.bytes_sent, "wire_bytes": self.wire_bytes, "syncs": self.syncs, "fragments": frags,
                "codec_states": states}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`. At the saved world size the run continues bit for bit. At
        another the anchors and outer momenta (the same on every rank) are restored exactly, and what
        the codecs' error feedback owed is kept as a sum: the sharded path by the library's elastic
        restore, the gather and summable paths by giving new rank r the sum of the saved residuals of
        ranks r, r + W, r + 2W, ... (W the new world size).

        Raises:
            ValueError: another format, codec, path, options or fragment layout.
            gradcomp.Error: a corrupted codec state (``checksum_mismatch``, ...); nothing changes then.
        """
        sd = state_dict
        check_identity(sd, _FORMAT, self._identity(), "gradcomp.localsteps")
        frags = sd["fragments"]
        if len(frags) != len(self._frags) or any(s["anchor"].numel() != fr.count for s, fr in zip(frags, self._frags)):
            raise ValueError("gradcomp.localsteps: checkpoint of another fragment layout")
        fresh = [self._fragment(f) for f in range(self.fragments)]  # restored into new states: all or nothing
        saved_world = sd["world_size"]
        for f, (s, fr) in enumerate(zip(frags, fresh)):
            rows = [bytes(t.numpy().tobytes()) for t in sd["codec_states"][str(f)]]
            if saved_world == self._world:
                self._load_codec_blob(fr, rows[self._rank])
            else:
                self._restore_elastic(fr, rows)
            fr.anchor.copy_(s["anchor"])
            if fr.momentum is not None:
                fr.momentum.copy_(s["momentum"])
            fr.mean.copy_(s["mean"])
            fr.pending, fr.syncs = bool(s["pending"]), int(s["syncs"])
        self._frags = fresh
        self.steps, self.syncs = int(sd["steps"]), int(sd["syncs"])
        self.bytes_sent, self.wire_bytes = int(sd["bytes_sent"]), int(sd["wire_bytes"])

    def _restore_elastic(self, fr: _Fragment, rows: List[bytes]) -> None:
        if self.path == "sharded":
            self._codec.restore_elastic(fr.state, rows)
            return
        owed = torch.zeros(fr.count)
        for r in range(self._rank, len(rows), self._world):
            if self.path == "summable":
                if rows[r]:
                    owed += torch.frombuffer(bytearray(rows[r]), dtype=torch.float32)
            else:
                scratch = self._codec.make_state(fr.count)
                scratch.restore(rows[r])
                owed += torch.as_tensor(scratch.residual) if scratch.residual is not None else 0
        residual = fr.state.residual
        if residual is not None:
            torch.as_tensor(residual).copy_(owed)

    def _identity(self) -> str:
        opts = ",".join(f"{k}={v!r}" for k, v in sorted(self.options.items()))
        return f"{self.codec}:{self.path}:{self.period}:{self.fragments}:{self.overlap}:{opts}"


def _check_options(codec, path, period, fragments, overlap, mix, outer_lr, outer_momentum, params, options) -> None:
    if codec not in codecs():
        raise ValueError(f"gradcomp.localsteps: codec {codec!r} is not one of gradcomp.codecs(): {sorted(codecs())}")
    if path not in _PATHS:
        raise ValueError(f"gradcomp.localsteps: path must be one of {_PATHS}, not {path!r}")
    if path == "summable" and codec not in _CASTS:
        raise ValueError(f"gradcomp.localsteps: path 'summable' takes a cast ({sorted(_CASTS)}), not {codec!r}")
    if (path == "summable" or (path == "auto" and codec in _CASTS)) and set(options) - {"error_feedback"}:
        raise ValueError(f"gradcomp.localsteps: a summable cast takes only error_feedback, not {sorted(set(options) - {'error_feedback'})}")
    for name, value in (("period", period), ("fragments", fragments), ("overlap", overlap)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"gradcomp.localsteps: {name} must be an int, not {value!r}")
    if period < 1:
        raise ValueError(f"gradcomp.localsteps: period must be >= 1, not {period}")
    if not 1 <= fragments <= period:
        raise ValueError(f"gradcomp.localsteps: fragments must lie in [1, period = {period}], not {fragments}")
    if not 0 <= overlap < period:
        raise ValueError(f"gradcomp.localsteps: overlap must lie in [0, period = {period}), not {overlap}")
    if not 0.0 <= mix < 1.0:
        raise ValueError(f"gradcomp.localsteps: mix must lie in [0, 1), not {mix}")
    if not (outer_lr > 0 and math.isfinite(outer_lr)):
        raise ValueError(f"gradcomp.localsteps: outer_lr must be finite and > 0, not {outer_lr}")
    if not 0.0 <= outer_momentum < 1.0:
        raise ValueError(f"gradcomp.localsteps: outer_momentum must lie in [0, 1), not {outer_momentum}")
    if not params:
        raise ValueError("gradcomp.localsteps: the model has no trainable parameters")
    for p in params:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise ValueError(f"gradcomp.localsteps: parameters must be float32 CPU tensors (a {p.dtype} tensor on {p.device})")
