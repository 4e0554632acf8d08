"""gradcomp in Hugging Face Accelerate.

Accelerate's ``DistributedDataParallelKwargs(comm_hook=...)`` takes only its enum of PyTorch's
own hooks, so gradcomp's hook is registered on the model ``accelerator.prepare`` returned:
:func:`register`. (The Transformers ``Trainer``: :mod:`gradcomp.integrations.transformers`.)

Example::

    >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    >>> state = gradcomp.integrations.accelerate.register(accelerator, model, "int8")

Several CPU processes are started by ``torchrun --nproc-per-node 2 script.py`` (the script
making ``Accelerator(cpu=True)``); ``accelerate launch --cpu --num_processes 2`` starts one
(docs/trainers.md).
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


def _one_of_several() -> str:
    # accelerate launch's simple launcher (any launch without --multi_gpu, so every --cpu launch)
    # runs the script once; it alone sets ACCELERATE_USE_CPU, and it sets MASTER_ADDR when asked
    # for several processes, while torchrun and the multi-GPU launcher set WORLD_SIZE.
    env = os.environ
    if "ACCELERATE_USE_CPU" not in env or "MASTER_ADDR" not in env or "WORLD_SIZE" in env:
        return ""
    return (". accelerate launch started this one process although several were asked for: without --multi_gpu "
            "(and --cpu excludes it) it runs the script once. Start N CPU processes with "
            "`torchrun --nproc-per-node N script.py` or `accelerate launch --multi_gpu --num_processes N script.py`, "
            "the script making Accelerator(cpu=True)")


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
        ValueError: an unknown codec or option, or an invalid value (in a single process too).
        RuntimeError: several processes and ``model`` is not DDP (not prepared, or prepared
            for FSDP or DeepSpeed: gradcomp.fsdp.attach is FSDP2's path).

    Warns when an FSDP plugin was ignored (on CPU Accelerate prepares DDP instead); the hook is
    registered on the DDP module then. In a single process that ``accelerate launch`` started
    although it was asked for several (``--cpu --num_processes N`` runs the script once), the
    warning says how to start N processes.
    """
    _hook.check(codec, options, "gradcomp.integrations.accelerate.register")
    if accelerator.num_processes == 1 and not isinstance(model, DistributedDataParallel):
        warnings.warn("gradcomp.integrations.accelerate.register: a single process communicates no gradients; "
                      f"no hook registered{_one_of_several()}", stacklevel=2)
        return None
    if _fsdp_ignored(accelerator):
        warnings.warn(f"Accelerate ignores the FSDP plugin under {accelerator.distributed_type} and wraps the "
                      "model in DDP: gradcomp's DDP hook is registered on it (for FSDP2, shard the model yourself "
                      "and call gradcomp.fsdp.attach)", stacklevel=2)
    where = f"gradcomp.integrations.accelerate.register ({accelerator.distributed_type}, " \
            f"{accelerator.num_processes} processes)"
    return _hook.register(model, codec, options, where)
