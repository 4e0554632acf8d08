// Tensor layouts, glob rules and the role classifier, on the parameter names the trainers
// really report (nanoGPT, Hugging Face GPT-2 and Llama, Meta's Llama, Megatron legacy and core).
#include <doctest/doctest.h>

#include <gradcomp/model/layout.hpp>

#include <string>
#include <utility>
#include <vector>

namespace gc = gradcomp;
using gc::role;

namespace {
role builtin(const char* name, std::vector<std::size_t> shape) { return gc::builtin_role(name, shape); }
}  // namespace

TEST_CASE("layout: tensors packed back to back, explicit offsets, validation") {
  gc::layout l;
  l.add("a.weight", {4, 3}).add("a.bias", {3}).add_at(100, "b.weight", {2, 2, 5}, gc::dtype::bf16);
  REQUIRE(l.size() == 3);
  CHECK(l[0].offset == 0);
  CHECK(l[1].offset == 12);
  CHECK(l[2].offset == 100);
  CHECK(l[2].elements() == 20);
  CHECK(l[2].rows() == 4);
  CHECK(l[2].cols() == 5);
  CHECK(l[1].rows() == 1);
  CHECK(l.extent() == 120);
  CHECK(l.parameters() == 35);
  CHECK(l.find("a.bias") == 1);
  CHECK(l.find("nope") == gc::layout::npos);
  CHECK(l.validate().ok());

  gc::layout overlap;
  overlap.add("x", {10}).add_at(5, "y", {10});
  CHECK(overlap.validate() == gc::errc::invalid_argument);
  gc::layout descending;
  descending.add_at(50, "x", {10}).add_at(0, "y", {10});
  CHECK(descending.validate() == gc::errc::invalid_argument);
  gc::layout empty_tensor;
  empty_tensor.add("x", {0, 4});
  CHECK(empty_tensor.validate() == gc::errc::invalid_argument);
  gc::layout twice;
  twice.add("x", {3}).add("x", {3});
  CHECK(twice.validate() == gc::errc::invalid_argument);
  gc::layout huge;
  huge.add("x", {std::size_t{1} << 40, std::size_t{1} << 40});
  CHECK(huge.validate() == gc::errc::invalid_argument);
}

TEST_CASE("glob_match: whole-name patterns with * and ?") {
  CHECK(gc::glob_match("*", ""));
  CHECK(gc::glob_match("*", "transformer.h.0.mlp.c_fc.weight"));
  CHECK(gc::glob_match("*.mlp.*", "transformer.h.0.mlp.c_fc.weight"));
  CHECK_FALSE(gc::glob_match("*.mlp.*", "transformer.h.0.attn.c_attn.weight"));
  CHECK(gc::glob_match("transformer.h.?.attn.*", "transformer.h.7.attn.c_proj.bias"));
  CHECK_FALSE(gc::glob_match("transformer.h.?.attn.*", "transformer.h.11.attn.c_proj.bias"));
  CHECK(gc::glob_match("*adapter*", "model.layers.3.adapter_down.weight"));
  CHECK_FALSE(gc::glob_match("*.weight", "x.bias"));
  CHECK(gc::glob_match("a*b*c", "axxbyyc"));
  CHECK_FALSE(gc::glob_match("a*b*c", "axxbyy"));
  CHECK(gc::glob_match("**a", "bbba"));
}

TEST_CASE("builtin roles: nanoGPT and Hugging Face GPT-2") {
  CHECK(builtin("transformer.wte.weight", {50257, 768}) == role::embedding);
  CHECK(builtin("transformer.wpe.weight", {1024, 768}) == role::embedding);
  CHECK(builtin("transformer.h.0.ln_1.weight", {768}) == role::norm);
  CHECK(builtin("transformer.h.0.ln_1.bias", {768}) == role::norm);
  CHECK(builtin("transformer.h.0.attn.c_attn.weight", {768, 2304}) == role::attention_qkv);  // HF Conv1D
  CHECK(builtin("transformer.h.0.attn.c_attn.weight", {2304, 768}) == role::attention_qkv);  // nanoGPT Linear
  CHECK(builtin("transformer.h.0.attn.c_attn.bias", {2304}) == role::bias);
  CHECK(builtin("transformer.h.11.attn.c_proj.weight", {768, 768}) == role::attention_out);
  CHECK(builtin("transformer.h.11.attn.c_proj.bias", {768}) == role::bias);
  CHECK(builtin("transformer.h.3.ln_2.weight", {768}) == role::norm);
  CHECK(builtin("transformer.h.3.mlp.c_fc.weight", {768, 3072}) == role::mlp_in);
  CHECK(builtin("transformer.h.3.mlp.c_fc.bias", {3072}) == role::bias);
  CHECK(builtin("transformer.h.3.mlp.c_proj.weight", {3072, 768}) == role::mlp_out);
  CHECK(builtin("transformer.ln_f.weight", {768}) == role::norm);
  CHECK(builtin("lm_head.weight", {50257, 768}) == role::lm_head);
  // GPT2Model (no LM head wrapper) drops the "transformer." prefix.
  CHECK(builtin("h.0.attn.c_attn.weight", {768, 2304}) == role::attention_qkv);
  CHECK(builtin("wte.weight", {50257, 768}) == role::embedding);
  // The causal-mask buffer HF GPT-2 registers as attn.bias is no linear bias.
  CHECK(builtin("transformer.h.0.attn.bias", {1, 1, 1024, 1024}) == role::other);
}

