// The per-thread flow's errors (tagc/flow.hpp, host loops): a bad reduced bitmap is
// reported on the device with the host codec's errc and the rest of the step does nothing
// (cells, residual and output untouched), after which the ranks carry on in step with the
// host; a packed sketch buffer too small for the step's cells is found on the device; argument
// errors come back at once with nothing run; the state goes to and from host checkpoints.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "tagc/twins.hpp"

using namespace gradcomp;
using namespace gradcomp::test::tagc;
using test::bytes;

namespace {

// One step whose reduced bitmap is corrupted: the host refuses it with `want`, the model
// reports it; nothing else of the step happens; both finish the step.
void bad_union_step(twins& t, std::uint64_t seed, const std::function<void(bytes&)>& corrupt, errc want) {
  const std::uint32_t W = t.world();
  const auto g = make_grads(grads::wide, t.n(), W, seed);
  const auto p0 = t.host.describe(0, t.hs[0]);
  std::vector<bytes> send(W, bytes(p0->bytes()));
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(t.host.encode(0, g[r], t.hs[r], send[r]).ok());
    bytes mine(p0->bytes());
    REQUIRE(t.dev.encode_bitmap(t.ex, t.ms[r].workspace.span(), t.ms[r].st, g[r], mine).ok());
    CHECK(mine == send[r]);
  }
  bytes uni = test::reduce_all(*p0, send);
  corrupt(uni);
  for (std::uint32_t r = 0; r < W; ++r) {
    CHECK(t.host.receive(0, t.hs[r], uni, {}).code() == want);
    REQUIRE(t.dev.receive_bitmap(t.ex, t.ms[r].workspace.span(), t.ms[r].st, uni).ok());
    CHECK(t.report(r).code == static_cast<std::uint32_t>(want));
    const auto q1 = t.dev.describe(1, t.ms[r].st);
    bytes cells(q1->bytes(), std::byte{0x5a});
    REQUIRE(t.dev.encode_sketch(t.ex, t.ms[r].workspace.span(), t.ms[r].st, cells).ok());
    CHECK(cells == bytes(q1->bytes(), std::byte{0x5a}));
    t.check_state(r);  // the residual holds x = g + e, as the host's does
    std::vector<float> out(summable::shard_of(t.n(), W, r).count, -7.0f);
    REQUIRE(t.dev.receive_sketch(t.ex, t.ms[r].workspace.span(), t.ms[r].st, std::span<const std::byte>(cells).first(q1->shard_bytes()),
                                 summable::received::shard, out)
                .ok());
    CHECK(out == std::vector<float>(out.size(), -7.0f));
    CHECK(t.report(r).code == static_cast<std::uint32_t>(want));
    t.host.finish_step(t.hs[r]);
    REQUIRE(t.dev.finish_step(t.ex, t.ms[r].st).ok());
    t.check_state(r);
  }
}

void set_word(bytes& b, std::size_t w, std::uint32_t v) { std::memcpy(b.data() + 4 * w, &v, 4); }
std::uint32_t word(const bytes& b, std::size_t w) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + 4 * w, 4);
  return v;
}

}  // namespace

TEST_CASE("tagc flow: a bad union is reported on the device, the step does nothing more, the next is whole") {
  const std::size_t n = 10007;  // 10007 % 32 = 23: the last word has 9 bits past n
  SUBCASE("1-bit: a bit past n") {
    twins t(gt::config{}, n, 4);
    t.step(make_grads(grads::wide, n, 4, 1), collective::reduce_scatter);
    bad_union_step(t, 2, [&](bytes& u) { set_word(u, n / 32, word(u, n / 32) | 1u << 30); }, errc::index_out_of_range);
    t.step(make_grads(grads::wide, n, 4, 3), collective::reduce_scatter);
  }
  SUBCASE("1-bit: more kept positions in a shard than W ranks can keep") {
    twins t(gt::config{}, n, 4);
    bad_union_step(t, 2, [&](bytes& u) {
      for (std::size_t w = 0; w < 40; ++w) set_word(u, w, 0xffffffffu);
    }, errc::count_too_large);
    t.step(make_grads(grads::wide, n, 4, 3), collective::all_reduce);
  }
  gt::config sum_safe;
  sum_safe.bitmap = gt::bitmap_mode::sum_safe;  // W = 4: 3-bit fields, 10 per word, 2 padding bits
  SUBCASE("sum-safe: a field above W, then a padding bit: the first bad word decides") {
    twins t(sum_safe, n, 4);
    bad_union_step(t, 2, [&](bytes& u) {
      set_word(u, 5, 7u);
      set_word(u, 9, 1u << 31);
    }, errc::count_too_large);
    t.step(make_grads(grads::wide, n, 4, 3), collective::reduce_scatter);
  }
  SUBCASE("sum-safe: a padding bit first") {
    twins t(sum_safe, n, 4);
    bad_union_step(t, 2, [&](bytes& u) {
      set_word(u, 5, 1u << 31);
      set_word(u, 9, 7u);
    }, errc::bad_meta);
  }
  SUBCASE("sum-safe: a field past n") {
    twins t(sum_safe, n, 4);
    bad_union_step(t, 2, [&](bytes& u) { set_word(u, n / 10, word(u, n / 10) | 1u << 27); }, errc::index_out_of_range);
  }
}

