"""The state of :func:`gradcomp.ddp.compress_hook`: a gradcomp codec chosen by name, each
compressed parameter's path (gather or sharded) and state, and collective checkpoints."""

from typing import Optional

import torch
import torch.distributed as dist

from .._checkpoint import GroupMember, gather_blobs, restore_mean, restore_owed, restore_rows
from .._core import Compressor, Sharded

_FORMAT = 2  # 1: gather-path states only (still read)
_PATHS = ("auto", "gather", "sharded")


def strip(name: str) -> str:
    """A parameter's name without the ``module.`` prefix DDP adds."""
    return name[len("module."):] if name.startswith("module.") else name


def _grad_dtype(p: torch.Tensor) -> torch.dtype:
    return torch.bfloat16 if p.dtype == torch.bfloat16 else torch.float32


def expect_state(state, cls, hook: str) -> None:
    """Raises TypeError unless state is a cls (the state class that hook is written for)."""
    if isinstance(state, cls):
        return
    other = "TagcHookState and tagc_hook" if cls.__name__ == "HookState" else "HookState and compress_hook"
    raise TypeError(f"gradcomp.ddp.{hook} expects a gradcomp.ddp.{cls.__name__} as its state, got "
                    f"{type(state).__name__}; register it with model.register_comm_hook(state, gradcomp.ddp.{hook}) "
                    f"(other algorithms have their own pair: {other})")


