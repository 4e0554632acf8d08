// gradcomp over MPI: data-parallel training of a small MLP (mlp.hpp) whose gradients travel
// through gradcomp, once per codec. The summable path (summable.hpp): fp32, bf16 and fp16 casts
// (summable::cast) by MPI_Allreduce, and TAGC-2 (tagc::codec): the kept-position bitmap by
// MPI_Allreduce with MPI_BOR (or MPI_SUM for the sum-safe packing), the count sketch by
// MPI_Reduce_scatter_block with a sum, then an MPI_Allgatherv of the decoded shards at the
// union's positions (or, "tagc-ar", the sketch all-reduced and every shard decoded by every
// rank). The gather path (exchange.hpp): int8, int4 + error feedback, top-k 1% + error
// feedback, DGC threshold 1% and 1-bit sign + error feedback by MPI_Allgatherv of their
// frames. The sharded path (sharded.hpp): the same five compressors as all-reduces ("-sh":
// MPI_Alltoall of fixed-size slots, the owner's sum re-encoded, MPI_Allgather of one slot), and
// int8 as a reduce-scatter whose fp32 shards are then all-gathered ("int8-sh-rs"). Local steps
// (localsteps.hpp, "ls4-int4+ef"): no exchange per step; every 4 steps the parameters'
// pseudo-gradient, int4 + error feedback on the sharded path, averaged. Prints the
// loss and the bytes each rank sends per step, then a summary with the held-out loss of each
// codec against fp32's.
//
//   mpirun -np 4 ./gradcomp_mpi [--steps N] [--batch B] [--lr X] [--momentum M] [--print-every K]
//                               [--only NAME] [--check MARGIN]
//
// --check MARGIN: exit 1 unless every codec's final held-out loss is within MARGIN of fp32's,
// training lowered fp32's loss, all ranks end with bit-identical parameters, TAGC's sketches
// peeled at least 99% of the union's items, and every sharded all-reduce sent at most 2/W of its
// gather path's fixed-size payloads plus 128 bytes per slot (sharded.hpp).
// --tagc-block B, --tagc-cells C: TAGC's sketch block and cells per kept item (default 1 and
// 1.5: docs/transports.md says why B = 1 for a model this small).
// --only NAME runs fp32 and NAME; NAME may also be a diagnostic exchange that the default list
// leaves out ("tagc-noef": TAGC with its residuals zeroed after every step; "topk-sh-own4%":
// the sharded top-k whose owners keep 4% of their reduced shard).
// --die-at-step K --die-rank R [--die-how kill|exit]: a failure drill. Rank R dies at step K of
// the first exchange it runs (of NAME with --only NAME), after its gradient and before the
// exchange, so the other ranks wait in that exchange's collective: by SIGKILL (default; what
// the kernel's out-of-memory killer sends) or by std::_Exit(3) without MPI_Finalize. The MPI
// launcher must then end every rank with an error (examples/mpi/die_test.cmake checks how fast).

#include <gradcomp/gradcomp.hpp>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exchange.hpp"
#include "localsteps.hpp"
#include "mlp.hpp"
#include "sharded.hpp"
#include "summable.hpp"

namespace {

namespace gc = gradcomp;
using namespace mpi_example;

struct options {
  int steps = 300, batch = 32, print_every = 1;
  float lr = 0.3f, momentum = 0.0f;  // plain SGD: measured margins in docs/transports.md
  double check = -1.0;  // < 0: no check
  std::string only;
  unsigned tagc_block = 1;       // B of TAGC's sketch (the library's default)
  double tagc_cells = 1.5;       // TAGC's cells per kept item (adaptive sizing)
  int die_at_step = -1, die_rank = -1;  // the failure drill (none by default)
  std::string die_how = "kill";
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--steps" && v) o.steps = std::atoi(v), ++i;
    else if (a == "--batch" && v) o.batch = std::atoi(v), ++i;
    else if (a == "--lr" && v) o.lr = static_cast<float>(std::atof(v)), ++i;
    else if (a == "--momentum" && v) o.momentum = static_cast<float>(std::atof(v)), ++i;
    else if (a == "--print-every" && v) o.print_every = std::atoi(v), ++i;
    else if (a == "--check" && v) o.check = std::atof(v), ++i;
    else if (a == "--only" && v) o.only = v, ++i;
    else if (a == "--tagc-block" && v) o.tagc_block = static_cast<unsigned>(std::atoi(v)), ++i;
    else if (a == "--tagc-cells" && v) o.tagc_cells = std::atof(v), ++i;
    else if (a == "--die-at-step" && v) o.die_at_step = std::atoi(v), ++i;
    else if (a == "--die-rank" && v) o.die_rank = std::atoi(v), ++i;
    else if (a == "--die-how" && v && (std::strcmp(v, "kill") == 0 || std::strcmp(v, "exit") == 0)) o.die_how = v, ++i;
    else {
      std::fprintf(stderr, "usage: gradcomp_mpi [--steps N] [--batch B] [--lr X] [--print-every K] [--only NAME] [--check MARGIN] "
                           "[--tagc-block B] [--tagc-cells C] [--die-at-step K --die-rank R [--die-how kill|exit]]\n");
      std::exit(2);
    }
  }
  return o;
}

