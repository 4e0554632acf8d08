#pragma once
// split: the summable path's routing. A laid-out buffer is cut into parts by the same rule as
// router (model/router.hpp: a tensor's role and size give its slot; here slot = part),
// each part the concatenation of its tensors in layout order, so that a summable codec runs
// over each part as one flat buffer with any collective. TAGC's choice (model/tagc.hpp,
// tagc_routing): part 0 the count sketch (tagc::codec), part 1 bf16 (summable::cast), part 2
// fp32 for small tensors (docs/model.md, "Routing").
//
//   model::split sp(model::gpt2_layout(model::gpt2_small), model::tagc_routing());
//   std::vector<float> mlp(sp.size(0));
//   sp.gather<float>(0, grad, mlp);               // then tagc::codec's phases over `mlp`
//   sp.scatter<float>(0, mlp_average, averaged);  // the part's result back into the flat buffer
//
// Elements of the buffer that no tensor covers (padding between tensors) belong to no part.

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "layout.hpp"
#include "../core/status.hpp"
#include "router.hpp"

namespace gradcomp::model {

class split {
 public:
  // One tensor of a part: its elements [flat, flat + count) of the buffer are [at, at + count)
  // of the part.
  struct piece {
    std::size_t tensor, flat, at, count;
  };

  static constexpr std::size_t max_parts = 64;

  explicit split(layout l, routing r = {}, classifier c = {}) : layout_(std::move(l)), routing_(r) {
    const std::vector<role> roles = c.classify(layout_);
    std::size_t last = routing_.small_slot;
    for (std::size_t s : routing_.slot_of_role) last = std::max(last, s);
    if (last >= max_parts) return;  // validate() says so; no part exists
    parts_.resize(last + 1);
    sizes_.assign(last + 1, 0);
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      const std::size_t p = slot_for(routing_, layout_[t].elements(), roles[t]);
      parts_[p].push_back({t, layout_[t].offset, sizes_[p], layout_[t].elements()});
      sizes_[p] += layout_[t].elements();
    }
  }

  status validate() const {
    if (parts_.empty()) return {errc::invalid_argument, "routing names a part beyond split::max_parts"};
    return layout_.validate();
  }
  const layout& get_layout() const { return layout_; }
  const routing& get_routing() const { return routing_; }
  std::size_t parts() const { return parts_.size(); }
  std::size_t size(std::size_t part) const { return part < sizes_.size() ? sizes_[part] : 0; }
  std::span<const piece> pieces(std::size_t part) const {
    return part < parts_.size() ? std::span<const piece>(parts_[part]) : std::span<const piece>{};
  }

  // The part's tensors from the flat buffer (layout().extent() elements) into `out` (size(part)).
  template <class T>
  status gather(std::size_t part, std::span<const T> flat, std::span<T> out) const {
    if (status s = check(part, flat.size(), out.size()); !s) return s;
    for (const piece& q : parts_[part]) std::copy_n(flat.begin() + q.flat, q.count, out.begin() + q.at);
    return {};
  }

  // `in` (size(part) elements) into the part's tensors of the flat buffer; the rest untouched.
  template <class T>
  status scatter(std::size_t part, std::span<const T> in, std::span<T> flat) const {
    if (status s = check(part, flat.size(), in.size()); !s) return s;
    for (const piece& q : parts_[part]) std::copy_n(in.begin() + q.at, q.count, flat.begin() + q.flat);
    return {};
  }

 private:
  status check(std::size_t part, std::size_t flat, std::size_t packed) const {
    if (part >= parts_.size()) return {errc::invalid_argument, "split has no such part"};
    if (flat != layout_.extent()) return {errc::size_mismatch, "flat buffer differs from the layout's extent"};
    if (packed != sizes_[part]) return {errc::size_mismatch, "part buffer differs from split::size(part)"};
    return {};
  }

  layout layout_;
  routing routing_;
  std::vector<std::vector<piece>> parts_;
  std::vector<std::size_t> sizes_;
};

}  // namespace gradcomp::model
