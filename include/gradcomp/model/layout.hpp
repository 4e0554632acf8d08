#pragma once
// Tensor layouts and roles (host side). A layout names the tensors of a flat gradient (or
// activation) buffer: name, shape, offset in elements, element type. A classifier maps each
// name and shape to a role, so that policies can differ by role (TAGC: sketch the big
// matrices, bf16 the rest). Built-in rules know the parameter names of nanoGPT, Hugging Face
// GPT-2 and Llama, Meta's original Llama and Megatron-LM (legacy and core); user rules (glob
// patterns, first match wins) are tried before them. docs/model.md lists the names.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/numeric.hpp"
#include "../core/status.hpp"

namespace gradcomp {

enum class role : std::uint8_t {
  other = 0,
  attention_qkv,  // query, key and value projections (fused or separate)
  attention_out,  // the attention output projection
  mlp_in,         // MLP up (and gate) projections
  mlp_out,        // MLP down projection
  embedding,      // token and position embeddings
  lm_head,        // the output projection to the vocabulary, or a token embedding tied to it
  norm,           // layer-norm / RMS-norm weights and biases
  bias,           // biases of linear layers
};
inline constexpr std::size_t role_count = 9;

constexpr const char* to_string(role r) {
  constexpr std::array<const char*, role_count> names = {"other",   "attention_qkv", "attention_out",
                                                         "mlp_in",  "mlp_out",       "embedding",
                                                         "lm_head", "norm",          "bias"};
  const auto i = static_cast<std::size_t>(r);
  return i < role_count ? names[i] : "unknown";
}

struct tensor_desc {
  std::string name;
  std::vector<std::size_t> shape;  // outermost first, as the framework reports it
  std::size_t offset = 0;          // first element in the buffer
  dtype type = dtype::f32;

  // Elements (1 for a scalar); saturates at SIZE_MAX (layout::validate rejects that).
  std::size_t elements() const {
    std::size_t n = 1;
    for (std::size_t d : shape) {
      if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) return std::numeric_limits<std::size_t>::max();
      n *= d;
    }
    return n;
  }
  // The tensor as a matrix: the last dimension is the row (a vector is one row).
  std::size_t cols() const { return shape.empty() ? 1 : shape.back(); }
  std::size_t rows() const { return cols() == 0 ? 0 : elements() / cols(); }
};

class layout {
 public:
  // Appends a tensor right after the current extent (tensors packed back to back).
  layout& add(std::string name, std::vector<std::size_t> shape, dtype type = dtype::f32) {
    return add_at(extent(), std::move(name), std::move(shape), type);
  }
  // Appends a tensor at an explicit offset (padding, buckets, another framework's order).
  layout& add_at(std::size_t offset, std::string name, std::vector<std::size_t> shape, dtype type = dtype::f32) {
    tensors_.push_back({std::move(name), std::move(shape), offset, type});
    const std::size_t n = tensors_.back().elements();
    const std::size_t end = offset > std::numeric_limits<std::size_t>::max() - n ? std::numeric_limits<std::size_t>::max()
                                                                                 : offset + n;
    extent_ = std::max(extent_, end);
    return *this;
  }

  const std::vector<tensor_desc>& tensors() const { return tensors_; }
  std::size_t size() const { return tensors_.size(); }
  const tensor_desc& operator[](std::size_t i) const { return tensors_[i]; }
  // Elements a buffer needs to hold every tensor: the largest offset + elements.
  std::size_t extent() const { return extent_; }
  std::size_t parameters() const {
    std::size_t n = 0;
    for (const auto& t : tensors_) n += t.elements();
    return n;
  }
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
  std::size_t find(std::string_view name) const {
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      if (tensors_[i].name == name) return i;
    return npos;
  }

  // Every tensor non-empty, in ascending offset order without overlap, names unique, no
  // element count or end that overflows.
  status validate() const {
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const tensor_desc& t = tensors_[i];
      const std::size_t n = t.elements();
      if (n == 0) return {errc::invalid_argument, "layout tensor with no elements"};
      if (n == std::numeric_limits<std::size_t>::max() || t.offset > std::numeric_limits<std::size_t>::max() - n)
        return {errc::invalid_argument, "layout tensor too large"};
      if (i > 0 && t.offset < tensors_[i - 1].offset + tensors_[i - 1].elements())
        return {errc::invalid_argument, "layout tensors overlap or are not in ascending offset order"};
      for (std::size_t j = 0; j < i; ++j)
        if (tensors_[j].name == t.name) return {errc::invalid_argument, "layout tensor names are not unique"};
    }
    return {};
  }

 private:
  std::vector<tensor_desc> tensors_;
  std::size_t extent_ = 0;
};