TEST_CASE("builtin roles: Hugging Face and Meta Llama") {
  CHECK(builtin("model.embed_tokens.weight", {32000, 4096}) == role::embedding);
  CHECK(builtin("model.layers.0.self_attn.q_proj.weight", {4096, 4096}) == role::attention_qkv);
  CHECK(builtin("model.layers.0.self_attn.k_proj.weight", {1024, 4096}) == role::attention_qkv);
  CHECK(builtin("model.layers.0.self_attn.v_proj.weight", {1024, 4096}) == role::attention_qkv);
  CHECK(builtin("model.layers.0.self_attn.o_proj.weight", {4096, 4096}) == role::attention_out);
  CHECK(builtin("model.layers.31.mlp.gate_proj.weight", {11008, 4096}) == role::mlp_in);
  CHECK(builtin("model.layers.31.mlp.up_proj.weight", {11008, 4096}) == role::mlp_in);
  CHECK(builtin("model.layers.31.mlp.down_proj.weight", {4096, 11008}) == role::mlp_out);
  CHECK(builtin("model.layers.31.input_layernorm.weight", {4096}) == role::norm);
  CHECK(builtin("model.layers.31.post_attention_layernorm.weight", {4096}) == role::norm);
  CHECK(builtin("model.norm.weight", {4096}) == role::norm);
  CHECK(builtin("lm_head.weight", {32000, 4096}) == role::lm_head);

  CHECK(builtin("tok_embeddings.weight", {32000, 4096}) == role::embedding);
  CHECK(builtin("layers.5.attention.wq.weight", {4096, 4096}) == role::attention_qkv);
  CHECK(builtin("layers.5.attention.wk.weight", {4096, 4096}) == role::attention_qkv);
  CHECK(builtin("layers.5.attention.wv.weight", {4096, 4096}) == role::attention_qkv);
  CHECK(builtin("layers.5.attention.wo.weight", {4096, 4096}) == role::attention_out);
  CHECK(builtin("layers.5.feed_forward.w1.weight", {11008, 4096}) == role::mlp_in);
  CHECK(builtin("layers.5.feed_forward.w3.weight", {11008, 4096}) == role::mlp_in);
  CHECK(builtin("layers.5.feed_forward.w2.weight", {4096, 11008}) == role::mlp_out);
  CHECK(builtin("layers.5.attention_norm.weight", {4096}) == role::norm);
  CHECK(builtin("layers.5.ffn_norm.weight", {4096}) == role::norm);
  CHECK(builtin("norm.weight", {4096}) == role::norm);
  CHECK(builtin("output.weight", {32000, 4096}) == role::lm_head);
  // w1 outside a feed-forward block, and "output" below the top level, are not guessed.
  CHECK(builtin("layers.5.adapter.w1.weight", {64, 4096}) == role::other);
  CHECK(builtin("layers.5.attention.output.weight", {4096, 4096}) == role::other);
}

