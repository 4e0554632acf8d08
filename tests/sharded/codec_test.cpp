// The sharded path (gradcomp/sharded.hpp) on W simulated ranks: reduce-scatter and all-reduce
// against the rank-order fp32 sum, replicas bit-identical, error-feedback conservation on both
// stages, independent randomness per rank, the byte model, bad slots of every kind (a specific
// error, the output untouched), checkpoints and elastic restore.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/sharded/checkpoint.hpp>
#include <gradcomp/sharded.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>


using namespace gradcomp;
namespace sh = gradcomp::sharded;
using bytes = std::vector<std::byte>;

namespace {

using lossless = compressor<partition::chunks, sparsify::dense, quantize::none, feedback::none>;
using int8_ef = compressor<partition::chunks, sparsify::dense, quantize::int_block<8>, feedback::residual>;
using int4_ef = compressor<partition::chunks, sparsify::dense, quantize::int_block<4>, feedback::residual>;
using topk_ef = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
using topk_exact = compressor<partition::chunks, sparsify::topk, quantize::none, feedback::residual>;
using qsgd4 = compressor<partition::chunks, sparsify::dense, quantize::qsgd<4>, feedback::none>;

// Values in (-1, 1), a few 10x larger; dyadic: multiples of 2^-12 below 1/2, whose sums over a
// few ranks and steps are exact in fp32.
std::vector<float> values(std::size_t n, std::uint64_t seed, bool dyadic = false) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  const auto uniform = [&] {  // splitmix64
    z += 0x9e3779b97f4a7c15ull;
    std::uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((x ^ (x >> 31)) >> 11) * 0x1.0p-53;
  };
  std::vector<float> v(n);
  for (float& x : v) {
    const double u = uniform() * 2.0 - 1.0;
    x = dyadic ? static_cast<float>(std::round(u * 2048.0) / 4096.0) : static_cast<float>(u * (uniform() < 0.05 ? 10.0 : 1.0));
  }
  return v;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), 4 * v.size());
  return b;
}

// W ranks of one codec and the transport between them.
template <class C>
struct ranks {
  sh::codec<C> codec;
  std::vector<typename sh::codec<C>::state> st;
  std::vector<bytes> sent0, sent1;  // the last step's send buffers

  ranks(const sh::codec<C>& c, std::size_t n, std::uint32_t world) : codec(c), st(world) {
    for (std::uint32_t r = 0; r < world; ++r) REQUIRE(codec.make_state(n, world, r, st[r]).ok());
  }
  std::uint32_t world() const { return static_cast<std::uint32_t>(st.size()); }
  std::size_t n() const { return st[0].size; }

  // Phase 0 of every rank, then what rank `to` receives from the all-to-all.
  template <class T = float>
  std::vector<bytes> scatter(const std::vector<std::vector<T>>& g) {
    const auto p = *codec.describe(0, st[0]);
    sent0.assign(world(), bytes(p.send_bytes()));
    for (std::uint32_t r = 0; r < world(); ++r) REQUIRE(codec.template encode<T>(0, g[r], st[r], sent0[r]).ok());
    std::vector<bytes> got(world(), bytes(p.receive_bytes()));
    for (std::uint32_t to = 0; to < world(); ++to)
      for (std::uint32_t from = 0; from < world(); ++from)
        std::memcpy(got[to].data() + from * p.slot_bytes, sent0[from].data() + to * p.slot_bytes, p.slot_bytes);
    return got;
  }
  // Phase 1 of every rank, and the all-gather's result (the same for every rank).
  bytes gather() {
    const auto p = *codec.describe(1, st[0]);
    sent1.assign(world(), bytes(p.send_bytes()));
    bytes all(p.receive_bytes());
    for (std::uint32_t r = 0; r < world(); ++r) {
      REQUIRE(codec.template encode<float>(1, {}, st[r], sent1[r]).ok());
      std::memcpy(all.data() + r * p.slot_bytes, sent1[r].data(), p.slot_bytes);
    }
    return all;
  }
  // A reduce-scatter step: each rank's shard.
  template <class T = float>
  std::vector<std::vector<T>> reduce_scatter(const std::vector<std::vector<T>>& g) {
    const std::vector<bytes> got = scatter<T>(g);
    std::vector<std::vector<T>> out(world());
    for (std::uint32_t r = 0; r < world(); ++r) {
      out[r].assign(summable::shard_of(n(), world(), r).count, T{});
      REQUIRE(codec.template receive<T>(0, st[r], got[r], std::span<T>(out[r])).ok());
    }
    return out;
  }
  // An all-reduce step: every rank's whole output.
  template <class T = float>
  std::vector<std::vector<T>> all_reduce(const std::vector<std::vector<T>>& g) {
    const std::vector<bytes> got = scatter<T>(g);
    for (std::uint32_t r = 0; r < world(); ++r) REQUIRE(codec.template receive<T>(0, st[r], got[r], std::span<T>()).ok());
    const bytes all = gather();
    std::vector<std::vector<T>> out(world(), std::vector<T>(n()));
    for (std::uint32_t r = 0; r < world(); ++r) REQUIRE(codec.template receive<T>(1, st[r], all, std::span<T>(out[r])).ok());
    return out;
  }
};

