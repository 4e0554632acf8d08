#pragma once
// The executor of tagc/flow.hpp as plain host loops, one "thread" after another and
// one "kernel" after another, over host memory standing in for device memory: the GPU's
// algorithm, step for step, checked against the host codec without a GPU.

#include <gradcomp/tagc/flow.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace gradcomp::test::tagc {

namespace td = gradcomp::tagc::detail;

struct host_executor {
  std::uint64_t launches = 0;  // steps that ran (not skipped by their guard)
  std::uint64_t skipped = 0;

  template <class F>
  void map(std::uint64_t n, const F& f, td::guard g) {
    if (g.skip()) {
      ++skipped;
      return;
    }
    ++launches;
    for (std::uint64_t i = 0; i < n; ++i) f(i);
  }
  template <class F>
  void count(std::uint64_t n, const F& f, td::counter* counters, td::guard g) {
    if (g.skip()) {
      ++skipped;
      return;
    }
    ++launches;
    for (std::uint64_t i = 0; i < n; ++i) {
      const td::tally t = f(i);
      if (t.segment != td::no_segment) counters[t.segment] += t.value;
    }
  }
  // A radix sort looks at bits [0, bits) only and is stable.
  void sort_keys(std::byte*, std::size_t, const std::uint64_t* in, std::uint64_t* out, std::uint64_t n, int bits) {
    const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
    std::copy(in, in + n, out);
    std::stable_sort(out, out + n, [mask](std::uint64_t a, std::uint64_t b) { return (a & mask) < (b & mask); });
  }
  void sort_pairs(std::byte*, std::size_t, const std::uint32_t* kin, std::uint32_t* kout, const std::uint32_t* vin, std::uint32_t* vout,
                  std::uint64_t n, int bits) {
    const std::uint32_t mask = bits >= 32 ? 0xffffffffu : (1u << bits) - 1u;
    std::vector<std::uint64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::uint64_t a, std::uint64_t b) { return (kin[a] & mask) < (kin[b] & mask); });
    for (std::uint64_t p = 0; p < n; ++p) {
      kout[p] = kin[order[p]];
      vout[p] = vin[order[p]];
    }
  }
  void exclusive_sum(std::byte*, std::size_t, std::uint32_t* data, std::uint64_t n) {
    std::uint32_t run = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t v = data[i];
      data[i] = run;
      run += v;
    }
  }
  // (Empty copies are skipped, as cudaMemcpy allows them and memcpy does not with null.)
  void zero(void* p, std::size_t bytes) {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  void upload(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  status outcome() const { return {}; }
  static result<std::size_t> temp_bytes(const td::sizes&) { return std::size_t{0}; }
};

// 256-byte aligned host memory, filled with a pattern (the GPU's memory is not zeroed either).
class aligned_bytes {
 public:
  explicit aligned_bytes(std::size_t bytes = 0, std::uint8_t fill = 0xa5) : buf_(bytes + 256, static_cast<std::byte>(fill)), size_(bytes) {}
  std::byte* data() {
    const auto p = reinterpret_cast<std::uintptr_t>(buf_.data());
    return buf_.data() + ((256 - p % 256) % 256);
  }
  std::span<std::byte> span() { return {data(), size_}; }

 private:
  std::vector<std::byte> buf_;
  std::size_t size_;
};

// One rank of the model: its state and workspace memory.
struct model_rank {
  aligned_bytes memory, workspace;
  gradcomp::tagc::device_state st;
};

inline std::vector<model_rank> make_model_ranks(const td::flow& dev, host_executor& ex, std::size_t n, std::uint32_t world) {
  std::vector<model_rank> ranks(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    ranks[r].memory = aligned_bytes(*dev.state_bytes(n, world));
    ranks[r].workspace = aligned_bytes(*dev.workspace_bytes<host_executor>(n, world));
    REQUIRE(dev.make_state(ex, ranks[r].memory.span(), n, world, r, ranks[r].st).ok());
  }
  return ranks;
}

}  // namespace gradcomp::test::tagc
