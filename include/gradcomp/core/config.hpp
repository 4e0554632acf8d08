#pragma once
// Host/device portability macros shared by every header.

#include "version.hpp"

// The per-element math: one definition for host and device. On the host it is inlined into
// the loops that call it, whatever the optimiser's budget, so that it is compiled for the
// instruction set of each CPU version of those loops (cpu/dispatch.hpp) and vectorised with
// them; GCC does not inline an ordinary function into a loop compiled with other options.
#if defined(__CUDACC__)
#define GRADCOMP_HD __host__ __device__
#elif defined(__GNUC__) || defined(__clang__)
#define GRADCOMP_HD __attribute__((always_inline))
#else
#define GRADCOMP_HD
#endif

// A host-and-device function that is not forced inline: a recursive one, or one that runs a
// caller's callable over blocks.
#if defined(__CUDACC__)
#define GRADCOMP_HD_CALL __host__ __device__
#else
#define GRADCOMP_HD_CALL
#endif

#if defined(__CUDA_ARCH__)
#define GRADCOMP_DEVICE_CODE 1
#else
#define GRADCOMP_DEVICE_CODE 0
#endif

// Asks for the cache line holding `address` (host code; a hint that never faults).
#define GRADCOMP_PREFETCH(address) ::gradcomp::detail::prefetch_line(address)

namespace gradcomp::detail {
inline void prefetch_line(const void* address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address);
  // GCC 12 at -O2 deletes a loop whose only statements are prefetches (under -ffinite-loops
  // it counts them as free of effects): this empty asm that takes the address keeps them.
  __asm__ volatile("" : : "r"(address));
#else
  (void)address;
#endif
}
}  // namespace gradcomp::detail

// Inlined into the caller whatever the optimiser's budget: per-group math (fit, tree_sum) is
// called inside loops that run_best() compiles for AVX2, and only inlined code gets that ISA.
#if defined(__CUDACC__)
#define GRADCOMP_INLINE __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define GRADCOMP_INLINE inline __attribute__((always_inline))
#else
#define GRADCOMP_INLINE inline
#endif

// Float math whose bits are compared across backends and ISA versions must not be contracted
// into fused multiply-adds (clang does so within an expression by default, GCC across them;
// AVX-512 and user -march flags make FMA available). Headers holding such math put it
// between these markers, which turn contraction off for clang; GCC's run-time dispatched
// loops carry fp-contract=off themselves (cpu/dispatch.hpp), and the project's own builds
// pass -ffp-contract=off. A consumer comparing bits across machines builds the same way.
#if defined(__clang__) && !defined(__CUDA__)
#define GRADCOMP_PRECISE_BEGIN _Pragma("float_control(push)") _Pragma("clang fp contract(off)")
#define GRADCOMP_PRECISE_END _Pragma("float_control(pop)")
#else
#define GRADCOMP_PRECISE_BEGIN
#define GRADCOMP_PRECISE_END
#endif
