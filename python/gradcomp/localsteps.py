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
after every sync (``mix=0``). The schedule, the checks, the pseudo-gradient, the built-in outer
step, the mixing and the checkpoints are the C++ library's flow (``gradcomp::localsteps``, bound
as ``_core._LocalStepsFlow``); the phases' collectives run through the package's one exchange
layer. Parameters may be float32, bfloat16 or float16 CPU tensors: the anchors, outer momenta
and means are float32, and a 16-bit parameter is written back rounded to nearest even.

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
from ._exchange import CASTS, Exchange, FlatParams, Replica, TorchTransport

__all__ = ["LocalSteps"]

_PATHS = ("auto", "gather", "sharded", "summable")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FORMAT = 2


class _Fragment(FlatParams):
    """One fragment: its range of the parameters, the C++ state's views of its anchor and mean,
    and the exchange in flight. As a flow of the exchange layer it is fragment f of the C++ flow."""

    def __init__(self, params, f: int, fragments: int, flow, state):
        super().__init__(params, *flow.fragment_of(sum(p.numel() for p in params), fragments, f))
        self.f, self._flow, self._state = f, flow, state
        self.phase_count = flow.phase_count
        self.anchor = torch.from_numpy(state.anchor(f))  # views of the C++ state (stable for its life)
        self.mean = torch.from_numpy(state.mean(f))
        self.job = None  # the exchange in flight

    def describe(self, k: int) -> dict:
        return self._flow.describe(self.f, k, self._state)

    def encode(self, k: int, local, send) -> None:
        self._flow.encode(self.f, k, local if k == 0 else None, self._state, send)

    def receive(self, k: int, recv, out) -> None:
        self._flow.receive(self.f, k, self._state, recv)


