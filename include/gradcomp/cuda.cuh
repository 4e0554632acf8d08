#pragma once
// gradcomp CUDA backend (compile with nvcc): compressor<...> executed on the GPU with the
// same payload bytes as the CPU. See docs/cuda.md. The host umbrella, gradcomp.hpp, never
// includes CUDA headers; this one includes it.

#include "gradcomp.hpp"
#include "cuda/common.cuh"
#include "cuda/compressor.cuh"
#include "cuda/crc32c.cuh"
#include "cuda/localsteps.cuh"
#include "cuda/sharded.cuh"
#include "cuda/tagc.cuh"
#include "cuda/topk_select.cuh"
