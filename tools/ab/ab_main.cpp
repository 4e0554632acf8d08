// In-process A/B comparison of two versions of the headers (tools/ab/ab.sh): the same codec
// of each version runs alternately on the same 1e7 fp32 gradient, with a memcpy of it before
// each pair, and the medians are compared. Slow drifts of a shared machine hit both alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" double ab_run_a(int id, int op, const float* g, std::size_t n, const char** name);
extern "C" double ab_run_b(int id, int op, const float* g, std::size_t n, const char** name);

// The payload and output buffers both sides use (a side's own payload is copied in before it
// decodes, untimed): with buffers of their own, two copies of the same code differed by up
// to 15% in decompress, by where their pages happened to lie.
extern "C" void* ab_shared(int which, std::size_t bytes) {
  static std::vector<std::byte> buffers[2];
  std::vector<std::byte>& b = buffers[which];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
std::vector<int> numbers(const char* list) {
  std::vector<int> out;
  for (const char* p = list; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CASES OPS ROUNDS  (CASES, OPS: comma-separated numbers; ops: 0 compress, "
                         "1 decompress, 2 accumulate, 3 compress without a previous threshold)\n", argv[0]);
    return 2;
  }
  const char* op_names[] = {"compress", "decompress", "accumulate", "compress-cold"};
  const int rounds = std::atoi(argv[3]);
  constexpr std::size_t n = 10000000;
  std::vector<float> g(n), copy(n);
  std::mt19937 rng(1);
  std::student_t_distribution<float> t3(3.0f);
  for (float& x : g) x = 1e-3f * t3(rng);
  for (const int id : numbers(argv[1])) {
    for (const int op : numbers(argv[2])) {
      if (op < 0 || op > 3) return 2;
      std::vector<double> a, b, m;
      const char* name = "?";
      for (int r = 0; r < rounds && name; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::memcpy(copy.data(), g.data(), 4 * n);
        m.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        const bool a_first = r % 2 == 0;  // alternate which side runs first
        const double first = a_first ? ab_run_a(id, op, g.data(), n, &name) : ab_run_b(id, op, g.data(), n, &name);
        const double second = a_first ? ab_run_b(id, op, g.data(), n, &name) : ab_run_a(id, op, g.data(), n, &name);
        if (first < 0 || second < 0) {
          std::fprintf(stderr, "no case %d\n", id);
          return 2;
        }
        a.push_back(a_first ? first : second);
        b.push_back(a_first ? second : first);
      }
      const double ma = median(a), mb = median(b), mm = median(m);
      std::printf("%-16s %-13s A %6.2f ms  B %6.2f ms  B/A %.3f  | memcpy %.2f ms: A %.2f, B %.2f\n", name,
                  op_names[op], ma * 1e3, mb * 1e3, mb / ma, mm * 1e3, ma / mm, mb / mm);
    }
  }
}
