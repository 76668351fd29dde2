// Per-op timing on one GPU at a GPT model's shapes, each op against its floor.
//
// train_step_bench's profile synchronises the device around every op, which
// adds a fixed cost of some microseconds to each call and inflates the small,
// memory-bound ops most. Here each op runs `--reps` times back to back after a
// warm-up and the device is synchronised once around the batch, so the
// launches overlap the work and the mean per call is the op's own time (for
// ops of more than a few microseconds). Each row prints the achieved rate and
// the floor the METHOD of this repo's GPU notes asks for: bytes that must move
// over the bandwidth of a device-to-device copy measured in the same run, or
// FLOPs over --peak-tflops. Inputs are random (never zeros: a matrix product
// on zeros runs faster than on real data).
//
//   op_bench --model gpt2-1558m --micro-batch 8 --seq-len 1024
//
// Nothing here is asserted: figures go into RESULTS.md by hand, with the
// machine, date, commit and command.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/buffer.h"
#if ENGINE_WITH_CUDA
#include "engine/cuda/gemm_search.h"
#endif
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "model/gpt_config.h"

namespace {

using engine::DType;
using engine::Shape;
using engine::Tensor;
constexpr engine::DeviceType kCuda = engine::DeviceType::kCuda;

// A device tensor with its own storage, filled with N(0, stddev) draws.
struct DeviceTensor {
  engine::Buffer buffer;
  Tensor t;
  DeviceTensor(Shape shape, DType dtype, double stddev = 1.0, double mean = 0.0, std::uint64_t key = 1)
      : buffer(kCuda, static_cast<std::size_t>(shape.numel()) * engine::dtype_size(dtype)),
        t(buffer.as_tensor(shape, dtype)) {
    std::vector<float> host(static_cast<std::size_t>(shape.numel()));
    engine::fill_normal(host.data(), shape.numel(), key, 0, mean, stddev);
    engine::ops::copy(t, Tensor(host.data(), shape, DType::kF32, engine::DeviceType::kCpu));
  }
};

// Mean seconds per call of `op` over `reps` back-to-back calls, after 3 warm-ups.
double seconds_per_call(const std::function<void()>& op, int reps) {
  for (int i = 0; i < 3; ++i) op();
  engine::device_synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) op();
  engine::device_synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

struct Row {
  std::string op, shape;
  double seconds;
  double bytes = 0;  // the fewest bytes the op must move (memory-bound ops)
  double flops = 0;  // the products' FLOPs (matrix ops)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-op GPU timing at a GPT model's shapes, against the bandwidth and FLOP floors"};
  std::string model_name = "gpt2-1558m";
  std::int64_t micro_batch = 8, seq_len = 1024;
  int reps = 20;
  double peak_tflops = 989.0;
  std::int64_t adamw_params = 100'000'000;
  app.add_option("--model", model_name, "GPT preset")->capture_default_str();
  app.add_option("--micro-batch", micro_batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--seq-len", seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--reps", reps, "timed calls per op")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--peak-tflops", peak_tflops, "dense bf16 peak for the matrix ops' floor")->capture_default_str();
  app.add_option("--adamw-params", adamw_params, "parameters in the AdamW case (30 bytes each)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (engine::cuda_device_count() == 0) {
      std::fprintf(stderr, "error: op_bench needs a visible GPU (and an engine built with CUDA)\n");
      return 1;
    }
    engine::cuda_set_device(0);
    const model::GptConfig config = model::gpt_preset(model_name);
    const std::int64_t B = micro_batch, T = seq_len, N = B * T, C = config.n_embd, H = config.n_head;
    const std::int64_t V = config.padded_vocab();
    const DType bf16 = DType::kBF16, f32 = DType::kF32;
    const double act = 2.0;  // bytes per bf16 element
    std::vector<Row> rows;
    char shape[96];

    // The bandwidth ceiling: a large device-to-device copy, bytes read plus written.
    {
      DeviceTensor src(Shape{N * C * 8}, bf16), dst(Shape{N * C * 8}, bf16);
      const double s = seconds_per_call([&] { engine::ops::copy(dst.t, src.t); }, reps);
      std::snprintf(shape, sizeof shape, "%lld bf16", static_cast<long long>(N * C * 8));
      rows.push_back({"copy (the ceiling)", shape, s, 2 * act * static_cast<double>(N * C * 8)});
    }
    const double bandwidth = rows[0].bytes / rows[0].seconds;

