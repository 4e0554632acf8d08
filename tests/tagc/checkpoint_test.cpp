// TAGC checkpoints: a run restored at step 10 continues byte for byte; mismatched, corrupted
// and truncated images are refused; elastic restore into another world size conserves what
// error feedback owes.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tagc/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::tagc;

namespace {

test::bytes save(const gt::codec& c, const gt::state& s) {
  test::bytes img(gt::checkpoint_bytes(s));
  const auto w = gt::save_checkpoint(c, s, img);
  REQUIRE(w.ok());
  CHECK(*w == img.size());
  return img;
}

struct trace {
  std::vector<std::vector<std::vector<test::bytes>>> sent;  // [step][phase][rank]
  std::vector<std::vector<std::vector<float>>> outs;        // [step][rank]
};

void run_steps(const gt::codec& c, std::vector<gt::state>& st, int first, int last, trace& t) {
  for (int step = first; step < last; ++step) {
    std::vector<std::vector<test::bytes>> sent;
    std::vector<std::vector<float>> outs;
    const auto g = rank_grads(st[0].size, static_cast<std::uint32_t>(st.size()), 700 + static_cast<std::uint64_t>(step), false);
    REQUIRE(test::run_ranks(c, st, g, collective::reduce_scatter, outs, &sent).ok());
    t.sent.push_back(sent);
    t.outs.push_back(outs);
  }
}

}  // namespace

TEST_CASE("tagc checkpoint: 20 steps, restored at 10, give steps 11..20 byte for byte") {
  const std::size_t n = 20011;
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe}) {
    gt::config cfg;
    cfg.bitmap = mode;
    cfg.seed = 1234;
    const gt::codec c(cfg);
    auto st = make_ranks(c, n, 4);
    trace first, whole, resumed;
    run_steps(c, st, 0, 10, first);
    std::vector<test::bytes> images;
    for (const auto& s : st) images.push_back(save(c, s));
    run_steps(c, st, 10, 20, whole);

    auto fresh = make_ranks(c, n, 4);  // a new process: another seed in its config is overridden by the key saved
    for (std::uint32_t r = 0; r < 4; ++r) REQUIRE(gt::load_checkpoint(c, images[r], fresh[r]).ok());
    CHECK(fresh[2].step == 10);
    CHECK(fresh[2].key == 1234);
    run_steps(c, fresh, 10, 20, resumed);
    CHECK(whole.sent == resumed.sent);
    CHECK(whole.outs == resumed.outs);
    for (std::uint32_t r = 0; r < 4; ++r) {
      CHECK(fresh[r].residual == st[r].residual);
      CHECK(fresh[r].thresholds == st[r].thresholds);
    }
  }
}

TEST_CASE("tagc checkpoint: mismatched, corrupted and truncated images are refused, state untouched") {
  const std::size_t n = 3001;
  const gt::codec c;
  auto st = make_ranks(c, n, 2);
  trace t;
  run_steps(c, st, 0, 2, t);
  const test::bytes img = save(c, st[1]);
  auto target = make_ranks(c, n, 2);
  const auto before = target[1].residual;
  const auto refuse = [&](const gt::codec& with, std::span<const std::byte> b, gt::state& s, errc want) {
    const auto res = s.residual;
    const auto step = s.step;
    CHECK(gt::load_checkpoint(with, b, s) == want);
    CHECK(s.residual == res);
    CHECK(s.step == step);
  };
  refuse(c, std::span<const std::byte>(img).first(30), target[1], errc::truncated);
  refuse(c, std::span<const std::byte>(img).first(img.size() - 8), target[1], errc::truncated);
  test::bytes longer = img;
  longer.resize(img.size() + 4);
  refuse(c, longer, target[1], errc::size_mismatch);
  for (std::size_t at : {std::size_t{60}, img.size() / 2, img.size() - 1}) {
    test::bytes flipped = img;
    flipped[at] ^= std::byte{0x10};
    refuse(c, flipped, target[1], errc::checksum_mismatch);
  }
  test::bytes b = img;
  b[0] = std::byte{0};
  refuse(c, b, target[1], errc::bad_magic);
  b = img;
  b[4] = std::byte{9};
  refuse(c, b, target[1], errc::unsupported_version);
  const auto resealed = [&](std::size_t at, std::uint32_t v) {  // a field changed, the CRC made right again
    test::bytes r = img;
    std::memcpy(r.data() + at, &v, 4);
    const std::uint32_t crc = crc32c(std::span<const std::byte>(r).first(r.size() - 4));
    std::memcpy(r.data() + r.size() - 4, &crc, 4);
    return r;
  };
  refuse(c, resealed(4, 0x00010002u), target[1], errc::bad_header);           // reserved half-word not zero
  refuse(c, resealed(4, 0x00000001u), target[1], errc::unsupported_version);  // version 1: before the envelope
  refuse(c, resealed(32, 0), target[1], errc::bad_header);                    // world 0
  refuse(c, resealed(36, 2), target[1], errc::bad_header);                    // rank >= world
  refuse(c, resealed(32, 1), target[1], errc::bad_header);                    // world differs from the threshold count
  refuse(c, img, target[0], errc::size_mismatch);  // another rank
  auto other_world = make_ranks(c, n, 3);
  refuse(c, img, other_world[1], errc::size_mismatch);
  auto other_size = make_ranks(c, n + 1, 2);
  refuse(c, img, other_size[1], errc::size_mismatch);
  gt::config cfg;
  cfg.block = 32;
  const gt::codec other_format(cfg);
  auto t2 = make_ranks(other_format, n, 2);
  refuse(other_format, img, t2[1], errc::codec_mismatch);
  cfg = {};
  cfg.select.density = 0.02;
  const gt::codec other_select(cfg);
  auto t3 = make_ranks(other_select, n, 2);
  refuse(other_select, img, t3[1], errc::codec_mismatch);
  gt::state unsized;
  CHECK(gt::load_checkpoint(c, img, unsized) == errc::size_mismatch);
  test::bytes small(gt::checkpoint_bytes(st[1]) - 1);
  CHECK(gt::save_checkpoint(c, st[1], small).code() == errc::buffer_too_small);
  CHECK(target[1].residual == before);
  CHECK(gt::load_checkpoint(c, img, target[1]).ok());
  CHECK(target[1].residual == st[1].residual);
}

