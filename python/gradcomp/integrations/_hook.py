"""What the framework integrations share: the codec and its options checked where the
integration is made, and gradcomp's DDP hook registered on a DDP model."""

import torch
from torch.nn.parallel import DistributedDataParallel

from .. import ddp
from .._core import Error

_TAGC_HOOK_ONLY = ("min_compress_numel", "select")  # TagcHookState's own arguments, not the codec's


def check(codec: str, options: dict, where: str, fsdp: bool = False) -> None:
    """Builds what the integration will build from ``codec`` and ``options`` later (the DDP
    hook state's codec and options, or with ``fsdp`` :func:`gradcomp.fsdp.attach`'s owner), so
    that a mistake is reported where the integration is made, before any process is launched.
    Needs no process group and no model.

    Raises ValueError naming ``where`` (the caller), the codec and the problem: an unknown codec
    or option, an invalid value."""
    if not isinstance(codec, str):
        raise ValueError(f"{where}: codec must be a name (a str), not {type(codec).__name__}")
    try:
        if fsdp:
            from .. import fsdp as _fsdp

            _fsdp.ShardedTagc(**options) if codec == "tagc" else _fsdp.ShardedCodec(codec, **options)
        elif codec == "tagc":  # TagcHookState's codec; its states need the model and the process group
            from ..tagc import TagcStates

            TagcStates(**{k: v for k, v in options.items() if k not in _TAGC_HOOK_ONLY})
        else:
            ddp.HookState(torch.nn.Module(), codec, **options)  # no parameters: nothing is made but the codec
    except (Error, TypeError, ValueError) as e:
        given = f" with {options}" if options else ""
        raise ValueError(f"{where}: codec {codec!r}{given}: {e}") from e


def register(model, codec: str, options: dict, where: str):
    """Registers :func:`gradcomp.ddp.compress_hook` (or, for ``codec="tagc"``,
    :func:`gradcomp.ddp.tagc_hook`) on the DDP module ``model``; returns the hook's state.

    Raises RuntimeError naming ``where`` (the caller) when ``model`` is not a DDP module: a
    hook exists only on DDP, and anything else would train without gradcomp."""
    if not isinstance(model, DistributedDataParallel):
        raise RuntimeError(f"{where}: the model is a {type(model).__name__}, not a DistributedDataParallel "
                           "module, so there is nothing to register gradcomp's DDP hook on")
    if codec == "tagc":
        state, hook = ddp.TagcHookState(model, **options), ddp.tagc_hook
    else:
        state, hook = ddp.HookState(model, codec, **options), ddp.compress_hook
    model.register_comm_hook(state, hook)
    return state
