// Benchmark of one training step (forward, backward, AdamW) on synthetic
// tokens, for any preset of model/gpt_config.cpp (GPT-2 or the Llama family):
// tokens/s, achieved FLOP/s and MFU (the model-FLOP count of model/flops.h,
// printed once per case: Megatron-LM's formula for GPT-2, every matmul with
// grouped-query qkv and SwiGLU for the Llama family), and where the step's
// time goes, op by op.
//
// Attention FLOPs are counted over the full s x s square by default, as the
// paper does and as examples/benchmarks/pytorch_reference.py and the figures
// of RESULTS.md do (`train` counts the causal half by default);
// --attention-flops causal counts the causal half (what
// examples/benchmarks/pytorch_llama_reference.py and examples/gpu/llama_check.sh
// use). The result line prints the other convention's figure beside it. MFU
// divides by the peak of engine/device.cpp's table for the GPU's name
// (--peak-tflops overrides it; on the CPU only --peak-tflops gives one).
//
// --timeline (default on): one extra step with the asynchronous op timeline
// (engine/profiler.h): each op's time on the device's clock with nothing
// synchronised, and the gaps where the device ran no op, by the ops either
// side. --profile: one extra step with each op synchronised (each op's time
// alone, on an idle device).
//
//   train_step_bench                                  # the two CPU cases of RESULTS.md
//   train_step_bench --model gpt2-124m --seq-len 64 --micro-batch 4 --steps 3
//   train_step_bench --model llama-micro --seq-len 64 --micro-batch 4 --grad-accum 2 --steps 2
//   train_step_bench --device cuda --model gpt2-1558m --seq-len 1024 --micro-batch 8 --grad-accum 64
//   train_step_bench --device cuda --model qwen2.5-1.5b --seq-len 1024 --micro-batch 8 --grad-accum 64
//                    --attention-flops causal
//
// --passes: the median time of one micro-batch's forward, its whole
// backward, and the same backward as the input-gradient and weight-gradient
// passes a zero-bubble schedule runs apart (model::GptStage::backward_input /
// backward_weight): the T_F, T_B and T_W of Qi et al. 2024, and what
// splitting costs.
//
// Nothing here is asserted: figures are recorded in RESULTS.md by hand, with
// the machine, date, commit and command.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/device.h"
#include "engine/op_timeline.h"
#include "engine/profiler.h"
#include "model/flops.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace {

struct Case {
  std::string model;
  std::int64_t micro_batch;
  std::int64_t seq_len;
  std::int64_t grad_accum = 1;  // micro-batches per optimizer step
};

using Clock = std::chrono::steady_clock;

