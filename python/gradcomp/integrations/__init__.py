"""gradcomp inside training frameworks (docs/trainers.md).

* :mod:`gradcomp.integrations.lightning`: PyTorch Lightning, :class:`GradcompDDPStrategy` and
  :func:`check_strategy`.
* :mod:`gradcomp.integrations.accelerate`: Hugging Face Accelerate (:func:`register`).
* :mod:`gradcomp.integrations.transformers`: the Transformers ``Trainer`` (:func:`attach`,
  :class:`GradcompCallback`).
* :mod:`gradcomp.integrations.torchtitan`: torchtitan's FSDP2 parallelize function
  (:func:`wrap_parallelize`, :func:`with_gradcomp`).
* :mod:`gradcomp.integrations.torchft`: torchft's DiLoCo pseudo-gradients through a codec
  (:class:`CompressedProcessGroup`).

Each module imports its framework; this package imports nothing. Each checks the codec and its
options where it is made (a ``ValueError`` naming the problem), before any process is launched.
"""
