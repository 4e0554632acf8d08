"""gradcomp in the Hugging Face Transformers ``Trainer``.

The ``Trainer`` has no hook argument: it wraps the model in DDP (through Accelerate) before
``on_train_begin`` and keeps the DDP module as ``trainer.model_wrapped``. :func:`attach` adds a
:class:`GradcompCallback` that registers gradcomp's DDP hook on that module when training
begins.

Example::

    >>> from gradcomp.integrations.transformers import attach
    >>> trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    >>> callback = attach(trainer, "int8")
    >>> trainer.train()
    >>> callback.state.bytes_sent
"""

import warnings

from torch.nn.parallel import DistributedDataParallel
from transformers import TrainerCallback

from . import _hook

__all__ = ["GradcompCallback", "attach"]


class GradcompCallback(TrainerCallback):
    """Registers gradcomp's DDP hook on ``trainer.model_wrapped`` at ``on_train_begin``.

    The callback holds the trainer because the callback events receive the unwrapped model only
    (``kwargs["model"]``); the ``Trainer`` wraps the model in DDP before ``on_train_begin`` and
    keeps the DDP module as ``model_wrapped``. A second ``train()`` reuses that DDP module and
    its hook.

    Args:
        trainer (transformers.Trainer): the trainer it is added to (:func:`attach` adds it).
        codec (str): a name of :func:`gradcomp.codecs`, or ``"tagc"``.
        **options: the hook state's options (the codec's, ``path``, ``min_compress_numel``).

    Attributes:
        state: the hook's state, None before training begins (and in a single process).

    Raises:
        ValueError (here): an unknown codec or option, or an invalid value.
        RuntimeError (at ``on_train_begin``): several processes and the wrapped model is not
            DDP (FSDP, DeepSpeed).
    """

    def __init__(self, trainer, codec: str = "int8", **options):
        _hook.check(codec, options, "GradcompCallback")
        self.trainer = trainer
        self.codec = codec
        self.options = options
        self.state = None
        self._model = None  # the DDP module the hook is registered on

    def on_train_begin(self, args, state, control, **kwargs):
        model = self.trainer.model_wrapped
        if model is self._model:
            return
        if args.world_size == 1 and not isinstance(model, DistributedDataParallel):
            warnings.warn("GradcompCallback: a single process communicates no gradients; no hook registered")
            return
        where = f"GradcompCallback (world size {args.world_size})"
        self.state = _hook.register(model, self.codec, self.options, where)
        self._model = model


def attach(trainer, codec: str = "int8", **options) -> GradcompCallback:
    """Adds a :class:`GradcompCallback` to a ``transformers.Trainer`` and returns it; its
    ``state`` is the hook's state once training has begun.

    Raises:
        ValueError: an unknown codec or option, or an invalid value (before anything is added).
    """
    callback = GradcompCallback(trainer, codec, **options)
    trainer.add_callback(callback)
    return callback
