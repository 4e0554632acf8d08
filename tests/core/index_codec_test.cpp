// Index sections: byte layouts, choice of layout, validation of untrusted sections, decoding.
#include <gradcomp/core/index_codec.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <vector>

#include "support/random.hpp"

using namespace gradcomp;
using frame::index_format;

namespace {

using bytes_t = std::vector<std::byte>;
using idx_t = std::vector<std::uint32_t>;

bytes_t to_bytes(std::initializer_list<unsigned> v) {
  bytes_t b;
  for (unsigned x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

// Each j < n kept with probability p, plus the first/last element when asked.
idx_t random_set(std::size_t n, double p, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::bernoulli_distribution keep(p);
  idx_t idx;
  for (std::size_t j = 0; j < n; ++j)
    if (keep(gen)) idx.push_back(static_cast<std::uint32_t>(j));
  return idx;
}

// Reference encoders, written plainly from the layout description.
unsigned ref_width(const idx_t& idx) {
  std::uint32_t max_gap = 0;
  for (std::size_t m = 0; m < idx.size(); ++m) max_gap = std::max(max_gap, m ? idx[m] - idx[m - 1] - 1 : idx[0]);
  return static_cast<unsigned>(std::bit_width(max_gap));
}

bytes_t ref_encode(index_format f, const idx_t& idx, std::size_t n, unsigned width) {
  bytes_t out;
  if (f == index_format::u32_list) {
    out.resize(4 * idx.size());
    for (std::size_t m = 0; m < idx.size(); ++m) store_le<std::uint32_t>(out.data() + 4 * m, idx[m]);
  } else if (f == index_format::delta) {
    idx_t gaps(idx.size());
    for (std::size_t m = 0; m < idx.size(); ++m) gaps[m] = m ? idx[m] - idx[m - 1] - 1 : idx[0];
    out.assign(8 + packed_bytes(idx.size(), width), std::byte{0});
    out[0] = static_cast<std::byte>(width);
    if (width) pack_bits(gaps, width, out.data() + 8);
  } else {
    out.assign((n + 7) / 8, std::byte{0});
    for (std::uint32_t j : idx) out[j / 8] |= static_cast<std::byte>(1u << (j % 8));
  }
  return out;
}

indices::encoding encoding_for(index_format f, const idx_t& idx, std::size_t n) {
  const unsigned w = indices::delta_width(idx.data(), idx.size());
  if (f == index_format::u32_list) return {f, indices::u32_bytes(idx.size()), 0};
  if (f == index_format::delta) return {f, indices::delta_bytes(idx.size(), w), w};
  return {f, indices::bitmap_bytes(n), 0};
}

bytes_t encode(const indices::encoding& e, const idx_t& idx, std::size_t n) {
  bytes_t out(e.bytes, std::byte{0xcd});  // exactly e.bytes: ASan catches any write past it
  indices::write(e, idx.data(), idx.size(), n, out.data());
  return out;
}

// Decodes k indices in pieces of random sizes.
idx_t decode(index_format f, const bytes_t& section, std::size_t k, std::uint32_t seed) {
  indices::reader r(f, section.data(), section.size());
  idx_t out(k);
  std::mt19937 gen(seed);
  for (std::size_t done = 0; done < k;) {
    const std::size_t piece = std::min<std::size_t>(k - done, 1 + gen() % 300);
    r.next(out.data() + done, piece);
    done += piece;
  }
  return out;
}

status check(index_format f, const bytes_t& section, std::size_t k, std::size_t n) {
  return indices::check(f, section.data(), section.size(), k, n);
}

constexpr index_format all_formats[] = {index_format::u32_list, index_format::delta, index_format::bitmap};

void round_trip(const idx_t& idx, std::size_t n, std::uint32_t seed) {
  CAPTURE(n);
  CAPTURE(idx.size());
  for (index_format f : all_formats) {
    CAPTURE(static_cast<int>(f));
    const auto e = encoding_for(f, idx, n);
    CHECK(e.width == (f == index_format::delta ? ref_width(idx) : 0u));
    const bytes_t section = encode(e, idx, n);
    CHECK(section == ref_encode(f, idx, n, e.width));
    const status s = check(f, section, idx.size(), n);
    CHECK_MESSAGE(s.ok(), s.detail());
    CHECK(decode(f, section, idx.size(), seed) == idx);
  }
}

}  // namespace

TEST_CASE("golden bytes for n = 20, indices {1, 2, 5, 19}") {
  const idx_t idx = {1, 2, 5, 19};
  const std::size_t n = 20;
  CHECK(encode(encoding_for(index_format::u32_list, idx, n), idx, n) ==
        to_bytes({1, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 19, 0, 0, 0}));
  // Gaps 1, 0, 2, 13 at 4 bits: 0x01, then 2 | 13 << 4.
  CHECK(encode(encoding_for(index_format::delta, idx, n), idx, n) == to_bytes({4, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xd2}));
  // Bits 1, 2, 5 in byte 0; bit 19 is byte 2, bit 3.
  CHECK(encode(encoding_for(index_format::bitmap, idx, n), idx, n) == to_bytes({0x26, 0x00, 0x08}));
  const auto e = indices::choose(idx.data(), idx.size(), n);
  CHECK(e.format == index_format::bitmap);
  CHECK(e.bytes == 3);

  // A 3-bit code crossing a byte: gaps 3, 0, 4 -> bits 011 000 100 (LSB first) = 0x03, 0x01.
  const idx_t odd = {3, 4, 9};
  CHECK(encode(encoding_for(index_format::delta, odd, 1000), odd, 1000) ==
        to_bytes({3, 0, 0, 0, 0, 0, 0, 0, 0x03, 0x01}));
  // Indices 0..k-1: width 0, the prefix alone.
  const idx_t dense = {0, 1, 2, 3, 4};
  CHECK(encode(encoding_for(index_format::delta, dense, 5), dense, 5) == to_bytes({0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST_CASE("round trip across sizes and densities") {
  std::uint32_t seed = 1;
  for (std::size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 100000u}) {
    for (double p : {0.001, 0.01, 0.1, 0.3, 0.5, 0.9, 1.0})
      for (int rep = 0; rep < 3; ++rep) round_trip(random_set(n, p, seed), n, seed), ++seed;
    // Adversarial: none, all, first only, last only, a run in the middle, one huge gap.
    idx_t all(n);
    for (std::size_t j = 0; j < n; ++j) all[j] = static_cast<std::uint32_t>(j);
    round_trip({}, n, seed);
    round_trip(all, n, seed);
    round_trip({0}, n, seed);
    round_trip({static_cast<std::uint32_t>(n - 1)}, n, seed);
    round_trip(idx_t(all.begin() + std::ptrdiff_t(n / 3), all.begin() + std::ptrdiff_t(2 * n / 3)), n, seed);
    if (n > 1) round_trip({0, static_cast<std::uint32_t>(n - 1)}, n, seed);
  }
}

TEST_CASE("every delta width up to 32, and a wider width than needed") {
  const std::size_t n = 0xffffffffu;  // the largest chunk: indices up to 2^32 - 2
  std::mt19937 gen(5);
  for (unsigned w = 1; w <= 32; ++w) {
    CAPTURE(w);
    // The first gap sets the width; later gaps are random w-bit values, kept where they fit.
    const std::uint64_t max_gap = (std::uint64_t{1} << w) - 1;
    idx_t idx = {static_cast<std::uint32_t>(max_gap / 2 + 1)};
    for (int tries = 0; tries < 200 && idx.size() < 40; ++tries) {
      const std::uint64_t gap = tries % 4 == 0 ? max_gap : (tries % 4 == 1 ? 0 : gen() & max_gap);
      if (std::uint64_t{idx.back()} + 1 + gap < n) idx.push_back(static_cast<std::uint32_t>(idx.back() + 1 + gap));
    }
    const auto e = indices::encoding{index_format::delta, indices::delta_bytes(idx.size(), w), w};
    CHECK(indices::delta_width(idx.data(), idx.size()) == w);
    CHECK(ref_width(idx) == w);
    const bytes_t section = encode(e, idx, n);
    CHECK(section == ref_encode(index_format::delta, idx, n, w));
    CHECK(check(index_format::delta, section, idx.size(), n).ok());
    CHECK(decode(index_format::delta, section, idx.size(), w) == idx);
    const bytes_t list = encode(encoding_for(index_format::u32_list, idx, n), idx, n);
    CHECK(check(index_format::u32_list, list, idx.size(), n).ok());
    CHECK(decode(index_format::u32_list, list, idx.size(), w) == idx);
  }
  // A writer may use more bits than the largest gap needs: still valid.
  const idx_t idx = {1, 2, 5, 19};
  const indices::encoding wide{index_format::delta, indices::delta_bytes(4, 11), 11};
  const bytes_t section = encode(wide, idx, 20);
  CHECK(section == ref_encode(index_format::delta, idx, 20, 11));
  CHECK(check(index_format::delta, section, 4, 20).ok());
  CHECK(decode(index_format::delta, section, 4, 5) == idx);
}

TEST_CASE("delta sections of whole groups of 32 gaps and a rest, every width, equal the reference") {
  // The writer packs whole groups of 32 gaps with the width a constant, the rest gap by gap:
  // each gap position of a group gets a gap with its top bits set (the bits that cross into
  // the next u32 word), the other gaps are random, and narrow widths get full random gaps.
  std::mt19937 gen(32);
  const std::size_t n = 0xffffffffu;
  const auto check_gaps = [&](const idx_t& gaps, unsigned w) {
    idx_t idx;
    std::uint64_t at = 0;
    for (std::size_t m = 0; m < gaps.size(); ++m) {
      at += (m ? 1 : 0) + gaps[m];
      REQUIRE(at < n);
      idx.push_back(static_cast<std::uint32_t>(at));
    }
    for (unsigned width : {w, std::min(32u, w + 3)}) {  // the exact width, and a wider one
      CAPTURE(width);
      const auto e = indices::encoding{index_format::delta, indices::delta_bytes(idx.size(), width), width};
      const bytes_t section = encode(e, idx, n);
      CHECK(section == ref_encode(index_format::delta, idx, n, width));
      CHECK(decode(index_format::delta, section, idx.size(), w) == idx);
    }
  };
  for (unsigned w = 1; w <= 32; ++w) {
    CAPTURE(w);
    const std::uint32_t max_gap = static_cast<std::uint32_t>((std::uint64_t{1} << w) - 1);
    const std::uint32_t small = std::min<std::uint32_t>(max_gap, 0xfffffu);  // 2^20 - 1
    for (std::size_t top = 0; top < 32; ++top) {  // one large gap at each position of a group
      idx_t gaps(40);
      for (auto& g : gaps) g = gen() & small;
      gaps[top] = w < 32 ? max_gap - (gen() & (max_gap >> 2)) : 0xf0000000u | (gen() & 0xffffffu);
      check_gaps(gaps, w);
    }
    for (std::size_t k : {31u, 32u, 33u, 64u, 95u, 257u}) {  // full random gaps where they fit
      CAPTURE(k);
      idx_t gaps(k);
      for (auto& g : gaps) g = gen() & (w <= 23 ? max_gap : small);
      gaps[0] = w <= 23 ? max_gap : gaps[0];
      check_gaps(gaps, w);
    }
  }
}

TEST_CASE("choose() picks the smallest, ties go to u32_list, then delta, then bitmap") {
  // Exact ties: 8 bytes each for u32 {0, 1} (delta: width 0, 8 bytes) and a 64-bit bitmap.
  idx_t two = {0, 1};
  CHECK(indices::choose(two.data(), 2, 64).format == index_format::u32_list);
  idx_t three = {0, 1, 2};  // u32 12, delta 8, bitmap 8
  auto e = indices::choose(three.data(), 3, 64);
  CHECK(e.format == index_format::delta);
  CHECK(e.bytes == 8);
  CHECK(e.width == 0);
  CHECK(indices::choose(three.data(), 3, 64, false).format == index_format::u32_list);
  CHECK(indices::choose(nullptr, 0, 100).format == index_format::u32_list);
  CHECK(indices::choose(nullptr, 0, 100).bytes == 0);

  std::uint32_t seed = 100;
  for (std::size_t n : {1u, 9u, 64u, 65u, 1000u, 100000u})
    for (double p : {0.0, 0.001, 0.01, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0}) {
      const idx_t idx = random_set(n, p, seed++);
      const std::size_t k = idx.size();
      const std::size_t sizes[3] = {4 * k, 8 + (k * ref_width(idx) + 7) / 8, (n + 7) / 8};
      const std::size_t best = static_cast<std::size_t>(std::min_element(sizes, sizes + 3) - sizes);  // first minimum
      e = indices::choose(idx.data(), k, n);
      CAPTURE(n);
      CAPTURE(k);
      CHECK(e.format == all_formats[best]);
      CHECK(e.bytes == sizes[best]);
      CHECK(e.width == (e.format == index_format::delta ? ref_width(idx) : 0u));
      const auto plain = indices::choose(idx.data(), k, n, false);
      CHECK(plain.format == index_format::u32_list);
      CHECK(plain.bytes == 4 * k);
    }
}

TEST_CASE("check() rejects malformed sections with the right error") {
  const idx_t idx = {1, 2, 5, 19};
  const std::size_t n = 20, k = 4;
  for (index_format f : all_formats) {
    CAPTURE(static_cast<int>(f));
    const bytes_t good = encode(encoding_for(f, idx, n), idx, n);
    bytes_t longer = good;
    longer.push_back(std::byte{0});
    CHECK(check(f, longer, k, n) == errc::bad_header);
    CHECK(check(f, bytes_t(good.begin(), good.end() - 1), k, n) == errc::bad_header);
    CHECK(check(f, bytes_t{}, k, n) == errc::bad_header);
    CHECK(check(f, good, k, std::size_t{1} << 32) == errc::invalid_argument);
  }
  CHECK(indices::check(index_format::none, nullptr, 0, 0, 10) == errc::invalid_argument);
  CHECK(indices::check(index_format::seeded, nullptr, 0, 0, 10) == errc::invalid_argument);

  SUBCASE("u32 list") {
    const auto u32 = [](idx_t v) { return ref_encode(index_format::u32_list, v, 0, 0); };
    CHECK(check(index_format::u32_list, u32({1, 5, 2, 19}), 4, n) == errc::index_not_ascending);
    CHECK(check(index_format::u32_list, u32({1, 2, 2, 19}), 4, n) == errc::index_not_ascending);
    CHECK(check(index_format::u32_list, u32({1, 2, 5, 20}), 4, n) == errc::index_out_of_range);
    CHECK(check(index_format::u32_list, u32({0xffffffffu}), 1, 0xffffffffu) == errc::index_out_of_range);
    CHECK(check(index_format::u32_list, u32({0xfffffffeu}), 1, 0xffffffffu).ok());
    CHECK(check(index_format::u32_list, u32({1, 2, 5}), 4, n) == errc::bad_header);
    CHECK(check(index_format::u32_list, u32({}), 0, 0).ok());
  }
  SUBCASE("delta") {
    const bytes_t good = encode(encoding_for(index_format::delta, idx, n), idx, n);
    for (std::size_t b = 0; b < 8; ++b)  // shorter than the prefix
      CHECK(indices::check(index_format::delta, good.data(), b, 0, n) == errc::bad_header);
    bytes_t bad = good;
    bad[0] = std::byte{33};
    CHECK(check(index_format::delta, bad, k, n) == errc::bad_header);
    for (std::size_t r = 1; r < 8; ++r) {
      bad = good;
      bad[r] = std::byte{0x10};
      CHECK(check(index_format::delta, bad, k, n) == errc::bad_header);
    }
    // Last gap 13 -> 14 reaches index 20 = n.
    bad = good;
    bad[9] = std::byte{0xe2};
    CHECK(check(index_format::delta, bad, k, n) == errc::index_out_of_range);
    CHECK(check(index_format::delta, good, k, 19) == errc::index_out_of_range);
    CHECK(check(index_format::delta, good, 3, n) == errc::bad_header);  // same size; gap 4 becomes stray bits
    // Stray bits after the last gap: 3 gaps of 3 bits leave 7 unused bits of byte 1.
    const idx_t odd = {3, 4, 9};
    bad = encode(encoding_for(index_format::delta, odd, 10), odd, 10);
    CHECK(check(index_format::delta, bad, 3, 10).ok());
    bad.back() |= std::byte{0x80};
    CHECK(check(index_format::delta, bad, 3, 10) == errc::bad_header);
    // Width 32, every gap 2^32 - 1: the first index is already out of range, and the
    // running sum (which would pass 2^64 over 2^32 gaps) never overflows.
    bytes_t huge(8 + 4 * 4, std::byte{0xff});
    std::fill(huge.begin(), huge.begin() + 8, std::byte{0});
    huge[0] = std::byte{32};
    CHECK(check(index_format::delta, huge, 4, 0xffffffffu) == errc::index_out_of_range);
    store_le<std::uint32_t>(huge.data() + 8, 0);  // 0, then 2^32: out of range on the second
    CHECK(check(index_format::delta, huge, 4, 0xffffffffu) == errc::index_out_of_range);
    // Width 0 means 0..k-1, for any k up to n (k = 2^32 - 1 costs nothing to check).
    const bytes_t prefix(8, std::byte{0});
    CHECK(check(index_format::delta, prefix, 0xffffffffu, 0xffffffffu).ok());
    CHECK(check(index_format::delta, prefix, std::size_t{1} << 32, 0xffffffffu) == errc::index_out_of_range);
    CHECK(check(index_format::delta, prefix, 0, 0).ok());
    // Counts whose size would overflow k * width.
    bad = good;
    for (std::size_t big : {std::size_t{1} << 59, SIZE_MAX / 4, SIZE_MAX})
      CHECK(check(index_format::delta, bad, big, n) == errc::bad_header);
  }
  SUBCASE("bitmap") {
    const bytes_t good = encode(encoding_for(index_format::bitmap, idx, n), idx, n);
    CHECK(check(index_format::bitmap, good, k + 1, n) == errc::bad_header);
    CHECK(check(index_format::bitmap, good, k - 1, n) == errc::bad_header);
    bytes_t bad = good;
    bad[2] |= std::byte{0x10};  // bit 20 = n
    CHECK(check(index_format::bitmap, bad, k + 1, n) == errc::bad_header);
    CHECK(check(index_format::bitmap, good, k, 19) == errc::bad_header);  // bit 19 is past a 19-element chunk
    CHECK(check(index_format::bitmap, good, k, 24).ok());
    CHECK(check(index_format::bitmap, good, k, 16) == errc::bad_header);
    CHECK(check(index_format::bitmap, good, k, 25) == errc::bad_header);
    CHECK(check(index_format::bitmap, bytes_t{}, 0, 0).ok());
    // Popcount over whole words and a tail: 19 bytes = 2 words + 3 bytes.
    const idx_t spread = {0, 63, 64, 127, 128, 150};
    const bytes_t b = encode(encoding_for(index_format::bitmap, spread, 151), spread, 151);
    CHECK(check(index_format::bitmap, b, 6, 151).ok());
    CHECK(check(index_format::bitmap, b, 5, 151) == errc::bad_header);
  }
}

TEST_CASE("check() on randomly corrupted sections accepts only decodable ones") {
  std::mt19937 gen(77);
  std::size_t accepted = 0, rejected = 0;
  for (std::size_t n : {9u, 64u, 65u, 300u, 5000u}) {
    for (double p : {0.01, 0.1, 0.5, 0.95}) {
      const idx_t idx = random_set(n, p, static_cast<std::uint32_t>(gen()));
      for (index_format f : all_formats) {
        const bytes_t good = encode(encoding_for(f, idx, n), idx, n);
        for (int trial = 0; trial < 200; ++trial) {
          bytes_t bad = good;
          if (bad.empty()) break;
          const int flips = 1 + static_cast<int>(gen() % 3);
          for (int i = 0; i < flips; ++i) bad[gen() % bad.size()] ^= static_cast<std::byte>(1u << (gen() % 8));
          if (gen() % 8 == 0) bad.resize(gen() % (bad.size() + 1));  // truncation too
          std::size_t k = idx.size();
          if (gen() % 8 == 0) k += gen() % 3, k -= std::min<std::size_t>(k, gen() % 3);
          if (!check(f, bad, k, n).ok()) {
            ++rejected;
            continue;
          }
          ++accepted;
          const idx_t out = decode(f, bad, k, trial);
          for (std::size_t m = 0; m < k; ++m) {
            REQUIRE(out[m] < n);
            if (m) REQUIRE(out[m - 1] < out[m]);
          }
        }
      }
    }
  }
  CHECK(accepted > 0);
  CHECK(rejected > 0);
}
