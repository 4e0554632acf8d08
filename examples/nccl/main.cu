// gradcomp over NCCL: data-parallel least squares on every visible GPU (one process, one NCCL
// rank per GPU), with the gradient exchange on device buffers and the CUDA backend:
//
//   fp32   ncclAllReduce(float, sum)
//   bf16   encode g / world with gradcomp's bf16 conversion, ncclAllReduce(bf16, sum), decode
//   int8, topk1%+ef   cuda::compress -> ncclAllGather of the payloads -> cuda::accumulate of
//          every rank's frames, rank 0 first -> average
//
// Every step is stream-ordered and never waits on the host: the CUDA backend writes sizes and
// errors to device reports, and the payload size of its selections (dense, exact top-k with
// u32 index lists) does not depend on the data, so the all-gather count is known up front.
// The host reads the loss and the reports only every --print-every steps.
//
//   tagc   TAGC-2 (cuda::tagc::codec, sum-safe bitmap, padded sketch layout), stream-ordered
//          as well: ncclAllReduce(uint32, sum) of the sum-safe bitmap (NCCL has no bitwise OR),
//          ncclReduceScatter(bf16, sum) of the sketch (padded: the count is known up front),
//          the peel of the rank's shard, ncclAllGather(float) of the decoded shards. The step's
//          report (errors, r, peel statistics) stays on the device until a print step.
//
//   int8-sh, int4+ef-sh, topk1%+ef-sh   the sharded all-reduce (docs/sharded.md), which has no
//          CUDA codec here: the host codec (sharded::codec) with device staging. The gradient is
//          copied to the host; encode(0) writes W fixed-size slots; they go to the device and
//          through an all-to-all of grouped ncclSend / ncclRecv pairs (ncclUint8, slot_bytes
//          each: slot j to rank j); the received slots come back to the host, receive(0) sums
//          them (the rank's shard, fp32, rank order) and encode(1) re-encodes the sum (the
//          owner's error feedback) into one slot; ncclAllGather of it; receive(1) on the host
//          decodes every shard; the sum goes back to the device for the update. Every step
//          waits for the device twice (before each host phase).
//
//   gradcomp_nccl [--steps N] [--lr X] [--print-every K]

#include <cuda_runtime.h>
#include <nccl.h>

#include <gradcomp/cuda.cuh>
#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace gc = gradcomp;

#define CHECK_CUDA(x) check_cuda((x), #x)
#define CHECK_NCCL(x) check_nccl((x), #x)
static void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)), std::exit(1);
}
static void check_nccl(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(e)), std::exit(1);
}
static void check(const gc::status& s, const char* what) {
  if (!s) std::fprintf(stderr, "%s: %s (%s)\n", what, gc::to_string(s.code()), s.detail()), std::exit(1);
}

constexpr int rows = 512, dim = 1 << 14;  // per-rank data A [rows x dim], b [rows]

// Deterministic data: rank r's A and b from a hash of (r, i); b = A x* with x*_j = sin(j).
__global__ void init_data(float* a, float* b, int rank) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < dim; ++j) {
      const std::uint32_t h = gc::murmur3_u32(static_cast<std::uint32_t>(i * dim + j), static_cast<std::uint32_t>(rank));
      const float v = (static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f) * 2.0f;
      a[static_cast<std::size_t>(i) * dim + j] = v;
      acc += v * sinf(static_cast<float>(j));
    }
    b[i] = acc;
  }
}
// residual r = A x - b (one thread per row); then grad = A^T r / rows (one thread per column).
__global__ void residual(const float* a, const float* b, const float* x, float* r) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
    float acc = -b[i];
    for (int j = 0; j < dim; ++j) acc += a[static_cast<std::size_t>(i) * dim + j] * x[j];
    r[i] = acc;
  }
}
__global__ void gradient(const float* a, const float* r, float* g) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < rows; ++i) acc += a[static_cast<std::size_t>(i) * dim + j] * r[i];
    g[j] = acc / rows;
  }
}
__global__ void encode_bf16(const float* g, std::uint16_t* w, float inv_world) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x)
    w[j] = gc::bf16_bits_from_float(g[j] * inv_world);
}
__global__ void decode_bf16(const std::uint16_t* w, float* avg) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x)
    avg[j] = gc::float_from_bf16_bits(w[j]);
}
__global__ void sgd(float* x, const float* sum, float scale) {  // x -= scale * sum
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x) x[j] -= scale * sum[j];
}

