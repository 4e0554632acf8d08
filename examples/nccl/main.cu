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
//   tagc   TAGC-2 (tagc::codec, sum-safe bitmap) with the HOST codec and device staging: the
//          gradient comes to the host, the codec encodes each phase there, and the phase
//          buffers travel through NCCL on the device: ncclAllReduce(uint32, sum) of the sum-safe
//          bitmap (NCCL has no bitwise OR), ncclReduceScatter(bf16, sum) of the sketch, then
//          ncclAllGather of every rank's decoded values at the union's positions of its shard
//          (padded to the fullest shard: NCCL's all-gather moves equal counts). Unlike the rows
//          above it synchronises the host three times per step (after each collective): the
//          CUDA kernels of sketch/ exist (cuda/sketch.cuh), but TAGC's selection, error
//          feedback and phase flow run on the host (docs/integrations.md).
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

// ---- TAGC with the host codec and device staging (see the top of the file).

struct tagc_rank {
  gc::tagc::state st;
  std::vector<float> grad, shard, values, avg;
  std::vector<std::uint64_t> buf;  // host phase buffer (u64: aligned for every element type)
  std::byte *d_phase, *d_cells;    // device: the phase buffer sent, the reduce-scattered cells
  float *d_values, *d_gathered;    // device: this rank's decoded values, everyone's
};

// The union's positions of shard i that every rank knows after phase 0.
static std::size_t union_in(const gc::tagc::state& st, gc::chunk_range r) {
  std::size_t c = 0;
  for (std::size_t j = r.offset; j < r.offset + r.count; ++j) c += (st.union_bits[j / 32] >> (j % 32)) & 1u;
  return c;
}

