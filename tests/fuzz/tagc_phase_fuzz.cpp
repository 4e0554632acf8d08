// libFuzzer target: TAGC's receives (tagc::codec::receive_bitmap, receive_sketch, and receive(k)
// that calls them) given the reduced buffers of three simulated ranks with bytes changed by the
// input. Never a crash. On error: a code the call can give, the state and the output as they
// were, and the good buffer then decodes exactly as on a fresh state. Accepted: the union and
// the decode keep their rules (no tail bits, zeros off the union, peeled <= items), and an
// unchanged buffer decodes exactly as the fixture's.
//
// Input: byte 0 the case, the rest the change.
//   bits 0-1: the config (bit 0: sum-safe bitmap instead of OR; bit 1: f32 cells, not bf16)
//   bit 2:    phase 1 (the sketch) instead of phase 0 (the bitmap)
//   bit 3:    phase 1 received as this rank's shard instead of the whole buffer
//   bit 4:    the input overwrites the buffer from its start, instead of being
//             (2-byte offset, XOR mask) triples
//   bits 5-6: 1 the buffer one element shorter, 2 one element longer, 3 misaligned by a byte
//   bit 7:    receive_bitmap / receive_sketch called by name (bit 3 gives the kind, whatever
//             the size) instead of receive(k)

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/tagc.hpp>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace gradcomp;
namespace gt = gradcomp::tagc;

namespace {

constexpr std::size_t n = 1003;  // 1003 % 32 != 0: the last bitmap word has bits past n
constexpr std::uint32_t world = 3, me = 1;
using bytes = std::vector<std::byte>;

// A copy of some bytes at an 8-byte aligned address, or one byte past it.
struct aligned {
  std::vector<std::uint64_t> words;
  std::size_t size = 0, skew = 0;
  void assign(const std::byte* p, std::size_t count, std::size_t off = 0) {
    words.assign((count + off + 7) / 8 + 1, 0);
    size = count;
    skew = off;
    if (count) std::memcpy(data(), p, count);
  }
  std::byte* data() { return reinterpret_cast<std::byte*>(words.data()) + skew; }
  std::span<const std::byte> view() const { return {reinterpret_cast<const std::byte*>(words.data()) + skew, size}; }
};

std::vector<float> gradient(std::uint32_t rank) {
  std::vector<float> g(n);
  std::uint32_t x = 12345u + 7919u * rank;
  for (std::size_t j = 0; j < n; ++j) {
    x = x * 1664525u + 1013904223u;
    const float own = static_cast<float>(static_cast<std::int32_t>(x >> 8) % 2001) / 1000.0f;
    g[j] = own + ((j % 37 == 0) ? 6.0f : 0.0f);  // large at shared positions: the ranks' sets overlap
  }
  return g;
}

// One step of three ranks; rank 1's state before each receive, the reduced buffers, and what
// rank 1 decodes from them.
struct fixture {
  gt::codec codec;
  gt::state after_encode0;  // rank 1 before receive(0)
  gt::state after_encode1;  // rank 1 before receive(1)
  bytes bitmap;             // the reduced bitmap
  bytes cells, shard;       // the reduced sketch, whole and rank 1's shard
  std::uint32_t rows = 0;
  std::vector<std::uint32_t> union_bits;
  std::vector<float> whole_out, shard_out;  // receive(1) of the good buffers
  sketch::peel_stats whole_stats{}, shard_stats{};