TEST_CASE("tagc flow: a packed sketch buffer too small for the step's cells is found on the device") {
  const std::size_t n = 20011;
  twins t(gt::config{}, n, 3);
  const auto g = make_grads(grads::wide, n, 3, 9);
  const auto p0 = t.host.describe(0, t.hs[0]);
  std::vector<bytes> send(3, bytes(p0->bytes()));
  for (std::uint32_t r = 0; r < 3; ++r)
    REQUIRE(t.dev.encode_bitmap(t.ex, t.ms[r].workspace.span(), t.ms[r].st, g[r], send[r]).ok());
  const bytes uni = test::reduce_all(*p0, send);
  REQUIRE(t.dev.receive_bitmap(t.ex, t.ms[0].workspace.span(), t.ms[0].st, uni).ok());
  const auto rep = t.report(0);
  REQUIRE(rep.code == 0);
  const std::size_t need = rep.sketch_cells * 2;  // bf16 cells
  const auto before = t.downloaded(0);
  bytes small(need - 2, std::byte{0x5a});
  REQUIRE(t.dev.encode_sketch(t.ex, t.ms[0].workspace.span(), t.ms[0].st, small).ok());
  CHECK(t.report(0).code == static_cast<std::uint32_t>(errc::buffer_too_small));
  CHECK(small == bytes(need - 2, std::byte{0x5a}));
  CHECK(bits_of(t.downloaded(0).residual) == bits_of(before.residual));
  // The same step with a large enough buffer on another rank; its shard received short.
  REQUIRE(t.dev.receive_bitmap(t.ex, t.ms[1].workspace.span(), t.ms[1].st, uni).ok());
  bytes cells(need);
  REQUIRE(t.dev.encode_sketch(t.ex, t.ms[1].workspace.span(), t.ms[1].st, cells).ok());
  CHECK(t.report(1).code == 0);
  std::vector<float> out(summable::shard_of(n, 3, 1).count, -7.0f);
  REQUIRE(t.dev.receive_sketch(t.ex, t.ms[1].workspace.span(), t.ms[1].st, std::span<const std::byte>(cells).first(need / 3 - 2),
                               summable::received::shard, out)
              .ok());
  CHECK(t.report(1).code == static_cast<std::uint32_t>(errc::size_mismatch));
  CHECK(out == std::vector<float>(out.size(), -7.0f));
}

