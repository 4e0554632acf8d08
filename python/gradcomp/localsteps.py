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
* **Any torch optimizer as the outer step**, as torchft's DiLoCo takes one:
  ``outer_optimizer=lambda params: torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)``
  is made over the anchors (one fp32 tensor per fragment); at a fragment's apply its anchor's
  ``.grad`` is the mean pseudo-gradient and the optimizer steps (SGD with lr 1 and no momentum
  is plain averaging, bit for bit as the built-in rule).

Paths (``path=``): ``"summable"``, the casts ``fp32``, ``bf16``, ``fp16`` all-reduced (SUM);
``"gather"``, any codec's frames all-gathered and every rank's decoded in rank order;
``"sharded"``, any codec by all-to-all and all-gather (:class:`gradcomp.Sharded`, with error
feedback on the owner too); ``"auto"`` (default): summable for casts, sharded otherwise. Every
rank decodes the same bytes in the same order, so the replicas' fragments are bit-identical
after every sync (``mix=0``). The pseudo-gradient, the built-in outer step and the mixing are the
C++ library's (``gradcomp::localsteps``), for CPU float32 parameters; the codec's phases and
collectives run through the package's one exchange layer.

Errors: a bad option raises ``ValueError`` naming it; a corrupted or foreign payload raises
:class:`gradcomp.Error` on every rank (a one-word all-reduce after each phase tells every rank)
and leaves the parameters untouched.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.distributed as dist

from . import _core
from ._checkpoint import check_identity, every_rank
from ._core import codecs
from ._exchange import CASTS, Exchange, FlatParams, Replica, TorchTransport, make_codec, make_flow

__all__ = ["LocalSteps"]

_PATHS = ("auto", "gather", "sharded", "summable")
_FORMAT = 1


class _Fragment(FlatParams):
    """One fragment: its range of the parameters, anchor, outer momentum, flow (the codec state)
    and the exchange in flight."""

    def __init__(self, params, offset: int, count: int, momentum: bool, flow):
        super().__init__(params, offset, count)
        self.anchor = self.read()
        self.momentum = torch.zeros(count) if momentum else None
        self.delta = torch.zeros(count)  # the pseudo-gradient being sent
        self.mean = torch.zeros(count)   # the received mean
        self.flow = flow
        self.job = None                  # the exchange in flight
        self.pending = False             # an exchange started: its mean's apply is due
        self.syncs = 0


