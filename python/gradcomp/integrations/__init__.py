"""gradcomp's DDP hooks inside training frameworks (docs/trainers.md).

* :mod:`gradcomp.integrations.lightning`: PyTorch Lightning, :class:`GradcompDDPStrategy` and
  :func:`check_strategy`.
* :mod:`gradcomp.integrations.accelerate`: Hugging Face Accelerate (:func:`register`) and the
  Transformers ``Trainer`` (:func:`attach`, ``GradcompCallback``).

Each module imports its framework; this package imports nothing.
"""
