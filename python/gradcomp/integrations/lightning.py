"""gradcomp in PyTorch Lightning (``lightning.pytorch``).

Lightning's ``DDPStrategy(ddp_comm_state=..., ddp_comm_hook=...)`` registers the hook only when
the root device is CUDA and drops it silently on any other device. :class:`GradcompDDPStrategy`
registers gradcomp's hook itself, on every device type, once the model is wrapped in DDP;
:func:`check_strategy` raises where a plain ``DDPStrategy`` would drop a hook.

Example::

    >>> from gradcomp.integrations.lightning import GradcompDDPStrategy
    >>> strategy = GradcompDDPStrategy("topk", density=0.01, find_unused_parameters=False)
    >>> trainer = lightning.pytorch.Trainer(accelerator="cpu", devices=2, strategy=strategy)
    >>> trainer.fit(module)
    >>> strategy.hook_state.bytes_sent
"""

import inspect

from lightning.pytorch.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel

from . import _hook

_TAKEN = ("ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper", "model_averaging_period")


def _arguments(fn, *skip: str) -> frozenset:
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in inspect.signature(fn).parameters.values() if p.kind in named) - set(skip)


# What goes to Lightning: DDPStrategy's own arguments and those it passes on to
# DistributedDataParallel (it sets module and device_ids itself). Every other keyword is gradcomp's.
LIGHTNING_ARGUMENTS = (_arguments(DDPStrategy.__init__, "self")
                       | _arguments(DistributedDataParallel.__init__, "self", "module", "device_ids"))
_SHARED = ("process_group",)  # DDP's group is the group the hook reduces over


class GradcompDDPStrategy(DDPStrategy):
    """``DDPStrategy`` whose gradients go through a gradcomp codec, on CPU (gloo) and CUDA alike.

    Args:
        codec (str): a name of :func:`gradcomp.codecs` (:class:`gradcomp.ddp.HookState` and
            :func:`gradcomp.ddp.compress_hook`), or ``"tagc"``
            (:class:`gradcomp.ddp.TagcHookState` and :func:`gradcomp.ddp.tagc_hook`).
        **options: gradcomp's options and Lightning's, told apart by name. A name of
            ``DDPStrategy.__init__`` or of ``DistributedDataParallel.__init__``
            (:data:`LIGHTNING_ARGUMENTS`: ``find_unused_parameters``, ``process_group_backend``,
            ``static_graph``, ``bucket_cap_mb``, ...) goes to ``DDPStrategy``, except its
            communication hook arguments, which this strategy replaces; every other name is the
            hook state's (the codec's options such as ``density`` or ``error_feedback``,
            ``path``, ``min_compress_numel``; for TAGC ``preset`` and its config). The only name
            both take, ``process_group``, goes to both: DDP and the hook reduce over the same
            group.

    Attributes:
        hook_state: the hook's state (``bytes_sent``, ``wire_bytes``, ``calls``, checkpoints),
            made when ``fit`` wraps the model; None before.

    Raises:
        ValueError: a communication hook argument of ``DDPStrategy`` was given; an unknown codec
            or option, or an invalid value (checked here, before ``fit`` launches anything).
    """

    def __init__(self, codec: str = "int8", **options) -> None:
        given = [k for k in _TAKEN if options.get(k) is not None]
        if given:
            raise ValueError(f"GradcompDDPStrategy registers gradcomp's hook itself; do not pass {', '.join(given)}")
        lightning = {k: v for k, v in options.items() if k in LIGHTNING_ARGUMENTS}
        ours = {k: v for k, v in options.items() if k not in LIGHTNING_ARGUMENTS or k in _SHARED}
        _hook.check(codec, ours, type(self).__name__)
        super().__init__(**lightning)
        self.codec = codec
        self.options = ours
        self.hook_state = None

    def configure_ddp(self) -> None:
        super().configure_ddp()  # wraps the model; no hook was given to DDPStrategy, so it registers none
        self.hook_state = _hook.register(self.model, self.codec, self.options, type(self).__name__)


def check_strategy(trainer) -> None:
    """Raises RuntimeError if ``trainer``'s strategy is a ``DDPStrategy`` given a
    communication hook (gradcomp's or any other) that it will not register, because its root
    device is not CUDA. Call it after constructing the ``Trainer``, before ``fit``.

    ``DDPStrategy`` keeps the hook in a private attribute (``_ddp_comm_hook``, Lightning 2.6);
    a strategy without it is not checked.
    """
    s = trainer.strategy
    if isinstance(s, GradcompDDPStrategy) or not isinstance(s, DDPStrategy):
        return
    hook = getattr(s, "_ddp_comm_hook", None)
    if hook is not None and s.root_device.type != "cuda":
        name = getattr(hook, "__qualname__", repr(hook))
        raise RuntimeError(f"{type(s).__name__} registers ddp_comm_hook only on CUDA devices; on "
                           f"{s.root_device.type} the hook {name} would be dropped and gradients all-reduced "
                           "uncompressed: use gradcomp.integrations.lightning.GradcompDDPStrategy")
