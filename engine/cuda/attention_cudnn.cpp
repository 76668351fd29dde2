// cuDNN fused attention (see attention_cudnn.h). Compiled in every CUDA
// build; without cuDNN and its frontend headers (ENGINE_WITH_CUDNN unset) it
// only answers "not run here", or refuses ENGINE_ATTENTION=cudnn.
//
// Why cuDNN: its Hopper SDPA kernels (wgmma, TMA) are what llm.c and
// PyTorch's SDPA run on H100; the built-in FlashAttention-2 kernels
// (attention_forward.cu and attention_backward.cu, mma.sync) measured 4.6 ms
// forward and 12.6 ms backward per gpt2-124m step at B 16, T 1024 on an H100
// (2026-11-23, RESULTS.md), far from what the tensor cores allow.
#include "engine/cuda/attention_cudnn.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/check.h"

namespace engine::cuda {
namespace {

enum class Choice { kAuto, kCudnn, kFlash };

Choice attention_choice() {
  static const Choice choice = [] {
    const char* env = std::getenv("ENGINE_ATTENTION");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return Choice::kAuto;
    if (std::strcmp(env, "cudnn") == 0) return Choice::kCudnn;
    if (std::strcmp(env, "flash") == 0) return Choice::kFlash;
    ENGINE_FAIL("ENGINE_ATTENTION='", env, "' is not one of auto, cudnn, flash");
  }();
  return choice;
}

}  // namespace
}  // namespace engine::cuda

#if ENGINE_WITH_CUDNN

#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

// The frontend bundles its own nlohmann::json for graph serialisation, which
// the engine does not use; skipping it keeps one JSON library in the program.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "engine/cuda/context.h"

namespace engine::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

#define CUDNN_CHECK(expr)                                                                       \
  do {                                                                                          \
    const cudnnStatus_t engine_cudnn_st_ = (expr);                                              \
    if (engine_cudnn_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                  \
      ENGINE_FAIL("cuDNN error ", cudnnGetErrorString(engine_cudnn_st_), " in ", #expr);        \
  } while (0)

// Tensor uids, shared by the two graphs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Graphs {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  std::int64_t forward_workspace = 0, backward_workspace = 0;
};

// The shape of one attention problem: H query heads, KV key/value heads.
struct Dims {
  std::int64_t B, T, H, KV, D;
  std::int64_t width() const { return (H + 2 * KV) * D; }  // W, a row of qkv
};

// heads of q, k or v (or dq, dk, dv) inside qkv (B, T, W) seen as (B, heads, T, D):
// H for q, KV for k and v.
fe::graph::Tensor_attributes qkv_part(const char* name, Uid uid, const Dims& d, std::int64_t heads) {
  const std::int64_t W = d.width();
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({d.B, heads, d.T, d.D})
      .set_stride({d.T * W, d.D, W, 1});
}
// out or dout (B, T, C) seen as (B, H, T, D).
fe::graph::Tensor_attributes btc(const char* name, Uid uid, std::int64_t B, std::int64_t T, std::int64_t H,
                                 std::int64_t D) {
  const std::int64_t C = H * D;
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, T, D}).set_stride(
      {T * C, D, C, 1});
}
// lse (B, H, T) f32 seen as (B, H, T, 1).
fe::graph::Tensor_attributes stats_tensor(std::int64_t B, std::int64_t T, std::int64_t H) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({B, H, T, 1})
      .set_stride({H * T, T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// validate, lower, pick a plan by heuristic A and build it; "" or why not.
std::string build(fe::graph::Graph& graph, cudnnHandle_t handle, std::int64_t& workspace) {
  if (auto e = graph.validate(); e.is_bad()) return "validate: " + e.get_message();
  if (auto e = graph.build_operation_graph(handle); e.is_bad()) return "build_operation_graph: " + e.get_message();
  if (auto e = graph.create_execution_plans({fe::HeurMode_t::A}); e.is_bad())
    return "create_execution_plans: " + e.get_message();
  if (auto e = graph.check_support(handle); e.is_bad()) return "check_support: " + e.get_message();
  if (auto e = graph.build_plans(handle); e.is_bad()) return "build_plans: " + e.get_message();
  if (auto e = graph.get_workspace_size(workspace); e.is_bad()) return "get_workspace_size: " + e.get_message();
  return "";
}

// Grouped-query attention needs nothing more than K and V (and dK, dV) with
// KV heads: cuDNN's SDPA maps query head h to key/value head h / (H / KV)
// (the frontend's sdpa samples take h_q, h_k, h_v apart) and sums dK, dV over
// each group. A cuDNN that does not take a grouped shape declines it here,
// and the built-in kernels run it.
std::string build_graphs(Graphs& g, cudnnHandle_t handle, const Dims& d, float scale) {
  const std::int64_t B = d.B, T = d.T, H = d.H, KV = d.KV, D = d.D;
  {
    g.forward = new_graph();
    auto& graph = *g.forward;
    TensorPtr q = graph.tensor(qkv_part("q", kQ, d, H)), k = graph.tensor(qkv_part("k", kK, d, KV)),
              v = graph.tensor(qkv_part("v", kV, d, KV));
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)  // the log-sum-exp the backward needs
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [o, stats] = graph.sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim({B, H, T, D}).set_stride({T * H * D, D, H * D, 1});
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, H, T, 1})
        .set_stride({H * T, T, 1, 1});
    if (std::string why = build(graph, handle, g.forward_workspace); !why.empty()) return "forward " + why;
  }
  {
    g.backward = new_graph();
    auto& graph = *g.backward;
    TensorPtr q = graph.tensor(qkv_part("q", kQ, d, H)), k = graph.tensor(qkv_part("k", kK, d, KV)),
              v = graph.tensor(qkv_part("v", kV, d, KV)), o = graph.tensor(btc("o", kO, B, T, H, D)),
              dout = graph.tensor(btc("dout", kDO, B, T, H, D)), stats = graph.tensor(stats_tensor(B, T, H));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, dout, stats, options);
    const std::int64_t W = d.width();
    for (auto [t, uid, heads] : {std::tuple{dq, kDQ, H}, std::tuple{dk, kDK, KV}, std::tuple{dv, kDV, KV}})
      t->set_output(true).set_uid(uid).set_dim({B, heads, T, D}).set_stride({T * W, D, W, 1});
    if (std::string why = build(graph, handle, g.backward_workspace); !why.empty()) return "backward " + why;
  }
  return "";
}

