// The TAGC codec refuses calls out of order, buffers of the wrong size or alignment, and
// reduced buffers no set of ranks could have produced; state and outputs stay as they were.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tagc/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::tagc;

namespace {

struct rig {
  gt::codec c;
  std::size_t n;
  std::vector<gt::state> st;
  std::vector<std::vector<float>> g;
  rig(const gt::config& cfg, std::size_t count, std::uint32_t world)
      : c(cfg), n(count), st(make_ranks(c, count, world)), g(rank_grads(count, world, 3, false)) {}

  // Every rank through encode(0); returns the reduced bitmap.
  test::bytes bitmaps() {
    const auto p = *c.describe(0, st[0]);
    std::vector<test::bytes> sends;
    for (std::size_t r = 0; r < st.size(); ++r) {
      sends.emplace_back(p.bytes());
      REQUIRE(c.encode(0, g[r], st[r], sends.back()).ok());
    }
    return test::reduce_all(p, sends);
  }
};

bool same_state(const gt::state& a, const gt::state& b) {
  return a.residual == b.residual && a.thresholds == b.thresholds && a.step == b.step && a.at == b.at && a.rows == b.rows;
}

}  // namespace

TEST_CASE("tagc bad input: calls out of order and mis-sized states") {
  rig t({}, 5000, 4);
  const auto p0 = *t.c.describe(0, t.st[0]);
  test::bytes buf(p0.bytes());
  std::vector<float> out(t.n, -1.0f);
  CHECK(t.c.receive(0, t.st[0], buf, {}) == errc::invalid_argument);         // nothing encoded yet
  CHECK(t.c.encode(1, t.g[0], t.st[0], buf) == errc::invalid_argument);      // sketch before bitmap
  CHECK(t.c.encode(0, std::vector<float>(7), t.st[0], buf) == errc::size_mismatch);
  test::bytes wide(p0.bytes() + 4);
  CHECK(t.c.encode(0, t.g[0], t.st[0], wide) == errc::size_mismatch);
  CHECK(t.c.encode(0, t.g[0], t.st[0], std::span<std::byte>(wide).subspan(1, p0.bytes())) == errc::invalid_argument);  // alignment
  const gt::state untouched = t.st[0];
  CHECK(same_state(t.st[0], untouched));
  REQUIRE(t.c.encode(0, t.g[0], t.st[0], buf).ok());
  CHECK(t.c.encode(0, t.g[0], t.st[0], buf) == errc::invalid_argument);  // twice
  gt::state bad;
  CHECK(t.c.describe(0, bad).code() == errc::size_mismatch);
  bad = t.st[1];
  bad.rank = 9;
  CHECK(t.c.describe(0, bad).code() == errc::invalid_argument);
  bad = t.st[1];
  bad.workspace.resize(8);
  CHECK(t.c.describe(0, bad).code() == errc::size_mismatch);
  gt::state fresh;
  CHECK(t.c.make_state(10, 0, 0, fresh) == errc::invalid_argument);
  CHECK(t.c.make_state(10, 2, 2, fresh) == errc::invalid_argument);
  CHECK(gt::codec(gt::config{.block = 0}).make_state(10, 2, 0, fresh) == errc::invalid_argument);
}