class LocalSteps(Replica):
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
        outer_lr (float): the built-in outer step's learning rate (default 1).
        outer_momentum (float): its momentum, in [0, 1) (0: none; default 0.5).
        nesterov (bool): Nesterov's form of the momentum (default True).
        outer_optimizer (callable, optional): instead of the built-in outer step, a function that
            makes a ``torch.optim`` optimizer of the anchors (one float32 tensor per fragment),
            e.g. ``lambda params: torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)``;
            at each apply the fragment's anchor gets the mean pseudo-gradient as its ``.grad``
            and the optimizer steps (the made optimizer: :attr:`outer_optimizer`).
        process_group (ProcessGroup, optional): the replicas (default: the world).
        **options: the codec's options (``error_feedback``, ``feedback_scale``, ``density``,
            ``group``, ...), as for :class:`gradcomp.Compressor`; ``error_feedback`` alone for
            a summable cast.

    Raises:
        ValueError: an option out of its domain (named in the message), an unknown codec or path,
            parameters that are not float32 CPU tensors, ``outer_optimizer`` with any of
            ``outer_lr``, ``outer_momentum``, ``nesterov``, or one that makes no optimizer.
    """

    def __init__(self, model, codec: str = "int4", path: str = "auto", period: int = 50, fragments: int = 1,
                 overlap: int = 0, mix: float = 0.0, outer_lr: Optional[float] = None,
                 outer_momentum: Optional[float] = None, nesterov: Optional[bool] = None, outer_optimizer=None,
                 process_group: Optional[dist.ProcessGroup] = None, **options) -> None:
        params = [p for p in (model.parameters() if isinstance(model, torch.nn.Module) else model) if p.requires_grad]
        if outer_optimizer is not None and not (outer_lr is None and outer_momentum is None and nesterov is None):
            raise ValueError("gradcomp.localsteps: outer_optimizer replaces the built-in outer step: pass it or "
                             "outer_lr / outer_momentum / nesterov, not both")
        if outer_optimizer is not None and not callable(outer_optimizer):
            raise ValueError("gradcomp.localsteps: outer_optimizer must be a function of the anchors (e.g. lambda params: "
                             f"torch.optim.SGD(params, lr=0.7)), not a {type(outer_optimizer).__name__}")
        outer_lr = 1.0 if outer_lr is None else outer_lr
        outer_momentum = (0.5 if outer_optimizer is None else 0.0) if outer_momentum is None else outer_momentum
        nesterov = True if nesterov is None else nesterov
        _check_options(codec, path, period, fragments, overlap, mix, outer_lr, outer_momentum, params, options)
        _core._localsteps_check(period, fragments, overlap, mix, outer_lr, outer_momentum, nesterov)
        self.codec, self.period, self.fragments, self.overlap, self.mix = codec, period, fragments, overlap, mix
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov
        self.path = ("summable" if codec in CASTS else "sharded") if path == "auto" else path
        self.options = dict(options)
        self.process_group = process_group
        self._ex = Exchange(TorchTransport(process_group), "gradcomp.localsteps")
        self._world, self._rank = self._ex.transport.world, self._ex.transport.rank
        self.params = params
        self._ex.transport.broadcast(params)
        self._codec = make_codec(codec, self.path, self.options)
        self.n = sum(p.numel() for p in params)
        self._frags = [_Fragment(params, *_core._localsteps_fragment(self.n, fragments, f),
                                 outer_optimizer is None and outer_momentum > 0, self._flow(f))
                       for f in range(fragments)]
        self._make_outer = outer_optimizer
        self.outer_optimizer = None  # the torch optimizer made by outer_optimizer, if any
        if outer_optimizer is not None:
            self.outer_optimizer = outer_optimizer([fr.anchor for fr in self._frags])
            if not isinstance(self.outer_optimizer, torch.optim.Optimizer):
                raise ValueError("gradcomp.localsteps: outer_optimizer must be a function of the anchors that returns a "
                                 f"torch.optim.Optimizer, not one that returns {type(self.outer_optimizer).__name__}")
        self.steps = 0        # inner steps taken
        self.syncs = 0        # fragment syncs applied

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in sorted(self.options.items()))
        outer = (f"outer_optimizer={type(self.outer_optimizer).__name__}" if self.outer_optimizer is not None else
                 f"outer_lr={self.outer_lr}, outer_momentum={self.outer_momentum}, nesterov={self.nesterov}")
        return (f"gradcomp.localsteps.LocalSteps({self.codec!r}, path={self.path!r}, period={self.period}, "
                f"fragments={self.fragments}, overlap={self.overlap}, mix={self.mix}, {outer}{opts})")

    def _flow(self, f: int):
        count = _core._localsteps_fragment(self.n, self.fragments, f)[1]
        return make_flow(self._codec, self.path, count, self._world, self._rank)

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
                self._send(f, fr)
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
                self._send(f, fr)
            self._complete(fr)
            self._apply(fr, 0.0)

    # --- one exchange (the exchange layer runs the codec's phases and collectives)

    def _send(self, f: int, fr: _Fragment) -> None:
        """Starts the fragment's exchange: its pseudo-gradient in, the mean into ``fr.mean``."""
        _core._localsteps_pseudo_gradient(fr.anchor, fr.read(), self._world, fr.delta)
        fr.job, fr.pending = self._ex.start(fr.flow, fr.delta, fr.mean, key=f), True
        self._advance(fr)

    def _advance(self, fr: _Fragment) -> None:
        if fr.job.advance():
            fr.job = None

    def _complete(self, fr: _Fragment) -> None:
        while fr.job is not None:
            self._advance(fr)

    def _apply(self, fr: _Fragment, mix: float) -> None:
        local = fr.read()
        if self.outer_optimizer is None:
            _core._localsteps_apply(fr.mean, fr.anchor, fr.momentum, local, self.outer_lr, self.outer_momentum,
                                    self.nesterov, mix)
        else:
            fr.anchor.grad = fr.mean
            self.outer_optimizer.step()
            fr.anchor.grad = None
            fr.mean.zero_()  # consumed: the apply below by a zero mean leaves the anchor and only mixes
            _core._localsteps_apply(fr.mean, fr.anchor, None, local, 1.0, 0.0, False, mix)
        fr.write(local)
        fr.pending = False
        fr.syncs += 1
        self.syncs += 1

    # --- checkpoints

    def state_dict(self) -> dict:
        """The synchroniser's state for a checkpoint (a collective: every rank calls it).

        Exchanges in flight are completed first (their means wait for their apply step as usual),
        so the saved state holds no half-done collective.

        Returns:
            dict: ``format``, ``identity`` (codec, path and options), ``world_size``, ``steps``,
            ``bytes_sent``, ``wire_bytes``, ``syncs``, ``fragments`` (per fragment: ``anchor``,
            ``momentum``, ``mean`` and ``pending``, ``syncs``), ``outer_optimizer`` (the outer
            optimizer's ``state_dict()``, None for the built-in step) and ``codec_states``
            (fragment index -> every rank's codec state bytes, as uint8 tensors).
        """
        for fr in self._frags:
            self._complete(fr)
        frags = [{"anchor": fr.anchor.clone(), "momentum": None if fr.momentum is None else fr.momentum.clone(),
                  "mean": fr.mean.clone(), "pending": fr.pending, "syncs": fr.syncs} for fr in self._frags]
        states = every_rank({str(f): fr.flow.checkpoint() for f, fr in enumerate(self._frags)}, self._world,
                            self.process_group)
        outer = None if self.outer_optimizer is None else self.outer_optimizer.state_dict()
        return {"format": _FORMAT, "identity": self._identity(), "world_size": self._world, "steps": self.steps,
                "bytes_sent": self.bytes_sent, "wire_bytes": self.wire_bytes, "syncs": self.syncs, "fragments": frags,
                "outer_optimizer": outer, "codec_states": states}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`. At the saved world size the run continues bit for bit. At
        another the anchors, the outer momenta or optimizer (the same on every rank) are restored
        exactly, and what the codecs' error feedback owed is kept: the sharded path by the
        library's elastic restore, the gather and summable paths by giving every new rank the same
        share of the saved residuals' sum (gradcomp._checkpoint's rule).

        Raises:
            ValueError: another format, codec, path, options, outer step or fragment layout.
            gradcomp.Error: a corrupted codec state (``checksum_mismatch``, ...); nothing changes then.
        """
        sd = state_dict
        check_identity(sd, _FORMAT, self._identity(), "gradcomp.localsteps")
        saved = sd["fragments"]
        if len(saved) != len(self._frags) or any(s["anchor"].numel() != fr.n for s, fr in zip(saved, self._frags)):
            raise ValueError("gradcomp.localsteps: checkpoint of another fragment layout")
        if (sd.get("outer_optimizer") is None) != (self.outer_optimizer is None):
            raise ValueError("gradcomp.localsteps: checkpoint of another outer step (built-in or outer_optimizer)")
        flows = [self._flow(f) for f in range(self.fragments)]  # restored into new states: all or nothing
        for f, flow in enumerate(flows):
            flow.restore_rows([bytes(t.numpy().tobytes()) for t in sd["codec_states"][str(f)]])
        if self.outer_optimizer is not None:
            self.outer_optimizer.load_state_dict(sd["outer_optimizer"])
        for s, fr, flow in zip(saved, self._frags, flows):
            fr.flow, fr.job = flow, None
            fr.anchor.copy_(s["anchor"])
            if fr.momentum is not None:
                fr.momentum.copy_(s["momentum"])
            fr.mean.copy_(s["mean"])
            fr.pending, fr.syncs = bool(s["pending"]), int(s["syncs"])
        self.steps, self.syncs = int(sd["steps"]), int(sd["syncs"])
        self.bytes_sent, self.wire_bytes = int(sd["bytes_sent"]), int(sd["wire_bytes"])

    def _identity(self) -> str:
        opts = ",".join(f"{k}={v!r}" for k, v in sorted(self.options.items()))
        return f"{self.codec}:{self.path}:{self.period}:{self.fragments}:{self.overlap}:{opts}"


def _check_options(codec, path, period, fragments, overlap, mix, outer_lr, outer_momentum, params, options) -> None:
    if codec not in codecs():
        raise ValueError(f"gradcomp.localsteps: codec {codec!r} is not one of gradcomp.codecs(): {sorted(codecs())}")
    if path not in _PATHS:
        raise ValueError(f"gradcomp.localsteps: path must be one of {_PATHS}, not {path!r}")
    if path == "summable" and codec not in CASTS:
        raise ValueError(f"gradcomp.localsteps: path 'summable' takes a cast ({sorted(CASTS)}), not {codec!r}")
    if (path == "summable" or (path == "auto" and codec in CASTS)) and set(options) - {"error_feedback"}:
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
