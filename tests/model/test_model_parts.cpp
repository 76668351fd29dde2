// Configs and the parameter registry (the FLOP count: test_flops.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/check.h"
#include "model/gpt_params.h"

using namespace model;

TEST(GptConfig, PresetsAndPadding) {
  const GptConfig c = gpt_preset("gpt2-124m");
  EXPECT_EQ(c.padded_vocab(), 50304);
  EXPECT_EQ(c.head_size(), 64);
  // 124M = 124,475,904 parameters with the padded vocabulary (llm.c's count).
  EXPECT_EQ(c.num_parameters(), 124475904);
  EXPECT_EQ(gpt_preset("gpt2-1558m").head_size(), 64);
  EXPECT_THROW(gpt_preset("gpt2-13b"), engine::Error);
}

TEST(GptConfig, HeadsThatDoNotDivideTheWidthAreRefused) {
  GptConfig c = gpt_preset("gpt-micro");
  c.n_head = 3;  // 32 / 3
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head (3) must divide n_embd (32)"), std::string::npos) << e.what();
  }
}

TEST(ParamRegistry, LayoutIsContiguousAlignedAndNamed) {
  const GptConfig c = gpt_preset("gpt-micro");
  const ParamRegistry reg = build_gpt_registry(c);
  EXPECT_EQ(reg.entries().size(), 2u + 12u * c.n_layer + 2u);
  std::int64_t held = 0;
  for (std::size_t i = 0; i < reg.entries().size(); ++i) {
    const ParamInfo& p = reg.entries()[i];
    EXPECT_EQ(p.offset % ParamRegistry::kAlignElements, 0) << p.name;
    if (i + 1 < reg.entries().size()) EXPECT_GE(reg.entries()[i + 1].offset, p.offset + p.numel());
    held += p.numel();
  }
  EXPECT_EQ(held, c.num_parameters());
  EXPECT_EQ(reg.find("h.1.mlp.proj.weight").shape, (engine::Shape{c.n_embd, 4 * c.n_embd}));
  EXPECT_THROW(reg.find("h.9.ln_1.weight"), engine::Error);
  // Decay: 2-D tensors only.
  EXPECT_TRUE(reg.find("wte").weight_decay);
  EXPECT_FALSE(reg.find("h.0.attn.qkv.bias").weight_decay);
  EXPECT_FALSE(reg.find("ln_f.weight").weight_decay);
}

TEST(ParamRegistry, InitialisationFollowsGpt2AndIsSeeded) {
  const GptConfig c = gpt_preset("gpt-micro");
  const ParamRegistry reg = build_gpt_registry(c);
  std::vector<float> a(reg.total_numel()), b(reg.total_numel()), d(reg.total_numel());
  auto as_tensor = [&](std::vector<float>& v) {
    return engine::Tensor(v.data(), engine::Shape{reg.total_numel()}, engine::DType::kF32, engine::DeviceType::kCpu);
  };
  reg.initialize(as_tensor(a), 1);
  reg.initialize(as_tensor(b), 1);
  reg.initialize(as_tensor(d), 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);
  EXPECT_EQ(a[reg.find("h.0.ln_1.weight").offset], 1.0f);
  EXPECT_EQ(a[reg.find("h.0.attn.qkv.bias").offset], 0.0f);
  // Residual projections are scaled by 1/sqrt(2L) (GPT-2): their spread is smaller.
  auto stddev = [&](const std::string& name) {
    const ParamInfo& p = reg.find(name);
    double s = 0;
    for (std::int64_t i = 0; i < p.numel(); ++i) s += double(a[p.offset + i]) * a[p.offset + i];
    return std::sqrt(s / p.numel());
  };
  EXPECT_NEAR(stddev("h.0.mlp.fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("h.0.mlp.proj.weight"), 0.02 / std::sqrt(2.0 * c.n_layer), 0.002);
}