struct Entry {
  bool usable = false;
  Graphs graphs;
};

class Registry {
 public:
  // The graphs for a shape on the current device, or nullptr where cuDNN
  // declined it (the reason printed once).
  const Graphs* find(int B, int T, int H, int KV, int D) {
    std::lock_guard lock(mutex_);
    const int device = context().device();
    const auto key = std::make_tuple(device, B, T, H, KV, D);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      Entry entry;
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
      std::string why = cudnnGetVersion() < 8903 ? "cuDNN " + std::to_string(cudnnGetVersion()) + " is older than 8.9.3"
                                                 : build_graphs(entry.graphs, handle_locked(device),
                                                                Dims{B, T, H, KV, D}, scale);
      entry.usable = why.empty();
      if (!entry.usable) {
        ENGINE_CHECK(attention_choice() != Choice::kCudnn, "ENGINE_ATTENTION=cudnn: cuDNN ", cudnnGetVersion(),
                     " cannot run attention for B ", B, " T ", T, " H ", H, " KV ", KV, " D ", D, ": ", why);
        std::fprintf(stderr,
                     "attention: cuDNN declined B %d T %d H %d KV %d D %d (%s); using the built-in kernels\n", B, T,
                     H, KV, D, why.c_str());
      }
      it = entries_.emplace(key, std::move(entry)).first;
    }
    return it->second.usable ? &it->second.graphs : nullptr;
  }

  // The device's handle, bound to the current stream.
  cudnnHandle_t handle(int device) {
    std::lock_guard lock(mutex_);
    return handle_locked(device);
  }

 private:
  cudnnHandle_t handle_locked(int device) {
    auto it = handles_.find(device);
    if (it == handles_.end()) {
      cudnnHandle_t h = nullptr;
      CUDNN_CHECK(cudnnCreate(&h));
      it = handles_.emplace(device, h).first;
    }
    CUDNN_CHECK(cudnnSetStream(it->second, current_stream()));
    return it->second;
  }

  std::mutex mutex_;
  std::map<std::tuple<int, int, int, int, int, int>, Entry> entries_;
  std::map<int, cudnnHandle_t> handles_;  // never destroyed: they live as long as the process's contexts
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked on purpose: no teardown order against the CUDA runtime
  return *r;
}

