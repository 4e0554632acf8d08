// gradcomp over MPI: data-parallel training of a small MLP (mlp.hpp) whose gradients travel
// through gradcomp, once per codec: fp32, bf16 and fp16 by MPI_Allreduce; int8, int4 + error
// feedback, top-k 1% + error feedback, DGC threshold 1% and 1-bit sign + error feedback by
// MPI_Allgatherv of their frames (exchange.hpp). Prints the loss and the bytes each rank sends
// per step, then a summary with the held-out loss of each codec against fp32's.
//
//   mpirun -np 4 ./gradcomp_mpi [--steps N] [--batch B] [--lr X] [--momentum M] [--print-every K]
//                               [--only NAME] [--check MARGIN]
//
// --check MARGIN: exit 1 unless every codec's final held-out loss is within MARGIN of fp32's,
// training lowered fp32's loss, and all ranks end with bit-identical parameters.

#include <gradcomp/gradcomp.hpp>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exchange.hpp"
#include "mlp.hpp"

namespace {

namespace gc = gradcomp;
using namespace mpi_example;

struct options {
  int steps = 300, batch = 32, print_every = 1;
  float lr = 0.3f, momentum = 0.0f;  // plain SGD: measured margins in docs/integrations.md
  double check = -1.0;  // < 0: no check
  std::string only;
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
    else {
      std::fprintf(stderr, "usage: gradcomp_mpi [--steps N] [--batch B] [--lr X] [--print-every K] [--only NAME] [--check MARGIN]\n");
      std::exit(2);
    }
  }
  return o;
}

std::vector<std::unique_ptr<exchange>> all_exchanges(std::size_t n, MPI_Comm comm) {
  using namespace gc;
  using int8 = compressor<partition::chunks, sparsify::dense, quantize::int_block<8>, feedback::none>;
  using int4 = compressor<partition::chunks, sparsify::dense, quantize::int_block<4>, feedback::residual>;
  using topk = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
  using dgc = compressor<partition::chunks, sparsify::threshold, quantize::bf16, feedback::residual>;
  using sign = compressor<partition::chunks, sparsify::dense, quantize::sign, feedback::residual>;
  std::vector<std::unique_ptr<exchange>> x;
  x.push_back(std::make_unique<cast_allreduce<quantize::none>>("fp32", comm));
  x.push_back(std::make_unique<cast_allreduce<quantize::bf16>>("bf16", comm));
  x.push_back(std::make_unique<cast_allreduce<quantize::fp16>>("fp16", comm));
  x.push_back(std::make_unique<gather<int8>>("int8", int8::config{}, n, comm));
  x.push_back(std::make_unique<gather<int4>>("int4+ef", int4::config{}, n, comm));
  x.push_back(std::make_unique<gather<topk>>("topk1%+ef", topk::config{.sparsify = {.density = 0.01}}, n, comm));
  x.push_back(std::make_unique<gather<dgc>>("dgc1%+ef", dgc::config{.sparsify = {.density = 0.01}}, n, comm));
  x.push_back(std::make_unique<gather<sign>>("sign+ef", sign::config{}, n, comm));
  return x;
}

struct outcome {
  std::string name;
  const char* path;
  double bytes_per_step, seconds, train_loss, eval_loss;
  bool replicas_agree;
};

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
  for (auto& ex : all_exchanges(shape.params(), MPI_COMM_WORLD)) {
    if (!opt.only.empty() && ex->name() != opt.only && ex->name() != "fp32") continue;
    std::vector<float> params = initial, velocity(params.size(), 0.0f);
    double bytes = 0.0, tail_loss = 0.0;
    int tail = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < opt.steps; ++step) {
      // Disjoint minibatches: stream (step, rank).
      task.sample(static_cast<std::uint64_t>(step) * 1024u + static_cast<std::uint64_t>(rank), static_cast<std::size_t>(opt.batch), x, y);
      float loss = mlp::loss_and_grad(shape, params, x, y, grad);
      const std::size_t sent = ex->average(grad, avg);
      for (std::size_t i = 0; i < params.size(); ++i) {  // SGD with momentum on the averaged gradient
        velocity[i] = opt.momentum * velocity[i] + avg[i];
        params[i] -= opt.lr * velocity[i];
      }
      bytes += static_cast<double>(sent);
      MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // for printing only
      loss /= static_cast<float>(world);
      if (step >= opt.steps - 20) tail_loss += loss, ++tail;
      if (rank == 0 && opt.print_every > 0 && (step % opt.print_every == 0 || step == opt.steps - 1))
        std::printf("%-10s step %4d  loss %.4f  bytes/rank %zu\n", ex->name().c_str(), step, loss, sent);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Replicas must agree bit for bit: compare every rank's parameter checksum with rank 0's.
    std::uint32_t sum = gc::crc32c(std::as_bytes(std::span<const float>(params)));
    std::uint32_t lo = sum, hi = sum;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
    const float eval = mlp::loss_and_grad(shape, params, eval_x, eval_y, {});
    results.push_back({ex->name(), ex->path(), bytes / opt.steps, seconds, tail_loss / std::max(tail, 1), eval, lo == hi});
  }

  int failed = 0;
  if (rank == 0) {
    const outcome& base = results.front();  // fp32
    std::printf("\n%-10s %-30s %12s %8s %10s %10s %10s %8s %s\n", "codec", "path", "bytes/step", "vs fp32", "train loss",
                "eval loss", "- fp32", "seconds", "replicas");
    for (const outcome& r : results) {
      const double diff = r.eval_loss - base.eval_loss;
      const bool ok = r.replicas_agree && (opt.check < 0 || std::fabs(diff) <= opt.check);
      failed += ok ? 0 : 1;
      std::printf("%-10s %-30s %12.0f %7.4fx %10.4f %10.4f %+10.4f %8.2f %s%s\n", r.name.c_str(), r.path, r.bytes_per_step,
                  r.bytes_per_step / base.bytes_per_step, r.train_loss, r.eval_loss, diff, r.seconds,
                  r.replicas_agree ? "identical" : "DIFFER", ok ? "" : "  <-- FAILED");
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