using int8_c = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::int_block<8>, gc::feedback::none>;
using topk_c = gc::compressor<gc::partition::chunks, gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual>;
using int4_c = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::int_block<4>, gc::feedback::residual>;

// One rank's device buffers and, for the gather path, its compressor state and workspaces.
template <class C>
struct rank_ctx {
  int device = 0;
  cudaStream_t stream{};
  ncclComm_t comm{};
  float *a, *b, *x, *r, *g, *avg;
  std::uint16_t* wire;
  std::byte *payload, *gathered, *state_mem, *cws, *dws;
  gc::cuda::report* reports;  // [0]: compress, [1 + k]: accumulate of rank k's frames
  gc::cuda::device_state st;
};

template <class C>
void run(const char* name, const C* comp, std::vector<rank_ctx<C>>& ranks, int steps, float lr, int print_every) {
  const int world = static_cast<int>(ranks.size());
  const std::size_t bytes = comp ? comp->template max_payload_bytes<float>(dim) : 0;
  const unsigned grid = 64, block = 256;
  for (auto& k : ranks) {  // same start on every rank: x = 0, fresh state
    CHECK_CUDA(cudaSetDevice(k.device));
    CHECK_CUDA(cudaMemsetAsync(k.x, 0, dim * sizeof(float), k.stream));
    if (comp) k.st = *gc::cuda::make_state(*comp, {k.state_mem, gc::cuda::state_bytes(*comp, dim)}, dim, k.stream);
  }
  for (int step = 0; step < steps; ++step) {
    for (auto& k : ranks) {
      CHECK_CUDA(cudaSetDevice(k.device));
      residual<<<grid, block, 0, k.stream>>>(k.a, k.b, k.x, k.r);
      gradient<<<grid, block, 0, k.stream>>>(k.a, k.r, k.g);
      if (comp) {
        const gc::cuda::executor ex{k.stream, {k.cws, gc::cuda::compress_workspace_bytes<float>(*comp, dim)}};
        check(gc::cuda::compress<float>(*comp, ex, {k.g, dim}, k.st, {k.payload, bytes}, k.reports), "compress");
      } else if (std::string(name) == "bf16") {
        encode_bf16<<<grid, block, 0, k.stream>>>(k.g, k.wire, 1.0f / world);
      }
    }
    CHECK_NCCL(ncclGroupStart());  // one process drives every rank: group the collectives
    for (auto& k : ranks) {
      if (comp)
        CHECK_NCCL(ncclAllGather(k.payload, k.gathered, bytes, ncclUint8, k.comm, k.stream));
      else if (std::string(name) == "bf16")
        CHECK_NCCL(ncclAllReduce(k.wire, k.wire, dim, ncclBfloat16, ncclSum, k.comm, k.stream));
      else
        CHECK_NCCL(ncclAllReduce(k.g, k.avg, dim, ncclFloat, ncclSum, k.comm, k.stream));
    }
    CHECK_NCCL(ncclGroupEnd());
    for (auto& k : ranks) {
      CHECK_CUDA(cudaSetDevice(k.device));
      float scale = lr / world;
      if (comp) {
        CHECK_CUDA(cudaMemsetAsync(k.avg, 0, dim * sizeof(float), k.stream));
        const gc::cuda::executor ex{k.stream, {k.dws, gc::cuda::decode_workspace_bytes<float>(*comp, dim, gc::cuda::max_frames(bytes))}};
        for (int src = 0; src < world; ++src)  // the same order on every rank: identical replicas
          check(gc::cuda::accumulate<float>(*comp, ex, {k.gathered + src * bytes, bytes}, std::span<float>(k.avg, dim),
                                            k.reports + 1 + src),
                "accumulate");
      } else if (std::string(name) == "bf16") {
        decode_bf16<<<grid, block, 0, k.stream>>>(k.wire, k.avg);
        scale = lr;  // already divided by the world size
      }
      sgd<<<grid, block, 0, k.stream>>>(k.x, k.avg, scale);
    }
    if (print_every > 0 && (step % print_every == 0 || step == steps - 1)) {  // the only host syncs
      auto& k = ranks.front();
      CHECK_CUDA(cudaSetDevice(k.device));
      residual<<<grid, block, 0, k.stream>>>(k.a, k.b, k.x, k.r);
      std::vector<float> r(rows);
      std::vector<gc::cuda::report> rep(1 + world);
      CHECK_CUDA(cudaMemcpyAsync(r.data(), k.r, rows * sizeof(float), cudaMemcpyDeviceToHost, k.stream));
      CHECK_CUDA(cudaMemcpyAsync(rep.data(), k.reports, rep.size() * sizeof rep[0], cudaMemcpyDeviceToHost, k.stream));
      CHECK_CUDA(cudaStreamSynchronize(k.stream));
      double loss = 0.0;
      for (float v : r) loss += 0.5 * v * v / rows;
      for (int i = 0; comp && i <= world; ++i)
        if (rep[i].error() != gc::errc::ok) std::fprintf(stderr, "%s: device reported %s\n", name, gc::to_string(rep[i].error())), std::exit(1);
      std::printf("%-10s step %4d  loss(rank 0 data) %.6f  bytes/rank %zu\n", name, step, loss,
                  comp ? bytes : dim * (std::string(name) == "bf16" ? 2 : 4));
    }
  }
  for (auto& k : ranks) CHECK_CUDA(cudaSetDevice(k.device)), CHECK_CUDA(cudaStreamSynchronize(k.stream));
}