// Glob match of a whole name: '*' matches any run of characters (dots included), '?' one
// character. Linear backtracking over the last '*', no recursion.
inline bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1, n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace detail {

inline bool one_of(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}
inline bool is_norm_module(std::string_view m) {
  return m.find("norm") != std::string_view::npos || m == "ln" || m.starts_with("ln_");
}
// The role a module name gives, in the context of its parent (c_proj, dense and the Meta
// Llama w1..w3 mean different things under attention and MLP blocks).
inline role module_role(std::string_view module, std::string_view parent, bool top_level) {
  const bool attention_parent = one_of(parent, {"attn", "attention", "self_attn", "self_attention"});
  const bool mlp_parent = one_of(parent, {"mlp", "feed_forward", "ffn"});
  if (is_norm_module(module)) return role::norm;
  if (one_of(module, {"c_attn", "q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "linear_qkv", "wq", "wk",
                      "wv", "wqkv", "query", "key", "value"}))
    return role::attention_qkv;
  if (one_of(module, {"o_proj", "out_proj", "linear_proj", "wo"}) ||
      (attention_parent && one_of(module, {"c_proj", "dense"})))
    return role::attention_out;
  if (one_of(module, {"c_fc", "gate_proj", "up_proj", "gate_up_proj", "fc1", "fc_in", "dense_h_to_4h", "linear_fc1"}) ||
      (mlp_parent && one_of(module, {"w1", "w3"})))
    return role::mlp_in;
  if (one_of(module, {"down_proj", "fc2", "fc_out", "dense_4h_to_h", "linear_fc2"}) ||
      (mlp_parent && one_of(module, {"c_proj", "w2"})))
    return role::mlp_out;
  if (one_of(module, {"wte", "wpe", "embed_tokens", "embed_positions", "word_embeddings", "position_embeddings",
                      "tok_embeddings"}))
    return role::embedding;
  if (one_of(module, {"lm_head", "output_layer", "embed_out"}) || (top_level && module == "output")) return role::lm_head;
  return role::other;
}

}  // namespace detail

// The built-in rules: the last dot-separated token is the leaf (weight, bias, Transformer
// Engine's layer_norm_weight / layer_norm_bias), the token before it the module, and the
// one before that its parent. A matrix role needs at least two dimensions; a linear layer's
// 1-D bias is `bias`, a norm's weight and bias are `norm`.
inline role builtin_role(std::string_view name, std::span<const std::size_t> shape) {
  std::vector<std::string_view> tokens;
  for (std::size_t at = 0; at <= name.size();) {
    const std::size_t dot = std::min(name.find('.', at), name.size());
    tokens.push_back(name.substr(at, dot - at));
    at = dot + 1;
  }
  std::string_view leaf = tokens.back();
  if (leaf.starts_with("layer_norm_")) return role::norm;  // TE fuses the norm into the next linear
  const bool has_leaf = detail::one_of(leaf, {"weight", "bias"});
  if (has_leaf) tokens.pop_back();
  if (tokens.empty()) return role::other;
  const std::string_view module = tokens.back();
  const std::string_view parent = tokens.size() >= 2 ? tokens[tokens.size() - 2] : std::string_view{};
  const role r = detail::module_role(module, parent, tokens.size() == 1);
  if (r == role::norm) return role::norm;
  if (has_leaf && leaf == "bias") return shape.size() <= 1 ? role::bias : role::other;
  if (r != role::other && shape.size() < 2) return role::other;  // a matrix name on a vector
  return r;
}

struct role_rule {
  std::string pattern;  // glob over the whole name ("*.mlp.*", "*adapter*")
  role assign = role::other;
};

class classifier {
 public:
  classifier() = default;
  explicit classifier(std::vector<role_rule> rules) : rules_(std::move(rules)) {}

  // A user rule, tried after the earlier user rules and before the built-in ones.
  classifier& add(std::string pattern, role r) {
    rules_.push_back({std::move(pattern), r});
    return *this;
  }
  const std::vector<role_rule>& rules() const { return rules_; }

  // A token embedding is tied to the LM head when the layout has no LM head tensor (GPT-2,
  // nanoGPT, Megatron's default): its gradient then carries the head's, and it gets lm_head.
  bool tied_embedding_is_lm_head = true;

  role operator()(std::string_view name, std::span<const std::size_t> shape) const {
    for (const role_rule& r : rules_)
      if (glob_match(r.pattern, name)) return r.assign;
    return builtin_role(name, shape);
  }

  std::vector<role> classify(const layout& l) const {
    std::vector<role> roles;
    roles.reserve(l.size());
    for (const tensor_desc& t : l.tensors()) roles.push_back((*this)(t.name, t.shape));
    if (tied_embedding_is_lm_head && std::find(roles.begin(), roles.end(), role::lm_head) == roles.end())
      for (std::size_t i = 0; i < l.size(); ++i)
        if (roles[i] == role::embedding && is_token_embedding(l[i].name)) {
          roles[i] = role::lm_head;
          break;
        }
    return roles;
  }

  static bool is_token_embedding(std::string_view name) {
    for (std::string_view m : {"wte", "embed_tokens", "word_embeddings", "tok_embeddings"}) {
      const std::size_t at = name.find(m);
      if (at != std::string_view::npos && (at == 0 || name[at - 1] == '.') &&
          (at + m.size() == name.size() || name[at + m.size()] == '.'))
        return true;
    }
    return false;
  }

 private:
  std::vector<role_rule> rules_;
};

}  // namespace gradcomp
