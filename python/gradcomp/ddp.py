"""DDP communication hooks that send gradients through gradcomp.

One hook function per algorithm, each with its own state class, as in
``torch.distributed.algorithms.ddp_comm_hooks``:

* :func:`compress_hook` with :class:`HookState`: a gradcomp codec chosen by name
  (``gradcomp.codecs()``).

  - Summable casts (``fp32``, ``bf16``, ``fp16``): the bucket is divided by the world size,
    cast to the wire type with the library's conversion, all-reduced (SUM in the wire type, as
    PyTorch's own fp16 / bf16 hooks do) and decoded back into the bucket.
  - Every other codec: each parameter of the bucket with at least ``min_compress_numel``
    elements is compressed on its own, with its own state keyed by the parameter's name, so
    DDP's bucket layout (rebuilt after the first step) never changes what is sent. Each such
    parameter takes one of two paths (``HookState(path=...)``):

    * the **gather path**: the parameter's frames, in a slot of fixed size, are all-gathered;
      every rank decodes every rank's frames in rank order. A rank sends (W - 1) payloads per
      step, a number that grows with the world size W.
    * the **sharded path** (:class:`gradcomp.Sharded`, all-reduce mode): each rank compresses
      shard j of the parameter for rank j; one ``all_to_all_single`` delivers them; rank j
      checks its W slots, sums them in fp32 in rank order, compresses the sum again (with error
      feedback of its own), and one ``all_gather_into_tensor`` gives every rank every reduced
      shard. About 2 (W - 1) / W of one payload per rank, whatever W.

    ``path="auto"`` (the default) sends each parameter the way that puts fewer bytes on the
    wire (:meth:`HookState.bytes_per_step`). Smaller parameters (biases, norms) travel as raw
    float32: in the gather slot, or, in a bucket with sharded parameters, as raw shards through
    the same all-to-all and all-gather. Every rank decodes the same bytes in the same order, so
    replicas stay bit-identical on both paths.

* :func:`tagc_hook` with :class:`TagcHookState`: TAGC-2. Every matrix parameter with at least
  ``min_compress_numel`` elements has its own TAGC state; a bucket's bitmaps go out in one
  all-reduce (BOR, or SUM for the sum-safe packing), then its sketches, with the bucket's other
  parameters cast to the cell type, in one SUM all-reduce; every rank decodes every shard.

Example::

    >>> import gradcomp.ddp
    >>> model = torch.nn.parallel.DistributedDataParallel(net)
    >>> state = gradcomp.ddp.HookState(model, "topk", density=0.01)  # top-k 1% + error feedback
    >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)

The hook states are checkpointable: ``state_dict()`` (a collective: every rank calls it)
gathers every rank's residuals, thresholds and steps; ``load_state_dict()`` restores them,
exactly when the world size is unchanged, and into another world size as described on each
class. docs/integrations.md in the repository maps each path onto the collectives.
"""

# No `from __future__ import annotations`: DDP's register_comm_hook checks the hooks' annotations
# against dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, not strings.
import time
from typing import Callable, Optional

import numpy as np
import torch
import torch.distributed as dist

from ._core import Compressor, Sharded
from ._gather import gather_blobs
from .tagc import TagcStates

__all__ = ["HookState", "TagcHookState", "compress_hook", "shard_of", "tagc_hook"]

_WIRE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
_FORMAT = 2  # 1: gather-path states only (still read)
_PATHS = ("auto", "gather", "sharded")


def _strip(name: str) -> str:
    return name[len("module."):] if name.startswith("module.") else name


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _set_residual(st, values: np.ndarray) -> None:
    """Overwrites a gather-path state's residual, on the CPU or its CUDA device."""
    if st.device == "cpu":
        np.asarray(st.residual)[:] = values
    else:
        st.residual.copy_(torch.from_numpy(values))


def _grad_dtype(p: torch.Tensor) -> torch.dtype:
    return torch.bfloat16 if p.dtype == torch.bfloat16 else torch.float32