// ---- TAGC on the device (see the top of the file).

__global__ void scale(float* g, float by) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x) g[j] *= by;
}

struct tagc_rank {
  gc::cuda::tagc::device_state st;
  std::byte *state_mem, *work, *send, *recv;  // state, workspace, phase buffers (the largest phase)
  float* values;                              // this rank's decoded shard, shard_size floats
  float* gathered;                            // every rank's, W shard_size floats: the average
};

template <class C>
void run_tagc(std::vector<rank_ctx<C>>& ranks, int steps, float lr, int print_every) {
  namespace gtc = gc::cuda::tagc;
  const auto world = static_cast<std::uint32_t>(ranks.size());
  gc::tagc::config cfg{};
  cfg.bitmap = gc::tagc::bitmap_mode::sum_safe;   // NCCL sums; it has no bitwise OR
  const gtc::codec codec(cfg, gtc::sketch_layout::padded);  // a reduce-scatter count the host knows
  const std::size_t shard = gc::summable::shard_size(dim, world);
  const std::size_t state_bytes = *codec.state_bytes(dim, world), work_bytes = *codec.workspace_bytes(dim, world);
  std::vector<tagc_rank> t(world);
  std::size_t most = 0;
  for (std::uint32_t k = 0; k < world; ++k) {
    auto& h = t[k];
    auto& r = ranks[k];
    CHECK_CUDA(cudaSetDevice(r.device));
    CHECK_CUDA(cudaMalloc(&h.state_mem, state_bytes));
    CHECK_CUDA(cudaMalloc(&h.work, work_bytes));
    check(codec.make_state(std::span<std::byte>(h.state_mem, state_bytes), dim, world, k, h.st, r.stream), "tagc make_state");
    most = codec.max_phase_bytes(h.st);
    CHECK_CUDA(cudaMalloc(&h.send, most));
    CHECK_CUDA(cudaMalloc(&h.recv, most));
    CHECK_CUDA(cudaMalloc(&h.values, sizeof(float) * shard));
    CHECK_CUDA(cudaMalloc(&h.gathered, sizeof(float) * shard * world));
    CHECK_CUDA(cudaMemsetAsync(h.values, 0, sizeof(float) * shard, r.stream));  // the last shard's tail stays 0
    CHECK_CUDA(cudaMemsetAsync(r.x, 0, dim * sizeof(float), r.stream));
  }
  const gc::summable::phase p0 = *codec.describe(0, t[0].st), p1 = *codec.describe(1, t[0].st);
  const auto each = [&](auto&& f) {  // f(rank context, TAGC buffers, rank), on the rank's device
    for (std::uint32_t k = 0; k < world; ++k) CHECK_CUDA(cudaSetDevice(ranks[k].device)), f(ranks[k], t[k], k);
  };
  const auto collectives = [&](auto&& f) {
    CHECK_NCCL(ncclGroupStart());
    for (std::uint32_t k = 0; k < world; ++k) f(ranks[k], t[k]);
    CHECK_NCCL(ncclGroupEnd());
  };
  for (int step = 0; step < steps; ++step) {
    each([&](rank_ctx<C>& r, tagc_rank& h, std::uint32_t) {  // the gradient / W; phase 0
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      gradient<<<64, 256, 0, r.stream>>>(r.a, r.r, r.g);
      scale<<<64, 256, 0, r.stream>>>(r.g, 1.0f / static_cast<float>(world));
      const gc::cuda::executor ex{r.stream, std::span<std::byte>(h.work, work_bytes)};
      check(codec.encode_bitmap(ex, h.st, std::span<const float>(r.g, dim), std::span<std::byte>(h.send, p0.bytes())), "tagc encode(0)");
    });
    collectives([&](rank_ctx<C>& r, tagc_rank& h) {
      CHECK_NCCL(ncclAllReduce(h.send, h.recv, p0.count, ncclUint32, ncclSum, r.comm, r.stream));
    });
    each([&](rank_ctx<C>& r, tagc_rank& h, std::uint32_t) {  // the union; phase 1
      const gc::cuda::executor ex{r.stream, std::span<std::byte>(h.work, work_bytes)};
      check(codec.receive_bitmap(ex, h.st, std::span<const std::byte>(h.recv, p0.bytes())), "tagc receive(0)");
      check(codec.encode_sketch(ex, h.st, std::span<std::byte>(h.send, p1.bytes())), "tagc encode(1)");
    });
    collectives([&](rank_ctx<C>& r, tagc_rank& h) {
      CHECK_NCCL(ncclReduceScatter(h.send, h.recv, p1.shard_count(), ncclBfloat16, ncclSum, r.comm, r.stream));
    });
    each([&](rank_ctx<C>& r, tagc_rank& h, std::uint32_t k) {  // the peel of this rank's shard
      const gc::cuda::executor ex{r.stream, std::span<std::byte>(h.work, work_bytes)};
      check(codec.receive_sketch(ex, h.st, std::span<const std::byte>(h.recv, p1.shard_bytes()), gc::summable::received::shard,
                                 std::span<float>(h.values, gc::summable::shard_of(dim, world, k).count)),
            "tagc receive(1)");
      check(codec.finish_step(r.stream, h.st), "tagc finish_step");
    });
    collectives([&](rank_ctx<C>& r, tagc_rank& h) {  // shard i lands at i shard_size = its offset
      CHECK_NCCL(ncclAllGather(h.values, h.gathered, shard, ncclFloat, r.comm, r.stream));
    });
    each([&](rank_ctx<C>& r, tagc_rank& h, std::uint32_t) { sgd<<<64, 256, 0, r.stream>>>(r.x, h.gathered, lr); });
    if (print_every > 0 && (step % print_every == 0 || step == steps - 1)) {  // the only host syncs
      auto& r = ranks.front();
      CHECK_CUDA(cudaSetDevice(r.device));
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      std::vector<float> res(rows);
      CHECK_CUDA(cudaMemcpyAsync(res.data(), r.r, rows * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
      const auto report = codec.read_report(t[0].st, r.stream);  // synchronous
      check(report ? gc::status{} : report.error(), "tagc read_report");
      if (report->code != 0) std::fprintf(stderr, "tagc: device reported %s\n", gc::to_string(static_cast<gc::errc>(report->code))), std::exit(1);
      double loss = 0.0;
      for (float v : res) loss += 0.5 * v * v / rows;
      std::printf("%-10s step %4d  loss(rank 0 data) %.6f  bytes/rank %zu  peeled %u/%u\n", "tagc", step, loss,
                  p0.bytes() + p1.bytes() + shard * sizeof(float), report->stats.peeled, report->stats.items);
    }
  }
  each([&](rank_ctx<C>& r, tagc_rank& h, std::uint32_t) {
    CHECK_CUDA(cudaStreamSynchronize(r.stream));
    for (void* p : {static_cast<void*>(h.state_mem), static_cast<void*>(h.work), static_cast<void*>(h.send),
                    static_cast<void*>(h.recv), static_cast<void*>(h.values), static_cast<void*>(h.gathered)})
      CHECK_CUDA(cudaFree(p));
  });
}

// ---- The sharded all-reduce, host codec with device staging (see the top of the file).

template <class C>
struct sharded_rank {
  typename gc::sharded::codec<C>::state st;
  float *grad, *sum;         // host (pinned): this rank's gradient; the sum over ranks
  std::byte *send, *recv;    // host (pinned): send slots and received slots (the larger phase's)
  std::byte *dsend, *drecv;  // device: the same, for NCCL
};

template <class C, class R>
void run_sharded(const char* name, const C& comp, std::vector<rank_ctx<R>>& ranks, int steps, float lr, int print_every) {
  namespace gs = gc::sharded;
  const auto world = static_cast<std::uint32_t>(ranks.size());
  const gs::codec<C> codec(comp, gs::mode::all_reduce);
  std::vector<sharded_rank<C>> t(world);
  for (std::uint32_t k = 0; k < world; ++k) check(codec.make_state(dim, world, k, t[k].st), "sharded make_state");
  const auto describe = [&](std::size_t k) {
    const gc::result<gs::phase> p = codec.describe(k, t[0].st);
    check(p ? gc::status{} : p.error(), "sharded describe");
    return *p;
  };
  const gs::phase p0 = describe(0), p1 = describe(1);
  const std::size_t send_bytes = std::max(p0.send_bytes(), p1.send_bytes()), recv_bytes = std::max(p0.receive_bytes(), p1.receive_bytes());
  const auto each = [&](auto&& f) {  // f(rank context, staging, rank), on the rank's device
    for (std::uint32_t k = 0; k < world; ++k) CHECK_CUDA(cudaSetDevice(ranks[k].device)), f(ranks[k], t[k], k);
  };
  const auto collectives = [&](auto&& f) {
    CHECK_NCCL(ncclGroupStart());
    for (std::uint32_t k = 0; k < world; ++k) f(ranks[k], t[k]);
    CHECK_NCCL(ncclGroupEnd());
  };
  each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {
    CHECK_CUDA(cudaMallocHost(&h.grad, sizeof(float) * dim));  // pinned: asynchronous copies; page-aligned slots
    CHECK_CUDA(cudaMallocHost(&h.sum, sizeof(float) * dim));
    CHECK_CUDA(cudaMallocHost(&h.send, send_bytes));
    CHECK_CUDA(cudaMallocHost(&h.recv, recv_bytes));
    CHECK_CUDA(cudaMalloc(&h.dsend, send_bytes));
    CHECK_CUDA(cudaMalloc(&h.drecv, recv_bytes));
    CHECK_CUDA(cudaMemsetAsync(r.x, 0, dim * sizeof(float), r.stream));
  });
  for (int step = 0; step < steps; ++step) {
    each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {  // the gradient, to the host
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      gradient<<<64, 256, 0, r.stream>>>(r.a, r.r, r.g);
      CHECK_CUDA(cudaMemcpyAsync(h.grad, r.g, dim * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
    });
    each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {  // phase 0 on the host; the W slots to the device
      CHECK_CUDA(cudaStreamSynchronize(r.stream));
      check(codec.template encode<float>(0, std::span<const float>(h.grad, dim), h.st, std::span<std::byte>(h.send, p0.send_bytes())),
            "sharded encode(0)");
      CHECK_CUDA(cudaMemcpyAsync(h.dsend, h.send, p0.send_bytes(), cudaMemcpyHostToDevice, r.stream));
    });
    collectives([&](rank_ctx<R>& r, sharded_rank<C>& h) {  // all-to-all: slot j to rank j, slot j of drecv from rank j
      for (std::uint32_t j = 0; j < world; ++j) {
        CHECK_NCCL(ncclSend(h.dsend + j * p0.slot_bytes, p0.slot_bytes, ncclUint8, static_cast<int>(j), r.comm, r.stream));
        CHECK_NCCL(ncclRecv(h.drecv + j * p0.slot_bytes, p0.slot_bytes, ncclUint8, static_cast<int>(j), r.comm, r.stream));
      }
    });
    each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {  // the shard's sum, re-encoded by its owner; to the device
      CHECK_CUDA(cudaMemcpyAsync(h.recv, h.drecv, p0.receive_bytes(), cudaMemcpyDeviceToHost, r.stream));
      CHECK_CUDA(cudaStreamSynchronize(r.stream));
      check(codec.template receive<float>(0, h.st, std::span<const std::byte>(h.recv, p0.receive_bytes()), std::span<float>{}),
            "sharded receive(0)");
      check(codec.template encode<float>(1, {}, h.st, std::span<std::byte>(h.send, p1.send_bytes())), "sharded encode(1)");
      CHECK_CUDA(cudaMemcpyAsync(h.dsend, h.send, p1.send_bytes(), cudaMemcpyHostToDevice, r.stream));
    });
    collectives([&](rank_ctx<R>& r, sharded_rank<C>& h) {  // slot r of drecv: rank r's reduced shard
      CHECK_NCCL(ncclAllGather(h.dsend, h.drecv, p1.slot_bytes, ncclUint8, r.comm, r.stream));
    });
    each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {  // every shard decoded on the host; the sum to the device
      CHECK_CUDA(cudaMemcpyAsync(h.recv, h.drecv, p1.receive_bytes(), cudaMemcpyDeviceToHost, r.stream));
      CHECK_CUDA(cudaStreamSynchronize(r.stream));
      check(codec.template receive<float>(1, h.st, std::span<const std::byte>(h.recv, p1.receive_bytes()), std::span<float>(h.sum, dim)),
            "sharded receive(1)");
      CHECK_CUDA(cudaMemcpyAsync(r.avg, h.sum, dim * sizeof(float), cudaMemcpyHostToDevice, r.stream));
      sgd<<<64, 256, 0, r.stream>>>(r.x, r.avg, lr / static_cast<float>(world));
    });
    if (print_every > 0 && (step % print_every == 0 || step == steps - 1)) {
      auto& r = ranks.front();
      CHECK_CUDA(cudaSetDevice(r.device));
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      std::vector<float> res(rows);
      CHECK_CUDA(cudaMemcpyAsync(res.data(), r.r, rows * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
      CHECK_CUDA(cudaStreamSynchronize(r.stream));
      double loss = 0.0;
      for (float v : res) loss += 0.5 * v * v / rows;
      // Send buffers (W slots, then one), and what crosses the wire: the W - 1 slots of each phase
      // that go to other ranks.
      std::printf("%-10s step %4d  loss(rank 0 data) %.6f  bytes/rank %zu  sent %zu\n", name, step, loss, p0.send_bytes() + p1.send_bytes(),
                  (world - 1) * (p0.slot_bytes + p1.slot_bytes));
    }
  }
  each([&](rank_ctx<R>& r, sharded_rank<C>& h, std::uint32_t) {
    CHECK_CUDA(cudaStreamSynchronize(r.stream));
    for (void* p : {static_cast<void*>(h.grad), static_cast<void*>(h.sum), static_cast<void*>(h.send), static_cast<void*>(h.recv)})
      CHECK_CUDA(cudaFreeHost(p));
    CHECK_CUDA(cudaFree(h.dsend));
    CHECK_CUDA(cudaFree(h.drecv));
  });
}

template <class C>
std::vector<rank_ctx<C>> setup(const C& comp, const std::vector<ncclComm_t>& comms) {
  const int world = static_cast<int>(comms.size());
  const std::size_t bytes = comp.template max_payload_bytes<float>(dim);
  std::vector<rank_ctx<C>> ranks(world);
  for (int d = 0; d < world; ++d) {
    auto& k = ranks[d];
    k.device = d;
    k.comm = comms[d];
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamCreate(&k.stream));
    CHECK_CUDA(cudaMalloc(&k.a, sizeof(float) * rows * dim));
    CHECK_CUDA(cudaMalloc(&k.b, sizeof(float) * rows));
    CHECK_CUDA(cudaMalloc(&k.r, sizeof(float) * rows));
    for (float** p : {&k.x, &k.g, &k.avg}) CHECK_CUDA(cudaMalloc(p, sizeof(float) * dim));
    CHECK_CUDA(cudaMalloc(&k.wire, sizeof(std::uint16_t) * dim));
    CHECK_CUDA(cudaMalloc(&k.payload, bytes));  // cudaMalloc: 256-byte aligned
    CHECK_CUDA(cudaMalloc(&k.gathered, bytes * world));
    CHECK_CUDA(cudaMalloc(&k.state_mem, gc::cuda::state_bytes(comp, dim)));
    CHECK_CUDA(cudaMalloc(&k.cws, gc::cuda::compress_workspace_bytes<float>(comp, dim)));
    CHECK_CUDA(cudaMalloc(&k.dws, gc::cuda::decode_workspace_bytes<float>(comp, dim, gc::cuda::max_frames(bytes))));
    CHECK_CUDA(cudaMalloc(&k.reports, sizeof(gc::cuda::report) * (1 + world)));
    init_data<<<8, 64, 0, k.stream>>>(k.a, k.b, d);
  }
  return ranks;
}

