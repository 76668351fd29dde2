// FP8 against bf16 at a GPT model's linear layers (issue 35, step 1): how much
// faster is cuBLASLt's E4M3 GEMM than the engine's bf16 GEMM, once the casts
// it needs are paid?
//
// For each linear layer of a block (qkv C -> 3C, attention projection C -> C,
// MLP fc C -> 4C, MLP projection 4C -> C) at N = B * T tokens, three products:
//   fwd      out (N, OC)    = inp (N, C) @ W^T
//   dinp     dinp (N, C)    = dout (N, OC) @ W
//   dweight  dW (OC, C)    += dout^T @ inp          (f32, accumulating)
// each timed as
//   bf16       the engine's own path: ops::matmul_forward / matmul_backward
//              (cuBLASLt, bf16 in, f32 accumulation; no bias, no GELU, and
//              dinp and dweight called separately)
//   fp8        engine::cuda::fp8_gemm alone (E4M3 in, per-tensor scales,
//              f32 accumulation, bf16 out or f32 accumulating for dW)
//   fp8 fast   the same with CUBLASLT_MATMUL_DESC_FAST_ACCUM on (for scale;
//              the training path would keep it off)
//   casts      what each micro-batch must quantise afresh for that product,
//              on Hopper's TN-only FP8 layout:
//                fwd:     amax(inp) + cast-transpose(inp -> inp_q, inp_q^T)
//                dinp:    amax(dout) + cast-transpose(dout -> dout_q, dout_q^T)
//                dweight: nothing new (inp_q^T kept from fwd, dout_q^T from dinp)
//   fp8+casts  the GEMM and its casts enqueued back to back, timed together
// and, apart, the weights' cast (amax(W) + cast-transpose(W -> W_q, W_q^T)),
// paid once per optimizer step, not per micro-batch.
//
// Timing (as op_bench: back-to-back launches, one synchronisation per batch,
// but between CUDA events): 3 warm-up rounds, then --reps calls. The
// operands rotate over R copies, R chosen so that one round's operands are
// more than 4x the L2 cache, so no call finds its inputs L2-warm from the
// call before. Inputs are random N(0, 1) (never zeros). speed-up = bf16 time /
// FP8 time (> 1: FP8 faster). An entry that fails prints why and shows nan;
// a dweight row marked "dweight=" is FP8 with an f32 output that does not
// accumulate (beta 0), timed because cuBLASLt refused the accumulating one.
//
//   fp8_gemm_bench --model gpt2-1558m --micro-batch 16 --seq-len 1024
//   ENGINE_GEMM_SEARCH=8 fp8_gemm_bench ...   (both bf16 and FP8 time 8 candidates per shape)
//
// Nothing is asserted; the correctness of the FP8 op is test_cuda_fp8's job.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/cuda/context.h"
#include "engine/cuda/fp8_cast.h"
#include "engine/cuda/fp8_gemm.h"
#include "engine/cuda/gemm_search.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "model/gpt_config.h"