TEST_CASE("tagc bad input: reduced bitmaps no ranks could send") {
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe}) {
    gt::config cfg;
    cfg.bitmap = mode;
    rig t(cfg, 5003, 4);  // 5003 % 32 != 0: the last word has bits past n
    const test::bytes good = t.bitmaps();
    const auto before = t.st[0];
    const auto refuse = [&](const test::bytes& b, errc want) {
      CHECK(t.c.receive(0, t.st[0], b, {}) == want);
      CHECK(same_state(t.st[0], before));
    };
    refuse(test::bytes(good.begin(), good.end() - 4), errc::size_mismatch);
    test::bytes b = good;
    if (mode == gt::bitmap_mode::bitwise_or) {
      test::store_at<std::uint32_t>(b, 5003 / 32, test::load_at<std::uint32_t>(b, 5003 / 32) | 1u << 31);
      refuse(b, errc::index_out_of_range);
    } else {
      test::store_at<std::uint32_t>(b, 0, 7u);  // a 3-bit field of 7 > W = 4
      refuse(b, errc::count_too_large);
      b = good;
      test::store_at<std::uint32_t>(b, 0, 1u << 31);  // above the 10 fields of 3 bits
      refuse(b, errc::bad_meta);
    }
    // Every position of a shard kept: more than 4 ranks of 1.25% (x 1.3) can keep.
    b = good;
    for (std::size_t j = 0; j < 1250; ++j) {
      if (mode == gt::bitmap_mode::bitwise_or) {
        test::store_at<std::uint32_t>(b, j / 32, test::load_at<std::uint32_t>(b, j / 32) | 1u << (j % 32));
      } else {
        test::store_at<std::uint32_t>(b, j / 10, (test::load_at<std::uint32_t>(b, j / 10) & ~(7u << (3 * (j % 10)))) | 1u << (3 * (j % 10)));
      }
    }
    refuse(b, errc::count_too_large);
    CHECK(t.c.receive(0, t.st[0], good, {}).ok());
  }
}

TEST_CASE("tagc bad input: reduced sketches of the wrong size or alignment, output untouched") {
  rig t({}, 6007, 3);
  const test::bytes bits = t.bitmaps();
  for (auto& s : t.st) REQUIRE(t.c.receive(0, s, bits, {}).ok());
  const auto p1 = *t.c.describe(1, t.st[0]);
  CHECK(p1.shardable);
  CHECK(p1.count == 3 * std::size_t{t.st[0].rows} * t.c.get_config().block);
  std::vector<test::bytes> sends;
  for (std::size_t r = 0; r < 3; ++r) {
    sends.emplace_back(p1.bytes());
    test::bytes short_buffer(p1.bytes() - 2);
    CHECK(t.c.encode(1, {}, t.st[r], short_buffer) == errc::size_mismatch);
    REQUIRE(t.c.encode(1, {}, t.st[r], sends.back()).ok());
  }
  const test::bytes whole = test::reduce_all(p1, sends);
  const test::bytes shard = test::received_by(p1, whole, 1, test::collective::reduce_scatter);
  const std::size_t mine = summable::shard_of(t.n, 3, 1).count;
  std::vector<float> out(mine, -2.0f);
  const auto refuse = [&](std::span<const std::byte> in, std::span<float> o, errc want) {
    CHECK(t.c.receive(1, t.st[1], in, o) == want);
    CHECK(out == std::vector<float>(mine, -2.0f));
  };
  refuse(std::span<const std::byte>(shard).first(shard.size() - 2), out, errc::size_mismatch);
  refuse(shard, std::span<float>(out).first(mine - 1), errc::size_mismatch);  // the shard's output size
  refuse(whole, out, errc::size_mismatch);                                     // whole: out must be n
  test::bytes odd(1);  // the shard one byte past an aligned start
  odd.insert(odd.end(), shard.begin(), shard.end());
  refuse(std::span<const std::byte>(odd).subspan(1, shard.size()), out, errc::invalid_argument);
  // The named call is told what it holds: a shard called whole, or the whole called a shard.
  CHECK(t.c.receive_sketch(t.st[1], shard, summable::received::whole, out) == errc::size_mismatch);
  CHECK(t.c.receive_sketch(t.st[1], whole, summable::received::shard, out) == errc::size_mismatch);
  CHECK(out == std::vector<float>(mine, -2.0f));
  CHECK(t.c.receive_sketch(t.st[1], shard, summable::received::shard, out).ok());
  CHECK(t.c.receive(1, t.st[1], shard, out) == errc::invalid_argument);  // twice
  t.c.finish_step(t.st[1]);
  CHECK(t.st[1].at == gt::stage::encode_bitmap);
}
