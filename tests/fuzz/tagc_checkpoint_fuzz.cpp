// libFuzzer target: TAGC checkpoints from untrusted bytes (tagc::load_checkpoint and
// tagc::restore_elastic). Never a crash. On error: a code the call can give, and the state
// exactly as it was. Accepted: load_checkpoint's state saves back to the same bytes;
// restore_elastic's state holds the rank-ordered sum of the saved residuals on its shard, 0
// elsewhere, thresholds 0; a world of one runs a step. The ranks' unchanged images restore.
//
// Input: byte 0 the case, the rest the change or the images.
//   bits 0-1: 0 load_checkpoint of rank 1's good image with bytes changed by (2-byte offset,
//             XOR mask) triples; 1 load_checkpoint of the input itself; 2 restore_elastic of
//             the three ranks' good images with bytes changed (the offset runs over the three
//             images end to end); 3 restore_elastic of the input cut into 1 to 4 equal images
//             (the first byte says how many)
//   bit 2:    the CRC rewritten after the change, so that the change reaches the checks behind it
//   bits 3-4: the state restored into: rank 1 of 3, rank 0 of 2, rank 3 of 4, rank 0 of 1

#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/tagc/checkpoint.hpp>
#include <gradcomp/tagc.hpp>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace gradcomp;
namespace gt = gradcomp::tagc;

namespace {

constexpr std::size_t n = 203;
constexpr std::uint32_t world = 3;
using bytes = std::vector<std::byte>;

// Three ranks after two steps, and each rank's checkpoint.
struct fixture {
  gt::codec codec{[] {
    gt::config c;
    c.select.density = 0.1;
    return c;
  }()};
  std::vector<bytes> images;