void execute(const fe::graph::Graph& graph, std::int64_t workspace_bytes,
             std::unordered_map<std::int64_t, void*>& pointers, const char* what) {
  void* workspace = workspace_bytes > 0 ? context().scratch(static_cast<std::size_t>(workspace_bytes)) : nullptr;
  cudnnHandle_t h = registry().handle(context().device());
  if (auto e = graph.execute(h, pointers, workspace); e.is_bad())
    ENGINE_FAIL("cuDNN ", what, " failed: ", e.get_message());
}

// The graphs for this shape when cuDNN runs it (one registry lookup per op),
// else null. They are built with the scale 1/sqrt(D); any other is refused.
const Graphs* selected_graphs(int B, int T, int H, int KV, int D, float scale) {
  if (attention_choice() == Choice::kFlash) return nullptr;
  const double expected = 1.0 / std::sqrt(static_cast<double>(D));
  ENGINE_CHECK(std::fabs(scale - expected) <= 1e-6 * expected, "cuDNN attention: scale ", scale,
               " is not 1/sqrt(", D, "), the one its graphs are built with");
  return registry().find(B, T, H, KV, D);
}

// The graphs' q, k and v: read in place from qkv (B, T, W) by strides; k
// starts after the H query heads, v after the KV key heads.
std::unordered_map<std::int64_t, void*> qkv_pointers(const __nv_bfloat16* qkv, int H, int KV, int D) {
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  return {{kQ, base}, {kK, base + std::int64_t{H} * D}, {kV, base + std::int64_t{H + KV} * D}};
}

}  // namespace

bool cudnn_attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int H, int KV,
                             int D, float scale) {
  const Graphs* g = selected_graphs(B, T, H, KV, D, scale);
  if (g == nullptr) return false;
  std::unordered_map<std::int64_t, void*> pointers = qkv_pointers(qkv, H, KV, D);
  pointers[kO] = out;
  pointers[kStats] = lse;
  execute(*g->forward, g->forward_workspace, pointers, "attention forward");
  return true;
}

bool cudnn_attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int H, int KV, int D,
                              float scale) {
  const Graphs* g = selected_graphs(B, T, H, KV, D, scale);
  if (g == nullptr) return false;
  std::unordered_map<std::int64_t, void*> pointers = qkv_pointers(qkv, H, KV, D);
  pointers[kO] = const_cast<__nv_bfloat16*>(out);
  pointers[kDO] = const_cast<__nv_bfloat16*>(dout);
  pointers[kStats] = const_cast<float*>(lse);
  pointers[kDQ] = dqkv;
  pointers[kDK] = dqkv + std::int64_t{H} * D;
  pointers[kDV] = dqkv + std::int64_t{H + KV} * D;
  execute(*g->backward, g->backward_workspace, pointers, "attention backward");
  return true;
}

}  // namespace engine::cuda

#else  // no cuDNN in this build

namespace engine::cuda {

// Nothing runs here; ENGINE_ATTENTION=cudnn is refused rather than ignored.
bool no_cudnn() {
  ENGINE_CHECK(attention_choice() != Choice::kCudnn,
               "ENGINE_ATTENTION=cudnn, but this build has no cuDNN attention (CMake found no cuDNN or no "
               "cudnn_frontend.h: see engine/cuda/README.md)");
  return false;
}
bool cudnn_attention_forward(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int, int, int, float) {
  return no_cudnn();
}
bool cudnn_attention_backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                              const float*, int, int, int, int, int, float) {
  return no_cudnn();
}

}  // namespace engine::cuda

#endif
