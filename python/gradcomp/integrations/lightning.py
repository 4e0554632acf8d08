"""gradcomp in PyTorch Lightning (``lightning.pytorch``).

Lightning's ``DDPStrategy(ddp_comm_state=..., ddp_comm_hook=...)`` registers the hook only when
the root device is CUDA and drops it silently on any other device. :class:`GradcompDDPStrategy`
registers gradcomp's hook itself, on every device type, once the model is wrapped in DDP;
:func:`check_strategy` raises where a plain ``DDPStrategy`` would drop a hook.

Example::

    >>> from gradcomp.integrations.lightning import GradcompDDPStrategy
    >>> strategy = GradcompDDPStrategy("topk", options={"density": 0.01})
    >>> trainer = lightning.pytorch.Trainer(accelerator="cpu", devices=2, strategy=strategy)
    >>> trainer.fit(module)
    >>> strategy.hook_state.bytes_sent
"""

from typing import Optional

from lightning.pytorch.strategies import DDPStrategy

from . import _hook

_TAKEN = ("ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper", "model_averaging_period")


class GradcompDDPStrategy(DDPStrategy):
    """``DDPStrategy`` whose gradients go through a gradcomp codec, on CPU (gloo) and CUDA alike.

    Args:
        codec (str): a name of :func:`gradcomp.codecs` (:class:`gradcomp.ddp.HookState` and
            :func:`gradcomp.ddp.compress_hook`), or ``"tagc"``
            (:class:`gradcomp.ddp.TagcHookState` and :func:`gradcomp.ddp.tagc_hook`).
        options (dict, optional): the hook state's options (the codec's, ``path``,
            ``min_compress_numel``; for TAGC ``preset`` and its config).
        **kwargs: ``DDPStrategy``'s arguments (``find_unused_parameters``, ``process_group_backend``,
            ...), except its communication hook arguments, which this strategy replaces.

    Attributes:
        hook_state: the hook's state (``bytes_sent``, ``wire_bytes``, ``calls``, checkpoints),
            made when ``fit`` wraps the model; None before.

    Raises:
        ValueError: a communication hook argument of ``DDPStrategy`` was given.
    """

    def __init__(self, codec: str = "int8", options: Optional[dict] = None, **kwargs) -> None:
        given = [k for k in _TAKEN if kwargs.get(k) is not None]
        if given:
            raise ValueError(f"GradcompDDPStrategy registers gradcomp's hook itself; do not pass {', '.join(given)}")
        super().__init__(**kwargs)
        self.codec = codec
        self.options = dict(options or {})
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
