#include "launch/plan/calibration_probes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "parallel/mpi_communicator.h"
#ifdef ENGINE_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace launch {
namespace {

using engine::DeviceType;
using engine::DType;
using engine::Tensor;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Host code waits for the device before reading a clock.
void sync(DeviceType device) {
  if (device == DeviceType::kCuda) engine::device_synchronize();
}

double median(std::vector<double> v) {
  ENGINE_CHECK(!v.empty(), "median of no samples");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A buffer and the tensor over all of it.
struct Owned {
  engine::Buffer buffer;
  Tensor tensor;
  Owned(DeviceType device, engine::Shape shape, DType dtype, double value)
      : buffer(device, static_cast<std::size_t>(shape.numel()) * engine::dtype_size(dtype)),
        tensor(buffer.as_tensor(shape, dtype)) {
    engine::ops::fill(tensor, value);  // also faults every page in, before any timing
  }
};

// Fills `t` with N(0, stddev) draws of stream `name` (engine/rng.h), through
// a host f32 copy. The matmul probe times random operands, never constants:
// a GPU's matrix units can run constant or zero operands faster than real data
// (this workplace saw a bf16 product 13% faster on zeros on an H200), and a
// calibration is only worth what its operands look like to the hardware.
void fill_random(const Tensor& t, std::string_view name, double stddev) {
  std::vector<float> host(static_cast<std::size_t>(t.numel()));
  engine::fill_normal(host.data(), t.numel(), engine::rng_key(1234, name), 0, 0.0, stddev);
  engine::ops::copy(t, Tensor(host.data(), t.shape(), DType::kF32, DeviceType::kCpu));
}

// The median seconds of one ops::add over `n` elements, from batches of
// back-to-back adds for about `seconds` (at least 5 batches).
double add_seconds(DeviceType device, std::int64_t n, double seconds) {
  Owned a(device, {n}, DType::kF32, 1), b(device, {n}, DType::kF32, 2), c(device, {n}, DType::kF32, 0);
  constexpr int kBatch = 100;
  for (int i = 0; i < 10; ++i) engine::ops::add(c.tensor, a.tensor, b.tensor);
  sync(device);
  std::vector<double> per_op;
  const double start = now();
  do {
    const double t0 = now();
    for (int i = 0; i < kBatch; ++i) engine::ops::add(c.tensor, a.tensor, b.tensor);
    sync(device);
    per_op.push_back((now() - t0) / kBatch);
  } while (per_op.size() < 5 || now() - start < seconds);
  return median(per_op);
}

}  // namespace

// ---- compute --------------------------------------------------------------------

std::string MatmulShapes::describe() const {
  const std::string c = std::to_string(channels);
  return "the 4 linear layers of a GPT block with C=" + c + " on " + std::to_string(tokens) +
         " tokens (qkv " + c + "->" + std::to_string(3 * channels) + ", projection " + c + "->" + c + ", MLP " + c +
         "->" + std::to_string(4 * channels) + " and " + std::to_string(4 * channels) + "->" + c +
         "), forward and backward";
}

MatmulShapes default_matmul_shapes(DeviceType device) {
  // CPU: a GPT a 2-core machine trains in minutes (C=512, 4 sequences of 512).
  // GPU: a ~1.3B GPT (C=2048) at 8 sequences of 1024 tokens, the scale one
  // GPU trains; smaller C leaves tensor cores underused and would describe
  // launch overhead, which op_overhead_seconds already holds.
  if (device == DeviceType::kCuda) return {2048, 8192};
  return {512, 2048};
}

MatmulProbe probe_matmul(DeviceType device, const MatmulShapes& shapes, double seconds) {
  const std::int64_t C = shapes.channels, N = shapes.tokens;
  ENGINE_CHECK(C > 0 && N > 0, "probe_matmul: channels and tokens must be positive, got C=", C, " N=", N);
  // Activations and weights in the backend's training dtype; weight gradients f32 (engine/ops.h).
  const DType act = device == DeviceType::kCuda ? DType::kBF16 : DType::kF32;
  struct Layer {
    std::int64_t in, out;
  };
  const Layer layers[] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  // Buffers for the widest layer, viewed per layer. Random operands of unit
  // scale (weights at GPT-2's 0.02): dweight, accumulated in f32 over every
  // pass, stays far from overflow.
  Owned inp(device, {N * 4 * C}, act, 0), out(device, {N * 4 * C}, act, 0);
  Owned dout(device, {N * 4 * C}, act, 0), dinp(device, {N * 4 * C}, act, 0);
  Owned weight(device, {4 * C * C}, act, 0), dweight(device, {4 * C * C}, DType::kF32, 0);
  fill_random(inp.tensor, "calibrate.inp", 1.0);
  fill_random(dout.tensor, "calibrate.dout", 1.0);
  fill_random(weight.tensor, "calibrate.weight", 0.02);
  auto run = [&](const Layer& l) {
    const Tensor x = inp.tensor.flat_slice(0, N * l.in).view({N, l.in});           // (N, in)
    const Tensor y = out.tensor.flat_slice(0, N * l.out).view({N, l.out});         // (N, out)
    const Tensor dy = dout.tensor.flat_slice(0, N * l.out).view({N, l.out});       // (N, out)
    const Tensor dx = dinp.tensor.flat_slice(0, N * l.in).view({N, l.in});         // (N, in)
    const Tensor w = weight.tensor.flat_slice(0, l.out * l.in).view({l.out, l.in});    // (out, in)
    const Tensor dw = dweight.tensor.flat_slice(0, l.out * l.in).view({l.out, l.in});  // (out, in)
    engine::ops::matmul_forward(y, x, w, Tensor{});
    engine::ops::matmul_backward(dx, dw, Tensor{}, dy, x, w);
  };
  run(layers[0]);  // untimed: thread pools start, cuBLASLt picks its algorithms
  sync(device);

  MatmulProbe probe;
  double flops = 0;
  const double start = now();
  for (int i = 0;; ++i) {
    const Layer& l = layers[i % 4];
    run(l);
    sync(device);
    flops += 6.0 * static_cast<double>(N) * static_cast<double>(l.in) * static_cast<double>(l.out);
    probe.layers_run = i + 1;
    if (probe.layers_run >= 4 && now() - start >= seconds) break;
  }
  probe.seconds = now() - start;
  probe.flops = flops / probe.seconds;
  return probe;
}

std::vector<GemmShapeProbe> probe_gemm_shapes(DeviceType device, const MatmulShapes& shapes, double seconds) {
  const std::int64_t C = shapes.channels, N = shapes.tokens;
  ENGINE_CHECK(C > 0 && N > 0, "probe_gemm_shapes: channels and tokens must be positive, got C=", C, " N=", N);
  const DType act = device == DeviceType::kCuda ? DType::kBF16 : DType::kF32;
  Owned inp(device, {N * 4 * C}, act, 0), dout(device, {N * 4 * C}, act, 0), work(device, {N * 4 * C}, act, 0);
  Owned weight(device, {4 * C * C}, act, 0), dweight(device, {4 * C * C}, DType::kF32, 0);
  fill_random(inp.tensor, "calibrate.inp", 1.0);
  fill_random(dout.tensor, "calibrate.dout", 1.0);
  fill_random(weight.tensor, "calibrate.weight", 0.02);
  struct Layer {
    std::int64_t in, out;
  };
  const Layer layers[] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  std::vector<GemmShapeProbe> probes;
  const double budget = seconds / 12.0;
  for (const Layer& l : layers) {
    const Tensor x = inp.tensor.flat_slice(0, N * l.in).view({N, l.in});
    const Tensor dy = dout.tensor.flat_slice(0, N * l.out).view({N, l.out});
    const Tensor y = work.tensor.flat_slice(0, N * l.out).view({N, l.out});
    const Tensor dx = work.tensor.flat_slice(0, N * l.in).view({N, l.in});
    const Tensor w = weight.tensor.flat_slice(0, l.out * l.in).view({l.out, l.in});
    const Tensor dw = dweight.tensor.flat_slice(0, l.out * l.in).view({l.out, l.in});
    const std::function<void()> passes[] = {
        [&] { engine::ops::matmul_forward(y, x, w, Tensor{}); },                // (N, out, in)
        [&] { engine::ops::matmul_backward(dx, Tensor{}, Tensor{}, dy, x, w); },  // (N, in, out)
        [&] { engine::ops::matmul_weight_grad(dw, Tensor{}, dy, x); },            // (out, in, N)
    };
    const std::int64_t dims[3][3] = {{N, l.out, l.in}, {N, l.in, l.out}, {l.out, l.in, N}};
    for (int p = 0; p < 3; ++p) {
      passes[p]();  // untimed: thread pools, cuBLASLt's choice of algorithm
      sync(device);
      std::vector<double> times;
      const double start = now();
      do {
        const double t0 = now();
        passes[p]();
        sync(device);
        times.push_back(now() - t0);
      } while (times.size() < 3 || now() - start < budget);
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      GemmShapeProbe probe{dims[p][0], dims[p][1], dims[p][2], 0};
      probe.flops = 2.0 * static_cast<double>(probe.m) * static_cast<double>(probe.n) * static_cast<double>(probe.k) /
                    median;
      // Some products share a shape (a square projection's forward and input
      // gradient, (N, C, C); the MLP's two matmuls mirror each other): the
      // planner looks rates up by shape, so one entry at their mean time.
      const auto same = std::find_if(probes.begin(), probes.end(), [&](const GemmShapeProbe& q) {
        return q.m == probe.m && q.n == probe.n && q.k == probe.k;
      });
      if (same != probes.end()) same->flops = 2.0 / (1.0 / same->flops + 1.0 / probe.flops);
      else probes.push_back(probe);
    }
  }
  return probes;
}

// ---- memory ---------------------------------------------------------------------

MemoryProbe probe_memory_bandwidth(DeviceType device, std::int64_t elements, double seconds) {
  ENGINE_CHECK(elements > 0, "probe_memory_bandwidth: elements must be positive, got ", elements);
  Owned a(device, {elements}, DType::kF32, 1), b(device, {elements}, DType::kF32, 2);
  Owned c(device, {elements}, DType::kF32, 0);
  engine::ops::add(c.tensor, a.tensor, b.tensor);  // untimed
  sync(device);
  std::vector<double> times;
  const double start = now();
  do {
    const double t0 = now();
    engine::ops::add(c.tensor, a.tensor, b.tensor);
    sync(device);
    times.push_back(now() - t0);
  } while (times.size() < 3 || now() - start < seconds);
  MemoryProbe probe;
  probe.repetitions = static_cast<int>(times.size());
  probe.bytes_per_second = 12.0 * static_cast<double>(elements) / median(times);
  return probe;
}

std::size_t largest_cache_bytes() {
  std::size_t largest = 0;
  // sysfs: /sys/devices/system/cpu/cpu0/cache/index*/size holds "32K", "260M".
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/cpu/cpu0/cache", ec)) {
    std::ifstream in(entry.path() / "size");
    std::string text;
    if (!(in >> text) || text.empty()) continue;
    std::size_t value = 0;
    try {
      value = std::stoull(text);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = text.back();
    if (unit == 'K') value <<= 10;
    if (unit == 'M') value <<= 20;
    if (unit == 'G') value <<= 30;
    largest = std::max(largest, value);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  for (const int name : {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) largest = std::max(largest, static_cast<std::size_t>(v));
  }
#endif
  return largest;
}

OpOverheadProbe probe_op_overhead(DeviceType device, double seconds) {
  // Two sizes at and above the CPU backend's OpenMP threshold, both in the
  // L2 cache, so their difference is the per-element cost and the rest is
  // the fixed cost (the intercept).
  const std::int64_t n1 = engine::cpu::kParallelMinElements, n2 = 2 * n1;
  OpOverheadProbe probe;
  probe.tiny_seconds = add_seconds(device, 1024, seconds / 3);
  const double t1 = add_seconds(device, n1, seconds / 3);
  const double t2 = add_seconds(device, n2, seconds / 3);
  probe.seconds = std::max(probe.tiny_seconds, 2 * t1 - t2);
  return probe;
}

// ---- links ----------------------------------------------------------------------

namespace {

// The engine's communicator for `comm` (collective over it), or null where
// this rank has no partner to measure with.
const char* backend_name(DeviceType device) {
#ifdef ENGINE_WITH_NCCL
  if (device == DeviceType::kCuda) return "nccl";
#else
  (void)device;
#endif
  return "mpi";
}

std::unique_ptr<parallel::Communicator> communicator_for(MPI_Comm comm, DeviceType device, const char* name) {
  if (comm == MPI_COMM_NULL) return nullptr;
  int size = 0;
  MPI_Comm_size(comm, &size);
  if (size < 2) return nullptr;
#ifdef ENGINE_WITH_NCCL
  if (device == DeviceType::kCuda) return std::make_unique<parallel::NcclCommunicator>(comm, name);
#endif
  return std::make_unique<parallel::MpiCommunicator>(comm, name);
}

// How many repetitions fit in `budget` seconds, from the slowest rank's pilot
// (seconds per repetition; 0 on ranks that sit out), the same on every rank
// of `world`, in [lo, hi].
int agreed_repetitions(MPI_Comm world, double pilot, double budget, int lo, int hi) {
  MPI_Allreduce(MPI_IN_PLACE, &pilot, 1, MPI_DOUBLE, MPI_MAX, world);
  if (!(pilot > 0)) return lo;
  return static_cast<int>(std::clamp(budget / pilot, static_cast<double>(lo), static_cast<double>(hi)));
}

// `repetitions` round trips of `t` between the pair's two ranks; seconds.
double ping_pong(parallel::Communicator* pair, const Tensor& t, int repetitions, DeviceType device) {
  if (pair == nullptr) return 0;
  const int peer = 1 - pair->rank();
  const double t0 = now();
  for (int i = 0; i < repetitions; ++i) {
    if (pair->rank() == 0) {
      pair->send(t, peer);
      pair->recv(t, peer);
    } else {
      pair->recv(t, peer);
      pair->send(t, peer);
    }
  }
  sync(device);
  return now() - t0;
}

// All-gathers of `whole` from each rank's `part`, or reduce-scatters of it
// into `part` (1/n of it, a buffer of its own: MPI forbids overlapping ones).
double gathers_or_scatters(parallel::Communicator* group, const Tensor& whole, const Tensor& part, bool gather,
                           int repetitions, DeviceType device) {
  if (group == nullptr) return 0;
  const double t0 = now();
  for (int i = 0; i < repetitions; ++i) {
    if (gather) group->all_gather(part, whole);
    else group->reduce_scatter(whole, part);
  }
  sync(device);
  return now() - t0;
}

double all_reduces(parallel::Communicator* group, const Tensor& t, int repetitions, DeviceType device) {
  if (group == nullptr) return 0;
  const double t0 = now();
  for (int i = 0; i < repetitions; ++i) group->all_reduce(t);
  sync(device);
  return now() - t0;
}

}  // namespace

std::vector<std::size_t> default_curve_sizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = std::size_t{64} << 10; bytes <= (std::size_t{16} << 20); bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

LinkProbe probe_link(MPI_Comm world, MPI_Comm pair_comm, MPI_Comm group_comm, DeviceType device,
                     std::size_t large_bytes, double seconds, std::size_t unit_bytes,
                     const std::vector<std::size_t>& curve_sizes) {
  ENGINE_CHECK(large_bytes >= 8, "probe_link: large_bytes must be at least 8, got ", large_bytes);
  const std::unique_ptr<parallel::Communicator> pair = communicator_for(pair_comm, device, "pair");
  const std::unique_ptr<parallel::Communicator> group = communicator_for(group_comm, device, "group");
  // Zeros: sums stay finite however often they are all-reduced.
  Owned small(device, {2}, DType::kF32, 0);
  Owned large(device, {static_cast<std::int64_t>(large_bytes / 4)}, DType::kF32, 0);
  const double bytes = static_cast<double>(large.tensor.bytes());

  // Latency: 8-byte round trips, after a pilot of 20 (which also warms up the connection).
  const int small_reps = agreed_repetitions(world, ping_pong(pair.get(), small.tensor, 20, device) / 20,
                                            seconds / 4, 20, 100000);
  barrier_sleeping(world);
  const double small_time = ping_pong(pair.get(), small.tensor, small_reps, device);

  // One-way bandwidth: large round trips, after one untimed and one pilot.
  ping_pong(pair.get(), large.tensor, 1, device);
  const int large_reps = agreed_repetitions(world, ping_pong(pair.get(), large.tensor, 1, device), seconds / 4, 2, 1000);
  barrier_sleeping(world);
  const double large_time = ping_pong(pair.get(), large.tensor, large_reps, device);

  // Bus bandwidth of the group's all-reduce.
  all_reduces(group.get(), large.tensor, 1, device);
  const int reduce_reps =
      agreed_repetitions(world, all_reduces(group.get(), large.tensor, 1, device), seconds / 2, 2, 1000);
  barrier_sleeping(world);
  const double reduce_time = all_reduces(group.get(), large.tensor, reduce_reps, device);

  // All-gather and reduce-scatter of a unit. The group's size is agreed
  // (the largest), and the buffer rounded to a multiple of it.
  int group_ranks = group ? group->size() : 1;
  MPI_Allreduce(MPI_IN_PLACE, &group_ranks, 1, MPI_INT, MPI_MAX, world);
  const std::int64_t unit_elements = static_cast<std::int64_t>(unit_bytes / 4) / group_ranks * group_ranks;
  double gather_time = 0, scatter_time = 0;
  int unit_reps = 0;
  if (unit_elements > 0) {
    const std::int64_t mine = group ? unit_elements / group->size() : unit_elements;
    Owned unit(device, {unit_elements}, DType::kF32, 0), part(device, {mine}, DType::kF32, 0);
    const auto run = [&](bool gather, int repetitions) {
      return gathers_or_scatters(group.get(), unit.tensor, part.tensor, gather, repetitions, device);
    };
    run(true, 1);
    unit_reps = agreed_repetitions(world, run(true, 1), seconds / 4, 3, 100000);
    barrier_sleeping(world);
    gather_time = run(true, unit_reps);
    run(false, 1);
    barrier_sleeping(world);
    scatter_time = run(false, unit_reps);
  }

  // Every collective at each curve size, each for about seconds / (3 sizes).
  // Per size: the mean bus bandwidth over the groups' ranks, in order
  // all-reduce, all-gather, reduce-scatter. Each repetition takes the next
  // of enough buffers to fill kColdBytes, as training's buckets and units
  // arrive from memory, not from a cache a repeated small buffer stays in
  // (on this project's CPU a hot 4 MiB all-reduce ran 3.1 GB/s, a cold one
  // 1.9; training's 13 MB gradient all-reduce was timed at about 0.4 of
  // what the hot figures predict: examples/benchmarks/RESULTS.md).
  constexpr std::size_t kColdBytes = std::size_t{64} << 20;
  std::vector<std::int64_t> curve_elements;  // each size in f32, a multiple of the group
  for (const std::size_t bytes : curve_sizes)
    curve_elements.push_back(static_cast<std::int64_t>(bytes / 4) / group_ranks * group_ranks);
  std::vector<double> curve_sums(3 * curve_sizes.size() + 1, 0.0);
  for (std::size_t i = 0; i < curve_sizes.size(); ++i) {
    const std::int64_t elements = curve_elements[i];
    if (elements <= 0) continue;
    const std::int64_t mine = group ? elements / group->size() : elements;
    const std::int64_t copies = std::max<std::int64_t>(1, static_cast<std::int64_t>(kColdBytes / (4 * elements)));
    Owned wholes(device, {elements * copies}, DType::kF32, 0), parts(device, {mine * copies}, DType::kF32, 0);
    std::int64_t next = 0;
    const auto run = [&](int kind, int reps) {
      if (!group) return 0.0;
      const double t0 = now();
      for (int r = 0; r < reps; ++r, next = (next + 1) % copies) {
        const Tensor whole = wholes.tensor.flat_slice(next * elements, elements);
        const Tensor part = parts.tensor.flat_slice(next * mine, mine);
        if (kind == 0) group->all_reduce(whole);
        else if (kind == 1) group->all_gather(part, whole);
        else group->reduce_scatter(whole, part);
      }
      sync(device);
      return now() - t0;
    };
    const double budget = seconds / (3.0 * static_cast<double>(curve_sizes.size()));
    for (int k = 0; k < 3; ++k) {  // all-reduce, all-gather, reduce-scatter
      run(k, 1);  // untimed
      const int reps = agreed_repetitions(world, run(k, 1), budget, 3, 100000);
      barrier_sleeping(world);
      const double time = run(k, reps);
      if (group && time > 0) {
        const double n = group->size(), bytes = static_cast<double>(elements) * 4;
        const double moved = (k == 0 ? 2 : 1) * (n - 1) / n * bytes;  // a ring's bus volume
        curve_sums[3 * i + k] = moved / (time / reps);
      }
    }
  }
  if (group) curve_sums.back() = 1;
  MPI_Allreduce(MPI_IN_PLACE, curve_sums.data(), static_cast<int>(curve_sums.size()), MPI_DOUBLE, MPI_SUM, world);

  // Means over the ranks that measured.
  double sums[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (pair) {
    sums[0] = small_time / (2.0 * small_reps);
    sums[1] = bytes / (large_time / (2.0 * large_reps));
    sums[2] = 1;
  }
  if (group) {
    const double n = group->size();
    sums[3] = 2 * (n - 1) / n * bytes / (reduce_time / reduce_reps);
    sums[4] = 1;
    sums[5] = group->rank() == 0 ? 1 : 0;
    if (unit_reps > 0) {
      const double unit = static_cast<double>(unit_elements) * 4;
      sums[6] = (n - 1) / n * unit / (gather_time / unit_reps);
      sums[7] = (n - 1) / n * unit / (scatter_time / unit_reps);
      sums[8] = 1;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 9, MPI_DOUBLE, MPI_SUM, world);
  int largest_group = group ? group->size() : 0;
  MPI_Allreduce(MPI_IN_PLACE, &largest_group, 1, MPI_INT, MPI_MAX, world);

  LinkProbe probe;
  if (sums[2] > 0) {
    probe.latency_seconds = sums[0] / sums[2];
    probe.pingpong_bytes_per_second = sums[1] / sums[2];
    probe.pairs = static_cast<int>(sums[2] / 2 + 0.5);
  }
  if (sums[4] > 0) probe.allreduce_busbw = sums[3] / sums[4];
  if (sums[8] > 0) {
    probe.allgather_busbw = sums[6] / sums[8];
    probe.reduce_scatter_busbw = sums[7] / sums[8];
  }
  if (curve_sums.back() > 0 && largest_group > 1)
    for (std::size_t i = 0; i < curve_sizes.size(); ++i) {
      const double bytes = static_cast<double>(curve_elements[i] * 4);
      std::vector<parallel::BandwidthAtSize>* curves[3] = {&probe.all_reduce_by_size, &probe.all_gather_by_size,
                                                           &probe.reduce_scatter_by_size};
      for (int k = 0; k < 3; ++k)
        if (bytes > 0 && curve_sums[3 * i + k] > 0)
          curves[k]->push_back({bytes, curve_sums[3 * i + k] / curve_sums.back()});
    }
  // The large all-reduce above is the curve's last point (past the cache
  // sizes a CPU's all-reduce slows down again).
  if (!probe.all_reduce_by_size.empty() && probe.allreduce_busbw > 0 && bytes > probe.all_reduce_by_size.back().bytes)
    probe.all_reduce_by_size.push_back({bytes, probe.allreduce_busbw});
  probe.groups = static_cast<int>(sums[5] + 0.5);
  probe.group_size = largest_group;
  probe.backend = backend_name(device);
  return probe;
}

// ---- storage --------------------------------------------------------------------

double probe_storage_write_seconds(const std::string& dir, std::size_t bytes, int rank) {
  ENGINE_CHECK(std::filesystem::is_directory(dir), "storage test: '", dir, "' is not a directory");
  const std::string path =
      (std::filesystem::path(dir) / (".calibrate_storage." + std::to_string(::getpid()) + "." + std::to_string(rank)))
          .string();
  // Incompressible bytes (xorshift64), so a compressing file system cannot
  // make the test faster than a checkpoint's weights.
  constexpr std::size_t kChunk = 8u << 20;
  std::vector<std::uint64_t> chunk(kChunk / 8);
  std::uint64_t x = 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank);
  for (std::uint64_t& word : chunk) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    word = x;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ENGINE_CHECK(fd >= 0, "storage test: cannot create '", path, "': ", std::strerror(errno));
  const double t0 = now();
  std::string error;
  for (std::size_t done = 0; done < bytes && error.empty();) {
    const std::size_t n = std::min(kChunk, bytes - done);
    const ssize_t written = ::write(fd, chunk.data(), n);
    if (written <= 0)
      error = std::string("writing failed: ") + std::strerror(errno);
    else
      done += static_cast<std::size_t>(written);
  }
  if (error.empty() && ::fsync(fd) != 0) error = std::string("fsync failed: ") + std::strerror(errno);
  ::close(fd);
  const double seconds = now() - t0;
  ::unlink(path.c_str());
  ENGINE_CHECK(error.empty(), "storage test: '", path, "': ", error);
  return seconds;
}

}  // namespace launch