int main(int argc, char** argv) {
  int steps = 200, print_every = 50;
  float lr = 0.08f;  // below 2 / (largest eigenvalue of A^T A / rows, about 15): gradient descent converges
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--lr") lr = static_cast<float>(std::atof(argv[i + 1]));
    else if (a == "--print-every") print_every = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  std::vector<ncclComm_t> comms(devices);
  CHECK_NCCL(ncclCommInitAll(comms.data(), devices, nullptr));
  std::printf("gradcomp NCCL example: %d rank(s), one per GPU; least squares, %d x %d per rank\n", devices, rows, dim);

  // compact_indices = false: u32 index lists, which the CUDA backend writes and reads, and a
  // payload size that does not depend on the data.
  const int8_c int8(int8_c::config{.compact_indices = false});
  const topk_c topk(topk_c::config{.sparsify = {.density = 0.01}, .compact_indices = false});
  auto r8 = setup(int8, comms);
  run<int8_c>("fp32", nullptr, r8, steps, lr, print_every);
  run<int8_c>("bf16", nullptr, r8, steps, lr, print_every);
  run("int8", &int8, r8, steps, lr, print_every);
  run_sharded("int8-sh", int8, r8, steps, lr, print_every);
  run_sharded("int4+ef-sh", int4_c(int4_c::config{}), r8, steps, lr, print_every);  // host codec only: no CUDA context needed
  run_tagc(r8, steps, lr, print_every);
  auto rk = setup(topk, comms);
  run("topk1%+ef", &topk, rk, steps, lr, print_every);
  run_sharded("topk1%+ef-sh", topk, rk, steps, lr, print_every);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return 0;
}