class HookState(GroupMember):
    """State of :func:`compress_hook`: a gradcomp codec, the process group and one codec state
    per compressed parameter.

    Every parameter of ``model`` that requires a gradient and has at least
    ``min_compress_numel`` elements is compressed on its own, keyed by the parameter's name,
    on the gather path (a :class:`gradcomp.State`: residual, thresholds, step) or the sharded
    path (a :class:`gradcomp.ShardedState`: a residual per destination shard and the owner's);
    summable casts (``fp32``, ``bf16``, ``fp16``) keep no state, cast whole buckets and
    all-reduce them whatever ``path`` says.

    **The path rule.** At W ranks a rank puts on the wire per step, for a parameter of n
    elements: gather path ``(W - 1) * (4 + P(n))`` (its slot: a frame-size word and
    ``max_payload_bytes(n)``, forwarded around the ring of the all-gather); sharded path
    ``(W - 1) * (S0 + S1)`` (W - 1 slots of the all-to-all and W - 1 of the all-gather;
    ``S0``, ``S1``: :meth:`gradcomp.Sharded.describe`'s ``slot_bytes``, 16 + the payload of
    one shard of ``ceil(n / W)`` elements). ``path="auto"`` takes the sharded path where it is
    strictly smaller: never at W <= 2 (two slot heads for one payload), almost always from
    W = 3 on. The paths are chosen once, when the process group exists (at construction, or
    at the first hook or checkpoint call), and stay fixed; :attr:`paths` lists them. A model on a
    CUDA device keeps the states of both paths in that device's memory.

    Args:
        model (torch.nn.Module): the model whose gradients the hook reduces (the DDP module or
            the module it wraps; a ``module.`` prefix of the names is ignored).
        codec (str): a codec name from :func:`gradcomp.codecs` (default ``"topk"``).
        process_group (ProcessGroup, optional): the group to reduce over (default: the world).
        min_compress_numel (int): parameters with fewer elements travel as raw float32
            (default 1024).
        path (str): ``"auto"`` (default: the rule above), ``"gather"`` or ``"sharded"`` (every
            compressed parameter on that path).
        **options: the codec's options (``density``, ``error_feedback``, ``group``, ...), as
            for :class:`gradcomp.Compressor`.

    Raises:
        ValueError: an unknown ``path``.
        gradcomp.Error: an unknown codec or option (``code == "invalid_argument"``).

    Attributes:
        compressor (gradcomp.Compressor): the codec (gather path, casts).
        sharded (gradcomp.Sharded | None): the codec on the sharded path (all-reduce mode);
            None for casts.
        paths (dict[str, str]): compressed parameter name -> ``"gather"`` or ``"sharded"``.
        states (dict[str, gradcomp.State]): per-parameter states of the gather path.
        sharded_states (dict[str, gradcomp.ShardedState]): per-parameter states of the sharded
            path.
        bytes_sent (int): bytes of the buffers this rank handed to the collectives, all steps.
        wire_bytes (int): bytes this rank put on the wire, all steps: (W - 1) blocks of each
            all-gather and all-to-all, 2 (W - 1) / W of each all-reduce's buffer.
        calls (int): buckets the hook has reduced.
        hook_seconds (float): wall time spent in the hook's own work on this rank, all steps:
            encoding before the collectives and decoding after them, not the collectives.

    Checkpoints: :meth:`state_dict` gathers every rank's states; :meth:`load_state_dict`
    restores them (exactly at the saved world size; :meth:`load_state_dict` says what is kept
    at another).

    Example::

        >>> state = gradcomp.ddp.HookState(model, "int4", error_feedback=True)
        >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)
        >>> state.paths["blocks.0.mlp.0.weight"]   # "sharded" at 4 ranks, "gather" at 2
    """

    def __init__(self, model: torch.nn.Module, codec: str = "topk", process_group: Optional[dist.ProcessGroup] = None,
                 min_compress_numel: int = 1024, path: str = "auto", **options) -> None:
        if path not in _PATHS:
            raise ValueError(f"gradcomp.ddp.HookState: path must be 'auto', 'gather' or 'sharded', not {path!r}")
        self.compressor = Compressor(codec, **options)
        self.sharded = None if self.compressor.summable else Sharded(codec, "all_reduce", **options)
        self.codec = codec
        self.options = dict(options)
        self.path = path
        self.process_group = process_group
        self.min_compress_numel = int(min_compress_numel)
        self._names = {}  # data_ptr -> parameter name
        self._compressed = {}  # compressed parameter name -> (numel, gradient dtype)
        trained = [p for p in model.parameters() if p.requires_grad]
        self.device = trained[0].device if trained else torch.device("cpu")
        self._numel = 0  # every parameter's elements
        self._small_numel = 0  # those of parameters that travel raw
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            self._names[p.data_ptr()] = strip(name)
            self._numel += p.numel()
            if self.compressor.summable:
                continue
            if p.numel() >= self.min_compress_numel:
                self._compressed[strip(name)] = (p.numel(), _grad_dtype(p))
            else:
                self._small_numel += p.numel()
        self.paths = {}  # parameter name -> "gather" | "sharded"
        self.states = {}  # parameter name -> gradcomp.State (gather path)
        self.sharded_states = {}  # parameter name -> gradcomp.ShardedState (sharded path)
        self._ready = self.compressor.summable
        self._plans = {}  # bucket parameter names -> _Plan
        self._wire = {}  # bucket index -> wire tensor (summable casts)
        self.bytes_sent = 0
        self.wire_bytes = 0
        self.calls = 0
        self.hook_seconds = 0.0
        if path == "gather" or (dist.is_available() and dist.is_initialized()):
            self._setup()

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        numel = sum(n for n, _ in self._compressed.values())
        shard = ""
        if not self.compressor.summable:
            shard = f", sharded={len(self.sharded_states)}" if self._ready else ", sharded=?"
        return (f"HookState(codec={self.codec!r}{opts}, path={self.path!r}, min_compress_numel={self.min_compress_numel}, "
                f"compressed={len(self._compressed)} parameters / {numel} elements{shard}, calls={self.calls}, "
                f"bytes_sent={self.bytes_sent})")

    # ---- paths
    def _setup(self) -> None:
        """Chooses every compressed parameter's path and makes its state (once)."""
        if self._ready:
            return
        world = rank = None
        if self.path != "gather":
            world, rank = self.world(), self.rank()
        cuda = self.device if self.device.type == "cuda" else None
        for name, (n, dtype) in self._compressed.items():
            take = "gather"
            if world is not None:
                gather, sharded = _path_bytes(self.compressor, self.sharded, n, dtype, world)
                if self.path == "sharded" or sharded < gather:
                    st = self.sharded.make_state(n, world, rank, dtype, cuda)
                    self.sharded_states[name], take = st, "sharded"
            if take == "gather":
                self.states[name] = self.compressor.make_state(n, device=self.device)
            self.paths[name] = take
        self._ready = True

    def bytes_per_step(self, world: Optional[int] = None) -> dict:
        """The bytes a rank puts on the wire per step, by path, for this model at ``world`` ranks.

        Computed from the slot sizes alone (no collective runs): the gather path's
        ``(W - 1) * (4 + max_payload_bytes(n))`` and the sharded path's
        ``(W - 1) * (S0 + S1)`` per compressed parameter (the class docstring's rule), and, for
        the parameters that travel raw, ``(W - 1) * 4 m`` gathered or
        ``2 (W - 1) * 4 ceil(m / W)`` sharded, as if the model were one bucket.

        Args:
            world (int, optional): the world size (default: the process group's).

        Returns:
            dict: ``gather`` (every compressed parameter on the gather path), ``sharded`` (every
            one on the sharded path), ``chosen`` (each on the path ``path`` gives it at that
            world size), and for comparison ``bf16_all_reduce`` and ``fp32_all_reduce`` (a
            ring all-reduce of every parameter: ``2 (W - 1) / W`` of the buffer). Casts:
            ``chosen`` is their all-reduce, ``gather`` and ``sharded`` are None.
        """
        w = int(world) if world is not None else self.world()

        def ring(nbytes: int) -> int:  # what a ring all-reduce of nbytes sends per rank
            return 2 * (w - 1) * nbytes // w

        out = {"bf16_all_reduce": ring(2 * self._numel), "fp32_all_reduce": ring(4 * self._numel)}
        if self.compressor.summable:
            return {"gather": None, "sharded": None, "chosen": ring(self.compressor.wire_bits // 8 * self._numel), **out}
        gather = sharded = chosen = 0
        any_sharded = False
        for n, dtype in self._compressed.values():
            g, s = _path_bytes(self.compressor, self.sharded, n, dtype, w)
            take = self.path == "sharded" or (self.path == "auto" and s < g)
            gather, sharded, chosen = gather + g, sharded + s, chosen + (s if take else g)
            any_sharded |= take
        m = self._small_numel
        raw_gather, raw_sharded = (w - 1) * 4 * m, 2 * (w - 1) * 4 * (-(-m // w))
        return {"gather": gather + raw_gather, "sharded": sharded + raw_sharded,
                "chosen": chosen + (raw_sharded if any_sharded else raw_gather), **out}

    # ---- checkpoints
    def state_dict(self) -> dict:
        """Every rank's codec states, for one checkpoint file.

        A collective over the process group: every rank calls it, and every rank gets the same
        dict (rank 0 typically ``torch.save``\\ s it).

        Returns:
            dict: ``format`` (2), ``codec``, ``options``, ``world_size``, ``paths`` (parameter
            name -> path), ``states`` (gather path: parameter name -> uint8 tensor
            ``[world_size, checkpoint bytes]``) and ``sharded`` (sharded path: parameter name ->
            a list of every rank's checkpoint, uint8 tensors, whose lengths may differ).
        """
        self._setup()
        self.compressor.check()  # a CUDA run's device reports: raise what they hold before saving
        if self.sharded is not None:
            self.sharded.check()
        pg = self.process_group
        gathered = gather_blobs({n: st.checkpoint() for n, st in self.states.items()}, pg)
        sharded = gather_blobs({n: self.sharded.checkpoint(st) for n, st in self.sharded_states.items()}, pg, ragged=True)
        return {"format": _FORMAT, "codec": self.codec, "options": dict(self.options), "world_size": self.world(),
                "paths": dict(self.paths), "states": gathered, "sharded": sharded}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s states into this rank's.

        At the saved world size, on the saved paths, every rank takes its own states, exactly:
        the run continues bit for bit. At another world size:

        - gather path, saved on the gather path: every rank takes the **mean** residual of the
          saved ranks (which keeps what is still owed to the averaged update,
          ``sum(residual) / world``), and its own row's step and thresholds, or rank 0's where
          it had no row.
        - sharded path, saved on the sharded path: the library's elastic restore
          (:meth:`gradcomp.Sharded.restore_elastic`). The sharded path divides the gradient by
          W before it encodes, so its residuals are in units of the averaged gradient and their
          sum over ranks is what is owed; that sum is kept exactly, each new rank holding it on
          its own new shard; thresholds restart; the step continues.
        - a parameter saved on the other path (``path="auto"`` chooses by the world size):
          what is owed to the averaged update (the gather path's mean residual, or the sharded
          path's sum of sender and owner residuals) goes to the new path the same way (every
          rank's gather residual; each rank's residual for its own shard), summed in float64
          and rounded once to float32. Thresholds restart; a gather state takes the saved step,
          a sharded state starts at step 0.

        Args:
            state_dict (dict): what :meth:`state_dict` returned (format 1 or 2).

        Raises:
            ValueError: an unknown format, another codec, or other compressed parameters.
            gradcomp.Error: a corrupted checkpoint (``code == "checksum_mismatch"``, ...).
        """
        sd = state_dict
        if sd.get("format") not in (1, _FORMAT):
            raise ValueError("gradcomp hook state: unknown format")
        if sd["codec"] != self.codec:
            raise ValueError(f"gradcomp hook state was made by codec {sd['codec']!r}, not {self.codec!r}")
        self._setup()
        saved = sd.get("paths") or {n: "gather" for n in sd["states"]}
        if set(saved) != set(self.paths):
            raise ValueError("gradcomp hook state: the compressed parameters differ from this model's")
        old, world, rank = sd["world_size"], self.world(), self.rank()
        for name, path in self.paths.items():
            if saved[name] != path:
                restore_owed(self, name, saved[name], sd)
            elif path == "sharded":
                restore_rows(self.sharded, self.sharded_states[name], sd["sharded"][name], old, world, rank)
            else:
                restore_mean(self.compressor, self.states[name], sd["states"][name], old, world, rank)

    def name_of(self, p: torch.Tensor) -> str:
        """The name of parameter p in the model the state was made for (RuntimeError if it has none)."""
        try:
            return self._names[p.data_ptr()]
        except KeyError:
            raise RuntimeError(f"gradcomp hook: a bucket holds a parameter that {type(self).__name__}'s model "
                               "does not have") from None


def _path_bytes(compressor: Compressor, sharded: Sharded, n: int, dtype: torch.dtype, world: int):
    """(gather, sharded): the bytes a rank puts on the wire per step for one compressed
    parameter of ``n`` elements at ``world`` ranks (HookState's rule)."""
    if world <= 1:
        return 0, 0
    gather = (world - 1) * (4 + compressor.max_payload_bytes(n, dtype))
    return gather, (world - 1) * sum(sharded.describe_size(k, n, world)["slot_bytes"] for k in (0, 1))