    // Memory-bound ops of a block at (N, C).
    {
      DeviceTensor x(Shape{N, C}, bf16, 2.0, 0.5, 2), y(Shape{N, C}, bf16, 1.0, 0.0, 3), out(Shape{N, C}, bf16);
      DeviceTensor w(Shape{C}, bf16, 0.2, 1.0, 4), b(Shape{C}, bf16, 0.2, 0.0, 5);
      DeviceTensor mean(Shape{N}, f32), rstd(Shape{N}, f32), dw(Shape{C}, f32), db(Shape{C}, f32);
      DeviceTensor dinp(Shape{N, C}, bf16, 1.0, 0.0, 6);
      const double nc = static_cast<double>(N * C);
      std::snprintf(shape, sizeof shape, "(%lld, %lld) bf16", static_cast<long long>(N), static_cast<long long>(C));
      rows.push_back({"add", shape, seconds_per_call([&] { engine::ops::add(out.t, x.t, y.t); }, reps), 3 * act * nc});
      rows.push_back({"layernorm_forward", shape,
                      seconds_per_call([&] { engine::ops::layernorm_forward(out.t, mean.t, rstd.t, x.t, w.t, b.t, 1e-5); },
                                       reps),
                      2 * act * nc});
      // dinp accumulates, so it is read and written: dout, inp, dinp in, dinp out.
      rows.push_back({"layernorm_backward", shape, seconds_per_call([&] {
                        engine::ops::layernorm_backward(dinp.t, dw.t, db.t, y.t, x.t, w.t, mean.t, rstd.t);
                      }, reps),
                      4 * act * nc});
    }

    // The block's matrix products as the model calls them, forward and
    // backward (dinp, dweight and dbias): the MLP's first product has GELU in
    // its forward epilogue, its second the GELU backward in its dinp.
    struct Linear {
      const char* name;
      std::int64_t in, out;
      bool gelu_after, gelu_before, bias;
    };
    const Linear linears[] = {{"qkv", C, 3 * C, false, false, true},
                              {"attn proj", C, C, false, false, true},
                              {"mlp fc + gelu", C, 4 * C, true, false, true},
                              {"mlp proj (gelu')", 4 * C, C, false, true, true},
                              {"lm head", C, V, false, false, false}};
    for (const Linear& l : linears) {
      DeviceTensor inp(Shape{N, l.in}, bf16, 1.0, 0.0, 7), weight(Shape{l.out, l.in}, bf16, 0.02, 0.0, 8);
      DeviceTensor bias(Shape{l.out}, bf16, 0.02, 0.0, 9), out(Shape{N, l.out}, bf16);
      DeviceTensor dout(Shape{N, l.out}, bf16, 1.0, 0.0, 10), dinp(Shape{N, l.in}, bf16);
      DeviceTensor dweight(Shape{l.out, l.in}, f32, 0.0), dbias(Shape{l.out}, f32, 0.0);
      DeviceTensor pre_out(l.gelu_after ? Shape{N, l.out} : Shape{0}, bf16, 1.0, 0.0, 11);
      DeviceTensor pre_in(l.gelu_before ? Shape{N, l.in} : Shape{0}, bf16, 1.0, 0.0, 11);
      const Tensor bias_t = l.bias ? bias.t : Tensor{};
      const double flops = 2.0 * static_cast<double>(N) * static_cast<double>(l.in) * static_cast<double>(l.out);
      std::snprintf(shape, sizeof shape, "%lld x %lld -> %lld", static_cast<long long>(N),
                    static_cast<long long>(l.in), static_cast<long long>(l.out));
      rows.push_back({std::string("matmul_forward ") + l.name, shape, seconds_per_call([&] {
                        engine::ops::matmul_forward(out.t, inp.t, weight.t, bias_t, l.gelu_after ? pre_out.t : Tensor{});
                      }, reps),
                      0, flops});
      if (l.out == C) {
        // The block's output projections with their residual add folded in
        // (what the model calls without tensor parallelism): against the
        // row above plus the add row, the add's pass saved.
        DeviceTensor residual(Shape{N, C}, bf16, 2.0, 0.0, 14);
        rows.push_back({std::string("matmul_forward_add ") + l.name, shape, seconds_per_call([&] {
                          engine::ops::matmul_forward_add(out.t, inp.t, weight.t, bias_t, residual.t);
                        }, reps),
                        0, flops});
      }
      rows.push_back({std::string("matmul_backward ") + l.name, shape, seconds_per_call([&] {
                        engine::ops::matmul_backward(dinp.t, dweight.t, l.bias ? dbias.t : Tensor{}, dout.t, inp.t,
                                                     weight.t, l.gelu_before ? pre_in.t : Tensor{});
                      }, reps),
                      0, 2 * flops});
    }

