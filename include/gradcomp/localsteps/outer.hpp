#pragma once
// The per-element math of local steps, written once for host and device (GRADCOMP_HD):
//   pseudo-gradient  d = (anchor - local) / W          (each rank's share of the mean)
//   outer step       m = mu m + mean;  u = nesterov ? mean + mu m : m;  anchor -= lr u
//   apply            local = mix * local + (1 - mix) * anchor   (local = anchor when mix = 0)
// With momentum 0 and lr 1 the outer step is plain averaging: anchor - mean of (anchor - local)
// is the mean of the replicas. Products are rounded on their own (mul_rn), never fused.

#include "../core/bits.hpp"
#include "../core/config.hpp"
#include "../core/rounding.hpp"

namespace gradcomp::localsteps {
GRADCOMP_PRECISE_BEGIN

// A float division is correctly rounded, so every rank computes the same share of a sum that
// the transport then adds.
GRADCOMP_HD inline float pseudo_gradient(float anchor, float local, float world) { return canonical_nan((anchor - local) / world); }

struct outer_rule {
  float lr = 1.0f;
  float momentum = 0.5f;
  bool nesterov = true;
};

// One outer step of one element: updates the anchor (and the momentum m when mu > 0).
GRADCOMP_HD inline void outer_step(const outer_rule& r, float mean, float& anchor, float* momentum) {
  float u = mean;
  if (momentum != nullptr) {
    const float m = canonical_nan(mul_rn(r.momentum, *momentum) + mean);
    *momentum = m;
    u = r.nesterov ? canonical_nan(mean + mul_rn(r.momentum, m)) : m;
  }
  anchor = canonical_nan(anchor - mul_rn(r.lr, u));
}

GRADCOMP_HD inline float mixed(float mix, float local, float anchor) {
  return mix == 0.0f ? anchor : canonical_nan(mul_rn(mix, local) + mul_rn(1.0f - mix, anchor));
}

GRADCOMP_PRECISE_END
}  // namespace gradcomp::localsteps
