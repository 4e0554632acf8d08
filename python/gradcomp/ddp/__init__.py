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
class. docs/python.md in the repository is the package's manual; docs/transports.md maps each
path onto the collectives.

Modules, one per algorithm:

* :mod:`gradcomp.ddp.hook_state`: :class:`HookState` (the codec, the path rule, the
  per-parameter states, checkpoints);
* :mod:`gradcomp.ddp.summable_hook`: the summable casts, all-reduced;
* :mod:`gradcomp.ddp.gather_sharded`: :func:`compress_hook` and its compressed codecs on the
  gather and the sharded path, a bucket's layout;
* :mod:`gradcomp.ddp.tagc2`: TAGC-2, :class:`TagcHookState` and :func:`tagc_hook`.
"""

from .._checkpoint import shard_of
from .gather_sharded import compress_hook
from .hook_state import HookState
from .tagc2 import TagcHookState, tagc_hook

__all__ = ["HookState", "TagcHookState", "compress_hook", "shard_of", "tagc_hook"]