TEST_CASE("tagc flow: argument errors come back at once and run nothing") {
  const std::size_t n = 1000;
  twins t(gt::config{}, n, 4);
  auto& m = t.ms[1];
  const auto p0 = t.dev.describe(0, m.st);
  bytes out(p0->bytes());
  std::vector<float> grad(n);
  auto ws = m.workspace.span();
  const auto launches = [&] { return t.ex.launches + t.ex.skipped; };
  const std::uint64_t before = launches();
  CHECK(t.dev.encode_bitmap(t.ex, ws, m.st, std::span<const float>(grad).first(n - 1), out).code() == errc::size_mismatch);
  CHECK(t.dev.encode_bitmap(t.ex, ws, m.st, grad, std::span<std::byte>(out).first(out.size() - 4)).code() == errc::size_mismatch);
  CHECK(t.dev.encode_bitmap(t.ex, ws, m.st, grad, std::span<std::byte>(out.data() + 1, out.size())).code() == errc::invalid_argument);
  CHECK(t.dev.encode_bitmap(t.ex, ws.first(ws.size() - 256), m.st, grad, out).code() == errc::buffer_too_small);
  CHECK(t.dev.encode_bitmap(t.ex, ws.subspan(8), m.st, grad, out).code() == errc::invalid_argument);
  CHECK(t.dev.receive_bitmap(t.ex, ws, m.st, out).code() == errc::invalid_argument);  // out of order
  CHECK(t.dev.encode_sketch(t.ex, ws, m.st, out).code() == errc::invalid_argument);
  std::vector<float> values(n);
  CHECK(t.dev.receive_sketch(t.ex, ws, m.st, out, summable::received::whole, values).code() == errc::invalid_argument);
  gt::config other = gt::config{};
  other.block = 32;
  const td::flow foreign(other);
  CHECK(foreign.encode_bitmap(t.ex, ws, m.st, grad, out).code() == errc::codec_mismatch);
  CHECK(launches() == before);  // nothing ran
  REQUIRE(t.dev.encode_bitmap(t.ex, ws, m.st, grad, out).ok());
  CHECK(launches() > before);
  CHECK(t.dev.encode_bitmap(t.ex, ws, m.st, grad, out).code() == errc::invalid_argument);  // twice
  REQUIRE(t.dev.receive_bitmap(t.ex, ws, m.st, out).ok());
  bytes cells(t.dev.describe(1, m.st)->bytes());
  REQUIRE(t.dev.encode_sketch(t.ex, ws, m.st, cells).ok());
  CHECK(t.dev.receive_sketch(t.ex, ws, m.st, out, summable::received::whole, std::span<float>(values).first(n - 1)).code() ==
        errc::size_mismatch);
  CHECK(t.dev.receive_sketch(t.ex, ws, m.st, std::span<const std::byte>(out).first(3), summable::received::whole, values).code() ==
        errc::size_mismatch);  // not whole cells
  // make_state's own checks.
  aligned_bytes mem(*t.dev.state_bytes(n, 4));
  gradcomp::tagc::device_state st;
  CHECK(t.dev.make_state(t.ex, mem.span().first(mem.span().size() - 1), n, 4, 0, st).code() == errc::buffer_too_small);
  CHECK(t.dev.make_state(t.ex, mem.span(), n, 4, 4, st).code() == errc::invalid_argument);
  CHECK(t.dev.make_state(t.ex, mem.span(), n, 0, 0, st).code() == errc::invalid_argument);
  gt::config bad;
  bad.block = 0;
  CHECK(td::flow(bad).state_bytes(n, 4).code() == errc::invalid_argument);
}

TEST_CASE("tagc flow: device state to and from host checkpoints, the run continuing identically") {
  const std::size_t n = 30011;
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe}) {
    gt::config c;
    c.bitmap = mode;
    twins t(c, n, 4);
    for (int s = 0; s < 2; ++s) t.step(make_grads(grads::wide, n, 4, 40 + static_cast<std::uint64_t>(s)), collective::reduce_scatter);
    for (std::uint32_t r = 0; r < 4; ++r) {
      const gt::state d = t.downloaded(r);
      bytes a(gt::checkpoint_bytes(d)), b(gt::checkpoint_bytes(t.hs[r]));
      REQUIRE(gt::save_checkpoint(t.host, d, a).ok());
      REQUIRE(gt::save_checkpoint(t.host, t.hs[r], b).ok());
      CHECK(a == b);
      // A fresh device state loaded from the host's checkpoint.
      gt::state loaded;
      REQUIRE(t.host.make_state(n, 4, r, loaded).ok());
      REQUIRE(gt::load_checkpoint(t.host, b, loaded).ok());
      model_rank fresh;
      fresh.memory = aligned_bytes(*t.dev.state_bytes(n, 4));
      fresh.workspace = aligned_bytes(*t.dev.workspace_bytes<host_executor>(n, 4));
      REQUIRE(t.dev.make_state(t.ex, fresh.memory.span(), n, 4, r, fresh.st).ok());
      REQUIRE(t.dev.upload_state(t.ex, loaded, fresh.st).ok());
      t.ms[r] = std::move(fresh);
    }
    for (int s = 2; s < 4; ++s) t.step(make_grads(grads::wide, n, 4, 40 + static_cast<std::uint64_t>(s)), collective::reduce_scatter);
    gt::state wrong;
    REQUIRE(t.host.make_state(n, 4, 2, wrong).ok());
    CHECK(t.dev.download_state(t.ex, t.ms[0].st, wrong).code() == errc::size_mismatch);
  }
}
