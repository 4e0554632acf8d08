"""What :mod:`gradcomp.restart` saves beside the given states: the random number generators,
and :class:`ModelState`, a model and its optimizer as one checkpointable object."""

from __future__ import annotations

import random
import sys
from typing import Optional

import torch


def _rng_state() -> dict:
    out = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        out["numpy"] = (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))
    return out


def _set_rng_state(rng: dict) -> None:
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    if "numpy" in rng:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


class ModelState:
    """A model and its optimizer as one checkpointable object, through
    ``torch.distributed.checkpoint.state_dict``: full (unsharded) tensors, so FSDP2 models save
    and load on any rank (DDP and plain modules too).

    ``state_dict()`` is a collective for FSDP2 models (every rank calls it; a
    :class:`Checkpointer` does).

    Args:
        model (torch.nn.Module): the model (``fully_shard``\\ ed, DDP or plain).
        optimizer (torch.optim.Optimizer, optional): its optimizer.
    """

    def __init__(self, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        """``{"model": ..., "optimizer": ...}``, full tensors (a collective for FSDP2)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True)
        if self.optimizer is None:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            return {"model": get_model_state_dict(self.model, options=opts), "optimizer": None}
        msd, osd = get_state_dict(self.model, self.optimizer, options=opts)
        return {"model": msd, "optimizer": osd}

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads what :meth:`state_dict` returned into the model and the optimizer."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_state_dict

        opts = StateDictOptions(full_state_dict=True)
        if self.optimizer is None:
            set_model_state_dict(self.model, state_dict["model"], options=opts)
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                           optim_state_dict=state_dict["optimizer"], options=opts)

