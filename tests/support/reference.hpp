#pragma once
// Sort-based references for the selection tests: magnitude keys and the exact top-k with the
// library's tie rule (larger key first, then the lower index), indices ascending.

#include <gradcomp/core/bits.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace gradcomp::test {

inline std::vector<std::uint32_t> keys_of(const std::vector<float>& x) {
  std::vector<std::uint32_t> keys(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) keys[i] = abs_key(x[i]);
  return keys;
}

// The k largest of keys[first, first + count), as indices into keys.
inline std::vector<std::uint32_t> reference_topk(const std::vector<std::uint32_t>& keys, std::size_t k,
                                                 std::size_t first = 0, std::size_t count = SIZE_MAX) {
  count = std::min(count, keys.size() - first);
  std::vector<std::uint32_t> idx(count);
  std::iota(idx.begin(), idx.end(), static_cast<std::uint32_t>(first));
  std::stable_sort(idx.begin(), idx.end(), [&](std::uint32_t a, std::uint32_t b) { return keys[a] > keys[b]; });
  idx.resize(std::min(k, count));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace gradcomp::test