TEST_CASE("builtin roles: Megatron-LM legacy and core (Transformer Engine)") {
  CHECK(builtin("language_model.embedding.word_embeddings.weight", {50304, 1024}) == role::embedding);
  CHECK(builtin("language_model.embedding.position_embeddings.weight", {1024, 1024}) == role::embedding);
  CHECK(builtin("language_model.encoder.layers.0.input_layernorm.weight", {1024}) == role::norm);
  CHECK(builtin("language_model.encoder.layers.0.self_attention.query_key_value.weight", {3072, 1024}) ==
        role::attention_qkv);
  CHECK(builtin("language_model.encoder.layers.0.self_attention.query_key_value.bias", {3072}) == role::bias);
  CHECK(builtin("language_model.encoder.layers.0.self_attention.dense.weight", {1024, 1024}) == role::attention_out);
  CHECK(builtin("language_model.encoder.layers.0.post_attention_layernorm.bias", {1024}) == role::norm);
  CHECK(builtin("language_model.encoder.layers.0.mlp.dense_h_to_4h.weight", {4096, 1024}) == role::mlp_in);
  CHECK(builtin("language_model.encoder.layers.0.mlp.dense_4h_to_h.weight", {1024, 4096}) == role::mlp_out);
  CHECK(builtin("language_model.encoder.final_layernorm.weight", {1024}) == role::norm);
  CHECK(builtin("language_model.output_layer.weight", {50304, 1024}) == role::lm_head);

  CHECK(builtin("embedding.word_embeddings.weight", {50304, 1024}) == role::embedding);
  CHECK(builtin("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight", {1024}) == role::norm);
  CHECK(builtin("decoder.layers.0.self_attention.linear_qkv.layer_norm_bias", {1024}) == role::norm);
  CHECK(builtin("decoder.layers.0.self_attention.linear_qkv.weight", {3072, 1024}) == role::attention_qkv);
  CHECK(builtin("decoder.layers.0.self_attention.linear_proj.weight", {1024, 1024}) == role::attention_out);
  CHECK(builtin("decoder.layers.0.self_attention.linear_proj.bias", {1024}) == role::bias);
  CHECK(builtin("decoder.layers.0.mlp.linear_fc1.weight", {4096, 1024}) == role::mlp_in);
  CHECK(builtin("decoder.layers.0.mlp.linear_fc2.weight", {1024, 4096}) == role::mlp_out);
  CHECK(builtin("decoder.layers.0.pre_mlp_layernorm.weight", {1024}) == role::norm);
  CHECK(builtin("decoder.final_layernorm.weight", {1024}) == role::norm);
  CHECK(builtin("output_layer.weight", {50304, 1024}) == role::lm_head);
}

TEST_CASE("builtin roles: shapes and unknown names") {
  // A matrix name on a vector is not a matrix role; an unknown name is other.
  CHECK(builtin("model.layers.0.self_attn.q_proj.weight", {4096}) == role::other);
  CHECK(builtin("model.layers.0.self_attn.rotary_emb.inv_freq", {64}) == role::other);
  CHECK(builtin("classifier.weight", {2, 768}) == role::other);
  CHECK(builtin("classifier.bias", {2}) == role::bias);
  CHECK(builtin("", {}) == role::other);
  CHECK(builtin("weight", {3}) == role::other);
  CHECK(std::string(gc::to_string(role::attention_qkv)) == "attention_qkv");
  CHECK(std::string(gc::to_string(static_cast<role>(200))) == "unknown");
}

TEST_CASE("classifier: user rules first (first match wins), tied embeddings") {
  gc::layout l;
  l.add("transformer.wte.weight", {512, 64})
      .add("transformer.wpe.weight", {64, 64})
      .add("transformer.h.0.attn.c_attn.weight", {64, 192})
      .add("transformer.h.0.adapter.down.weight", {16, 64})
      .add("transformer.h.0.mlp.c_fc.weight", {64, 256});
  gc::classifier c;
  auto roles = c.classify(l);
  CHECK(roles == std::vector<role>{role::lm_head, role::embedding, role::attention_qkv, role::other, role::mlp_in});

  c.add("*.adapter.*", role::mlp_in).add("*.adapter.down.*", role::norm).add("*.c_attn.*", role::mlp_out);
  roles = c.classify(l);
  CHECK(roles[3] == role::mlp_in);  // the first matching rule wins
  CHECK(roles[2] == role::mlp_out);
  CHECK(c.rules().size() == 3);

  c.tied_embedding_is_lm_head = false;
  CHECK(c.classify(l)[0] == role::embedding);

  // With an LM head of its own, the token embedding stays an embedding.
  gc::layout untied = l;
  untied.add("lm_head.weight", {512, 64});
  CHECK(gc::classifier{}.classify(untied)[0] == role::embedding);
  CHECK(gc::classifier{}.classify(untied)[5] == role::lm_head);

  CHECK(gc::classifier::is_token_embedding("model.embed_tokens.weight"));
  CHECK(gc::classifier::is_token_embedding("embedding.word_embeddings.weight"));
  CHECK_FALSE(gc::classifier::is_token_embedding("transformer.wpe.weight"));
  CHECK_FALSE(gc::classifier::is_token_embedding("my_wte_thing.weight"));
}
