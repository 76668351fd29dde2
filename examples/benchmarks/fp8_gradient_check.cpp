// fp8_gradient_check: how far FP8 moves the gradients (issue 35's validation,
// "per-layer gradient cosine on real activations").
//
// One model, the same micro-batches of real tokens from a shard, gradients
// computed with the blocks' matmuls native, then in FP8 E4M3 with per-tensor
// current scaling and/or block scaling (--fp8-scaling tensor|block|both;
// engine/ops.h, MatmulFormat and Fp8Scaling). On CUDA that is
// --precision fp8 against bf16; on the CPU fp8-emulated (the same rounding,
// in f32) against fp32. Per parameter tensor it prints the cosine of the
// native and each FP8 gradient and the FP8 gradient's relative L2 error, then
// the worst of each block, and the losses. With --warmup-steps K the model first trains K
// native AdamW steps on the data, so the activations and gradients compared
// have a trained model's distributions rather than an initialisation's.
//
//   fp8_gradient_check --model gpt-demo --data "data/fortunes_bpe1024/fortunes_train_*.bin" --vocab-size 1024 \
//     --micro-batch 16 --seq-len 128 --warmup-steps 200
//   fp8_gradient_check --device cuda --model gpt2-124m --data "..." --micro-batch 8 --seq-len 1024 --warmup-steps 100
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "launch/data/data_loader.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace {

struct Options {
  std::string model = "gpt-demo", data;
  std::int64_t vocab_size = 0, micro_batch = 16, seq_len = 128;
  int warmup_steps = 0, batches = 4;
  double lr = 2e-3;
  std::uint64_t seed = 1337;
  engine::DeviceType device = engine::DeviceType::kCpu;
  std::vector<engine::ops::Fp8Scaling> scalings{engine::ops::Fp8Scaling::kTensor};
};

struct Gradients {
  std::vector<float> values;  // the whole flat gradient buffer, f32 on the host
  double loss = 0;            // mean over the batches' tokens
};

// The gradients of `batches` micro-batches (sequences from `first`), accumulated.
Gradients gradients(model::GptStage& stage, model::ParamStore& store, const launch::DataLoader& data,
                    const Options& o, std::int64_t first) {
  const std::int64_t tokens = o.micro_batch * o.seq_len;
  std::vector<std::int32_t> inputs(tokens), targets(tokens);
  store.zero_grads();
  Gradients g;
  for (int b = 0; b < o.batches; ++b) {
    data.read_sequences(first + b * o.micro_batch, o.micro_batch, inputs.data(), targets.data());
    stage.forward(0, inputs.data(), targets.data(), 1.0 / static_cast<double>(tokens * o.batches));
    stage.backward(0);
    g.loss += stage.loss_sum(0) / static_cast<double>(tokens * o.batches);
  }
  g.values.resize(static_cast<std::size_t>(store.grads().numel()));
  engine::ops::copy(engine::Tensor(g.values.data(), store.grads().shape(), engine::DType::kF32, engine::DeviceType::kCpu),
                    store.grads());
  return g;
}

// The layer of a block parameter ("h.3.attn.qkv.weight" -> "h.3"), or the name itself.
std::string layer_of(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return name;
  return name.substr(0, name.find('.', 2));
}