std::vector<std::vector<float>> rank_values(std::size_t n, std::uint32_t world, std::uint64_t seed, bool dyadic = false) {
  std::vector<std::vector<float>> g;
  for (std::uint32_t r = 0; r < world; ++r) g.push_back(values(n, seed * 131 + r, dyadic));
  return g;
}

// The fp32 sum in rank order, element by element.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& g) {
  std::vector<float> s(g[0].size(), 0.0f);
  for (const auto& gr : g)
    for (std::size_t j = 0; j < s.size(); ++j) s[j] += gr[j];
  return s;
}

template <class C>
C small_chunks(typename C::config c = {}) {
  c.partition.chunk_bytes = 4096;  // several frames per shard
  return C(c);
}

}  // namespace

TEST_CASE("sharded: a lossless codec's reduce-scatter and all-reduce are the rank-order fp32 sum, bit for bit") {
  for (std::uint32_t world : {1u, 2u, 3u, 4u, 8u})
    for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{30011}}) {
      CAPTURE(world);
      CAPTURE(n);
      const auto g = rank_values(n, world, n + world);
      const auto want = bits_of(rank_order_sum(g));
      ranks<lossless> rs(sh::codec<lossless>(small_chunks<lossless>()), n, world);
      const auto shards = rs.reduce_scatter(g);
      std::vector<float> whole;
      for (const auto& s : shards) whole.insert(whole.end(), s.begin(), s.end());
      CHECK(bits_of(whole) == want);
      ranks<lossless> ar(sh::codec<lossless>(small_chunks<lossless>(), sh::mode::all_reduce), n, world);
      for (const auto& out : ar.all_reduce(g)) CHECK(bits_of(out) == want);
    }
}

TEST_CASE("sharded: every codec's all-reduce leaves bit-identical replicas near the sum, step after step") {
  const std::size_t n = 20011;
  const auto run = [&](auto comp, double bound) {
    using C = decltype(comp);
    for (std::uint32_t world : {2u, 3u, 4u, 8u}) {
      CAPTURE(world);
      ranks<C> ar(sh::codec<C>(comp, sh::mode::all_reduce), n, world);
      for (int step = 0; step < 3; ++step) {
        const auto g = rank_values(n, world, 7 * step + world);
        const auto want = rank_order_sum(g);
        const auto out = ar.all_reduce(g);
        double err = 0, norm = 0;
        for (std::size_t j = 0; j < n; ++j) {
          err += (out[0][j] - want[j]) * (out[0][j] - want[j]);
          norm += want[j] * want[j];
        }
        for (const auto& o : out) CHECK(bits_of(o) == bits_of(out[0]));
        CHECK(std::sqrt(err / norm) < bound);
      }
    }
  };
  // Sanity bounds on the relative L2 error of one step (two quantizations; error feedback moves
  // error between steps): far below what a broken decode gives (about 1 or more).
  run(small_chunks<int8_ef>(), 0.05);
  run(small_chunks<int4_ef>(), 0.8);
  run(small_chunks<qsgd4>(), 2.5);  // (unbiased, with the variance of 4-bit levels over 512-value groups, twice)
  run(topk_ef({.sparsify = {.density = 0.05}}), 1.0);  // (top-k leaves most of the sum in the residuals)
}