namespace {

using engine::DType;
using engine::Shape;
using engine::Tensor;
namespace cu = engine::cuda;
constexpr engine::DeviceType kCuda = engine::DeviceType::kCuda;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Random bf16 values to tile device tensors from (generating each tensor on
// the host would take longer than the whole benchmark).
struct Pattern {
  static constexpr std::int64_t kElements = std::int64_t{1} << 22;
  engine::Buffer buffer{kCuda, kElements * 2};
  Pattern() {
    std::vector<float> host(kElements);
    engine::fill_normal(host.data(), kElements, 99, 0, 0.0, 1.0);
    engine::ops::copy(buffer.as_tensor(Shape{kElements}, DType::kBF16),
                      Tensor(host.data(), Shape{kElements}, DType::kF32, engine::DeviceType::kCpu));
  }
  void fill(void* dst, std::int64_t elements) const {  // bf16 elements
    for (std::int64_t done = 0; done < elements; done += kElements) {
      const std::int64_t n = std::min(kElements, elements - done);
      check(cudaMemcpyAsync(static_cast<char*>(dst) + done * 2, buffer.data(), static_cast<std::size_t>(n) * 2,
                            cudaMemcpyDeviceToDevice, cu::context().stream()),
            "pattern fill");
    }
  }
};

// One operand: a bf16 (rows, cols) matrix, its E4M3 cast and transposed cast,
// its scaling state.
struct Operand {
  std::int64_t rows, cols;
  engine::Buffer bf16, q, qt, scale;
  Operand(std::int64_t r, std::int64_t c, const Pattern& pattern)
      : rows(r), cols(c), bf16(kCuda, static_cast<std::size_t>(r * c) * 2), q(kCuda, static_cast<std::size_t>(r * c)),
        qt(kCuda, static_cast<std::size_t>(r * c)), scale(kCuda, cu::kFp8ScaleFloats * sizeof(float)) {
    pattern.fill(bf16.data(), r * c);
    quantize();  // so the FP8-only timings read real codes and scales
  }
  Tensor t() const { return bf16.as_tensor(Shape{rows, cols}, DType::kBF16); }
  const __nv_bfloat16* x() const { return static_cast<const __nv_bfloat16*>(bf16.data()); }
  cu::Fp8Scale s() const { return cu::fp8_scale_at(static_cast<float*>(scale.data())); }
  cu::Fp8Operand plain() const { return {static_cast<const __nv_fp8_e4m3*>(q.data()), s().scale_inv}; }
  cu::Fp8Operand transposed() const { return {static_cast<const __nv_fp8_e4m3*>(qt.data()), s().scale_inv}; }
  // amax + the fused cast-transpose writing both copies.
  void quantize() const {
    cu::fp8_amax(x(), rows * cols, s(), cu::context().stream());
    cu::fp8_cast_transpose(x(), rows, cols, s(), static_cast<__nv_fp8_e4m3*>(q.data()),
                           static_cast<__nv_fp8_e4m3*>(qt.data()), cu::context().stream());
  }
  std::size_t bytes() const { return static_cast<std::size_t>(rows * cols) * 4; }  // bf16 + q + qt
};

// Mean seconds per call of op(i % rotation) over reps calls, between events.
double seconds_per_call(const std::function<void(int)>& op, int reps, int rotation) {
  cudaStream_t stream = cu::context().stream();
  for (int i = 0; i < 3 * rotation; ++i) op(i % rotation);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, stream), "event record");
  for (int i = 0; i < reps; ++i) op(i % rotation);
  check(cudaEventRecord(stop, stream), "event record");
  check(cudaEventSynchronize(stop), "event sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "event time");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / reps;
}

struct Row {
  std::string layer, pass, shape;
  double flops = 0;
  double bf16 = 0, fp8 = 0, fp8_fast = 0, casts = 0, fp8_casts = 0;  // seconds
  double cast_bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FP8 (E4M3, cuBLASLt) against bf16 GEMMs at a GPT model's linear layers, casts included"};
  std::string model_name = "gpt2-1558m";
  std::int64_t micro_batch = 16, seq_len = 1024;
  int reps = 50;
  app.add_option("--model", model_name, "GPT preset")->capture_default_str();
  app.add_option("--micro-batch", micro_batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--seq-len", seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--reps", reps, "timed calls per entry")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    if (engine::cuda_device_count() == 0) {
      std::fprintf(stderr, "error: fp8_gemm_bench needs a visible GPU\n");
      return 1;
    }
    engine::cuda_set_device(0);
    cu::check_fp8_device(0);  // one clear line on a GPU without FP8 tensor cores
    const model::GptConfig config = model::gpt_preset(model_name);
    const std::int64_t N = micro_batch * seq_len, C = config.n_embd;
    int l2_bytes = 0;
    check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "L2 size");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "properties");

    std::printf("fp8_gemm_bench: %s on %s (compute capability %d.%d, L2 %d MiB), N = B %lld x T %lld = %lld "
                "tokens, %d calls per entry after 3 warm-up rounds, events around the batch\n",
                config.describe().c_str(), prop.name, prop.major, prop.minor, l2_bytes >> 20,
                static_cast<long long>(micro_batch), static_cast<long long>(seq_len), static_cast<long long>(N),
                reps);
    const int search = cu::gemm_search_candidates();
    std::printf("bf16: the engine's matmul (cuBLASLt, %s)\n",
                search > 1 ? "fastest of the heuristic's candidates, ENGINE_GEMM_SEARCH" : "the heuristic's first");
    std::printf("fp8: E4M3 x E4M3, per-tensor current scaling, f32 accumulation (fast accumulation off unless "
                "'fast'), bf16 out (dweight f32 +=), cuBLASLt, %s\n",
                search > 1 ? "fastest of the heuristic's candidates, ENGINE_GEMM_SEARCH" : "the heuristic's first");
    std::printf("%s\n", cu::fp8_block_scaling_report(N, 3 * C, C).c_str());

    const Pattern pattern;
    struct Linear {
      const char* name;
      std::int64_t in, out;
    };
    const Linear linears[] = {{"qkv", C, 3 * C}, {"attn proj", C, C}, {"mlp fc", C, 4 * C}, {"mlp proj", 4 * C, C}};
    std::vector<Row> rows;
    std::vector<Row> weight_rows;
    cudaStream_t stream = cu::context().stream();
    for (const Linear& l : linears) {
      const std::int64_t IN = l.in, OUT = l.out;
      // One set: inp (N, IN), dout (N, OUT), W (OUT, IN), each with casts.
      const double set_bytes = static_cast<double>(N * IN + N * OUT + OUT * IN) * 4;
      const int rotation = std::clamp(static_cast<int>(4.0 * l2_bytes / set_bytes) + 1, 2, 16);
      std::vector<Operand> inp, dout, w;
      inp.reserve(rotation), dout.reserve(rotation), w.reserve(rotation);
      for (int r = 0; r < rotation; ++r) {
        inp.emplace_back(N, IN, pattern);
        dout.emplace_back(N, OUT, pattern);
        w.emplace_back(OUT, IN, pattern);
      }
      engine::Buffer out(kCuda, static_cast<std::size_t>(N * OUT) * 2), dinp(kCuda, static_cast<std::size_t>(N * IN) * 2);
      engine::Buffer dw(kCuda, static_cast<std::size_t>(OUT * IN) * 4);
      check(cudaMemsetAsync(dw.data(), 0, dw.bytes(), stream), "memset");
      const Tensor out_t = out.as_tensor(Shape{N, OUT}, DType::kBF16), dinp_t = dinp.as_tensor(Shape{N, IN}, DType::kBF16);
      const Tensor dw_t = dw.as_tensor(Shape{OUT, IN}, DType::kF32);
      const cu::Fp8GemmOptions plain, fast{false, true}, acc{true, false}, acc_fast{true, true};
      const double flops = 2.0 * static_cast<double>(N) * static_cast<double>(IN) * static_cast<double>(OUT);
      char shape[96];
      auto shape_of = [&](std::int64_t n, std::int64_t k, std::int64_t m) {
        std::snprintf(shape, sizeof shape, "(%lld x %lld) @ (%lld x %lld)^T", static_cast<long long>(n),
                      static_cast<long long>(k), static_cast<long long>(m), static_cast<long long>(k));
        return std::string(shape);
      };

      // One entry's time, or NaN (and the reason on stdout) when it throws, so
      // that one entry cuBLASLt refuses does not lose the others.
      auto timed = [&](const char* what, const std::function<void(int)>& op) {
        try {
          return seconds_per_call(op, reps, rotation);
        } catch (const std::exception& e) {
          (void)cudaGetLastError();
          std::printf("%s %s: failed: %s\n", l.name, what, e.what());
          return std::nan("");
        }
      };

      // fwd: out (N, OUT) = inp (N, IN) @ W^T; fp8: x = inp_q, w = W_q, k = IN.
      Row fwd{l.name, "fwd", shape_of(N, IN, OUT), flops};
      fwd.bf16 = timed("fwd bf16", [&](int r) { engine::ops::matmul_forward(out_t, inp[r].t(), w[r].t(), {}, {}); });
      auto fwd_fp8 = [&](int r, const cu::Fp8GemmOptions& o) {
        cu::fp8_gemm(out.data(), DType::kBF16, inp[r].plain(), w[r].plain(), N, OUT, IN, o, stream);
      };
      fwd.fp8 = timed("fwd fp8", [&](int r) { fwd_fp8(r, plain); });
      fwd.fp8_fast = timed("fwd fp8 fast", [&](int r) { fwd_fp8(r, fast); });
      fwd.casts = timed("fwd casts", [&](int r) { inp[r].quantize(); });
      fwd.fp8_casts = timed("fwd fp8+casts", [&](int r) { inp[r].quantize(); fwd_fp8(r, plain); });
      fwd.cast_bytes = static_cast<double>(N * IN) * (2 + 2 + 1 + 1);  // amax read, cast read, q, q^T

      // dinp: dinp (N, IN) = dout (N, OUT) @ W; fp8: x = dout_q, w = W_q^T (IN, OUT), k = OUT.
      Row dgrad{l.name, "dinp", shape_of(N, OUT, IN), flops};
      dgrad.bf16 = timed("dinp bf16", [&](int r) {
        engine::ops::matmul_backward(dinp_t, {}, {}, dout[r].t(), inp[r].t(), w[r].t(), {});
      });
      auto dgrad_fp8 = [&](int r, const cu::Fp8GemmOptions& o) {
        cu::fp8_gemm(dinp.data(), DType::kBF16, dout[r].plain(), w[r].transposed(), N, IN, OUT, o, stream);
      };
      dgrad.fp8 = timed("dinp fp8", [&](int r) { dgrad_fp8(r, plain); });
      dgrad.fp8_fast = timed("dinp fp8 fast", [&](int r) { dgrad_fp8(r, fast); });
      dgrad.casts = timed("dinp casts", [&](int r) { dout[r].quantize(); });
      dgrad.fp8_casts = timed("dinp fp8+casts", [&](int r) { dout[r].quantize(); dgrad_fp8(r, plain); });
      dgrad.cast_bytes = static_cast<double>(N * OUT) * 6;

      // dweight: dW (OUT, IN) += dout^T @ inp; fp8: x = dout_q^T (OUT, N), w = inp_q^T (IN, N), k = N.
      Row wgrad{l.name, "dweight", shape_of(OUT, N, IN), flops};
      wgrad.bf16 = timed("dweight bf16", [&](int r) {
        engine::ops::matmul_backward({}, dw_t, {}, dout[r].t(), inp[r].t(), w[r].t(), {});
      });
      auto wgrad_fp8 = [&](int r, const cu::Fp8GemmOptions& o) {
        cu::fp8_gemm(dw.data(), DType::kF32, dout[r].transposed(), inp[r].transposed(), OUT, IN, N, o, stream);
      };
      wgrad.fp8 = timed("dweight fp8", [&](int r) { wgrad_fp8(r, acc); });
      wgrad.fp8_fast = timed("dweight fp8 fast", [&](int r) { wgrad_fp8(r, acc_fast); });
      if (std::isnan(wgrad.fp8)) {
        // If cuBLASLt takes no accumulating f32 output for FP8, the training
        // path would write f32 (beta 0) and add: time that GEMM instead.
        wgrad.pass = "dweight=";
        wgrad.fp8 = timed("dweight fp8 (f32, not accumulating)", [&](int r) { wgrad_fp8(r, plain); });
        wgrad.fp8_fast = timed("dweight fp8 fast (f32, not accumulating)", [&](int r) { wgrad_fp8(r, fast); });
      }
      wgrad.casts = 0;  // its operands' transposed casts were made by fwd and dinp
      wgrad.fp8_casts = wgrad.fp8;

      Row weights{l.name, "W cast", "", 0};
      weights.casts = timed("W casts", [&](int r) { w[r].quantize(); });
      weights.cast_bytes = static_cast<double>(OUT * IN) * 6;

      std::printf("fp8 algorithms, %s (rotation over %d operand sets):\n  fwd     %s\n  dinp    %s\n  dweight %s\n",
                  l.name, rotation, cu::fp8_gemm_algorithm(DType::kBF16, N, OUT, IN, plain).c_str(),
                  cu::fp8_gemm_algorithm(DType::kBF16, N, IN, OUT, plain).c_str(),
                  cu::fp8_gemm_algorithm(DType::kF32, OUT, IN, N, acc).c_str());
      rows.push_back(fwd);
      rows.push_back(dgrad);
      rows.push_back(wgrad);
      weight_rows.push_back(weights);
      check(cudaStreamSynchronize(stream), "sync");
    }

    auto tf = [](double flops, double s) { return s > 0 ? flops / s / 1e12 : 0.0; };
    std::printf("\n%-10s %-8s %-30s | %9s %7s | %9s %7s %6s | %9s %6s | %9s %7s | %9s %7s %6s\n", "layer", "pass",
                "product", "bf16 us", "TF/s", "fp8 us", "TF/s", "x", "fast us", "x", "casts us", "GB/s",
                "+casts us", "TF/s", "x");
    Row total{"block", "all", "4 linears x 3 products"};
    for (const Row& r : rows) {
      std::printf("%-10s %-8s %-30s | %9.1f %7.0f | %9.1f %7.0f %6.2f | %9.1f %6.2f | %9.1f %7.0f | %9.1f %7.0f "
                  "%6.2f\n",
                  r.layer.c_str(), r.pass.c_str(), r.shape.c_str(), r.bf16 * 1e6, tf(r.flops, r.bf16), r.fp8 * 1e6,
                  tf(r.flops, r.fp8), r.bf16 / r.fp8, r.fp8_fast * 1e6, r.bf16 / r.fp8_fast, r.casts * 1e6,
                  r.casts > 0 ? r.cast_bytes / r.casts / 1e9 : 0.0, r.fp8_casts * 1e6, tf(r.flops, r.fp8_casts),
                  r.bf16 / r.fp8_casts);
      total.flops += r.flops, total.bf16 += r.bf16, total.fp8 += r.fp8, total.fp8_fast += r.fp8_fast;
      total.casts += r.casts, total.fp8_casts += r.fp8_casts, total.cast_bytes += r.cast_bytes;
    }
    std::printf("%-10s %-8s %-30s | %9.1f %7.0f | %9.1f %7.0f %6.2f | %9.1f %6.2f | %9.1f %7.0f | %9.1f %7.0f "
                "%6.2f\n",
                total.layer.c_str(), total.pass.c_str(), total.shape.c_str(), total.bf16 * 1e6,
                tf(total.flops, total.bf16), total.fp8 * 1e6, tf(total.flops, total.fp8), total.bf16 / total.fp8,
                total.fp8_fast * 1e6, total.bf16 / total.fp8_fast, total.casts * 1e6,
                total.cast_bytes / total.casts / 1e9, total.fp8_casts * 1e6, tf(total.flops, total.fp8_casts),
                total.bf16 / total.fp8_casts);
    double weight_casts = 0;
    std::printf("\nper optimizer step, not per micro-batch: the weights' cast (amax + cast-transpose to W_q, W_q^T)\n");
    for (const Row& r : weight_rows) {
      std::printf("  %-10s %9.1f us %7.0f GB/s\n", r.layer.c_str(), r.casts * 1e6, r.cast_bytes / r.casts / 1e9);
      weight_casts += r.casts;
    }
    std::printf("  block      %9.1f us; with it paid every micro-batch (no gradient accumulation) the block's FP8 "
                "speed-up is %.2f\n",
                weight_casts * 1e6, total.bf16 / (total.fp8_casts + weight_casts));
    std::printf("\nsummary: the block's 12 GEMMs at N %lld: bf16 %.1f us, fp8 %.1f us (%.2fx), fp8 + per-micro-batch "
                "casts %.1f us (%.2fx); x = bf16 time / fp8 time\n",
                static_cast<long long>(N), total.bf16 * 1e6, total.fp8 * 1e6, total.bf16 / total.fp8,
                total.fp8_casts * 1e6, total.bf16 / total.fp8_casts);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