struct Options {
  int steps = 5;
  engine::DeviceType device = engine::DeviceType::kCpu;
  model::Precision precision = model::Precision::kFp32;
  engine::ops::MatmulFormat matmul_format = engine::ops::MatmulFormat::kNative;  // fp8: the blocks' matmuls
  engine::ops::Fp8Scaling fp8_scaling = engine::ops::Fp8Scaling::kTensor;
  bool profile = true;
  bool timeline = true;
  model::AttentionFlops attention = model::AttentionFlops::kFull;
  double peak_flops = 0;  // FLOP/s that MFU divides by; 0: no MFU
  bool passes = false;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_case(const Case& c, const Options& o) {
  const engine::DeviceType device = o.device;
  const model::Precision precision = o.precision;
  const int steps = o.steps;
  model::GptConfig config = model::gpt_preset(c.model);
  // What is timed and how it is counted, before the (possibly long) set-up.
  std::printf("%s: %s %s | %s %s | B=%lld T=%lld x%lld (%lld tokens a step)\n", c.model.c_str(),
              model::architecture_name(config.arch), config.describe().c_str(),
              device == engine::DeviceType::kCuda ? "cuda" : "cpu",
              o.matmul_format == engine::ops::MatmulFormat::kFp8E4M3
                  ? (o.fp8_scaling == engine::ops::Fp8Scaling::kBlock
                         ? (precision == model::Precision::kBf16 ? "fp8 (bf16, the blocks' matmuls in E4M3, block scaling)"
                                                                 : "fp8-emulated (fp32, E4M3 rounding, block scaling)")
                         : (precision == model::Precision::kBf16 ? "fp8 (bf16, the blocks' matmuls in E4M3)"
                                                                 : "fp8-emulated (fp32, E4M3 rounding)"))
                  : (precision == model::Precision::kBf16 ? "bf16" : "fp32"),
              static_cast<long long>(c.micro_batch), static_cast<long long>(c.seq_len),
              static_cast<long long>(c.grad_accum), static_cast<long long>(c.micro_batch * c.seq_len * c.grad_accum));
  std::printf("  %s\n", model::flops_convention(o.attention, config).c_str());
  const model::ParamRegistry registry = model::build_gpt_registry(config);
  model::ParamStore store(registry, device, precision);
  store.initialize(1);
  // Under fp8 the blocks keep their amax slots, as the trainer's stages do.
  const model::ActivationShape shape{c.micro_batch, c.seq_len, model::activation_dtype(precision),
                                     o.matmul_format == engine::ops::MatmulFormat::kFp8E4M3};
  model::GptStage stage(config, store, model::whole_model(config), shape, 1);
  stage.set_matmul_format(o.matmul_format);
  stage.set_fp8_scaling(o.fp8_scaling);
  engine::Arena plan = engine::Arena::planning(device);
  stage.allocate(plan);
  engine::Arena arena(device, plan.used());
  stage.allocate(arena);
  std::vector<optim::ParamSegment> segments;
  for (const auto& s : registry.decay_segments()) segments.push_back({s.offset, s.count, s.decay});
  optim::AdamW adamw({store.master(), store.grads(), store.working()}, segments, optim::AdamWConfig{});

  // One micro-batch of tokens, reused by every micro-batch of a step (the
  // timing does not depend on the values).
  const std::int64_t tokens_per_micro = c.micro_batch * c.seq_len, tokens_per_step = tokens_per_micro * c.grad_accum;
  std::vector<std::int32_t> tokens(tokens_per_micro), targets(tokens_per_micro);
  for (std::int64_t i = 0; i < tokens_per_micro; ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7919) % config.vocab_size);
    targets[i] = static_cast<std::int32_t>((i * 104729 + 3) % config.vocab_size);
  }
  auto step = [&] {
    store.zero_grads();
    for (std::int64_t m = 0; m < c.grad_accum; ++m) {  // gradients accumulate over the micro-batches
      stage.forward(0, tokens.data(), targets.data(), 1.0 / static_cast<double>(tokens_per_step));
      stage.backward(0);
    }
    const double norm = std::sqrt(optim::grad_sum_of_squares(store.grads()));
    adamw.step(1e-4, optim::clip_factor(norm, 1.0));
    stage.weights_changed();  // FP8: the weights are cast again in the next step, as in training
    engine::device_synchronize();
  };
  step();  // warm-up: first touches of memory, thread pools, cuBLASLt heuristics

  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double flops =
      model::training_flops_per_step(config, c.micro_batch * c.grad_accum, c.seq_len, o.attention);
  const model::AttentionFlops other =
      o.attention == model::AttentionFlops::kFull ? model::AttentionFlops::kCausal : model::AttentionFlops::kFull;
  const double other_flops = model::training_flops_per_step(config, c.micro_batch * c.grad_accum, c.seq_len, other);
  // The last micro-batch's mean loss: a finite, plausible value (about
  // ln V on random tokens) says the step computed something.
  const double loss = stage.loss_sum(0) / static_cast<double>(tokens_per_micro);
  char mfu[64] = "";
  if (o.peak_flops > 0)
    std::snprintf(mfu, sizeof mfu, " | MFU %.1f%% of %g TFLOP/s", 100.0 * flops / median / o.peak_flops,
                  o.peak_flops / 1e12);
  // Peak: everything the engine allocated on the device (weights, gradients,
  // optimizer state, activations, workspaces), comparable with PyTorch's
  // max_memory_allocated.
  std::printf("%-10s B=%-3lld T=%-5lld x%-3lld params %6.1fM | step %8.1f ms (median of %d) | %9.0f tok/s | "
              "%7.2f GFLOP/s (%s attention: %.2f) | activations %s | peak memory %s | loss %.6f%s\n",
              c.model.c_str(), static_cast<long long>(c.micro_batch), static_cast<long long>(c.seq_len),
              static_cast<long long>(c.grad_accum), config.num_parameters() / 1e6, median * 1e3, steps,
              tokens_per_step / median, flops / median / 1e9,
              other == model::AttentionFlops::kCausal ? "causal" : "full-square", other_flops / median / 1e9,
              engine::format_bytes(arena.capacity()).c_str(),
              engine::format_bytes(engine::memory_stats(device).peak).c_str(), loss, mfu);

  if (o.passes) {
    // Each pass of one micro-batch timed alone (the device synchronised
    // around it), alternating the whole and the split backward.
    // A second stage over the same parameters, built for the split backward.
    model::GptStage split(config, store, model::whole_model(config), shape, 1, {}, nullptr, model::Recompute::kNone,
                          nullptr, 1, 1);
    engine::Arena split_plan = engine::Arena::planning(device);
    split.allocate(split_plan);
    engine::Arena split_arena(device, split_plan.used());
    split.allocate(split_arena);
    std::vector<double> forward, whole, input, weight;
    const auto timed = [&](std::vector<double>& into, auto&& pass) {
      engine::device_synchronize();
      const auto t0 = Clock::now();
      pass();
      engine::device_synchronize();
      into.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    };
    const double scale = 1.0 / static_cast<double>(tokens_per_micro);
    for (int i = 0; i < std::max(steps, 3); ++i) {
      timed(forward, [&] { stage.forward(0, tokens.data(), targets.data(), scale); });
      timed(whole, [&] { stage.backward(0); });
      split.forward(0, tokens.data(), targets.data(), scale, 0);
      timed(input, [&] { split.backward_input(0, 0, 0); });
      timed(weight, [&] { split.backward_weight(0, 0); });
    }
    const double f = median_of(forward), b = median_of(whole), bi = median_of(input), w = median_of(weight);
    std::printf("  passes of one micro-batch (medians): forward %.2f ms | backward %.2f ms | split: input %.2f ms + "
                "weight %.2f ms = %.2f ms (%+.1f%%) | T_F : T_B : T_W = 1 : %.2f : %.2f\n",
                f * 1e3, b * 1e3, bi * 1e3, w * 1e3, (bi + w) * 1e3, 100.0 * ((bi + w) / b - 1.0), bi / f, w / f);
  }

  if (o.timeline) {
    // One more step with timing marks around each op and nothing synchronised.
    engine::OpProfiler::set_mode(engine::ProfileMode::kTimeline);
    engine::OpProfiler::reset();
    step();
    engine::OpProfiler::set_mode(engine::ProfileMode::kOff);
    const engine::TimelineSummary timeline = engine::summarise_timeline(engine::OpProfiler::timeline());
    std::printf("  timeline of one step (device clock, no synchronisation; %lld micro-batches, %.2f ms of span each):\n",
                static_cast<long long>(c.grad_accum), timeline.span_ms / static_cast<double>(c.grad_accum));
    std::printf("%s", engine::format_timeline_summary(timeline, 12).c_str());
  }
  if (!o.profile) return;
  // One more step with per-op timing (synchronising around each op).
  engine::OpProfiler::reset();
  engine::OpProfiler::enable(true);
  const auto t0 = Clock::now();
  step();
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  engine::OpProfiler::enable(false);
  auto ops = engine::OpProfiler::snapshot();
  std::vector<std::pair<std::string, engine::OpTime>> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  double matmul = 0;
  for (const auto& [name, t] : sorted) {
    std::printf("    %-22s %8.2f ms %5.1f%%  (%lld calls)\n", name.c_str(), t.seconds * 1e3, 100 * t.seconds / total,
                t.calls);
    if (name.rfind("matmul", 0) == 0) matmul += t.seconds;
  }
  std::printf("    matmul share of the step: %.1f%%\n", 100 * matmul / total);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time training steps of a GPT-2 or Llama-family preset on synthetic tokens."};
  std::string model_name, device_name = "cpu", precision_name = "auto";
  std::int64_t micro_batch = 0, seq_len = 0, grad_accum = 1;
  int steps = 5;
  double peak_tflops = 0;
  bool profile = true, timeline = true, passes = false;
  std::string attention_flops = "full";
  app.add_option("--model", model_name, "Preset to time (default: the two cases of RESULTS.md)");
  app.add_option("--micro-batch", micro_batch, "Sequences per step");
  app.add_option("--seq-len", seq_len, "Tokens per sequence");
  app.add_option("--grad-accum", grad_accum, "Micro-batches per optimizer step (gradient accumulation)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", steps, "Timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--precision", precision_name,
                 "auto, fp32, bf16, fp8 (cuda: bf16 with the blocks' matmuls in FP8 E4M3) or fp8-emulated (cpu)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp8", "fp8-emulated"}))->capture_default_str();
  std::string fp8_scaling = "tensor";
  app.add_option("--fp8-scaling", fp8_scaling, "Under fp8: tensor or block (train's --fp8-scaling)")
      ->check(CLI::IsMember({"tensor", "block"}))->capture_default_str();
  app.add_flag("--passes", passes,
               "Time one micro-batch's forward, whole backward, and the backward split into input and weight "
               "passes (zero-bubble schedules)");
  app.add_option("--profile", profile, "Print the per-op breakdown of one extra step, each op synchronised")
      ->capture_default_str();
  app.add_option("--timeline", timeline,
                 "Print the op timeline of one extra step: device-clock times, nothing synchronised, and the gaps")
      ->capture_default_str();
  app.add_option("--attention-flops", attention_flops,
                 "Attention FLOPs in the GFLOP/s figure: full (s x s, Megatron-LM 2021, RESULTS.md) or causal (half)")
      ->check(CLI::IsMember({"causal", "full"}))->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops,
                 "Peak TFLOP/s for MFU (default: engine/device.cpp's table by the GPU's name; none on the CPU)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const engine::DeviceType device = device_name == "cuda" ? engine::DeviceType::kCuda : engine::DeviceType::kCpu;
    if (device == engine::DeviceType::kCuda) engine::cuda_set_device(0);
    const bool fp8 = precision_name == "fp8", fp8_emulated = precision_name == "fp8-emulated";
    if (fp8 && device != engine::DeviceType::kCuda) throw std::runtime_error("--precision fp8 needs --device cuda");
    if (fp8_emulated && device != engine::DeviceType::kCpu)
      throw std::runtime_error("--precision fp8-emulated runs on --device cpu");
    const engine::ops::Fp8Scaling scaling = engine::ops::parse_fp8_scaling(fp8_scaling);
    if (fp8) {
      std::string why;
      if (!engine::cuda_fp8_supported(0, &why)) throw std::runtime_error("--precision fp8: " + why);
      if (scaling == engine::ops::Fp8Scaling::kBlock && !engine::cuda_fp8_block_scaling_supported(0, &why))
        throw std::runtime_error("--fp8-scaling block: " + why);
    }
    const model::Precision precision =
        fp8 ? model::Precision::kBf16
        : fp8_emulated ? model::Precision::kFp32
        : precision_name == "auto"
            ? (device == engine::DeviceType::kCuda ? model::Precision::kBf16 : model::Precision::kFp32)
            : model::parse_precision(precision_name);
    std::vector<Case> cases;
    if (model_name.empty())
      cases = {{"gpt-demo", 16, 128}, {"gpt2-124m", 4, 64}};
    else
      cases = {{model_name, micro_batch ? micro_batch : 4, seq_len ? seq_len : 64, grad_accum}};
    double peak = peak_tflops * 1e12;
    if (peak == 0 && device == engine::DeviceType::kCuda)
      peak = engine::gpu_peak_flops_by_name(engine::cuda_device_name(0));
    const Options options{steps,
                          device,
                          precision,
                          fp8 || fp8_emulated ? engine::ops::MatmulFormat::kFp8E4M3 : engine::ops::MatmulFormat::kNative,
                          scaling,
                          profile,
                          timeline,
                          model::parse_attention_flops(attention_flops),
                          peak,
                          passes};
    for (const Case& c : cases) run_case(c, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
