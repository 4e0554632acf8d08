"""gradcomp codecs as the reduce-scatter of torchtitan's FSDP2 training.

torchtitan has no DDP: every model's ``ModelSpec.parallelize_fn`` applies ``fully_shard`` (and
TP, activation checkpointing, compile) and then sets each FSDP module's gradient divide factor
to 1, because its loss is already divided by the global token count. FSDP2 then hands the
reduce-scatter ``ReduceOp.PREMUL_SUM(1.0)``, which :mod:`gradcomp.fsdp` applies as a plain sum
(gloo has no PREMUL_SUM: torchtitan's own reduce-scatter fails on CPU with "Cannot use
ReduceOp.PREMUL_SUM with Gloo", gradcomp's does not). :func:`wrap_parallelize` returns a
parallelize function that runs the original and then :func:`gradcomp.fsdp.attach`::

    >>> import dataclasses
    >>> from gradcomp.integrations.torchtitan import with_gradcomp
    >>> from torchtitan.models.llama3.config_registry import llama3_debugmodel
    >>> def llama3_debugmodel_int8():
    ...     config = llama3_debugmodel()
    ...     config.model_spec = with_gradcomp(config.model_spec, "int8")
    ...     return config

The attach must come after the parallelize function's last ``fully_shard`` and after anything
else that replaces FSDP's reduce-scatter: ``parallelism.enable_fsdp_symm_mem`` does, so it is
refused. Pipeline parallelism calls the parallelize function once per stage; each call attaches
its own codec states (``fn.states`` lists them, one per call).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from .. import fsdp
from . import _hook

__all__ = ["with_gradcomp", "wrap_parallelize"]


def wrap_parallelize(parallelize_fn: Callable, codec: str = "int8", **options) -> Callable:
    """A parallelize function that runs ``parallelize_fn`` and then makes every FSDP module's
    reduce-scatter run ``codec`` (:func:`gradcomp.fsdp.attach`).

    Args:
        parallelize_fn (callable): a ``ModelSpec.parallelize_fn`` (``parallelize_llama``, ...),
            called as ``parallelize_fn(model, **kwargs)``.
        codec (str): ``"tagc"`` or a codec of :func:`gradcomp.codecs`, as for
            :func:`gradcomp.fsdp.attach`.
        **options: the codec's options.

    Returns:
        callable: the wrapped function; its ``states`` attribute lists what each call's
        :func:`gradcomp.fsdp.attach` returned (:class:`gradcomp.fsdp.ShardedCodec` or
        :class:`gradcomp.fsdp.ShardedTagc`: ``bytes_sent``, ``calls``, ``state_dict()``).

    Raises:
        ValueError (here): an unknown codec, preset or option, or an invalid value.
        ValueError (from the wrapped function): the model has no ``fully_shard`` modules (data
            parallelism off), or symmetric-memory FSDP communication is enabled (it replaces
            the reduce-scatter gradcomp installs).
    """
    _hook.check(codec, options, "gradcomp.integrations.torchtitan", fsdp=True)
    states = []

    @functools.wraps(parallelize_fn)
    def parallelize(model, *args, **kwargs):
        parallelism = kwargs.get("parallelism")
        if parallelism is not None and getattr(parallelism, "enable_fsdp_symm_mem", False):
            raise ValueError("gradcomp.integrations.torchtitan: parallelism.enable_fsdp_symm_mem replaces FSDP's "
                             "reduce-scatter; turn it off to run a gradcomp codec")
        model = parallelize_fn(model, *args, **kwargs)
        try:
            states.append(fsdp.attach(model, codec, **options))
        except ValueError as e:
            raise ValueError(f"gradcomp.integrations.torchtitan: {e} (is data parallelism (dp_shard) on?)") from e
        return model

    parallelize.states = states
    return parallelize


def with_gradcomp(model_spec, codec: str = "int8", **options):
    """A copy of a torchtitan ``ModelSpec`` whose ``parallelize_fn`` is
    :func:`wrap_parallelize` of the original.

    Args:
        model_spec (torchtitan.protocols.model_spec.ModelSpec): e.g. ``model_registry("debugmodel")``.
        codec (str): as for :func:`wrap_parallelize`.
        **options: the codec's options.

    Returns:
        ModelSpec: the copy (``spec.parallelize_fn.states`` lists the attached states).

    Raises:
        ValueError: an unknown codec, preset or option, or an invalid value.
    """
    return dataclasses.replace(model_spec, parallelize_fn=wrap_parallelize(model_spec.parallelize_fn, codec, **options))
