#pragma once
// Ready-made layouts of published models, in the order and with the names and shapes their
// trainers report from named_parameters() (parameters shared by tying are listed once, as
// PyTorch does). The configs are the published ones:
//   GPT-2 small / medium: 12 / 24 layers, d_model 768 / 1024, vocab 50257, context 1024
//     (124,439,808 / 354,823,168 parameters).
//   Llama 7B: 32 layers, d_model 4096, FFN 11008, vocab 32000, untied head (6,738,415,616).
//   Megatron GPT "345M": 24 layers, d_model 1024, context 1024, vocab 50257 padded to a
//     multiple of 128 x tensor-parallel size; each tensor-parallel rank holds its shard.
// nanoGPT stores nn.Linear weights [out x in]; Hugging Face GPT-2 stores Conv1D weights
// [in x out]. Both tie the LM head to wte (so no lm_head tensor is listed).

#include <cstddef>
#include <string>
#include <vector>

#include "layout.hpp"

namespace gradcomp::model {

struct gpt2_config {
  std::size_t layers = 12, d_model = 768, vocab = 50257, context = 1024;
  bool bias = true;  // nanoGPT can drop biases; GPT-2 checkpoints have them
};
inline constexpr gpt2_config gpt2_small{};
inline constexpr gpt2_config gpt2_medium{24, 1024, 50257, 1024, true};

enum class gpt2_naming { nanogpt, huggingface };

inline layout gpt2_layout(const gpt2_config& c, gpt2_naming naming = gpt2_naming::huggingface, dtype type = dtype::f32) {
  const std::size_t d = c.d_model;
  const bool hf = naming == gpt2_naming::huggingface;
  // A linear layer of `in` -> `out` features, stored as each framework stores it.
  const auto matrix = [&](std::size_t in, std::size_t out) {
    return hf ? std::vector<std::size_t>{in, out} : std::vector<std::size_t>{out, in};
  };
  layout l;
  l.add("transformer.wte.weight", {c.vocab, d}, type);
  l.add("transformer.wpe.weight", {c.context, d}, type);
  const auto linear = [&](const std::string& name, std::size_t in, std::size_t out) {
    l.add(name + ".weight", matrix(in, out), type);
    if (c.bias) l.add(name + ".bias", {out}, type);
  };
  const auto norm = [&](const std::string& name) {
    l.add(name + ".weight", {d}, type);
    if (c.bias) l.add(name + ".bias", {d}, type);
  };
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    norm(h + "ln_1");
    linear(h + "attn.c_attn", d, 3 * d);
    linear(h + "attn.c_proj", d, d);
    norm(h + "ln_2");
    linear(h + "mlp.c_fc", d, 4 * d);
    linear(h + "mlp.c_proj", 4 * d, d);
  }
  norm("transformer.ln_f");
  return l;
}

struct llama_config {
  std::size_t layers = 32, d_model = 4096, ffn = 11008, heads = 32, kv_heads = 32, vocab = 32000;
};
inline constexpr llama_config llama_7b{};

enum class llama_naming { huggingface, meta };