TEST_CASE("sharded: error feedback conserves on both stages: delivered + owed == given, exactly") {
  // Dyadic values: every sum and difference is exact in fp32, so conservation holds bit for bit.
  const std::size_t n = 4099;
  for (std::uint32_t world : {2u, 3u, 4u}) {
    CAPTURE(world);
    ranks<topk_exact> ar(sh::codec<topk_exact>(topk_exact({.sparsify = {.density = 0.05}}), sh::mode::all_reduce), n, world);
    std::vector<float> given(n, 0.0f), delivered(n, 0.0f);
    for (int step = 0; step < 6; ++step) {
      const auto g = rank_values(n, world, 100 + step, true);
      for (const auto& gr : g)
        for (std::size_t j = 0; j < n; ++j) given[j] += gr[j];
      const auto out = ar.all_reduce(g);
      for (std::size_t j = 0; j < n; ++j) delivered[j] += out[0][j];
      std::vector<float> owed(n, 0.0f);
      for (std::uint32_t r = 0; r < world; ++r) {
        for (std::uint32_t s = 0; s < world; ++s) {  // the senders' residuals, per destination shard
          const chunk_range c = summable::shard_of(n, world, s);
          for (std::size_t i = 0; i < c.count; ++i) owed[c.offset + i] += ar.st[r].send[s].residual[i];
        }
        const chunk_range mine = summable::shard_of(n, world, r);  // the owner's
        for (std::size_t i = 0; i < mine.count; ++i) owed[mine.offset + i] += ar.st[r].owner.residual[i];
      }
      std::vector<float> total(n);
      for (std::size_t j = 0; j < n; ++j) total[j] = delivered[j] + owed[j];
      CHECK(bits_of(total) == bits_of(given));
    }
  }
}

TEST_CASE("sharded: ranks and shards draw independent random numbers, runs repeat bit for bit") {
  const std::size_t n = 8192;
  const std::vector<std::vector<float>> same(2, values(n, 3));
  ranks<qsgd4> a(sh::codec<qsgd4>(qsgd4{}), n, 2), b(sh::codec<qsgd4>(qsgd4{}), n, 2);
  (void)a.scatter(same);
  (void)b.scatter(same);
  CHECK(a.sent0 == b.sent0);            // the same run twice
  CHECK(a.sent0[0] != a.sent0[1]);      // the same gradient on two ranks: other rounding
  CHECK(sh::seed_for(0, 0, 1) != sh::seed_for(0, 1, 0));
}

TEST_CASE("sharded: bf16 gradients go through as bf16, the sum in fp32") {
  const std::size_t n = 3001;
  const std::uint32_t world = 3;
  std::vector<std::vector<bf16_t>> g(world, std::vector<bf16_t>(n));
  std::vector<float> want(n, 0.0f);
  for (std::uint32_t r = 0; r < world; ++r) {
    const auto v = values(n, 40 + r, true);
    for (std::size_t j = 0; j < n; ++j) {
      g[r][j] = bf16_t::from_float(v[j]);
      want[j] += g[r][j].to_float();
    }
  }
  ranks<lossless> ar(sh::codec<lossless>(lossless{}, sh::mode::all_reduce), n, world);
  const auto out = ar.all_reduce<bf16_t>(g);
  for (std::size_t j = 0; j < n; ++j) CHECK(out[1][j].bits == bf16_t::from_float(want[j]).bits);
}

TEST_CASE("sharded: an all-reduce sends about 2 (W - 1) / W of one gather-path payload") {
  const std::size_t n = 1 << 20;
  const topk_ef comp({.sparsify = {.density = 0.01}});
  const std::size_t payload = comp.max_payload_bytes<float>(n);
  for (std::uint32_t world : {2u, 4u, 8u, 16u}) {
    CAPTURE(world);
    typename sh::codec<topk_ef>::state st;
    const sh::codec<topk_ef> c(comp, sh::mode::all_reduce);
    REQUIRE(c.make_state(n, world, 0, st).ok());
    const std::size_t sharded = (world - 1) * (c.describe(0, st)->slot_bytes + c.describe(1, st)->slot_bytes);
    const std::size_t gather = (world - 1) * payload;  // a ring all-gather of every rank's payload
    CHECK(static_cast<double>(sharded) <= 1.02 * 2.0 / world * static_cast<double>(gather) + 4096.0 * world);
  }
}

