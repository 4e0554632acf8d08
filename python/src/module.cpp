// gradcomp._core: gradcomp's codecs on CPU and CUDA arrays. Each part of the module is bound by
// its own file: core.cpp (gradcomp.Error, codecs, build_info, crc32c), compressor.cpp (State,
// Compressor), summable.cpp (PhaseState, PhaseCodec, Tagc, SummableCast), sharded.cpp
// (ShardedState, Sharded), planner.cpp (plan_layer and its helpers) and localsteps.cpp (the local
// steps' math for gradcomp.localsteps).

#include <nanobind/nanobind.h>

#include "arrays.hpp"

NB_MODULE(_core, m) {
  using namespace gradcomp_py;
  m.doc() =
      "gradcomp's codecs on CPU and CUDA arrays (bindings of the header-only C++ library).\n\n"
      "Arrays are torch tensors or any other DLPack / buffer-protocol array (NumPy), used in place, never "
      "copied; they must be C-contiguous, on the CPU or, where build_info()['cuda'] says so, a CUDA device. "
      "gradcomp failures raise gradcomp.Error; arguments of the wrong type raise TypeError, wrong layouts "
      "ValueError.";
  bind_core(m);
  bind_state(m);
  bind_compressor(m);
  bind_summable(m);
  bind_sharded(m);
  bind_planner(m);
  bind_localsteps(m);
}