// The failure drill: this rank dies now, saying so first (stderr is unbuffered).
[[noreturn]] void die(const options& o, int rank, int step, const std::string& exchange) {
  std::fprintf(stderr, "gradcomp_mpi: rank %d dies at step %d of %s (--die-at-step, %s)\n", rank, step, exchange.c_str(),
               o.die_how == "kill" ? "SIGKILL" : "exit status 3 without MPI_Finalize");
  std::fflush(stdout);
#ifdef SIGKILL
  if (o.die_how == "kill") std::raise(SIGKILL);
#endif
  std::_Exit(3);
}

std::vector<std::unique_ptr<exchange>> all_exchanges(std::size_t n, const options& o, const wire_ops& ops, MPI_Comm comm) {
  using namespace gc;
  using int8 = compressor<partition::chunks, sparsify::dense, quantize::int_block<8>, feedback::none>;
  using int4 = compressor<partition::chunks, sparsify::dense, quantize::int_block<4>, feedback::residual>;
  using topk = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
  using dgc = compressor<partition::chunks, sparsify::threshold, quantize::bf16, feedback::residual>;
  using sign = compressor<partition::chunks, sparsify::dense, quantize::sign, feedback::residual>;
  // Plain casts, as PyTorch's bf16/fp16 hooks send them: no error feedback.
  const auto cast = [&](const char* name, auto q) {
    using Q = decltype(q);
    return std::make_unique<summable_exchange<summable::cast<Q>>>(name, summable::cast<Q>({.feedback = false}), n,
                                                                  route::all_reduce, ops, comm);
  };
  const auto tagc = [&](const char* name, tagc::config c, route how, bool drop = false) {
    c.block = o.tagc_block;
    if (c.rows == tagc::sizing::adaptive) c.cells_per_item = o.tagc_cells;
    return std::make_unique<summable_exchange<tagc::codec>>(name, tagc::codec(c), n, how, ops, comm, drop);
  };
  tagc::config sum_safe{};
  sum_safe.bitmap = tagc::bitmap_mode::sum_safe;
  std::vector<std::unique_ptr<exchange>> x;
  x.push_back(cast("fp32", quantize::none{}));
  x.push_back(cast("bf16", quantize::bf16{}));
  x.push_back(cast("fp16", quantize::fp16{}));
  x.push_back(tagc("tagc", tagc::config{}, route::reduce_scatter));
  x.push_back(tagc("tagc-ar", tagc::config{}, route::all_reduce));
  x.push_back(tagc("tagc-sumsafe", sum_safe, route::reduce_scatter));
  x.push_back(tagc("tagc2-preset", tagc::preset_tagc2(), route::reduce_scatter));
  x.push_back(tagc("tagc-noef", tagc::config{}, route::reduce_scatter, true));
  // Each gather-path codec also on the sharded path, as an all-reduce ("-sh"), with the same
  // configuration; int8 also as a reduce-scatter followed by an all-gather of the fp32 shards.
  const auto both = [&]<class C>(const char* name, const typename C::config& cfg) {
    x.push_back(std::make_unique<mpi_example::gather<C>>(name, cfg, n, comm));
    x.push_back(std::make_unique<sharded_exchange<C>>(std::string(name) + "-sh", cfg, n, sharded::mode::all_reduce, comm));
  };
  both.operator()<int8>("int8", int8::config{});
  x.push_back(std::make_unique<sharded_exchange<int8>>("int8-sh-rs", int8::config{}, n, sharded::mode::reduce_scatter, comm));
  both.operator()<int4>("int4+ef", int4::config{});
  both.operator()<topk>("topk1%+ef", topk::config{.sparsify = {.density = 0.01}});
  // Diagnostic: top-k whose owners keep 4% of their reduced shard (W x 1%, the most positions
  // the W ranks' selections can cover) instead of 1%.
  x.push_back(std::make_unique<sharded_exchange<topk>>("topk-sh-own4%", topk::config{.sparsify = {.density = 0.01}},
                                                       topk::config{.sparsify = {.density = 0.04}}, n, sharded::mode::all_reduce,
                                                       comm, true));
  both.operator()<dgc>("dgc1%+ef", dgc::config{.sparsify = {.density = 0.01}});
  both.operator()<sign>("sign+ef", sign::config{});
  // Local steps: the parameters' pseudo-gradient every 4 steps, int4 + error feedback on the
  // sharded path, the mean applied by plain averaging (outer lr 1, no momentum).
  using ls_path = sharded::codec<int4>;
  x.push_back(std::make_unique<local_steps<ls_path>>("ls4-int4+ef", localsteps::config{.period = 4, .outer_lr = 1.0f, .momentum = 0.0f},
                                                     ls_path(int4{}, sharded::mode::all_reduce), comm));
  return x;
}

