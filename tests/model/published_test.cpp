// Ready-made layouts against the published parameter counts and shapes, and their roles.
#include <doctest/doctest.h>

#include <gradcomp/model/published.hpp>

#include <array>
#include <cstddef>
#include <vector>

namespace gc = gradcomp;
namespace gm = gradcomp::model;
using gc::role;

namespace {
std::array<std::size_t, gc::role_count> role_counts(const gc::layout& l) {
  std::array<std::size_t, gc::role_count> n{};
  for (role r : gc::classifier{}.classify(l)) ++n[static_cast<std::size_t>(r)];
  return n;
}
std::size_t count(const std::array<std::size_t, gc::role_count>& n, role r) { return n[static_cast<std::size_t>(r)]; }
std::vector<std::size_t> shape_of(const gc::layout& l, const char* name) {
  const std::size_t i = l.find(name);
  REQUIRE(i != gc::layout::npos);
  return l[i].shape;
}
}  // namespace

TEST_CASE("published: GPT-2 small and medium, Hugging Face and nanoGPT names") {
  const gc::layout hf = gm::gpt2_layout(gm::gpt2_small);
  CHECK(hf.validate().ok());
  CHECK(hf.size() == 2 + 12 * 12 + 2);
  CHECK(hf.parameters() == 124'439'808);  // GPT2LMHeadModel, LM head tied
  CHECK(hf.extent() == hf.parameters());
  CHECK(hf.parameters() - hf[1].elements() == 123'653'376);  // nanoGPT's count leaves out wpe
  CHECK(shape_of(hf, "transformer.h.0.attn.c_attn.weight") == std::vector<std::size_t>{768, 2304});
  CHECK(shape_of(hf, "transformer.h.11.mlp.c_proj.weight") == std::vector<std::size_t>{3072, 768});

  const gc::layout nano = gm::gpt2_layout(gm::gpt2_small, gm::gpt2_naming::nanogpt);
  CHECK(nano.parameters() == 124'439'808);
  CHECK(shape_of(nano, "transformer.h.0.attn.c_attn.weight") == std::vector<std::size_t>{2304, 768});
  CHECK(shape_of(nano, "transformer.h.11.mlp.c_proj.weight") == std::vector<std::size_t>{768, 3072});

  CHECK(gm::gpt2_layout(gm::gpt2_medium).parameters() == 354'823'168);
  gm::gpt2_config no_bias = gm::gpt2_small;
  no_bias.bias = false;
  CHECK(gm::gpt2_layout(no_bias).size() == 2 + 12 * 6 + 1);

  for (const gc::layout* l : {&hf, &nano}) {
    const auto n = role_counts(*l);
    CHECK(count(n, role::attention_qkv) == 12);
    CHECK(count(n, role::attention_out) == 12);
    CHECK(count(n, role::mlp_in) == 12);
    CHECK(count(n, role::mlp_out) == 12);
    CHECK(count(n, role::embedding) == 1);  // wpe; wte is tied to the head
    CHECK(count(n, role::lm_head) == 1);
    CHECK(count(n, role::norm) == 50);
    CHECK(count(n, role::bias) == 48);
    CHECK(count(n, role::other) == 0);
  }
}

TEST_CASE("published: Llama 7B (Hugging Face and Meta names), a layer set, grouped-query attention") {
  const gc::layout hf = gm::llama_layout(gm::llama_7b);
  CHECK(hf.validate().ok());
  CHECK(hf.parameters() == 6'738'415'616);
  const gc::layout meta = gm::llama_layout(gm::llama_7b, gm::llama_naming::meta);
  CHECK(meta.parameters() == 6'738'415'616);
  CHECK(shape_of(meta, "layers.31.feed_forward.w2.weight") == std::vector<std::size_t>{4096, 11008});
  for (const gc::layout* l : {&hf, &meta}) {
    const auto n = role_counts(*l);
    CHECK(count(n, role::attention_qkv) == 96);
    CHECK(count(n, role::attention_out) == 32);
    CHECK(count(n, role::mlp_in) == 64);
    CHECK(count(n, role::mlp_out) == 32);
    CHECK(count(n, role::embedding) == 1);
    CHECK(count(n, role::lm_head) == 1);
    CHECK(count(n, role::norm) == 65);
    CHECK(count(n, role::other) == 0);
  }
  // Layers 4 and 5 alone: no embedding, no head, nine tensors a layer.
  const gc::layout two = gm::llama_layout(gm::llama_7b, gm::llama_naming::huggingface, 4, 2);
  CHECK(two.size() == 18);
  CHECK(two[0].name == "model.layers.4.self_attn.q_proj.weight");
  CHECK(two.parameters() == 2 * 202'383'360);
  // The last layer brings the final norm and the head.
  CHECK(gm::llama_layout(gm::llama_7b, gm::llama_naming::huggingface, 31).size() == 9 + 2);
  gm::llama_config gqa = gm::llama_7b;
  gqa.kv_heads = 8;
  CHECK(shape_of(gm::llama_layout(gqa, gm::llama_naming::huggingface, 0, 1), "model.layers.0.self_attn.k_proj.weight") ==
        std::vector<std::size_t>{1024, 4096});
}

TEST_CASE("published: Megatron GPT 345M, whole and one tensor-parallel shard") {
  const gc::layout one = gm::megatron_gpt_layout(gm::megatron_gpt_345m);
  CHECK(one.validate().ok());
  CHECK(gm::megatron_padded_vocab(gm::megatron_gpt_345m) == 50304);
  CHECK(one.parameters() == 50304 * 1024 + 1024 * 1024 + 24 * (12 * 1024 * 1024 + 13 * 1024) + 2 * 1024);
  const auto n = role_counts(one);
  CHECK(count(n, role::attention_qkv) == 24);
  CHECK(count(n, role::attention_out) == 24);
  CHECK(count(n, role::mlp_in) == 24);
  CHECK(count(n, role::mlp_out) == 24);
  CHECK(count(n, role::lm_head) == 1);  // word embeddings, tied
  CHECK(count(n, role::embedding) == 1);
  CHECK(count(n, role::norm) == 24 * 4 + 2);
  CHECK(count(n, role::bias) == 24 * 4);

  gm::megatron_gpt_config tp2 = gm::megatron_gpt_345m;
  tp2.tensor_parallel = 2;
  tp2.tied = false;
  const gc::layout shard = gm::megatron_gpt_layout(tp2);
  CHECK(gm::megatron_padded_vocab(tp2) == 50432);  // a multiple of 128 x 2
  CHECK(shape_of(shard, "embedding.word_embeddings.weight") == std::vector<std::size_t>{25216, 1024});
  CHECK(shape_of(shard, "decoder.layers.0.self_attention.linear_qkv.weight") == std::vector<std::size_t>{1536, 1024});
  CHECK(shape_of(shard, "decoder.layers.0.self_attention.linear_proj.weight") == std::vector<std::size_t>{1024, 512});
  CHECK(shape_of(shard, "decoder.layers.23.mlp.linear_fc2.weight") == std::vector<std::size_t>{1024, 2048});
  const auto m = role_counts(shard);
  CHECK(count(m, role::lm_head) == 1);  // output_layer
  CHECK(count(m, role::embedding) == 2);
}