TEST_CASE("tagc elastic restore: W = 4 -> 2, 3, 8 keeps the residuals' sum over ranks") {
  const std::size_t n = 10007;
  const gt::codec c;
  auto st = make_ranks(c, n, 4);
  trace t;
  run_steps(c, st, 0, 3, t);
  std::vector<test::bytes> images;
  for (std::uint32_t r : {2u, 0u, 3u, 1u}) images.push_back(save(c, st[r]));  // any order
  std::vector<std::span<const std::byte>> views(images.begin(), images.end());
  std::vector<float> owed(n);  // the saved residuals added in rank order
  for (std::size_t j = 0; j < n; ++j) {
    float s = st[0].residual[j];
    for (std::uint32_t r = 1; r < 4; ++r) s = s + st[r].residual[j];
    owed[j] = s;
  }
  for (std::uint32_t world : {2u, 3u, 8u}) {
    CAPTURE(world);
    auto now = make_ranks(c, n, world);
    for (auto& s : now) REQUIRE(gt::restore_elastic(c, views, s).ok());
    std::size_t differ = 0;
    for (std::size_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (const auto& r : now) s += r.residual[j];
      differ += s != owed[j];
    }
    CHECK(differ == 0);
    for (std::uint32_t r = 0; r < world; ++r) {
      CHECK(now[r].step == 3);
      CHECK(now[r].thresholds == std::vector<float>(world, 0.0f));
      const chunk_range mine = summable::shard_of(n, world, r);
      for (std::size_t j = 0; j < n; ++j)
        if (j < mine.offset || j >= mine.offset + mine.count) REQUIRE(now[r].residual[j] == 0.0f);
    }
    trace after;
    run_steps(c, now, 3, 5, after);  // the run goes on under the new world size
    CHECK(now[0].step == 5);
  }
  // Refused: a missing rank, a rank twice, checkpoints of different steps.
  auto now = make_ranks(c, n, 2);
  const auto before = now[0].residual;
  CHECK(gt::restore_elastic(c, std::span(views).first(3), now[0]) == errc::size_mismatch);
  std::vector<std::span<const std::byte>> twice{views[0], views[0], views[1], views[2]};
  CHECK(gt::restore_elastic(c, twice, now[0]) == errc::invalid_argument);
  auto later = st;
  trace more;
  run_steps(c, later, 3, 4, more);
  const test::bytes newer = save(c, later[0]);
  std::vector<std::span<const std::byte>> mixed{newer, views[0], views[2], views[3]};  // rank 0 at step 4, 2/3/1 at step 3
  CHECK(gt::restore_elastic(c, mixed, now[0]) == errc::invalid_argument);
  CHECK(gt::restore_elastic(c, {}, now[0]) == errc::invalid_argument);
  CHECK(now[0].residual == before);
}