  explicit fixture(int variant) : codec(config_of(variant)) {
    std::vector<gt::state> st(world);
    for (std::uint32_t r = 0; r < world; ++r)
      if (!codec.make_state(n, world, r, st[r]).ok()) std::abort();
    const auto p0 = *codec.describe(0, st[0]);
    std::vector<std::uint32_t> reduced(p0.count, 0u);
    for (std::uint32_t r = 0; r < world; ++r) {
      std::vector<std::uint32_t> words(p0.count);
      if (!codec.encode(0, gradient(r), st[r], std::as_writable_bytes(std::span(words))).ok()) std::abort();
      for (std::size_t i = 0; i < words.size(); ++i)
        reduced[i] = codec.get_config().bitmap == gt::bitmap_mode::bitwise_or ? reduced[i] | words[i] : reduced[i] + words[i];
    }
    bitmap.resize(p0.bytes());
    std::memcpy(bitmap.data(), reduced.data(), bitmap.size());
    after_encode0 = st[me];
    for (auto& s : st)
      if (!codec.receive(0, s, bitmap, {}).ok()) std::abort();
    rows = st[me].rows;
    union_bits = st[me].union_bits;
    const auto p1 = *codec.describe(1, st[0]);
    std::vector<float> sum(p1.count, 0.0f);
    for (std::uint32_t r = 0; r < world; ++r) {
      bytes out(p1.bytes());
      if (!codec.encode(1, {}, st[r], out).ok()) std::abort();
      for (std::size_t i = 0; i < p1.count; ++i) {
        if (p1.type == summable::wire_type::f32) {
          float v;
          std::memcpy(&v, out.data() + 4 * i, 4);
          sum[i] += v;
        } else {
          bf16_t v;
          std::memcpy(&v, out.data() + 2 * i, 2);
          sum[i] += to_float(v);
        }
      }
    }
    cells.resize(p1.bytes());
    for (std::size_t i = 0; i < p1.count; ++i) {
      if (p1.type == summable::wire_type::f32) {
        std::memcpy(cells.data() + 4 * i, &sum[i], 4);
      } else {
        const bf16_t v = from_float<bf16_t>(sum[i]);
        std::memcpy(cells.data() + 2 * i, &v, 2);
      }
    }
    shard.assign(cells.begin() + static_cast<std::ptrdiff_t>(me * p1.shard_bytes()),
                 cells.begin() + static_cast<std::ptrdiff_t>((me + 1) * p1.shard_bytes()));
    after_encode1 = st[me];
    whole_out.assign(n, 0.0f);
    gt::state s = after_encode1;
    if (!codec.receive(1, s, cells, whole_out).ok()) std::abort();
    whole_stats = s.stats;
    shard_out.assign(summable::shard_of(n, world, me).count, 0.0f);
    s = after_encode1;
    if (!codec.receive(1, s, shard, shard_out).ok()) std::abort();
    shard_stats = s.stats;
    if (whole_stats.items == 0) std::abort();  // the fixture must exercise the peel
  }

