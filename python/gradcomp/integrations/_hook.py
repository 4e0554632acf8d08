"""What the framework integrations share: gradcomp's DDP hook registered on a DDP model."""

from torch.nn.parallel import DistributedDataParallel

from .. import ddp

HOOKS = (ddp.compress_hook, ddp.tagc_hook)


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

