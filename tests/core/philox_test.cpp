// random16_fill (the host batch form, compiled into each CPU version of the loops that call
// it) gives exactly random16_at's numbers, in every version, for any length and counters whose
// low word wraps inside a batch.
#include <gradcomp/core/philox.hpp>
#include <gradcomp/cpu/dispatch.hpp>

#include "support/isa.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace gradcomp;

namespace {

// random16_fill as the CPU version run_best() picks compiles it.
void fill(std::uint32_t* out, std::uint64_t m0, std::size_t n, std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
          random_stream stream) {
  cpu::detail::run_best([&]() GRADCOMP_LOOP_BODY { random16_fill(out, m0, n, seed, step, chunk, stream); });
}

constexpr std::uint32_t sentinel = 0x5a5a5a5au;

// Fills n values from m0 and compares them with random16_at; also checks that nothing past n
// rounded up to a multiple of 64 (what the caller must provide) was written.
void check_fill(std::uint64_t m0, std::size_t n, std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
                random_stream stream) {
  const std::size_t room = (n + 63) / 64 * 64;
  std::vector<std::uint32_t> out(room + 64, sentinel);
  fill(out.data(), m0, n, seed, step, chunk, stream);
  std::size_t wrong = 0, first_wrong = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i] != random16_at(seed, step, chunk, stream, m0 + i)) {
      if (!wrong) first_wrong = i;
      ++wrong;
    }
  }
  std::size_t overrun = 0;
  for (std::size_t i = room; i < out.size(); ++i) overrun += out[i] != sentinel;
  INFO("m0 = " << m0 << ", n = " << n << ", seed = " << seed << ", step = " << step << ", chunk = " << chunk
               << ", stream = " << static_cast<std::uint32_t>(stream)
               << ", version = " << static_cast<int>(cpu::active_isa()) << ", first wrong index = " << first_wrong);
  CHECK(wrong == 0);
  CHECK(overrun == 0);
}

}  // namespace

TEST_CASE("random16_fill equals random16_at, with and without AVX2") {
  constexpr std::uint64_t wrap = std::uint64_t{1} << 32;  // counter q = m0 / 8 whose low word wraps
  const std::uint64_t m0s[] = {
      0,
      8,
      8 * 1000,
      8 * (wrap - 3),    // wraps in the first eight counters
      8 * (wrap - 12),   // wraps in the second eight
      8 * (wrap - 20),   // wraps in a later batch
      8 * (3 * wrap + 5),
      8 * ((std::uint64_t{1} << 61) - 200),  // near the largest counters
  };
  const std::size_t ns[] = {0,   1,   2,   7,   8,   9,   56,  63,  64,  65,  100, 127,
                            128, 129, 135, 136, 191, 192, 193, 255, 256, 257, 1000};
  const std::uint32_t seeds[] = {0u, 1u, 0x9e3779b9u, 0xffffffffu};
  const std::uint64_t steps[] = {0u, 1u, 0xfffffffeu, (std::uint64_t{7} << 32) | 3u};
  const std::uint32_t chunks[] = {0u, 5u, 0xffffffffu};
  for (const cpu::isa version : test::isas()) {
    const test::isa_scope scope(version);
    for (const std::uint64_t m0 : m0s)
      for (const std::size_t n : ns) check_fill(m0, n, 12345u, 77u, 3u, random_stream::quantizer);
    for (const std::uint32_t seed : seeds)
      for (const std::uint64_t step : steps)
        for (const std::uint32_t chunk : chunks)
          for (const random_stream stream : {random_stream::quantizer, random_stream::sparsifier})
            for (const std::uint64_t m0 : {m0s[0], m0s[4], m0s[7]})
              for (const std::size_t n : {std::size_t{9}, std::size_t{135}, std::size_t{257}})
                check_fill(m0, n, seed, step, chunk, stream);
  }
}

TEST_CASE("random16_fill: every version gives the same numbers for a long run") {
  const std::size_t n = 100000 + 17;
  std::vector<std::uint32_t> with(n + 64), without(n + 64);
  {
    const test::isa_scope scope(cpu::isa::baseline);
    fill(without.data(), 8 * 4242, n, 0xabcdef01u, 99u, 17u, random_stream::quantizer);
  }
  for (const cpu::isa version : test::isas()) {
    const test::isa_scope scope(version);
    fill(with.data(), 8 * 4242, n, 0xabcdef01u, 99u, 17u, random_stream::quantizer);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += with[i] != without[i];
    CHECK(wrong == 0);
  }
  // Spot checks against the per-value definition across the whole run.
  for (std::size_t i = 0; i < n; i += 997)
    CHECK(with[i] == random16_at(0xabcdef01u, 99u, 17u, random_stream::quantizer, 8 * 4242 + i));
}