TEST_CASE("sharded: a rank's states share one workspace, so its memory does not grow with the world size") {
  const std::size_t n = 1 << 20;
  const topk_ef comp({.sparsify = {.density = 0.01}});
  const sh::codec<topk_ef> c(comp, sh::mode::all_reduce);
  for (std::uint32_t world : {2u, 8u, 64u}) {
    CAPTURE(world);
    typename sh::codec<topk_ef>::state st;
    REQUIRE(c.make_state(n, world, 1, st).ok());
    std::size_t need = 0, residuals = st.owner.residual.size();
    for (std::uint32_t j = 0; j < world; ++j) {
      need = std::max(need, comp.workspace_bytes(summable::shard_of(n, world, j).count));
      residuals += st.send[j].residual.size();
      CHECK(st.send[j].workspace.capacity() == 0);
    }
    CHECK(st.owner.workspace.capacity() == 0);
    CHECK(st.workspace.size() == need);
    CHECK(residuals == n + summable::shard_of(n, world, 1).count);
  }
}

TEST_CASE("sharded: bad slots get a specific error and leave the output untouched") {
  const std::size_t n = 5003;
  const std::uint32_t world = 3;
  const auto g = rank_values(n, world, 9);
  ranks<int8_ef> t(sh::codec<int8_ef>(small_chunks<int8_ef>(), sh::mode::all_reduce), n, world);
  const auto p = *t.codec.describe(0, t.st[0]);
  const std::vector<bytes> got = t.scatter(g);
  const chunk_range mine = summable::shard_of(n, world, 1);
  std::vector<float> out(mine.count, -3.0f);
  const auto refuse = [&](bytes in, errc want) {
    CHECK(t.codec.receive<float>(0, t.st[1], in, std::span<float>(out)) == want);
    CHECK(out == std::vector<float>(mine.count, -3.0f));
  };
  refuse(bytes(got[1].begin(), got[1].end() - 8), errc::size_mismatch);  // a slot short
  bytes in = got[1];
  in[p.slot_bytes + 16 + 200] ^= std::byte{1};  // a corrupted frame in rank 1's slot
  refuse(in, errc::checksum_mismatch);
  in = got[1];
  std::memcpy(in.data() + 2 * p.slot_bytes, got[1].data(), p.slot_bytes);  // rank 0's slot where rank 2's belongs
  refuse(in, errc::bad_header);
  in = got[1];
  in.back() = std::byte{7};  // padding after the frames
  refuse(in, errc::bad_header);
  in = got[1];
  in[0] = std::byte{0};  // not a slot
  refuse(in, errc::bad_magic);
  // A foreign frame (another codec's) and a slot of another step.
  ranks<int4_ef> other(sh::codec<int4_ef>(small_chunks<int4_ef>(), sh::mode::all_reduce), n, world);
  const std::vector<bytes> foreign = other.scatter(g);
  if (p.slot_bytes == other.codec.describe(0, other.st[0])->slot_bytes) {
    in = got[1];
    std::memcpy(in.data(), foreign[1].data(), p.slot_bytes);
    refuse(in, errc::codec_mismatch);
  }
  ranks<int8_ef> later(sh::codec<int8_ef>(small_chunks<int8_ef>(), sh::mode::all_reduce), n, world);
  for (auto& s : later.st) s.step = 5;
  in = got[1];
  std::memcpy(in.data(), later.scatter(g)[1].data(), p.slot_bytes);
  refuse(in, errc::codec_mismatch);
  // Out of order, then the good buffer.
  bytes slot(t.codec.describe(1, t.st[1])->send_bytes());
  CHECK(t.codec.encode<float>(1, {}, t.st[1], slot) == errc::invalid_argument);
  CHECK(t.codec.receive<float>(0, t.st[1], got[1], std::span<float>(out)).ok());
}

TEST_CASE("sharded: bad gathered slots leave every shard of the output untouched") {
  const std::size_t n = 4000;
  const std::uint32_t world = 4;
  ranks<int8_ef> t(sh::codec<int8_ef>(int8_ef{}, sh::mode::all_reduce), n, world);
  const std::vector<bytes> got = t.scatter(rank_values(n, world, 2));
  for (std::uint32_t r = 0; r < world; ++r) REQUIRE(t.codec.receive<float>(0, t.st[r], got[r], std::span<float>()).ok());
  bytes all = t.gather();
  const auto p = *t.codec.describe(1, t.st[0]);
  all[3 * p.slot_bytes + 120] ^= std::byte{0x10};  // the last owner's frame
  std::vector<float> out(n, 7.0f);
  CHECK(t.codec.receive<float>(1, t.st[0], all, std::span<float>(out)) == errc::checksum_mismatch);
  CHECK(out == std::vector<float>(n, 7.0f));
  CHECK(t.codec.receive<float>(1, t.st[0], all, std::span<float>(out).first(n - 1)) == errc::size_mismatch);
}

