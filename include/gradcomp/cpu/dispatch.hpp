#pragma once
// Hot loops are compiled once per instruction set, for the baseline ISA, for AVX2 and for
// AVX-512, and the best one the CPU has is picked at run time, so users get vector code
// without -march flags. The loops are the same source (a lambda marked GRADCOMP_LOOP_BODY,
// inlined into each version); the compilers vectorise them for each ISA.
//
// Every version produces the same bits: the loops use integer math and plain IEEE adds and
// multiplies, and no version may fuse a multiply and an add (AVX-512 has FMA, and GCC and
// clang would contract `a * b + c` by default): the versions carry optimize("fp-contract=off")
// with GCC, and the headers holding float math turn contraction off for clang
// (GRADCOMP_PRECISE_BEGIN in core/config.hpp). Tests compare the versions' payloads.

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#include <cpuid.h>
#define GRADCOMP_CPU_DISPATCH 1
// Marks the lambda handed to run_best(), so its loop is compiled inside each ISA version.
#define GRADCOMP_LOOP_BODY __attribute__((always_inline))
#define GRADCOMP_ISA_AVX2 "avx2,f16c,bmi,bmi2,popcnt"
#define GRADCOMP_ISA_AVX512 "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,bmi,bmi2,popcnt"
#else
#define GRADCOMP_CPU_DISPATCH 0
#define GRADCOMP_LOOP_BODY
#endif

// GCC's -O2 vectorises only the loops its "very cheap" cost model accepts; the versions ask
// for -O3 in optimised GCC builds (-O0 builds stay as they are; clang vectorises at -O2).
#if GRADCOMP_CPU_DISPATCH && !defined(__clang__) && defined(__OPTIMIZE__)
#define GRADCOMP_VERSION_OPTIONS __attribute__((optimize("O3", "fp-contract=off")))
#elif GRADCOMP_CPU_DISPATCH && !defined(__clang__)
#define GRADCOMP_VERSION_OPTIONS __attribute__((optimize("fp-contract=off")))
#else
#define GRADCOMP_VERSION_OPTIONS
#endif

namespace gradcomp::cpu {

enum class isa : std::uint8_t { baseline = 0, avx2 = 1, avx512 = 2 };

// The highest version run_best() may use (default: all). Tests and benchmarks lower it to
// check and measure the others.
inline std::atomic<isa>& isa_limit() {
  static std::atomic<isa> limit{isa::avx512};
  return limit;
}

#if GRADCOMP_CPU_DISPATCH
namespace detail {
// What the CPU (and the OS, for the vector registers' state) supports.
inline isa detect_isa() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return isa::baseline;
  const bool osxsave = c >> 27 & 1u, f16c = c >> 29 & 1u, popcnt = c >> 23 & 1u;
  if (!osxsave || !f16c || !popcnt) return isa::baseline;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return isa::baseline;  // SSE and AVX state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return isa::baseline;
  const bool avx2 = b >> 5 & 1u, bmi1 = b >> 3 & 1u, bmi2 = b >> 8 & 1u;
  if (!avx2 || !bmi1 || !bmi2) return isa::baseline;
  const bool avx512 = (b >> 16 & 1u) && (b >> 17 & 1u) && (b >> 30 & 1u) && (b >> 31 & 1u);  // F, DQ, BW, VL
  return avx512 && (xcr0_lo & 0xe0u) == 0xe0u ? isa::avx512 : isa::avx2;                     // opmask, ZMM state
}

template <class F>
GRADCOMP_VERSION_OPTIONS __attribute__((target(GRADCOMP_ISA_AVX512))) void run_avx512(F& f) {
  f();
}
template <class F>
GRADCOMP_VERSION_OPTIONS __attribute__((target(GRADCOMP_ISA_AVX2))) void run_avx2(F& f) {
  f();
}
template <class F>
GRADCOMP_VERSION_OPTIONS void run_baseline(F& f) {
  f();
}
}  // namespace detail

// The version run_best() runs now.
inline isa active_isa() {
  static const isa detected = detail::detect_isa();
  const isa limit = isa_limit().load(std::memory_order_relaxed);
  return limit < detected ? limit : detected;
}

namespace detail {
template <class F>
void run_best(F&& f) {
  switch (active_isa()) {
    case isa::avx512: return run_avx512(f);
    case isa::avx2: return run_avx2(f);
    default: return run_baseline(f);
  }
}
}  // namespace detail
#else
inline isa active_isa() { return isa::baseline; }

namespace detail {
template <class F>
void run_best(F&& f) {
  f();
}
}  // namespace detail
#endif

}  // namespace gradcomp::cpu