  static gt::config config_of(int variant) {
    gt::config c;
    c.select.density = 0.05;
    c.bitmap = variant & 1 ? gt::bitmap_mode::sum_safe : gt::bitmap_mode::bitwise_or;
    c.cells = variant & 2 ? summable::wire_type::f32 : summable::wire_type::bf16;
    return c;
  }
};

const fixture& fixture_of(int variant) {
  static const fixture f[4] = {fixture(0), fixture(1), fixture(2), fixture(3)};
  return f[variant];
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_stats(const sketch::peel_stats& a, const sketch::peel_stats& b) {
  return a.items == b.items && a.peeled == b.peeled && a.rounds == b.rounds;
}

// What a failed receive must not change. The union is compared unless the sum-safe decoder
// may have written it (see the phase-0 branch).
bool same_state(const gt::state& a, const gt::state& b, bool with_union) {
  return a.size == b.size && a.world == b.world && a.rank == b.rank && a.at == b.at && a.step == b.step && a.key == b.key &&
         a.rows == b.rows && same_bits(a.residual, b.residual) && same_bits(a.thresholds, b.thresholds) &&
         same_stats(a.stats, b.stats) && (!with_union || a.union_bits == b.union_bits);
}

bool equal(std::span<const std::byte> a, const bytes& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// The good buffer with the input applied, its length or alignment changed as asked.
aligned mutated(const bytes& good, std::size_t element, std::uint8_t how, const std::uint8_t* data, std::size_t size) {
  bytes b = good;
  if (how & 16) {
    std::memcpy(b.data(), data, std::min(size, b.size()));
  } else {
    for (std::size_t i = 0; i + 3 <= size && !b.empty(); i += 3) {
      const std::size_t at = (std::size_t{data[i]} | std::size_t{data[i + 1]} << 8) % b.size();
      b[at] ^= static_cast<std::byte>(data[i + 2]);
    }
  }
  const int change = (how >> 5) & 3;
  if (change == 1 && b.size() >= element) b.resize(b.size() - element);
  if (change == 2) b.resize(b.size() + element, std::byte{0x40});
  aligned a;
  a.assign(b.data(), b.size(), change == 3 ? 1 : 0);
  return a;
}

// Checks an accepted decode of `range` of the union into `out`.
void check_decode(const gt::state& st, chunk_range range, std::span<const float> out) {
  std::size_t items = 0;
  for (std::size_t j = 0; j < range.count; ++j) {
    const std::size_t e = range.offset + j;
    if ((st.union_bits[e / 32] >> (e % 32)) & 1u) {
      ++items;
    } else if (std::bit_cast<std::uint32_t>(out[j]) != 0u) {
      std::abort();  // off the union: +0
    }
  }
  if (st.at != gt::stage::done || st.stats.items != items || st.stats.peeled > st.stats.items) std::abort();
}

void phase0(const fixture& f, std::uint8_t how, const std::uint8_t* data, std::size_t size) {
  const gt::codec& c = f.codec;
  const bool sum_safe = c.get_config().bitmap == gt::bitmap_mode::sum_safe;
  const aligned in = mutated(f.bitmap, 4, how, data, size);
  static gt::state st;  // assigned, not constructed: the workspace is allocated once
  st = f.after_encode0;
  const status s = (how & 128) ? c.receive_bitmap(st, in.view()) : c.receive(0, st, in.view(), {});
  if (!s.ok()) {
    const errc e = s.code();
    if (((how >> 5) & 3) == 3 ? e != errc::invalid_argument
                              : e != errc::size_mismatch && e != errc::index_out_of_range && e != errc::count_too_large &&
                                    !(sum_safe && e == errc::bad_meta))
      std::abort();
    // The sum-safe decoder writes the union (this step's scratch) before the per-shard count
    // check; the retry below rewrites it.
    if (!same_state(st, f.after_encode0, !sum_safe || e != errc::count_too_large)) std::abort();
    aligned good;
    good.assign(f.bitmap.data(), f.bitmap.size());
    if (!c.receive(0, st, good.view(), {}).ok() || st.rows != f.rows || st.union_bits != f.union_bits) std::abort();
    return;
  }
  if (((how >> 5) & 3) != 0 || st.at != gt::stage::encode_sketch || st.rows == 0) std::abort();  // a wrong size or alignment passed
  if (equal(in.view(), f.bitmap) && (st.rows != f.rows || st.union_bits != f.union_bits)) std::abort();
  const std::size_t last = st.union_bits.size() - 1;
  if ((st.union_bits[last] & ~sketch::bitmap_tail_mask(n)) != 0) std::abort();  // no bits past n
  if (!sum_safe && std::memcmp(st.union_bits.data(), in.view().data(), in.size) != 0) std::abort();  // OR: the words as received
  // The rest of the step on that union (the sketch's size follows from it), this rank alone.
  const auto p1 = c.describe(1, st);
  if (!p1) std::abort();
  aligned out;
  out.words.assign(p1->bytes() / 8 + 1, 0);
  out.size = p1->bytes();
  if (!c.encode(1, {}, st, std::span<std::byte>(out.data(), out.size)).ok()) std::abort();
  std::vector<float> dec(n, 7.5f);
  if (!c.receive(1, st, out.view(), dec).ok()) std::abort();
  check_decode(st, {0, n}, dec);
}

void phase1(const fixture& f, std::uint8_t how, const std::uint8_t* data, std::size_t size) {
  const gt::codec& c = f.codec;
  const bool whole = !(how & 8);
  const bytes& good = whole ? f.cells : f.shard;
  const std::size_t element = c.get_config().cells == summable::wire_type::f32 ? 4 : 2;
  const aligned in = mutated(good, element, how, data, size);
  const std::vector<float>& want = whole ? f.whole_out : f.shard_out;
  const std::vector<float> before(want.size(), 7.5f);
  std::vector<float> out = before;
  static gt::state st;
  st = f.after_encode1;
  const status s = (how & 128) ? c.receive_sketch(st, in.view(), whole ? summable::received::whole : summable::received::shard, out)
                               : c.receive(1, st, in.view(), out);
  if (!s.ok()) {
    // The cells' values are never refused: only the size and the alignment are.
    if (s.code() != (((how >> 5) & 3) == 3 ? errc::invalid_argument : errc::size_mismatch)) std::abort();
    if (!same_state(st, f.after_encode1, true) || !same_bits(out, before)) std::abort();
    aligned g;
    g.assign(good.data(), good.size());
    if (!c.receive(1, st, g.view(), out).ok() || !same_bits(out, want)) std::abort();
    return;
  }
  if (((how >> 5) & 3) != 0) std::abort();  // a wrong size or alignment passed
  check_decode(st, whole ? chunk_range{0, n} : summable::shard_of(n, world, me), out);
  if (equal(in.view(), good) && (!same_bits(out, want) || !same_stats(st.stats, whole ? f.whole_stats : f.shard_stats))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t how = data[0];
  const fixture& f = fixture_of(how & 3);
  if (how & 4) {
    phase1(f, how, data + 1, size - 1);
  } else {
    phase0(f, how, data + 1, size - 1);
  }
  return 0;
}
