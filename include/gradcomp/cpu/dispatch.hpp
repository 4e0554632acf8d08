#pragma once
// Hot loops are compiled twice: for the baseline ISA and for AVX2, picked at run time, so
// users get vector code without -march flags. AVX2 enables no FMA, and the loops use integer
// math and plain IEEE adds and multiplies, so both versions produce the same bits (tests
// compare them).

#include <atomic>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#include <cpuid.h>
#define GRADCOMP_CPU_DISPATCH 1
// Marks the lambda handed to run_best(), so its loop is compiled inside each ISA variant.
#define GRADCOMP_LOOP_BODY __attribute__((always_inline))
// The ISA of the AVX2 version: AVX2 and F16C, which every CPU with AVX2 also has. With both
// in one target, the F16C conversions of fp16 and fp8 inline into the loops that call them
// (fp8 with a scale per group of 128 made a call per group).
#define GRADCOMP_AVX2_ISA "avx2,f16c"
// Compiles a function for the AVX2 version (its caller must check avx2_active() or be such
// code itself).
#define GRADCOMP_TARGET_AVX2 __attribute__((target(GRADCOMP_AVX2_ISA)))
#else
#define GRADCOMP_CPU_DISPATCH 0
#define GRADCOMP_LOOP_BODY
#define GRADCOMP_TARGET_AVX2
#endif

// GCC's -O2 vectorises only the loops its "very cheap" cost model accepts, which leaves most
// of the library's loops scalar: int8 decompress took 3x the time at -O2 (RelWithDebInfo's
// level) as at -O3. The functions that run the hot loops (run_best's two versions, the
// pipelined store) therefore ask for -O3 in optimised GCC builds; -O0 builds stay as they
// are, and clang vectorises at -O2 already.
#if GRADCOMP_CPU_DISPATCH && defined(__OPTIMIZE__) && !defined(__clang__)
#define GRADCOMP_VECTORIZE __attribute__((optimize("O3")))
#else
#define GRADCOMP_VECTORIZE
#endif

namespace gradcomp::cpu {

// Whether run_best() may use AVX2 (default: when the CPU has it). Tests and benchmarks turn
// it off to check and measure the baseline version.
inline std::atomic<bool>& avx2_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

#if GRADCOMP_CPU_DISPATCH
namespace detail {
template <class F>
GRADCOMP_VECTORIZE GRADCOMP_TARGET_AVX2 void run_avx2(F& f) {
  f();
}
template <class F>
GRADCOMP_VECTORIZE void run_baseline(F& f) {
  f();
}
// Whether the CPU has the AVX2 version's ISA, GRADCOMP_AVX2_ISA. F16C is CPUID leaf 1, ECX
// bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
inline bool cpu_has_avx2() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
  }();
  return has;
}
}  // namespace detail

// Whether run_best() runs its AVX2 version now.
inline bool avx2_active() { return detail::cpu_has_avx2() && avx2_allowed().load(std::memory_order_relaxed); }

template <class F>
void run_best(F&& f) {
  if (avx2_active()) {
    detail::run_avx2(f);
  } else {
    detail::run_baseline(f);
  }
}
#else
inline bool avx2_active() { return false; }

template <class F>
void run_best(F&& f) {
  f();
}
#endif

}  // namespace gradcomp::cpu
