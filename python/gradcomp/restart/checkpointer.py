"""The :class:`Checkpointer` of :mod:`gradcomp.restart`: saves every ``every`` steps from every
rank and resumes from the newest checkpoint that every rank verifies."""

from __future__ import annotations

import io
import os
import warnings
from typing import Dict, List, Mapping, Optional, Tuple

import torch
import torch.distributed as dist

from .files import _TEMP, FORMAT, CheckpointError, _check, _header, _parse, _write_atomically, file_name
from .states import _rng_state, _set_rng_state

_SHARED_STORE = (
    "gradcomp.restart: torchrun shares its rendezvous store with the workers (TORCHELASTIC_USE_AGENT_STORE=True) "
    "and keeps it across restarts, so a restarted worker group can read the previous attempt's addresses from it "
    "and fail to connect (gloo: 'connectFullMesh failed ... Connection refused'); run torchrun with "
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")


class CheckpointWarning(UserWarning):
    """A checkpoint that :meth:`Checkpointer.resume` skipped (damaged, or missing some rank's
    file); the message names the file and the reason."""


class Checkpointer:
    """Saves everything a resumed run needs every ``every`` steps, from every rank, and resumes
    from the newest checkpoint every rank verifies.

    Args:
        directory (str): where the files go (made if missing); every rank's files go to the
            same directory, shared or not.
        states (Mapping[str, object]): what to save, by name: anything with ``state_dict()``
            and ``load_state_dict()`` (modules, optimizers, :class:`ModelState`, the hook
            states of :mod:`gradcomp.ddp`, what :func:`gradcomp.fsdp.attach` returns, a
            learning-rate scheduler, a stateful sampler). They are saved and loaded in this
            order; the gradcomp states' ``state_dict()`` are collectives, which every rank
            runs in the same order.
        every (int): :meth:`maybe_save` saves after every ``every``-th step (default 100).
        keep (int | None): the complete steps kept (default 2; None keeps every one).
        rng (bool): also save and restore the random number generators: Python's ``random``,
            torch's CPU generator, CUDA's where it is initialised, NumPy's global one where
            NumPy is imported (default True).
        group (ProcessGroup, optional): the ranks that checkpoint together (default: the
            world; none without ``torch.distributed``).
        weights_only (bool): ``torch.load``'s when resuming (default True).

    Attributes:
        rank (int): this process's rank.
        world (int): the number of ranks.
        resumed_from (int | None): the step :meth:`resume` resumed from (None: none found).
        saved (int | None): the last step saved.

    The files are trusted input: the CRC32C finds damage, not tampering, and
    ``weights_only=False`` unpickles arbitrary objects.

    Example::

        >>> ckpt = Checkpointer("ckpt", {"model": net, "optimizer": opt, "hook": state}, every=50, keep=2)
        >>> start = ckpt.resume()
        >>> for step in range(start, steps):
        ...     train_one_step(step)
        ...     ckpt.maybe_save(step + 1)
    """

    def __init__(self, directory: str, states: Mapping[str, object], every: int = 100, keep: Optional[int] = 2,
                 rng: bool = True, group: Optional[dist.ProcessGroup] = None, weights_only: bool = True) -> None:
        if int(every) < 1:
            raise ValueError(f"gradcomp.restart.Checkpointer: every must be at least 1, not {every}")
        if keep is not None and int(keep) < 1:
            raise ValueError(f"gradcomp.restart.Checkpointer: keep must be at least 1 or None, not {keep}")
        for name, obj in states.items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"gradcomp.restart.Checkpointer: {name!r} ({type(obj).__name__}) has no "
                                "state_dict() and load_state_dict()")
        self.directory = os.fspath(directory)
        self.states = dict(states)
        self.every = int(every)
        self.keep = None if keep is None else int(keep)
        self.rng = bool(rng)
        self.group = group
        self.weights_only = bool(weights_only)
        self._dist = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if self._dist else 0
        self.world = dist.get_world_size(group) if self._dist else 1
        self.resumed_from: Optional[int] = None
        self.saved: Optional[int] = None
        if (self.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
                and int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0):
            warnings.warn(_SHARED_STORE, RuntimeWarning, stacklevel=2)

    def __repr__(self) -> str:
        return (f"Checkpointer({self.directory!r}, states={list(self.states)}, every={self.every}, keep={self.keep}, "
                f"rank={self.rank} of {self.world}, resumed_from={self.resumed_from}, saved={self.saved})")

    # ---- files
    def path(self, step: int, rank: Optional[int] = None, world: Optional[int] = None) -> str:
        """The file of ``rank`` of ``world`` (default: this rank, this world size) after ``step``
        steps."""
        return os.path.join(self.directory, file_name(step, self.rank if rank is None else rank,
                                                      self.world if world is None else world))

    def _files(self) -> Dict[Tuple[int, int], set]:
        """(step, world) -> the ranks with a file."""
        out: Dict[Tuple[int, int], set] = {}
        for name in os.listdir(self.directory):
            p = _parse(name)
            if p is not None:
                out.setdefault((p[0], p[2]), set()).add(p[1])
        return out

    def _complete(self) -> Dict[int, int]:
        """step -> a world size whose every rank has a file of that step (this world size
        preferred)."""
        out: Dict[int, int] = {}
        for (step, world), ranks in self._files().items():
            if len(ranks) == world and (step not in out or world == self.world):
                out[step] = world
        return out

    # ---- collectives
    def _gather(self, value: int) -> List[int]:
        if not self._dist or self.world == 1:
            return [value]
        every: List[Optional[int]] = [None] * self.world
        dist.all_gather_object(every, value, group=self.group)
        return [int(v) for v in every]

    def _barrier(self) -> None:
        if self._dist and self.world > 1:
            dist.barrier(group=self.group)

    # ---- saving
    def maybe_save(self, step: int) -> bool:
        """Saves after every ``every``-th step: call it after each step with the number of steps
        done.

        Args:
            step (int): the steps done (the step the run resumes at from this checkpoint).

        Returns:
            bool: whether it saved.
        """
        if step > 0 and step % self.every == 0:
            self.save(step)
            return True
        return False

    def save(self, step: int) -> str:
        """Saves every state, the step and the random number generators' states into this
        rank's file for ``step``, atomically, then, once every rank has saved, removes the
        steps beyond the newest ``keep``.

        A collective: every rank calls it with the same step (the gradcomp states'
        ``state_dict()`` and a barrier).

        Args:
            step (int): the steps done.

        Returns:
            str: this rank's file.
        """
        step = int(step)
        os.makedirs(self.directory, exist_ok=True)
        content = {"format": FORMAT, "step": step, "rank": self.rank, "world": self.world,
                   "states": {name: obj.state_dict() for name, obj in self.states.items()},
                   "rng": _rng_state() if self.rng else None}
        buf = io.BytesIO()
        torch.save(content, buf)
        payload = buf.getvalue()
        path = self.path(step)
        _write_atomically(path, _header(step, self.rank, self.world, payload), payload)
        self._barrier()  # every rank's file is in place: older steps may go
        self.saved = step
        self._prune()
        return path

    def _remove(self, step: int, world: int, ranks) -> None:
        for r in ranks:
            if r % self.world == self.rank:  # each rank removes its share of the files
                try:
                    os.remove(os.path.join(self.directory, file_name(step, r, world)))
                except FileNotFoundError:
                    pass

    def _prune(self) -> None:
        if self.keep is None:
            return
        complete = sorted(self._complete(), reverse=True)
        if len(complete) < self.keep:
            return
        oldest_kept = complete[self.keep - 1]  # older ones go, complete or not
        for (step, world), ranks in self._files().items():
            if step < oldest_kept:
                self._remove(step, world, ranks)

    def _clean_temporaries(self) -> None:
        for name in os.listdir(self.directory):
            m = _TEMP.match(name)
            if m and int(m.group(2)) % self.world == self.rank:
                try:
                    os.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    # ---- resuming
    def _verified(self, step: int, world: int, cache: dict):
        """This rank's source file of ``step`` (saved at ``world`` ranks), verified: its payload,
        or None (warned) when damaged."""
        if step not in cache:
            path = self.path(step, self.rank % world, world)
            try:
                with open(path, "rb") as f:
                    cache[step] = _check(path, f.read())["payload"]
            except CheckpointError as e:
                warnings.warn(f"gradcomp.restart: skipping {path}: {e.code}: {e.detail}", CheckpointWarning, stacklevel=3)
                cache[step] = None
            except OSError as e:
                warnings.warn(f"gradcomp.restart: skipping {path}: {e}", CheckpointWarning, stacklevel=3)
                cache[step] = None
        return cache[step]

    def resume(self) -> int:
        """Loads the newest checkpoint that every rank verifies into the states; returns its step
        (0 when there is none: a fresh start).

        A collective. Damaged files (and steps some rank's file is missing from) are skipped
        with a :class:`CheckpointWarning`; the ranks agree on one step. Files of newer steps
        are removed afterwards, as are temporary files a crash left behind.

        Returns:
            int: the step to continue at.

        Raises:
            KeyError: the checkpoint has no state of one of the given names.
            ValueError, gradcomp.Error: a state refused what was saved (another codec, another
                model; an FSDP reduce-scatter state saved at another world size).
            pickle.UnpicklingError: with ``weights_only=True``, a state holds objects other than
                tensors, numbers, strings and containers (pass ``weights_only=False``).
        """
        os.makedirs(self.directory, exist_ok=True)
        self._clean_temporaries()
        files = self._files()
        complete = self._complete()
        if self.rank == 0:
            newest = max(complete, default=-1)
            for (step, world), ranks in sorted(files.items()):
                if step > newest and len(ranks) < world:
                    missing = sorted(set(range(world)) - ranks)
                    warnings.warn(f"gradcomp.restart: skipping step {step} in {self.directory}: no file of rank(s) "
                                  f"{missing} of {world} (a crash while saving)", CheckpointWarning, stacklevel=2)
        cache: dict = {}
        limit = None
        while True:
            mine = -1
            for step in sorted(complete, reverse=True):
                if limit is not None and step > limit:
                    continue
                if self._verified(step, complete[step], cache) is not None:
                    mine = step
                    break
            every = self._gather(mine)
            agreed = min(every)
            if agreed == max(every):
                break
            limit = agreed
        if agreed >= 0:
            content = torch.load(io.BytesIO(cache[agreed]), weights_only=self.weights_only)
            saved_world = content["world"]
            for name, obj in self.states.items():
                if name not in content["states"]:
                    raise KeyError(f"gradcomp.restart: {self.path(agreed, self.rank % saved_world, saved_world)} has "
                                   f"no state {name!r} (it has {sorted(content['states'])})")
                obj.load_state_dict(content["states"][name])
            if self.rng and content.get("rng") is not None and self.rank < saved_world:
                _set_rng_state(content["rng"])
        # Newer steps are damaged or incomplete: they go, so that no later listing mixes them
        # with this run's files.
        for (step, world), ranks in files.items():
            if step > agreed:
                self._remove(step, world, ranks)
        self._barrier()
        self.resumed_from = agreed if agreed >= 0 else None
        return max(agreed, 0)