void run(const Options& o) {
  model::GptConfig config = model::gpt_preset(o.model);
  if (o.vocab_size > 0) config.vocab_size = o.vocab_size;
  config.validate();
  const bool cuda = o.device == engine::DeviceType::kCuda;
  const model::Precision precision = cuda ? model::Precision::kBf16 : model::Precision::kFp32;
  std::printf("%s %s | %s: native %s against the blocks' matmuls in FP8 E4M3%s | B=%lld T=%lld, %d micro-batches, "
              "after %d native AdamW steps\n",
              o.model.c_str(), config.describe().c_str(), cuda ? "cuda" : "cpu", cuda ? "bf16" : "fp32",
              cuda ? "" : " (emulated)", static_cast<long long>(o.micro_batch), static_cast<long long>(o.seq_len),
              o.batches, o.warmup_steps);

  const model::ParamRegistry registry = model::build_gpt_registry(config);
  model::ParamStore store(registry, o.device, precision);
  store.initialize(o.seed);
  // The amax slots of per-tensor scaling (the trainer's stages keep them under fp8).
  const model::ActivationShape shape{o.micro_batch, o.seq_len, model::activation_dtype(precision), true};
  model::GptStage stage(config, store, model::whole_model(config), shape, 1);
  engine::Arena plan = engine::Arena::planning(o.device);
  stage.allocate(plan);
  engine::Arena arena(o.device, plan.used());
  stage.allocate(arena);
  const launch::DataLoader data(o.data, static_cast<int>(o.seq_len), static_cast<int>(config.vocab_size), false,
                                o.seed);

  // Warm-up: native training, so what is compared comes from a trained model.
  std::vector<optim::ParamSegment> segments;
  for (const auto& s : registry.decay_segments()) segments.push_back({s.offset, s.count, s.decay});
  optim::AdamW adamw({store.master(), store.grads(), store.working()}, segments, optim::AdamWConfig{});
  std::int64_t next = 0;
  for (int k = 0; k < o.warmup_steps; ++k) {
    Options one = o;
    one.batches = 1;
    const Gradients g = gradients(stage, store, data, one, next);
    next += o.micro_batch;
    const double norm = std::sqrt(optim::grad_sum_of_squares(store.grads()));
    adamw.step(o.lr, optim::clip_factor(norm, 1.0));
    if ((k + 1) % 50 == 0 || k + 1 == o.warmup_steps) std::printf("  warm-up step %d: loss %.4f\n", k + 1, g.loss);
  }

  const Gradients native = gradients(stage, store, data, o, next);
  stage.set_matmul_format(engine::ops::MatmulFormat::kFp8E4M3);
  std::vector<Gradients> fp8;
  for (const engine::ops::Fp8Scaling scaling : o.scalings) {
    stage.set_fp8_scaling(scaling);
    fp8.push_back(gradients(stage, store, data, o, next));
    std::printf("loss: native %.6f, fp8 %s scaling %.6f (%+.3g relative)\n", native.loss,
                engine::ops::fp8_scaling_name(scaling), fp8.back().loss, (fp8.back().loss - native.loss) / native.loss);
  }

  std::printf("%-28s %10s", "tensor", "elements");
  for (const engine::ops::Fp8Scaling scaling : o.scalings)
    std::printf(" %10s cosine %10s error", engine::ops::fp8_scaling_name(scaling), engine::ops::fp8_scaling_name(scaling));
  std::printf("\n");
  struct Worst {
    double cosine = 1, error = 0;
  };
  std::vector<std::map<std::string, Worst>> by_layer(o.scalings.size());
  std::vector<std::string> layer_order;
  for (const model::ParamInfo& p : registry.entries()) {
    std::printf("%-28s %10lld", p.name.c_str(), static_cast<long long>(p.numel()));
    const std::string layer = layer_of(p.name);
    if (!by_layer[0].count(layer)) layer_order.push_back(layer);
    for (std::size_t k = 0; k < o.scalings.size(); ++k) {
      double dot = 0, nn = 0, ff = 0, diff = 0;
      for (std::int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
        const double a = native.values[i], b = fp8[k].values[i];
        dot += a * b, nn += a * a, ff += b * b, diff += (a - b) * (a - b);
      }
      const double cosine = nn > 0 && ff > 0 ? dot / std::sqrt(nn * ff) : 1.0;
      const double error = nn > 0 ? std::sqrt(diff / nn) : 0.0;
      std::printf(" %17.6f %16.3e", cosine, error);
      Worst& w = by_layer[k][layer];
      w.cosine = std::min(w.cosine, cosine);
      w.error = std::max(w.error, error);
    }
    std::printf("\n");
  }
  std::printf("by layer (worst tensor):\n");
  for (const std::string& layer : layer_order) {
    std::printf("  %-10s", layer.c_str());
    for (std::size_t k = 0; k < o.scalings.size(); ++k)
      std::printf("  %s: cosine %.6f, rel. error %.3e", engine::ops::fp8_scaling_name(o.scalings[k]),
                  by_layer[k][layer].cosine, by_layer[k][layer].error);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gradients with the transformer blocks' matmuls native and in FP8 E4M3, compared per tensor."};
  Options o;
  std::string device = "cpu";
  app.add_option("--model", o.model, "Preset")->capture_default_str();
  app.add_option("--data", o.data, "Token shards (a file or glob, as train --train-data)")->required();
  app.add_option("--vocab-size", o.vocab_size, "Override the preset's vocabulary (the shards' tokenizer's)");
  app.add_option("--micro-batch", o.micro_batch, "Sequences per micro-batch")->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str();
  app.add_option("--batches", o.batches, "Micro-batches whose gradients are compared (accumulated)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "Native AdamW steps (one micro-batch each) before comparing")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "Warm-up learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "Initialisation seed")->capture_default_str();
  app.add_option("--device", device, "cpu (fp8-emulated vs fp32) or cuda (fp8 vs bf16)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  std::string scaling = "tensor";
  app.add_option("--fp8-scaling", scaling, "tensor, block, or both (side by side)")
      ->check(CLI::IsMember({"tensor", "block", "both"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (scaling == "both") o.scalings = {engine::ops::Fp8Scaling::kTensor, engine::ops::Fp8Scaling::kBlock};
  else o.scalings = {engine::ops::parse_fp8_scaling(scaling)};
  try {
    o.device = device == "cuda" ? engine::DeviceType::kCuda : engine::DeviceType::kCpu;
    if (o.device == engine::DeviceType::kCuda) {
      engine::cuda_set_device(0);
      std::string why;
      if (!engine::cuda_fp8_supported(0, &why)) throw std::runtime_error(why);
      for (const engine::ops::Fp8Scaling s : o.scalings)
        if (s == engine::ops::Fp8Scaling::kBlock && !engine::cuda_fp8_block_scaling_supported(0, &why))
          throw std::runtime_error("--fp8-scaling block: " + why);
    }
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