// Layers [first, first + count) of a Llama model; with first == 0 the embedding comes first,
// and with the last layer included the final norm and the LM head follow.
inline layout llama_layout(const llama_config& c, llama_naming naming = llama_naming::huggingface,
                           std::size_t first = 0, std::size_t count = ~std::size_t{0}, dtype type = dtype::f32) {
  const std::size_t d = c.d_model, kv = d / c.heads * c.kv_heads;
  const bool hf = naming == llama_naming::huggingface;
  const std::size_t end = count > c.layers - std::min(first, c.layers) ? c.layers : first + count;
  layout l;
  if (first == 0) l.add(hf ? "model.embed_tokens.weight" : "tok_embeddings.weight", {c.vocab, d}, type);
  for (std::size_t i = first; i < end; ++i) {
    const std::string p = (hf ? "model.layers." : "layers.") + std::to_string(i) + ".";
    if (hf) {
      l.add(p + "self_attn.q_proj.weight", {d, d}, type);
      l.add(p + "self_attn.k_proj.weight", {kv, d}, type);
      l.add(p + "self_attn.v_proj.weight", {kv, d}, type);
      l.add(p + "self_attn.o_proj.weight", {d, d}, type);
      l.add(p + "mlp.gate_proj.weight", {c.ffn, d}, type);
      l.add(p + "mlp.up_proj.weight", {c.ffn, d}, type);
      l.add(p + "mlp.down_proj.weight", {d, c.ffn}, type);
      l.add(p + "input_layernorm.weight", {d}, type);
      l.add(p + "post_attention_layernorm.weight", {d}, type);
    } else {
      l.add(p + "attention.wq.weight", {d, d}, type);
      l.add(p + "attention.wk.weight", {kv, d}, type);
      l.add(p + "attention.wv.weight", {kv, d}, type);
      l.add(p + "attention.wo.weight", {d, d}, type);
      l.add(p + "feed_forward.w1.weight", {c.ffn, d}, type);
      l.add(p + "feed_forward.w2.weight", {d, c.ffn}, type);
      l.add(p + "feed_forward.w3.weight", {c.ffn, d}, type);
      l.add(p + "attention_norm.weight", {d}, type);
      l.add(p + "ffn_norm.weight", {d}, type);
    }
  }
  if (end == c.layers) {
    l.add(hf ? "model.norm.weight" : "norm.weight", {d}, type);
    l.add(hf ? "lm_head.weight" : "output.weight", {c.vocab, d}, type);
  }
  return l;
}

struct megatron_gpt_config {
  std::size_t layers = 24, d_model = 1024, vocab = 50257, context = 1024;
  std::size_t tensor_parallel = 1;  // this rank's shard of each split matrix
  std::size_t vocab_multiple = 128;  // --make-vocab-size-divisible-by
  bool tied = true;                  // share_embeddings_and_output_weights
};
inline constexpr megatron_gpt_config megatron_gpt_345m{};

inline std::size_t megatron_padded_vocab(const megatron_gpt_config& c) {
  const std::size_t m = c.vocab_multiple * c.tensor_parallel;
  return (c.vocab + m - 1) / m * m;
}

// Megatron core (Transformer Engine layer spec: the norms are fused into linear_qkv and
// linear_fc1) on a single pipeline stage. Column-parallel weights are split along rows,
// row-parallel ones along columns; their biases are replicated.
inline layout megatron_gpt_layout(const megatron_gpt_config& c, dtype type = dtype::f32) {
  const std::size_t d = c.d_model, tp = c.tensor_parallel, v = megatron_padded_vocab(c) / tp;
  layout l;
  l.add("embedding.word_embeddings.weight", {v, d}, type);
  l.add("embedding.position_embeddings.weight", {c.context, d}, type);
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".";
    l.add(p + "self_attention.linear_proj.weight", {d, d / tp}, type);
    l.add(p + "self_attention.linear_proj.bias", {d}, type);
    l.add(p + "self_attention.linear_qkv.layer_norm_weight", {d}, type);
    l.add(p + "self_attention.linear_qkv.layer_norm_bias", {d}, type);
    l.add(p + "self_attention.linear_qkv.weight", {3 * d / tp, d}, type);
    l.add(p + "self_attention.linear_qkv.bias", {3 * d / tp}, type);
    l.add(p + "mlp.linear_fc1.layer_norm_weight", {d}, type);
    l.add(p + "mlp.linear_fc1.layer_norm_bias", {d}, type);
    l.add(p + "mlp.linear_fc1.weight", {4 * d / tp, d}, type);
    l.add(p + "mlp.linear_fc1.bias", {4 * d / tp}, type);
    l.add(p + "mlp.linear_fc2.weight", {d, 4 * d / tp}, type);
    l.add(p + "mlp.linear_fc2.bias", {d}, type);
  }
  l.add("decoder.final_layernorm.weight", {d}, type);
  l.add("decoder.final_layernorm.bias", {d}, type);
  if (!c.tied) l.add("output_layer.weight", {v, d}, type);
  return l;
}

}  // namespace gradcomp::model
