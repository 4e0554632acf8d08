#pragma once
// A two-layer perceptron (D -> H relu -> C, softmax cross-entropy) with hand-written backprop,
// and a synthetic but learnable task: inputs are Gaussian, labels come from a fixed random
// "teacher" network of the same form. Everything is seeded, so every run and every rank
// count sees the same numbers: ranks draw disjoint minibatches from per-rank streams.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace mlp {

struct shape {
  std::size_t in = 64, hidden = 256, classes = 10;
  std::size_t params() const { return hidden * in + hidden + classes * hidden + classes; }
};

// Parameter views into one flat buffer: W1 [H x D], b1 [H], W2 [C x H], b2 [C].
struct views {
  float *w1, *b1, *w2, *b2;
  views(const shape& s, float* p)
      : w1(p), b1(p + s.hidden * s.in), w2(b1 + s.hidden), b2(w2 + s.classes * s.hidden) {}
};

inline std::vector<float> init(const shape& s, std::uint32_t seed) {
  std::vector<float> p(s.params(), 0.0f);
  std::mt19937 rng(seed);
  views v(s, p.data());
  std::normal_distribution<float> n1(0.0f, std::sqrt(2.0f / static_cast<float>(s.in)));
  std::normal_distribution<float> n2(0.0f, std::sqrt(1.0f / static_cast<float>(s.hidden)));
  for (std::size_t i = 0; i < s.hidden * s.in; ++i) v.w1[i] = n1(rng);
  for (std::size_t i = 0; i < s.classes * s.hidden; ++i) v.w2[i] = n2(rng);
  return p;  // biases start at zero
}

// Mean cross-entropy over the batch; if grad is non-empty, writes d(loss)/d(params) into it.
// x: [B x D] row-major, y: [B] labels.
inline float loss_and_grad(const shape& s, std::span<const float> params, std::span<const float> x,
                           std::span<const int> y, std::span<float> grad) {
  const std::size_t B = y.size(), D = s.in, H = s.hidden, C = s.classes;
  views v(s, const_cast<float*>(params.data()));
  const bool want_grad = !grad.empty();
  views g(s, want_grad ? grad.data() : nullptr);
  if (want_grad) std::fill(grad.begin(), grad.end(), 0.0f);
  std::vector<float> h(H), logits(C), dh(H);
  double total = 0.0;
  const float inv_b = 1.0f / static_cast<float>(B);
  for (std::size_t b = 0; b < B; ++b) {
    const float* xb = x.data() + b * D;
    for (std::size_t j = 0; j < H; ++j) {
      float a = v.b1[j];
      for (std::size_t i = 0; i < D; ++i) a += v.w1[j * D + i] * xb[i];
      h[j] = a > 0.0f ? a : 0.0f;
    }
    float mx = -INFINITY;
    for (std::size_t c = 0; c < C; ++c) {
      float a = v.b2[c];
      for (std::size_t j = 0; j < H; ++j) a += v.w2[c * H + j] * h[j];
      logits[c] = a;
      mx = std::max(mx, a);
    }
    float z = 0.0f;
    for (std::size_t c = 0; c < C; ++c) z += std::exp(logits[c] - mx);
    const float log_z = mx + std::log(z);
    total += log_z - logits[static_cast<std::size_t>(y[b])];
    if (!want_grad) continue;
    // d loss / d logits = softmax - onehot, scaled by 1/B.
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (std::size_t c = 0; c < C; ++c) {
      const float d = (std::exp(logits[c] - log_z) - (static_cast<int>(c) == y[b] ? 1.0f : 0.0f)) * inv_b;
      g.b2[c] += d;
      for (std::size_t j = 0; j < H; ++j) {
        g.w2[c * H + j] += d * h[j];
        dh[j] += d * v.w2[c * H + j];
      }
    }
    for (std::size_t j = 0; j < H; ++j) {
      if (h[j] <= 0.0f) continue;  // relu
      g.b1[j] += dh[j];
      for (std::size_t i = 0; i < D; ++i) g.w1[j * D + i] += dh[j] * xb[i];
    }
  }
  return static_cast<float>(total / static_cast<double>(B));
}

// The task: x ~ N(0, 1)^D, y = argmax of a fixed random teacher's logits.
class task {
 public:
  static constexpr std::size_t teacher_hidden = 8;

  task(const shape& s, std::uint32_t seed) : s_(s), teacher_(init({s.in, teacher_hidden, s.classes}, seed ^ 0x5eedu)) {}

  // `count` samples from stream `stream` (e.g. rank * steps + step, or a held-out stream).
  void sample(std::uint64_t stream, std::size_t count, std::vector<float>& x, std::vector<int>& y) const {
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (stream + 1));
    std::normal_distribution<float> n(0.0f, 1.0f);
    const shape t{s_.in, teacher_hidden, s_.classes};
    views v(t, const_cast<float*>(teacher_.data()));
    x.resize(count * s_.in);
    y.resize(count);
    std::vector<float> h(t.hidden);
    for (std::size_t b = 0; b < count; ++b) {
      float* xb = x.data() + b * s_.in;
      for (std::size_t i = 0; i < s_.in; ++i) xb[i] = n(rng);
      for (std::size_t j = 0; j < t.hidden; ++j) {
        float a = v.b1[j];
        for (std::size_t i = 0; i < t.in; ++i) a += v.w1[j * t.in + i] * xb[i];
        h[j] = a > 0.0f ? a : 0.0f;
      }
      int best = 0;
      float best_v = -INFINITY;
      for (std::size_t c = 0; c < t.classes; ++c) {
        float a = v.b2[c];
        for (std::size_t j = 0; j < t.hidden; ++j) a += v.w2[c * t.hidden + j] * h[j];
        if (a > best_v) best_v = a, best = static_cast<int>(c);
      }
      y[b] = best;
    }
  }

 private:
  shape s_;
  std::vector<float> teacher_;
};

}  // namespace mlp