TEST_CASE("sharded: a checkpoint resumes byte for byte, an elastic restore keeps what feedback owes") {
  const std::size_t n = 6007;
  const auto comp = topk_exact({.sparsify = {.density = 0.05}});
  const sh::codec<topk_exact> c(comp, sh::mode::all_reduce);
  ranks<topk_exact> a(c, n, 4);
  for (int step = 0; step < 3; ++step) (void)a.all_reduce(rank_values(n, 4, step, true));
  std::vector<bytes> saved(4);
  for (std::uint32_t r = 0; r < 4; ++r) {
    saved[r].resize(sh::checkpoint_bytes(c, a.st[r]));
    REQUIRE(sh::save_checkpoint(c, a.st[r], saved[r]).ok());
  }
  // Same world: continue on fresh states, then compare with the original.
  ranks<topk_exact> b(c, n, 4);
  for (std::uint32_t r = 0; r < 4; ++r) REQUIRE(sh::load_checkpoint(c, saved[r], b.st[r]).ok());
  const auto g = rank_values(n, 4, 77, true);
  CHECK(a.all_reduce(g) == b.all_reduce(g));
  CHECK(a.sent0 == b.sent0);
  CHECK(a.sent1 == b.sent1);
  // Damaged images are refused, the state untouched.
  bytes bad = saved[2];
  bad[60] ^= std::byte{1};
  CHECK(sh::load_checkpoint(c, bad, b.st[2]) == errc::checksum_mismatch);
  bytes v1 = saved[2];
  v1[4] = std::byte{1};  // version 1, before the envelope
  CHECK(sh::load_checkpoint(c, v1, b.st[2]) == errc::unsupported_version);
  CHECK(sh::load_checkpoint(c, saved[1], b.st[2]) == errc::size_mismatch);  // another rank's
  CHECK(sh::load_checkpoint(sh::codec<topk_exact>(comp), saved[2], b.st[2]) == errc::codec_mismatch);  // another mode
  // 4 -> 3 ranks: the owed sums carry over exactly.
  std::vector<float> owed_before(n, 0.0f);
  ranks<topk_exact> old(c, n, 4);
  for (std::uint32_t r = 0; r < 4; ++r) REQUIRE(sh::load_checkpoint(c, saved[r], old.st[r]).ok());
  for (std::uint32_t r = 0; r < 4; ++r)
    for (std::uint32_t s = 0; s < 4; ++s) {
      const chunk_range sc = summable::shard_of(n, 4, s);
      for (std::size_t i = 0; i < sc.count; ++i) owed_before[sc.offset + i] += old.st[r].send[s].residual[i];
    }
  std::vector<std::span<const std::byte>> images(saved.begin(), saved.end());
  ranks<topk_exact> e(c, n, 3);
  std::vector<float> owed_after(n, 0.0f), owner_after(n, 0.0f), owner_before(n, 0.0f);
  for (std::uint32_t r = 0; r < 3; ++r) {
    REQUIRE(sh::restore_elastic(c, images, e.st[r]).ok());
    CHECK(e.st[r].step == old.st[0].step);
    for (std::uint32_t s = 0; s < 3; ++s) {
      const chunk_range sc = summable::shard_of(n, 3, s);
      for (std::size_t i = 0; i < sc.count; ++i) owed_after[sc.offset + i] += e.st[r].send[s].residual[i];
    }
    const chunk_range mine = summable::shard_of(n, 3, r);
    for (std::size_t i = 0; i < mine.count; ++i) owner_after[mine.offset + i] = e.st[r].owner.residual[i];
  }
  for (std::uint32_t r = 0; r < 4; ++r) {
    const chunk_range mine = summable::shard_of(n, 4, r);
    for (std::size_t i = 0; i < mine.count; ++i) owner_before[mine.offset + i] = old.st[r].owner.residual[i];
  }
  CHECK(bits_of(owed_after) == bits_of(owed_before));  // dyadic residuals: the sums are exact
  CHECK(bits_of(owner_after) == bits_of(owner_before));
  (void)e.all_reduce(rank_values(n, 3, 5, true));  // and the restored run steps on
  CHECK(sh::restore_elastic(c, std::span<const std::span<const std::byte>>(images).first(3), e.st[0]) == errc::size_mismatch);
}