def shard_of(n: int, world: int, rank: int):
    """(offset, count) of shard ``rank`` of ``n`` elements over ``world`` (summable::shard_of)."""
    size = -(-n // world)
    first = min(n, rank * size)
    return first, min(n, first + size) - first


def _expect_state(state, cls, hook: str) -> None:
    """Raises TypeError unless state is a cls (the state class that hook is written for)."""
    if isinstance(state, cls):
        return
    other = {HookState: "TagcHookState and tagc_hook", TagcHookState: "HookState and compress_hook"}[cls]
    raise TypeError(f"gradcomp.ddp.{hook} expects a gradcomp.ddp.{cls.__name__} as its state, got "
                    f"{type(state).__name__}; register it with model.register_comm_hook(state, gradcomp.ddp.{hook}) "
                    f"(other algorithms have their own pair: {other})")


class HookState:
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
            self._names[p.data_ptr()] = _strip(name)
            self._numel += p.numel()
            if self.compressor.summable:
                continue
            if p.numel() >= self.min_compress_numel:
                self._compressed[_strip(name)] = (p.numel(), _grad_dtype(p))
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

    # ---- collectives
    def world(self) -> int:
        """The size of the process group."""
        return dist.get_world_size(self.process_group)

    def rank(self) -> int:
        """This process's rank in the process group."""
        return dist.get_rank(self.process_group)

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
                self._restore_across(name, saved[name], sd)
            elif path == "sharded":
                st, blobs = self.sharded_states[name], [t.numpy().tobytes() for t in sd["sharded"][name]]
                if old == world:
                    self.sharded.load_checkpoint(st, blobs[rank])
                else:
                    self.sharded.restore_elastic(st, blobs)
            else:
                self._restore_gather(name, sd["states"][name], old, world, rank)

    def _restore_gather(self, name: str, rows: torch.Tensor, old: int, world: int, rank: int) -> None:
        st = self.states[name]
        if old == world:
            st.restore(rows[rank].numpy().tobytes())
            return
        # Another world size: every rank takes the mean residual, so that the total still owed,
        # sum(residual) / world, is what it was. Step and thresholds: rank's own row if it had
        # one, else rank 0's.
        st.restore(rows[rank if rank < old else 0].numpy().tobytes())
        if st.residual.shape[0]:
            tmp = self.compressor.make_state(st.size)
            mean = np.zeros(st.size, dtype=np.float64)
            for r in range(old):
                tmp.restore(rows[r].numpy().tobytes())
                mean += np.asarray(tmp.residual)
            _set_residual(st, (mean / old).astype(np.float32))

    def _owed(self, name: str, path: str, sd: dict):
        """What a saved parameter still owes the averaged update (float64, whole parameter) and
        its saved step."""
        n, dtype = self._compressed[name]
        old, owed = sd["world_size"], np.zeros(n, dtype=np.float64)
        if path == "gather":
            tmp, rows = self.compressor.make_state(n), sd["states"][name]
            for r in range(old):
                tmp.restore(rows[r].numpy().tobytes())
                if tmp.residual.shape[0]:
                    owed += np.asarray(tmp.residual)
            tmp.restore(rows[0].numpy().tobytes())
            return owed / old, tmp.step
        step = 0
        for r, blob in enumerate(sd["sharded"][name]):
            tmp = self.sharded.make_state(n, old, r, dtype)
            self.sharded.load_checkpoint(tmp, blob.numpy().tobytes())
            for j in range(old):
                off, count = shard_of(n, old, j)
                if count and tmp.sender_residual(j).shape[0]:
                    owed[off:off + count] += np.asarray(tmp.sender_residual(j))
            off, count = tmp.shard
            if count and tmp.owner_residual.shape[0]:
                owed[off:off + count] += np.asarray(tmp.owner_residual)
            step = tmp.step
        return owed, step

    def _restore_across(self, name: str, was: str, sd: dict) -> None:
        owed, step = self._owed(name, was, sd)
        if self.paths[name] == "gather":
            st = self.states[name]
            st.step = step
            if st.residual.shape[0]:
                _set_residual(st, owed.astype(np.float32))
            return
        st = self.sharded_states[name]
        off, count = st.shard
        mine = st.sender_residual(st.rank)
        if count and mine.shape[0]:
            mine[:] = owed[off:off + count].astype(np.float32)

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


class _Plan:
    """A bucket's fixed layout.

    Without sharded parameters, one all-gather of a block ``[int32 frame sizes | frames,
    max_payload_bytes each | raw fp32 of the small parameters]``. With them, first an all-to-all
    of W blocks (block j: ``[each sharded parameter's slot for shard j | shard j of the small
    parameters' raw fp32]``), then the all-gather of ``[int32 frame sizes | gather-path frames
    | each sharded parameter's re-encoded shard | this rank's reduced shard of the small
    parameters]``. Every offset is a multiple of 8.
    """

    def __init__(self, state: HookState, names, grads):
        c, world = state.compressor, state.world()
        dev = grads[0].device if grads else torch.device("cpu")
        self.gather, self.shard, self.small = [], [], []
        m = 0
        for i, (name, g) in enumerate(zip(names, grads)):
            path = state.paths.get(name)
            if path == "sharded":
                self.shard.append([i, name])
            elif path == "gather":
                self.gather.append([i, name])
            else:
                self.small.append((i, m, g.numel()))
                m += g.numel()
        self.small_count = m
        slots = [[state.sharded.describe(k, state.sharded_states[e[1]])["slot_bytes"] for k in (0, 1)] for e in self.shard]
        q = -(-m // world)  # raw values per shard
        layout = c.gather_layout([grads[e[0]].numel() for e in self.gather], [grads[e[0]].dtype for e in self.gather],
                                 [s1 for _, s1 in slots], q if self.shard else m, dev.type == "cuda")
        for e, at, cap in zip(self.gather, layout["offsets"], layout["caps"]):
            e += [at, cap]
        self.small1, self.block1 = layout["small_offset"], layout["block_bytes"]
        if self.shard:
            at0, most = 0, 0
            for e, (s0, s1), at in zip(self.shard, slots, layout["slot_offsets"]):
                e += [at0, s0, at, s1]
                at0, most = at0 + s0, max(most, s0)
            self.q = q
            self.small0, self.block0 = at0, _align8(at0 + 4 * self.q)
            self.send0 = torch.zeros(world * self.block0, dtype=torch.uint8, device=dev)
            self.recv0 = torch.empty(world * self.block0, dtype=torch.uint8, device=dev)
            self.scratch = torch.empty(world * most, dtype=torch.uint8, device=dev)
            self.raw = torch.zeros(world * self.q, dtype=torch.float32, device=dev)
        self.send = torch.zeros(self.block1, dtype=torch.uint8, device=dev)
        self.gather_states = [state.states[e[1]] for e in self.gather]
        self.gather_offsets = [e[2] for e in self.gather]
        self.recv = torch.empty(world * self.block1, dtype=torch.uint8, device=dev)


def compress_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket through a gradcomp codec.

    Summable casts all-reduce the bucket cast to the wire type. Every other codec compresses
    each large parameter of the bucket with its own state, on the path :class:`HookState`
    chose for it: gather-path frames are all-gathered and every rank decodes them in rank
    order; sharded-path parameters go through one ``all_to_all_single`` (waited for inside the
    hook) and the same all-gather (the module docstring has the details).

    Args:
        state (HookState): the codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`HookState`, or a summable cast gets a bucket that
            is not float32.
        gradcomp.Error: a frame or slot failed validation (``.code`` says why).

    Example::

        >>> state = gradcomp.ddp.HookState(model, "topk", density=0.01)
        >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)
    """
    _expect_state(state, HookState, "compress_hook")
    state.calls += 1
    if state.compressor.summable:
        return _summable(state, bucket)
    state._setup()
    return _compressed(state, bucket)


def _summable(state: HookState, bucket) -> torch.futures.Future:
    buf, pg, world = bucket.buffer(), state.process_group, state.world()
    c = state.compressor
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.compress_hook: summable casts expect float32 buckets")
    if c.wire_bits == 32:
        buf.div_(world)
        state.bytes_sent += buf.numel() * 4
        state.wire_bytes += 2 * (world - 1) * buf.numel() * 4 // world
        return dist.all_reduce(buf, group=pg, async_op=True).get_future().then(lambda f: f.value()[0])
    wire = state._wire.get(bucket.index())
    if wire is None or wire.numel() != buf.numel():
        wire = state._wire[bucket.index()] = torch.empty(buf.numel(), dtype=_WIRE_DTYPE[state.codec], device=buf.device)
    c.encode_cast(buf, wire, 1.0 / world)
    state.bytes_sent += wire.numel() * wire.element_size()
    state.wire_bytes += 2 * (world - 1) * wire.numel() * wire.element_size() // world

    def done(_):
        c.decode_cast(wire, buf)
        return buf

    return dist.all_reduce(wire, group=pg, async_op=True).get_future().then(done)


def _scatter(state: HookState, plan: _Plan, grads) -> None:
    """Phase 0 of the bucket's sharded parameters and small parameters: the all-to-all, waited
    for, each shard's sum, and phase 1's encoding into the all-gather block."""
    pg, world, codec = state.process_group, state.world(), state.sharded
    send0 = plan.send0.view(world, plan.block0)
    for i, name, at0, s0, _, _ in plan.shard:
        g = grads[i]
        g.div_(world)  # residuals in units of the average: their sum over ranks is what is owed
        buf = plan.scratch[:world * s0]
        codec.encode(0, g, state.sharded_states[name], buf)
        send0[:, at0:at0 + s0].copy_(buf.view(world, s0))
    q = plan.q
    if plan.small:
        raw = plan.raw
        for i, at, n in plan.small:
            raw[at:at + n].copy_(grads[i])
        raw.div_(world)
        send0[:, plan.small0:plan.small0 + 4 * q].copy_(raw.view(world, q).view(torch.uint8))
    # Waited for, and the all-gather issued from this thread: every rank issues its collectives
    # in the same order.
    dist.all_to_all_single(plan.recv0, plan.send0, group=pg)
    state.bytes_sent += plan.send0.numel()
    state.wire_bytes += (world - 1) * plan.block0
    recv0 = plan.recv0.view(world, plan.block0)
    for i, name, at0, s0, at1, s1 in plan.shard:
        st = state.sharded_states[name]
        codec.receive(0, st, recv0[:, at0:at0 + s0].contiguous().view(-1))
        codec.encode(1, None, st, plan.send[at1:at1 + s1])
    if plan.small:
        parts = recv0[:, plan.small0:plan.small0 + 4 * q].contiguous().view(torch.float32)
        total = parts[0].clone()
        for r in range(1, world):  # rank order: the same sum on every run
            total.add_(parts[r])
        plan.send[plan.small1:plan.small1 + 4 * q].view(torch.float32).copy_(total)


def _compressed(state: HookState, bucket) -> torch.futures.Future:
    t0 = time.perf_counter()
    pg, world = state.process_group, state.world()
    c = state.compressor
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state.name_of(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _Plan(state, names, grads)
    if plan.shard:
        _scatter(state, plan, grads)
    send = plan.send
    # One C++ call per bucket each way. On a CUDA device a frame's size is fixed by the codec and
    # the parameter's size, the same on every rank: the sizes travel for the CPU's sake, and the
    # receiver uses its own.
    outs = [grads[e[0]] for e in plan.gather]
    local = c.compress_many(outs, plan.gather_states, send, plan.gather_offsets) if outs else []
    if local:
        send[:4 * len(local)].view(torch.int32).copy_(torch.tensor(local, dtype=torch.int32))
    if plan.small and not plan.shard:
        small = send[plan.small1:plan.small1 + 4 * plan.small_count].view(torch.float32)
        for i, at, n in plan.small:
            small[at:at + n].copy_(grads[i])
    state.bytes_sent += plan.block1
    state.wire_bytes += (world - 1) * plan.block1

    def done(_):
        t1 = time.perf_counter()
        recv = plan.recv.view(world, plan.block1)
        for i, name, _, _, at1, s1 in plan.shard:
            state.sharded.receive(1, state.sharded_states[name], recv[:, at1:at1 + s1].contiguous().view(-1), grads[i])
        if outs:  # every rank's frames in rank order: every replica adds the same way
            torch._foreach_zero_(outs)
            c.accumulate_many(plan.recv, plan.block1, outs, plan.gather_offsets, local if plan.recv.is_cuda else None)
            torch._foreach_div_(outs, world)
        if plan.small and plan.shard:  # every rank's reduced shard, in shard order
            raw = recv[:, plan.small1:plan.small1 + 4 * plan.q].contiguous().view(torch.float32).view(-1)
            for i, at, n in plan.small:
                grads[i].copy_(raw[at:at + n])
        elif plan.small:
            raw = recv[:, plan.small1:plan.small1 + 4 * plan.small_count].view(torch.float32)
            for i, at, n in plan.small:
                g = grads[i]
                g.copy_(raw[0, at:at + n])
                for r in range(1, world):
                    g.add_(raw[r, at:at + n])
                g.div_(world)
        state.hook_seconds += time.perf_counter() - t1
        return bucket.buffer()

    state.hook_seconds += time.perf_counter() - t0
    return dist.all_gather_into_tensor(plan.recv, send, group=pg, async_op=True).get_future().then(done)


class TagcHookState(TagcStates):
    """State of :func:`tagc_hook`: TAGC-2 with one TAGC state per compressed parameter.

    States are keyed by the parameter's name, so DDP's bucket rebuild changes nothing; the
    phases are batched per bucket. Parameters that are not compressed travel cast to the cell
    type (bf16 by default), as TAGC-2 does. The states live where the parameters do (CPU or
    a CUDA device). The bitmap packing follows the process group's backend unless ``bitmap``
    is given: ``"or"`` (gloo's BOR), ``"sum_safe"`` on NCCL, which has no bitwise OR.

    Args:
        model (torch.nn.Module): the model whose gradients the hook reduces.
        preset (str): ``"default"`` (adaptive sketch), ``"tagc2"`` (ratio 10) or ``"v1"``, as
            for :func:`gradcomp.Tagc`.
        process_group (ProcessGroup, optional): the group to reduce over (default: the world).
        min_compress_numel (int): the default selection's smallest compressed parameter
            (default 1024).
        select (Callable[[str, torch.nn.Parameter], bool], optional): chooses the compressed
            parameters by name and parameter (default: matrices of at least
            ``min_compress_numel`` elements: embeddings, attention and MLP weights, LM head).
        **config: :func:`gradcomp.Tagc`'s options (``density``, ``bitmap``, ``cells``, ...).

    Raises:
        gradcomp.Error: an unknown preset or option, or an invalid value.

    Checkpoints: :meth:`state_dict` gathers every rank's TAGC checkpoint bytes;
    :meth:`load_state_dict` restores each rank's own row at the saved world size, and runs the
    library's elastic restore at another (the residuals' sum is kept, each new rank holding its
    shard of it).

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model, "tagc2")
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """

    def __init__(self, model: torch.nn.Module, preset: str = "default", process_group: Optional[dist.ProcessGroup] = None,
                 min_compress_numel: int = 1024, select: Optional[Callable[[str, torch.nn.Parameter], bool]] = None,
                 **config) -> None:
        super().__init__(preset, process_group, **config)
        self.min_compress_numel = int(min_compress_numel)
        select = select or (lambda name, p: p.dim() >= 2 and p.numel() >= self.min_compress_numel)
        world, rank = self.world(), self.rank()
        self._names = {}
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            self._names[p.data_ptr()] = _strip(name)
            if select(_strip(name), p):
                self.states[_strip(name)] = self.codec.make_state(p.numel(), world, rank, p.device if p.is_cuda else None)
        self._plans = {}  # bucket parameter names -> _TagcPlan

    name_of = HookState.name_of


class _TagcPlan:
    """A bucket's compressed parameters (their bitmap words' offsets) and the others."""

    def __init__(self, state: TagcHookState, names, grads):
        self.big, self.small, at = [], [], 0
        for i, name in enumerate(names):
            if name in state.states:
                words = state.codec.describe(0, state.states[name])["count"]
                self.big.append((i, name, at, words))
                at += words
            else:
                self.small.append(i)
        self.bits = torch.empty(at, dtype=torch.int32, device=grads[0].device)
        self.small_count = sum(grads[i].numel() for i in self.small)


def tagc_hook(state: TagcHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket with TAGC-2.

    Per bucket: the gradient divided by the world size; one all-reduce of every compressed
    parameter's bitmap words (int32, BOR; SUM with ``bitmap="sum_safe"``, the default on NCCL),
    waited for inside the hook; then one SUM all-reduce of every compressed parameter's sketch
    cells followed by the other parameters cast to the cell type. The future decodes each
    parameter's whole buffer on every rank (the same bits everywhere).

    On CUDA gradients the states live on the device and nothing waits for it: on NCCL the
    wait for the bitmap is a stream dependency, and the sketch buffer has its padded size
    (:meth:`gradcomp.PhaseCodec.make_state`). Errors the device finds in a reduced buffer are
    raised by ``state.codec.check()``, which also runs every ``state.codec.check_interval``
    steps of the states together and in :meth:`state_dict`.

    Args:
        state (TagcHookState): the TAGC codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`TagcHookState`, or the bucket is not float32.
        gradcomp.Error: a reduced buffer failed the library's checks.

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model)
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """
    _expect_state(state, TagcHookState, "tagc_hook")
    state.calls += 1
    buf, pg, world, c = bucket.buffer(), state.process_group, state.world(), state.codec
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.tagc_hook: float32 buckets expected")
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state.name_of(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _TagcPlan(state, names, grads)
    buf.div_(world)  # the codec sums averages; residuals are in the average's units
    # Phase 0, waited for: the sketch's size follows from the union, and issuing the second
    # collective here (not from a callback) keeps the ranks' collectives in one order. With
    # CUDA states the wait is the stream's (NCCL), not the host's: describe(1) is the padded
    # sketch's, known before the union.
    for i, name, at, words in plan.big:
        c.encode(0, grads[i], state.states[name], plan.bits[at:at + words])
    if plan.big:
        dist.all_reduce(plan.bits, op=state.bitmap_op, group=pg)
    counts = []
    for i, name, at, words in plan.big:
        st = state.states[name]
        c.receive(0, st, plan.bits[at:at + words])
        counts.append(c.describe(1, st)["count"])
    # Phase 1: every compressed parameter's sketch, then the others cast to the cell type.
    sketched = sum(counts)
    cells = torch.empty(sketched + plan.small_count, dtype=state.cell_dtype, device=buf.device)
    at = 0
    for (i, name, _, _), n in zip(plan.big, counts):
        c.encode(1, grads[i], state.states[name], cells[at:at + n])
        at += n
    for i in plan.small:
        n = grads[i].numel()
        cells[at:at + n].copy_(grads[i])  # round to nearest even, as the library's casts
        at += n
    state.bytes_sent += plan.bits.numel() * 4 + cells.numel() * cells.element_size()

    def done(_):
        at = 0
        for (i, name, _, _), n in zip(plan.big, counts):
            st = state.states[name]
            c.receive(1, st, cells[at:at + n], grads[i])
            c.finish_step(st)
            state.count(st)
            at += n
        for i in plan.small:
            n = grads[i].numel()
            grads[i].copy_(cells[at:at + n])
            at += n
        return buf

    return dist.all_reduce(cells, group=pg, async_op=True).get_future().then(done)