    // Attention: FLOPs of the causal half (what the kernels compute), 4 N T C
    // forward (QK^T and PV over half the square) and 2.5x that backward.
    {
      DeviceTensor qkv(Shape{B, T, 3 * C}, bf16, 1.0, 0.0, 12), out(Shape{B, T, C}, bf16);
      DeviceTensor dout(Shape{B, T, C}, bf16, 1.0, 0.0, 13), dqkv(Shape{B, T, 3 * C}, bf16);
      engine::Buffer saved_buffer(kCuda, static_cast<std::size_t>(
                                             engine::ops::attention_saved_shape(kCuda, B, H, T).numel()) *
                                             engine::dtype_size(engine::ops::attention_saved_dtype(kCuda, bf16)));
      const Tensor saved = saved_buffer.as_tensor(engine::ops::attention_saved_shape(kCuda, B, H, T),
                                                  engine::ops::attention_saved_dtype(kCuda, bf16));
      const double causal = 2.0 * static_cast<double>(N) * static_cast<double>(T) * static_cast<double>(C);
      std::snprintf(shape, sizeof shape, "B %lld, T %lld, %lld heads of %lld", static_cast<long long>(B),
                    static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(C / H));
      const int heads = static_cast<int>(H);
      rows.push_back({"attention_forward (causal FLOPs)", shape,
                      seconds_per_call([&] { engine::ops::attention_forward(out.t, saved, qkv.t, heads); }, reps), 0,
                      causal});
      rows.push_back({"attention_backward (causal FLOPs)", shape, seconds_per_call([&] {
                        engine::ops::attention_backward(dqkv.t, dout.t, qkv.t, out.t, saved, heads);
                      }, reps),
                      0, 2.5 * causal});
    }

    // AdamW over f32 master, grads, m, v and a bf16 working copy: 16 bytes
    // read, 14 written per parameter.
    {
      const Shape n{adamw_params};
      DeviceTensor p(n, f32, 0.02), g(n, f32, 1e-3), m(n, f32, 1e-4), v(n, f32, 1e-7, 1e-6), work(n, bf16);
      engine::ops::AdamWHyper h;
      h.lr = 1e-4;
      h.weight_decay = 0.1;
      std::snprintf(shape, sizeof shape, "%lld parameters", static_cast<long long>(adamw_params));
      rows.push_back({"adamw_update", shape,
                      seconds_per_call([&] { engine::ops::adamw_update(p.t, g.t, m.t, v.t, h, work.t); }, reps),
                      30.0 * static_cast<double>(adamw_params)});
    }

    std::printf("op_bench: %s, B %lld x T %lld, %d calls each after 3 warm-ups; bandwidth ceiling %.0f GB/s "
                "(the copy), FLOP floor at %.0f TFLOP/s\n",
                config.describe().c_str(), static_cast<long long>(B), static_cast<long long>(T), reps,
                bandwidth / 1e9, peak_tflops);
#if ENGINE_WITH_CUDA
    if (const int search = engine::cuda::gemm_search_candidates(); search > 1)
      std::printf("op_bench: GEMM algorithms: the fastest of the cuBLASLt heuristic's first %d, timed per shape "
                  "(ENGINE_GEMM_SEARCH)\n", search);
    else
      std::printf("op_bench: GEMM algorithms: the cuBLASLt heuristic's first\n");
#endif
    std::printf("%-36s %-32s %10s %14s %10s %8s\n", "op", "shape", "us/call", "rate", "floor us", "x floor");
    for (const Row& r : rows) {
      const double floor = r.bytes > 0 ? r.bytes / bandwidth : r.flops / (peak_tflops * 1e12);
      char rate[32];
      if (r.bytes > 0)
        std::snprintf(rate, sizeof rate, "%.0f GB/s", r.bytes / r.seconds / 1e9);
      else
        std::snprintf(rate, sizeof rate, "%.0f TFLOP/s", r.flops / r.seconds / 1e12);
      std::printf("%-36s %-32s %10.1f %14s %10.1f %8.2f\n", r.op.c_str(), r.shape.c_str(), r.seconds * 1e6, rate,
                  floor * 1e6, r.seconds / floor);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