  fixture() {
    std::vector<gt::state> st(world);
    for (std::uint32_t r = 0; r < world; ++r)
      if (!codec.make_state(n, world, r, st[r]).ok()) std::abort();
    for (int step = 0; step < 2; ++step) {
      const auto p0 = *codec.describe(0, st[0]);
      std::vector<std::uint32_t> reduced(p0.count, 0u);
      for (std::uint32_t r = 0; r < world; ++r) {
        std::vector<float> g(n);
        for (std::size_t j = 0; j < n; ++j) g[j] = static_cast<float>((j * 31 + r * 7 + step) % 23) - 11.0f;
        std::vector<std::uint32_t> words(p0.count);
        if (!codec.encode(0, g, st[r], std::as_writable_bytes(std::span(words))).ok()) std::abort();
        for (std::size_t i = 0; i < words.size(); ++i) reduced[i] |= words[i];
      }
      for (auto& s : st)
        if (!codec.receive(0, s, std::as_bytes(std::span(reduced)), {}).ok()) std::abort();
      const auto p1 = *codec.describe(1, st[0]);
      std::vector<float> sum(p1.count, 0.0f);
      for (auto& s : st) {
        std::vector<bf16_t> cells(p1.count);
        if (!codec.encode(1, {}, s, std::as_writable_bytes(std::span(cells))).ok()) std::abort();
        for (std::size_t i = 0; i < cells.size(); ++i) sum[i] += to_float(cells[i]);
      }
      std::vector<bf16_t> reduced_cells(p1.count);
      for (std::size_t i = 0; i < sum.size(); ++i) reduced_cells[i] = from_float<bf16_t>(sum[i]);
      for (auto& s : st) {
        std::vector<float> out(n);
        if (!codec.receive(1, s, std::as_bytes(std::span(reduced_cells)), out).ok()) std::abort();
        codec.finish_step(s);
      }
    }
    for (const auto& s : st) {
      images.emplace_back(gt::checkpoint_bytes(s));
      if (!gt::save_checkpoint(codec, s, images.back())) std::abort();
    }
  }
};

void reseal(bytes& image) {
  if (image.size() < 4) return;
  const std::uint32_t crc = crc32c(std::span<const std::byte>(image).first(image.size() - 4));
  store_le<std::uint32_t>(image.data() + image.size() - 4, crc);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_state(const gt::state& a, const gt::state& b) {
  return a.size == b.size && a.world == b.world && a.rank == b.rank && a.at == b.at && a.step == b.step && a.key == b.key &&
         a.rows == b.rows && same_bits(a.residual, b.residual) && same_bits(a.thresholds, b.thresholds) &&
         a.union_bits == b.union_bits;
}

bool load_error(errc e) {
  return e == errc::truncated || e == errc::bad_magic || e == errc::unsupported_version || e == errc::bad_header ||
         e == errc::size_mismatch || e == errc::checksum_mismatch || e == errc::codec_mismatch;
}

// One step of a rank restored into a world of one: the state is usable.
void step_alone(const gt::codec& c, gt::state& st) {
  const auto p0 = c.describe(0, st);
  if (!p0) std::abort();
  std::vector<std::uint32_t> words(p0->count);
  std::vector<float> g(st.size, 0.25f);
  if (!c.encode(0, g, st, std::as_writable_bytes(std::span(words))).ok()) std::abort();
  if (!c.receive(0, st, std::as_bytes(std::span(words)), {}).ok()) std::abort();
  const auto p1 = c.describe(1, st);
  if (!p1) std::abort();
  std::vector<bf16_t> cells(p1->count);
  if (!c.encode(1, {}, st, std::as_writable_bytes(std::span(cells))).ok()) std::abort();
  std::vector<float> out(st.size);
  if (!c.receive(1, st, std::as_bytes(std::span(cells)), out).ok()) std::abort();
  c.finish_step(st);
}

// An accepted restore_elastic: the rule of tagc/checkpoint.hpp, from the images themselves.
void check_elastic(const gt::state& st, std::span<const std::span<const std::byte>> views) {
  std::vector<gt::checkpoint_view> by_rank(views.size());
  for (const auto v : views) {
    const auto p = gt::parse_checkpoint(v);
    if (!p || p->rank >= by_rank.size()) std::abort();
    by_rank[p->rank] = *p;
  }
  if (st.step != by_rank[0].step || st.key != by_rank[0].key) std::abort();
  for (const float t : st.thresholds)
    if (std::bit_cast<std::uint32_t>(t) != 0u) std::abort();
  const chunk_range mine = summable::shard_of(n, st.world, st.rank);
  for (std::size_t j = 0; j < n; ++j) {
    float want = 0.0f;
    if (j >= mine.offset && j < mine.offset + mine.count) {
      want = by_rank[0].residual_at(j);
      for (std::size_t r = 1; r < by_rank.size(); ++r) want = want + by_rank[r].residual_at(j);
    }
    if (std::bit_cast<std::uint32_t>(st.residual[j]) != std::bit_cast<std::uint32_t>(want)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fixture f;
  if (size == 0) return 0;
  const std::uint8_t how = data[0];
  ++data;
  --size;
  // The states restored into, made once (a state's workspace is large; assignment reuses it).
  static const std::vector<gt::state> blank = [] {
    static constexpr std::uint32_t targets[4][2] = {{3, 1}, {2, 0}, {4, 3}, {1, 0}};
    std::vector<gt::state> v(4);
    for (int i = 0; i < 4; ++i) {
      if (!f.codec.make_state(n, targets[i][0], targets[i][1], v[i]).ok()) std::abort();
      for (std::size_t j = 0; j < n; ++j) v[i].residual[j] = static_cast<float>(j) * 0.5f;
      v[i].step = 99;
    }
    return v;
  }();
  const gt::state& before = blank[(how >> 3) & 3];
  static gt::state st;
  st = before;
  const bool load = (how & 3) < 2;
  std::vector<bytes> images;
  bool unchanged = false;  // the ranks' good images as saved
  switch (how & 3) {
    case 0:
    case 2: {
      images = load ? std::vector<bytes>{f.images[1]} : f.images;
      const std::size_t each = f.images[0].size();
      for (std::size_t i = 0; i + 3 <= size; i += 3) {
        const std::size_t at = (std::size_t{data[i]} | std::size_t{data[i + 1]} << 8) % (each * images.size());
        images[at / each][at % each] ^= static_cast<std::byte>(data[i + 2]);
      }
      if (how & 4)
        for (auto& img : images) reseal(img);
      unchanged = load ? images[0] == f.images[1] : images == f.images;
      break;
    }
    case 1:
      images.emplace_back(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
      if (how & 4) reseal(images[0]);
      break;
    default: {
      if (size == 0) return 0;
      const std::size_t parts = 1 + data[0] % 4, each = (size - 1) / parts;
      for (std::size_t p = 0; p < parts; ++p)
        images.emplace_back(reinterpret_cast<const std::byte*>(data + 1 + p * each), reinterpret_cast<const std::byte*>(data + 1 + (p + 1) * each));
      if (how & 4)
        for (auto& img : images) reseal(img);
      break;
    }
  }
  const std::vector<std::span<const std::byte>> views(images.begin(), images.end());
  const status s = load ? gt::load_checkpoint(f.codec, views[0], st) : gt::restore_elastic(f.codec, views, st);
  if (!s.ok()) {
    if (!(load_error(s.code()) || (!load && s.code() == errc::invalid_argument))) std::abort();
    if (!same_state(st, before)) std::abort();
    // Good images restore: rank 1's into rank 1 of 3, all three into any world.
    if (unchanged && (!load || before.world == world)) std::abort();
    return 0;
  }
  if (st.at != gt::stage::encode_bitmap || st.size != n || st.world != before.world || st.rank != before.rank) std::abort();
  if (load) {
    bytes again(gt::checkpoint_bytes(st));
    const auto saved = gt::save_checkpoint(f.codec, st, again);
    if (!saved || *saved != again.size() || again != images[0]) std::abort();
  } else {
    check_elastic(st, views);
  }
  if (before.world == 1) step_alone(f.codec, st);
  return 0;
}