template <class C>
void run_tagc(std::vector<rank_ctx<C>>& ranks, int steps, float lr, int print_every) {
  const auto world = static_cast<std::uint32_t>(ranks.size());
  gc::tagc::config cfg{};
  cfg.bitmap = gc::tagc::bitmap_mode::sum_safe;
  const gc::tagc::codec codec(cfg);
  std::vector<tagc_rank> t(world);
  std::size_t most = 0;
  for (std::uint32_t k = 0; k < world; ++k) {
    auto& h = t[k];
    check(codec.make_state(dim, world, k, h.st), "tagc make_state");
    most = codec.max_phase_bytes(h.st);
    h.grad.resize(dim), h.avg.resize(dim), h.values.resize(dim), h.buf.resize(most / 8 + 1);
    h.shard.resize(gc::summable::shard_of(dim, world, k).count);
    CHECK_CUDA(cudaSetDevice(ranks[k].device));
    CHECK_CUDA(cudaMalloc(&h.d_phase, most));
    CHECK_CUDA(cudaMalloc(&h.d_cells, most));
    CHECK_CUDA(cudaMalloc(&h.d_values, sizeof(float) * dim));
    CHECK_CUDA(cudaMalloc(&h.d_gathered, sizeof(float) * dim * world));
    CHECK_CUDA(cudaMemsetAsync(ranks[k].x, 0, dim * sizeof(float), ranks[k].stream));
  }
  const auto sync = [&](std::uint32_t k) { CHECK_CUDA(cudaSetDevice(ranks[k].device)), CHECK_CUDA(cudaStreamSynchronize(ranks[k].stream)); };
  const auto phase_of = [&](std::size_t ph, tagc_rank& h) {
    const auto p = codec.describe(ph, h.st);
    check(p ? gc::status{} : p.error(), "tagc describe");
    return *p;
  };
  for (int step = 0; step < steps; ++step) {
    gc::summable::phase p0{}, p1{};
    for (std::uint32_t k = 0; k < world; ++k) {  // gradient to the host, divided by W; phase 0
      auto& r = ranks[k];
      auto& h = t[k];
      CHECK_CUDA(cudaSetDevice(r.device));
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      gradient<<<64, 256, 0, r.stream>>>(r.a, r.r, r.g);
      CHECK_CUDA(cudaMemcpyAsync(h.grad.data(), r.g, sizeof(float) * dim, cudaMemcpyDeviceToHost, r.stream));
      sync(k);
      for (float& v : h.grad) v /= static_cast<float>(world);
      p0 = phase_of(0, h);
      const auto out = std::as_writable_bytes(std::span(h.buf)).first(p0.bytes());
      check(codec.encode(0, h.grad, h.st, out), "tagc encode(0)");
      CHECK_CUDA(cudaMemcpyAsync(h.d_phase, out.data(), out.size(), cudaMemcpyHostToDevice, r.stream));
    }
    CHECK_NCCL(ncclGroupStart());
    for (std::uint32_t k = 0; k < world; ++k)
      CHECK_NCCL(ncclAllReduce(t[k].d_phase, t[k].d_phase, p0.count, ncclUint32, ncclSum, ranks[k].comm, ranks[k].stream));
    CHECK_NCCL(ncclGroupEnd());
    for (std::uint32_t k = 0; k < world; ++k) {  // the union; phase 1
      auto& r = ranks[k];
      auto& h = t[k];
      const auto in = std::as_writable_bytes(std::span(h.buf)).first(p0.bytes());
      CHECK_CUDA(cudaMemcpyAsync(in.data(), h.d_phase, in.size(), cudaMemcpyDeviceToHost, r.stream));
      sync(k);
      check(codec.receive(0, h.st, in, {}), "tagc receive(0)");
      p1 = phase_of(1, h);
      const auto out = std::as_writable_bytes(std::span(h.buf)).first(p1.bytes());
      check(codec.encode(1, h.grad, h.st, out), "tagc encode(1)");
      CHECK_CUDA(cudaMemcpyAsync(h.d_phase, out.data(), out.size(), cudaMemcpyHostToDevice, r.stream));
    }
    CHECK_NCCL(ncclGroupStart());
    for (std::uint32_t k = 0; k < world; ++k)
      CHECK_NCCL(ncclReduceScatter(t[k].d_phase, t[k].d_cells, p1.shard_count(), ncclBfloat16, ncclSum, ranks[k].comm, ranks[k].stream));
    CHECK_NCCL(ncclGroupEnd());
    std::size_t slot = 0;  // values per rank in the all-gather: the fullest shard's union
    for (std::uint32_t i = 0; i < world; ++i) slot = std::max(slot, union_in(t[0].st, gc::summable::shard_of(dim, world, i)));
    for (std::uint32_t k = 0; k < world; ++k) {  // decode this rank's shard; its union values
      auto& r = ranks[k];
      auto& h = t[k];
      const auto in = std::as_writable_bytes(std::span(h.buf)).first(p1.shard_bytes());
      CHECK_CUDA(cudaMemcpyAsync(in.data(), h.d_cells, in.size(), cudaMemcpyDeviceToHost, r.stream));
      sync(k);
      check(codec.receive(1, h.st, in, h.shard), "tagc receive(1)");
      const gc::chunk_range mine = gc::summable::shard_of(dim, world, k);
      std::size_t m = 0;
      for (std::size_t j = 0; j < mine.count; ++j)
        if ((h.st.union_bits[(mine.offset + j) / 32] >> ((mine.offset + j) % 32)) & 1u) h.values[m++] = h.shard[j];
      CHECK_CUDA(cudaMemcpyAsync(h.d_values, h.values.data(), sizeof(float) * slot, cudaMemcpyHostToDevice, r.stream));
      codec.finish_step(h.st);
    }
    CHECK_NCCL(ncclGroupStart());
    for (std::uint32_t k = 0; k < world; ++k)
      CHECK_NCCL(ncclAllGather(t[k].d_values, t[k].d_gathered, slot, ncclFloat, ranks[k].comm, ranks[k].stream));
    CHECK_NCCL(ncclGroupEnd());
    for (std::uint32_t k = 0; k < world; ++k) {  // every shard's values back into place; SGD
      auto& r = ranks[k];
      auto& h = t[k];
      std::vector<float> all(slot * world);
      CHECK_CUDA(cudaMemcpyAsync(all.data(), h.d_gathered, sizeof(float) * all.size(), cudaMemcpyDeviceToHost, r.stream));
      sync(k);
      std::fill(h.avg.begin(), h.avg.end(), 0.0f);
      for (std::uint32_t i = 0; i < world; ++i) {
        const gc::chunk_range s = gc::summable::shard_of(dim, world, i);
        std::size_t m = 0;
        for (std::size_t j = s.offset; j < s.offset + s.count; ++j)
          if ((h.st.union_bits[j / 32] >> (j % 32)) & 1u) h.avg[j] = all[i * slot + m++];
      }
      CHECK_CUDA(cudaMemcpyAsync(r.avg, h.avg.data(), sizeof(float) * dim, cudaMemcpyHostToDevice, r.stream));
      sgd<<<64, 256, 0, r.stream>>>(r.x, r.avg, lr);
    }
    if (print_every > 0 && (step % print_every == 0 || step == steps - 1)) {
      auto& r = ranks.front();
      CHECK_CUDA(cudaSetDevice(r.device));
      residual<<<64, 256, 0, r.stream>>>(r.a, r.b, r.x, r.r);
      std::vector<float> res(rows);
      CHECK_CUDA(cudaMemcpyAsync(res.data(), r.r, rows * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
      sync(0);
      double loss = 0.0;
      for (float v : res) loss += 0.5 * v * v / rows;
      const auto [items, peeled, rounds] = t[0].st.stats;
      std::printf("%-10s step %4d  loss(rank 0 data) %.6f  bytes/rank %zu  peeled %u/%u\n", "tagc", step, loss,
                  p0.bytes() + p1.bytes() + slot * sizeof(float), peeled, items);
      (void)rounds;
    }
  }
  for (std::uint32_t k = 0; k < world; ++k) {
    sync(k);
    CHECK_CUDA(cudaFree(t[k].d_phase)), CHECK_CUDA(cudaFree(t[k].d_cells));
    CHECK_CUDA(cudaFree(t[k].d_values)), CHECK_CUDA(cudaFree(t[k].d_gathered));
  }
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
  float lr = 0.5f;
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
  run_tagc(r8, steps, lr, print_every);
  auto rk = setup(topk, comms);
  run("topk1%+ef", &topk, rk, steps, lr, print_every);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return 0;
}