struct outcome {
  std::string name, path;
  traffic per_step;
  double seconds, train_loss, eval_loss;
  bool replicas_agree;
  std::string note;      // TAGC: union density and peeled fraction
  double peeled = 1.0;   // TAGC: fraction of the union's items that peeled
  double limit = 0.0;    // sharded all-reduce: the most ring bytes per step it may send
};

// The codec's counters summed over ranks (TAGC: {union items, items, peeled}): a note and the
// peeled fraction.
std::pair<std::string, double> note_of(const exchange& ex, int steps, std::size_t n, int world) {
  std::vector<double> c = ex.counters();
  if (c.empty()) return {std::string{}, 1.0};
  MPI_Allreduce(MPI_IN_PLACE, c.data(), static_cast<int>(c.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double peeled = c[2] / std::max(c[1], 1.0);
  char buf[96];
  std::snprintf(buf, sizeof buf, "union %.2f%%, peeled %.2f%%", 100.0 * c[0] / (static_cast<double>(world) * steps * static_cast<double>(n)),
                100.0 * peeled);
  return {buf, peeled};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const options opt = parse(argc, argv);

  const mlp::shape shape;
  const mlp::task task(shape, 7);
  std::vector<float> eval_x, x, grad(shape.params()), avg(shape.params());
  std::vector<int> eval_y, y;
  task.sample(~0ull, 2048, eval_x, eval_y);  // held-out stream, the same on every rank
  const std::vector<float> initial = mlp::init(shape, 1);
  const float initial_eval = mlp::loss_and_grad(shape, initial, eval_x, eval_y, {});
  if (rank == 0)
    std::printf("gradcomp MPI example: %d ranks, MLP %zu-%zu-%zu (%zu parameters), %d steps of batch %d per rank, "
                "held-out loss at start %.4f\n",
                world, shape.in, shape.hidden, shape.classes, shape.params(), opt.steps, opt.batch, initial_eval);

  std::vector<outcome> results;
  {
    const wire_ops ops;  // user-defined MPI_Ops: freed before MPI_Finalize
    bool drilled = false;  // the failure drill runs in the first exchange (or in --only's)
    for (auto& ex : all_exchanges(shape.params(), opt, ops, MPI_COMM_WORLD)) {
      const bool wanted = opt.only.empty() ? !ex->diagnostic() : ex->name() == opt.only || ex->name() == "fp32";
      if (!wanted) continue;
      const bool drill = !drilled && opt.die_at_step >= 0 && (opt.only.empty() || ex->name() == opt.only);
      drilled = drilled || drill;
      std::vector<float> params = initial, velocity(params.size(), 0.0f);
      ex->start(params);
      traffic total;
      double tail_loss = 0.0;
      int tail = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      for (int step = 0; step < opt.steps; ++step) {
        // Disjoint minibatches: stream (step, rank).
        task.sample(static_cast<std::uint64_t>(step) * 1024u + static_cast<std::uint64_t>(rank), static_cast<std::size_t>(opt.batch), x, y);
        float loss = mlp::loss_and_grad(shape, params, x, y, grad);
        if (drill && step == opt.die_at_step && rank == opt.die_rank) die(opt, rank, step, ex->name());
        const traffic sent = ex->average(grad, avg);
        for (std::size_t i = 0; i < params.size(); ++i) {  // SGD with momentum on the averaged gradient
          velocity[i] = opt.momentum * velocity[i] + avg[i];
          params[i] -= opt.lr * velocity[i];
        }
        total += sent;
        total += ex->after_step(params);
        MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // for printing only
        loss /= static_cast<float>(world);
        if (step >= opt.steps - 20) tail_loss += loss, ++tail;
        if (rank == 0 && opt.print_every > 0 && (step % opt.print_every == 0 || step == opt.steps - 1))
          std::printf("%-12s step %4d  loss %.4f  bytes/rank: buffers %.0f, ring %.0f\n", ex->name().c_str(), step, loss,
                      sent.buffers, sent.ring);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Replicas must agree bit for bit: compare every rank's parameter checksum with rank 0's.
      std::uint32_t sum = gc::crc32c(std::as_bytes(std::span<const float>(params)));
      std::uint32_t lo = sum, hi = sum;
      MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
      const float eval = mlp::loss_and_grad(shape, params, eval_x, eval_y, {});
      const traffic per_step{total.buffers / opt.steps, total.ring / opt.steps};
      const auto [note, peeled] = note_of(*ex, opt.steps, shape.params(), world);
      results.push_back(
          {ex->name(), ex->path(), per_step, seconds, tail_loss / std::max(tail, 1), eval, lo == hi, note, peeled, ex->byte_limit()});
    }
  }

  int failed = 0;
  if (rank == 0) {
    const outcome& base = results.front();  // fp32
    std::printf("\n%-13s %-36s %10s %10s %8s %10s %10s %9s %7s %-9s %s\n", "codec", "path", "buffers", "ring bytes",
                "vs fp32", "train loss", "eval loss", "- fp32", "seconds", "replicas", "");
    for (const outcome& r : results) {
      const double diff = r.eval_loss - base.eval_loss;
      // A TAGC sketch sized by the union peels everything but a handful of items (a failing peel
      // would leave most of the gradient in the residuals); a sharded all-reduce sends about 2/W
      // of the gather path's bytes (sharded.hpp: the bound).
      const bool bytes_ok = r.limit <= 0.0 || r.per_step.ring <= r.limit;
      const bool ok = r.replicas_agree && (opt.check < 0 || (std::fabs(diff) <= opt.check && r.peeled >= 0.99 && bytes_ok));
      failed += ok ? 0 : 1;
      std::string note = r.note;
      if (r.limit > 0.0) {  // the ring bytes against the gather row of the same codec ("int8-sh": "int8") and the bound
        const std::size_t at = r.name.rfind("-sh");
        const std::string gathered = at == std::string::npos ? std::string{} : r.name.substr(0, at);
        char buf[96];
        for (const outcome& g : results)
          if (g.name == gathered && !gathered.empty())
            std::snprintf(buf, sizeof buf, "%.3fx gather's, ", r.per_step.ring / g.per_step.ring), note += buf;
        std::snprintf(buf, sizeof buf, "bound %.0f%s", r.limit, bytes_ok ? "" : " EXCEEDED");
        note += buf;
      }
      std::printf("%-13s %-36s %10.0f %10.0f %7.4fx %10.4f %10.4f %+9.4f %7.2f %-9s %s%s\n", r.name.c_str(), r.path.c_str(),
                  r.per_step.buffers, r.per_step.ring, r.per_step.ring / base.per_step.ring, r.train_loss, r.eval_loss, diff,
                  r.seconds, r.replicas_agree ? "identical" : "DIFFER", note.c_str(), ok ? "" : "  <-- FAILED");
    }
    if (opt.check >= 0 && !(base.eval_loss < 0.7 * initial_eval)) {
      std::printf("fp32 did not train: held-out loss %.4f vs %.4f at start\n", base.eval_loss, initial_eval);
      ++failed;
    }
    if (opt.check >= 0) std::printf("%s (margin %.3f on the held-out loss)\n", failed ? "CHECK FAILED" : "check passed", opt.check);
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed ? 1 : 0;
}