class LocalSteps(Replica):
    """Synchronises replicas every ``period`` inner steps through a gradcomp codec.

    Args:
        model (torch.nn.Module or iterable of tensors): the replica's parameters (float32,
            bfloat16 or float16, CPU), the same on every rank at the start (rank 0's are broadcast).
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
            parameters that are not float CPU tensors, ``outer_optimizer`` with any of
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
        self.codec, self.period, self.fragments, self.overlap, self.mix = codec, period, fragments, overlap, mix
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov
        self.path = ("summable" if codec in CASTS else "sharded") if path == "auto" else path
        self.options = dict(options)
        self.process_group = process_group
        self._ex = Exchange(TorchTransport(process_group), "gradcomp.localsteps")
        self._world, self._rank = self._ex.transport.world, self._ex.transport.rank
        self.params = params
        self._ex.transport.broadcast(params)
        # With an outer optimizer the flow's own outer step is the identity (lr 1 on a zeroed mean)
        # and only mixes.
        rule = (outer_lr, outer_momentum, nesterov) if outer_optimizer is None else (1.0, 0.0, False)
        try:
            self._flow = _core._LocalStepsFlow(codec, self.path, period, fragments, overlap, mix, *rule, **self.options)
        except _core.Error as e:  # an unknown option or a value out of its domain
            raise ValueError(f"gradcomp.localsteps: codec {codec!r} with {self.options}: {e}") from None
        self.n = sum(p.numel() for p in params)
        self._state = self._flow.make_state(self.n, self._world, self._rank)
        self._frags = [_Fragment(params, f, fragments, self._flow, self._state) for f in range(fragments)]
        for fr in self._frags:
            fr.anchor.copy_(fr.read())
        self.outer_optimizer = None  # the torch optimizer made by outer_optimizer, if any
        if outer_optimizer is not None:
            self.outer_optimizer = outer_optimizer([fr.anchor for fr in self._frags])
            if not isinstance(self.outer_optimizer, torch.optim.Optimizer):
                raise ValueError("gradcomp.localsteps: outer_optimizer must be a function of the anchors that returns a "
                                 f"torch.optim.Optimizer, not one that returns {type(self.outer_optimizer).__name__}")
        self.syncs = 0  # fragment syncs applied

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in sorted(self.options.items()))
        outer = (f"outer_optimizer={type(self.outer_optimizer).__name__}" if self.outer_optimizer is not None else
                 f"outer_lr={self.outer_lr}, outer_momentum={self.outer_momentum}, nesterov={self.nesterov}")
        return (f"gradcomp.localsteps.LocalSteps({self.codec!r}, path={self.path!r}, period={self.period}, "
                f"fragments={self.fragments}, overlap={self.overlap}, mix={self.mix}, {outer}{opts})")

    @property
    def steps(self) -> int:
        """Inner steps taken."""
        return self._state.step

    # --- the schedule (the C++ flow's)

    def step(self) -> None:
        """Call after every inner optimizer step: advances each exchange in flight by one phase,
        starts the syncs that are due and applies the means that are due (collectives: every rank
        calls it at the same steps)."""
        self._flow.advance(self._state)
        due = [self._flow.due(self._state, f) for f in range(self.fragments)]
        for fr, (_, applies) in zip(self._frags, due):
            if fr.job is not None and not applies:
                self._advance(fr)
        for fr, (sends, applies) in zip(self._frags, due):
            if sends:
                self._send(fr)
            if applies:
                self._complete(fr)
                self._apply(fr, self.mix)

    def finish(self) -> None:
        """The end of training: completes the exchanges in flight, syncs every fragment not synced at
        this step, and leaves every fragment at its anchor, so that the replicas end bit-identical."""
        for fr in self._frags:
            sends, applies = self._flow.due(self._state, fr.f)
            pending = fr.job is not None or self._state.pending(fr.f)
            if not pending and sends and applies:  # synced at this very step
                fr.write(fr.anchor)
                continue
            if not pending:
                self._send(fr)
            self._complete(fr)
            self._apply(fr, 0.0)

    # --- one exchange (the exchange layer runs the phases' collectives)

    def _send(self, fr: _Fragment) -> None:
        """Starts the fragment's exchange: phase 0 reads its local values, the mean stays in the
        C++ state for the apply."""
        fr.job = self._ex.start(fr, fr.read(), None, key=fr.f)
        self._advance(fr)

    def _advance(self, fr: _Fragment) -> None:
        if fr.job.advance():
            fr.job = None

    def _complete(self, fr: _Fragment) -> None:
        while fr.job is not None:
            self._advance(fr)

    def _apply(self, fr: _Fragment, mix: float) -> None:
        local = fr.read()
        if self.outer_optimizer is not None:
            fr.anchor.grad = fr.mean
            self.outer_optimizer.step()
            fr.anchor.grad = None
            fr.mean.zero_()  # consumed: the flow's outer step below is the identity and only mixes
        self._flow.apply(fr.f, self._state, local)
        if mix != self.mix:  # finish(): every fragment ends on its anchor
            local.copy_(fr.anchor)
        fr.write(local)
        self.syncs += 1

    # --- checkpoints

    def state_dict(self) -> dict:
        """The synchroniser's state for a checkpoint (a collective: every rank calls it).

        Exchanges in flight are completed first (their means wait for their apply step as usual),
        so the saved state holds no half-done collective.

        Returns:
            dict: ``format``, ``identity`` (codec, path, options and schedule), ``world_size``,
            ``bytes_sent``, ``wire_bytes``, ``syncs``, ``outer_optimizer`` (the outer optimizer's
            ``state_dict()``, None for the built-in step) and ``states`` (every rank's image of the
            C++ state: the step, per fragment the anchor, momentum, pending mean and the codec's
            state; docs/wire-format.md, "Local-steps checkpoint"), a list of uint8 tensors.
        """
        for fr in self._frags:
            self._complete(fr)
        images = every_rank({"state": self._flow.checkpoint(self._state)}, self._world, self.process_group)["state"]
        outer = None if self.outer_optimizer is None else self.outer_optimizer.state_dict()
        return {"format": _FORMAT, "identity": self._identity(), "world_size": self._world, "bytes_sent": self.bytes_sent,
                "wire_bytes": self.wire_bytes, "syncs": self.syncs, "outer_optimizer": outer, "states": images}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`. At the saved world size the run continues bit for bit. At
        another the step, anchors, outer momenta or optimizer (the same on every rank) are restored
        exactly, and what the codecs' error feedback owed is kept: the sharded path by the
        library's elastic restore, the gather and summable paths by giving every new rank the same
        share of the saved residuals' sum (the package's one rule, gradcomp._checkpoint).

        Raises:
            ValueError: another format, codec, path, options, schedule or outer step.
            gradcomp.Error: a damaged or foreign image (``checksum_mismatch``, ``size_mismatch``, ...),
                checked in full before anything changes.
        """
        sd = state_dict
        check_identity(sd, _FORMAT, self._identity(), "gradcomp.localsteps")
        if (sd.get("outer_optimizer") is None) != (self.outer_optimizer is None):
            raise ValueError("gradcomp.localsteps: checkpoint of another outer step (built-in or outer_optimizer)")
        images = [bytes(t.numpy().tobytes()) for t in sd["states"]]
        for fr in self._frags:
            fr.job = None
        if len(images) == self._world:
            self._flow.load_checkpoint(self._state, images[self._rank])
        else:
            self._flow.restore_elastic(self._state, images)
        if self.outer_optimizer is not None:
            self.outer_optimizer.load_state_dict(sd["outer_optimizer"])
        self.syncs = int(sd["syncs"])
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
        if p.dtype not in _DTYPES or p.device.type != "cpu":
            raise ValueError(f"gradcomp.localsteps: parameters must be float32, bfloat16 or float16 CPU tensors "
                             f"(a {p.dtype} tensor on {p.device})")
