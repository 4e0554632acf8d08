"""gradcomp in Hugging Face Accelerate and the Transformers ``Trainer``.

Accelerate's ``DistributedDataParallelKwargs(comm_hook=...)`` takes only its enum of PyTorch's
own hooks, so gradcomp's hook is registered on the model ``accelerator.prepare`` returned:
:func:`register`. The ``Trainer`` has no hook argument; :func:`attach` adds a callback that
registers the hook on ``trainer.model_wrapped`` (the DDP module) when training begins.

Example::

    >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    >>> state = gradcomp.integrations.accelerate.register(accelerator, model, "int8")

    >>> trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    >>> callback = gradcomp.integrations.accelerate.attach(trainer, "int8")
    >>> trainer.train()
    >>> callback.state.bytes_sent

This module imports Accelerate; it imports Transformers only when ``GradcompCallback`` or
:func:`attach` is used.
"""

import os
import warnings

import accelerate
from torch.nn.parallel import DistributedDataParallel

from . import _hook


def _fsdp_ignored(accelerator) -> bool:
    # Accelerator(fsdp_plugin=...) sets ACCELERATE_USE_FSDP, but only a GPU-like device type
    # switches to FSDP; on CPU (MULTI_CPU) the plugin is dropped and the model wrapped in DDP.
    return (os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
            and accelerator.distributed_type != accelerate.DistributedType.FSDP)


def register(accelerator, model, codec: str = "int8", **options):
    """Registers gradcomp's DDP hook on ``model``, as ``accelerator.prepare`` returned it.

    Args:
        accelerator (accelerate.Accelerator): the accelerator that prepared ``model``.
        model: the prepared model: a ``DistributedDataParallel`` module when there are several
            processes (multi-GPU, or several CPU processes with ``Accelerator(cpu=True)``).
        codec (str): a name of :func:`gradcomp.codecs`, or ``"tagc"`` (TAGC-2's hook).
        **options: the hook state's options (the codec's, ``path``, ``min_compress_numel``).

    Returns:
        gradcomp.ddp.HookState | gradcomp.ddp.TagcHookState | None: the hook's state
        (``bytes_sent``, ``calls``, checkpoints); None in a single process, where nothing is
        communicated (a warning says so).

    Raises:
        RuntimeError: several processes and ``model`` is not DDP (not prepared, or prepared
            for FSDP or DeepSpeed: gradcomp.fsdp.attach is FSDP2's path).

    Warns when an FSDP plugin was ignored (on CPU Accelerate prepares DDP instead); the hook is
    registered on the DDP module then.
    """
    if accelerator.num_processes == 1 and not isinstance(model, DistributedDataParallel):
        warnings.warn("gradcomp.integrations.accelerate.register: a single process communicates no gradients; "
                      "no hook registered", stacklevel=2)
        return None
    if _fsdp_ignored(accelerator):
        warnings.warn(f"Accelerate ignores the FSDP plugin under {accelerator.distributed_type} and wraps the "
                      "model in DDP: gradcomp's DDP hook is registered on it (for FSDP2, shard the model yourself "
                      "and call gradcomp.fsdp.attach)", stacklevel=2)
    where = f"gradcomp.integrations.accelerate.register ({accelerator.distributed_type}, " \
            f"{accelerator.num_processes} processes)"
    return _hook.register(model, codec, options, where)


def attach(trainer, codec: str = "int8", **options):
    """Adds a :class:`GradcompCallback` to a ``transformers.Trainer`` and returns it; its
    ``state`` is the hook's state once training has begun."""
    callback = _callback_class()(trainer, codec, **options)
    trainer.add_callback(callback)
    return callback


_CALLBACK = None


def _callback_class():
    global _CALLBACK
    if _CALLBACK is not None:
        return _CALLBACK
    from transformers import TrainerCallback

    class GradcompCallback(TrainerCallback):
        """Registers gradcomp's DDP hook on ``trainer.model_wrapped`` at ``on_train_begin``.

        The callback holds the trainer because the callback events receive the unwrapped model
        only (``kwargs["model"]``); the ``Trainer`` wraps the model in DDP before
        ``on_train_begin`` and keeps the DDP module as ``model_wrapped``. A second ``train()``
        reuses that DDP module and its hook.

        Args:
            trainer (transformers.Trainer): the trainer it is added to (:func:`attach` adds it).
            codec (str): a name of :func:`gradcomp.codecs`, or ``"tagc"``.
            **options: the hook state's options.

        Attributes:
            state: the hook's state, None before training begins (and in a single process).

        Raises (at ``on_train_begin``):
            RuntimeError: several processes and the wrapped model is not DDP (FSDP, DeepSpeed).
        """

        def __init__(self, trainer, codec: str = "int8", **options):
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

    _CALLBACK = GradcompCallback
    return _CALLBACK


def __getattr__(name):
    if name == "GradcompCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
