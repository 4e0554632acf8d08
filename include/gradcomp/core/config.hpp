#pragma once
// Host/device portability macros shared by every header.

#include "version.hpp"

#if defined(__CUDACC__)
#define GRADCOMP_HD __host__ __device__
#else
#define GRADCOMP_HD
#endif

#if defined(__CUDA_ARCH__)
#define GRADCOMP_DEVICE_CODE 1
#else
#define GRADCOMP_DEVICE_CODE 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GRADCOMP_PREFETCH(address) __builtin_prefetch(address)
#else
#define GRADCOMP_PREFETCH(address) ((void)(address))
#endif

// Inlined into the caller whatever the optimiser's budget: per-group math (fit, tree_sum) is
// called inside loops that run_best() compiles for AVX2, and only inlined code gets that ISA.
#if defined(__CUDACC__)
#define GRADCOMP_INLINE __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define GRADCOMP_INLINE inline __attribute__((always_inline))
#else
#define GRADCOMP_INLINE inline
#endif
