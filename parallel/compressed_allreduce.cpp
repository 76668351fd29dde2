// The error-compensated 1-bit all-reduce of 1-bit Adam (compressed_allreduce.h
// explains the algorithm and the decisions). CPU implementation: OpenMP loops
// over independent words/elements, reductions in double over fixed blocks so
// the result does not depend on the thread count.
#include "parallel/compressed_allreduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/check.h"
#include "engine/device.h"

namespace parallel {

namespace {

using engine::DeviceType;
using engine::DType;
using engine::Shape;
using engine::Tensor;

// Below this many elements a loop runs on one thread: starting a team costs
// more than the work.
constexpr std::int64_t kParallelMin = 1 << 14;
// Norm partial sums cover fixed blocks (not one per thread) so the order of
// the additions, hence the rounding, is the same whatever the thread count.
constexpr std::int64_t kNormBlock = 4096;
constexpr int kBitsPerWord = 32;

bool bit(const std::uint32_t* words, std::int64_t i) {
  return (words[i / kBitsPerWord] >> (i % kBitsPerWord)) & 1u;
}

std::uint32_t float_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float bits_float(std::uint32_t w) { return std::bit_cast<float>(w); }

}  // namespace

const char* compression_scale_name(CompressionScale scale) {
  return scale == CompressionScale::kRms ? "rms" : "mean_abs";
}

// ---- sign packing --------------------------------------------------------------

void pack_signs(std::span<const float> v, std::span<std::uint32_t> words) {
  const auto count = static_cast<std::int64_t>(v.size());
  const std::int64_t nw = packed_sign_words(count);
  ENGINE_CHECK(static_cast<std::int64_t>(words.size()) == nw, "pack_signs: ", count, " values need ", nw,
               " words, got ", words.size());
  const float* in = v.data();
  std::uint32_t* out = words.data();
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (std::int64_t w = 0; w < nw; ++w) {
    const std::int64_t first = w * kBitsPerWord;
    const std::int64_t last = std::min(first + kBitsPerWord, count);
    std::uint32_t word = 0;
    for (std::int64_t i = first; i < last; ++i)
      word |= static_cast<std::uint32_t>(in[i] >= 0.0f) << (i - first);  // +1 for v >= 0 (and -0)
    out[w] = word;
  }
}

void unpack_signs(std::span<const std::uint32_t> words, float scale, std::span<float> out) {
  const auto count = static_cast<std::int64_t>(out.size());
  ENGINE_CHECK(static_cast<std::int64_t>(words.size()) >= packed_sign_words(count), "unpack_signs: ", count,
               " values need ", packed_sign_words(count), " words, got ", words.size());
  const std::uint32_t* in = words.data();
  float* o = out.data();
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (std::int64_t i = 0; i < count; ++i) o[i] = bit(in, i) ? scale : -scale;
}

float compression_scale(std::span<const float> v, CompressionScale kind) {
  const auto count = static_cast<std::int64_t>(v.size());
  if (count == 0) return 0.0f;
  const std::int64_t blocks = (count + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks));
  const float* in = v.data();
  const bool squares = kind == CompressionScale::kRms;
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t last = std::min((b + 1) * kNormBlock, count);
    double sum = 0.0;
    for (std::int64_t i = b * kNormBlock; i < last; ++i) {
      const double x = in[i];
      sum += squares ? x * x : std::fabs(x);
    }
    partial[b] = sum;
  }
  double total = 0.0;
  for (double p : partial) total += p;  // in block order: deterministic
  const double mean = total / static_cast<double>(count);
  return static_cast<float>(squares ? std::sqrt(mean) : mean);
}

float compress_with_error(std::span<float> v, std::span<std::uint32_t> words, CompressionScale kind) {
  const auto count = static_cast<std::int64_t>(v.size());
  const std::int64_t nw = packed_sign_words(count);
  ENGINE_CHECK(static_cast<std::int64_t>(words.size()) == nw, "compress_with_error: ", count, " values need ", nw,
               " words, got ", words.size());
  const float scale = compression_scale(v, kind);
  float* x = v.data();
  std::uint32_t* out = words.data();
  // Pack the signs and subtract what the receiver will reconstruct, one word
  // (32 elements) per iteration: the error is what compression dropped.
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (std::int64_t w = 0; w < nw; ++w) {
    const std::int64_t first = w * kBitsPerWord;
    const std::int64_t last = std::min(first + kBitsPerWord, count);
    std::uint32_t word = 0;
    for (std::int64_t i = first; i < last; ++i) {
      const bool positive = x[i] >= 0.0f;
      word |= static_cast<std::uint32_t>(positive) << (i - first);
      x[i] -= positive ? scale : -scale;
    }
    out[w] = word;
  }
  return scale;
}

// ---- CompressedAllReduce ---------------------------------------------------------

CompressedAllReduce::CompressedAllReduce(Communicator& comm, std::int64_t n, DeviceType device,
                                         CompressionScale scale)
    : comm_(comm), n_(n), size_(comm.size()), rank_(comm.rank()), device_(device), scale_kind_(scale) {
  ENGINE_CHECK(n >= 1, "CompressedAllReduce: n = ", n, " must be at least 1");
  // ceil(n / p), rounded up to whole sign words so every chunk's bits start
  // on a word boundary (rank j's message is a plain slice of the buffer).
  const std::int64_t per_rank = (n + size_ - 1) / size_;
  chunk_ = packed_sign_words(per_rank) * kBitsPerWord;
  words_ = chunk_ / kBitsPerWord + 1;  // + the scale
  const std::int64_t message_words = size_ * words_;
  ENGINE_CHECK(message_words <= INT32_MAX, "CompressedAllReduce: n = ", n, " over ", size_,
               " ranks needs messages of ", message_words, " words, more than one MPI count holds; split it");

  worker_error_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(n) * sizeof(float));
  const std::int64_t server_alloc = std::max<std::int64_t>(server_count(), 1);  // a Buffer of 0 bytes has no pointer
  server_error_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(server_alloc) * sizeof(float));
  send_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(message_words) * sizeof(std::uint32_t));
  recv_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(message_words) * sizeof(std::uint32_t));
  if (device_ == DeviceType::kCuda) {
    host_x_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(n) * sizeof(float));
    dev_send_ = engine::Buffer(DeviceType::kCuda, send_.bytes());
    dev_recv_ = engine::Buffer(DeviceType::kCuda, recv_.bytes());
  }
  reset_errors();
}

std::int64_t CompressedAllReduce::chunk_begin(int j) const { return std::min<std::int64_t>(j * chunk_, n_); }

std::int64_t CompressedAllReduce::chunk_count(int j) const {
  return std::min<std::int64_t>((j + 1) * chunk_, n_) - chunk_begin(j);
}

std::uint64_t CompressedAllReduce::bytes_per_call() const {
  if (size_ == 1) return 0;
  // all_to_all (p-1)/p * p*W words + all_gather (p-1)/p * p*W words, 4 bytes each.
  return 2ull * static_cast<std::uint64_t>(size_ - 1) * static_cast<std::uint64_t>(words_) * 4ull;
}

Tensor CompressedAllReduce::worker_error() const {
  return Tensor(worker_error_.data(), Shape{n_}, DType::kF32, DeviceType::kCpu);
}

Tensor CompressedAllReduce::server_error() const {
  return Tensor(server_error_.data(), Shape{server_count()}, DType::kF32, DeviceType::kCpu);
}

void CompressedAllReduce::reset_errors() {
  std::memset(worker_error_.data(), 0, worker_error_.bytes());
  std::memset(server_error_.data(), 0, server_error_.bytes());
}

void CompressedAllReduce::all_reduce_mean(const Tensor& x) {
  ENGINE_CHECK(!x.empty() && x.dtype() == DType::kF32 && x.numel() == n_ && x.device() == device_,
               "CompressedAllReduce::all_reduce_mean: x ", x.describe(), " must be f32 with ", n_,
               " elements on ", engine::device_name(device_));
  const int p = size_;
  const std::int64_t W = words_;
  const std::int64_t sign_words = chunk_ / kBitsPerWord;  // the scale is word sign_words of a message

  // A CUDA x is staged through host memory: everything below is CPU code.
  float* xs = x.data_as<float>();
  if (device_ == DeviceType::kCuda) {
    engine::copy_bytes(host_x_.data(), DeviceType::kCpu, x.data(), DeviceType::kCuda, x.bytes());
    xs = static_cast<float*>(host_x_.data());
  }
  float* we = static_cast<float*>(worker_error_.data());
  float* se = static_cast<float*>(server_error_.data());
  auto* send = static_cast<std::uint32_t*>(send_.data());
  auto* recv = static_cast<std::uint32_t*>(recv_.data());
  const Tensor send_t(send, Shape{p * W}, DType::kI32, DeviceType::kCpu);
  const Tensor recv_t(recv, Shape{p * W}, DType::kI32, DeviceType::kCpu);

  // ---- worker: compensate, then compress every chunk (error feedback) -------
  // worker_error becomes v = x + worker_error; compress_with_error turns it
  // into v - decompress(compress(v)), the error of this call.
  const std::int64_t n = n_;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) we[i] += xs[i];
  for (int j = 0; j < p; ++j) {
    const std::int64_t begin = chunk_begin(j), count = chunk_count(j);
    std::uint32_t* msg = send + j * W;
    const std::int64_t used = packed_sign_words(count);
    const float scale = compress_with_error(std::span<float>(we + begin, count), std::span<std::uint32_t>(msg, used),
                                            scale_kind_);
    std::fill(msg + used, msg + sign_words, 0u);  // padding bits: 0, never read
    msg[sign_words] = float_bits(scale);
  }

  // ---- exchange 1: rank r receives chunk r of every rank ---------------------
  if (device_ == DeviceType::kCuda) {
    const Tensor ds(dev_send_.data(), Shape{p * W}, DType::kI32, DeviceType::kCuda);
    const Tensor dr(dev_recv_.data(), Shape{p * W}, DType::kI32, DeviceType::kCuda);
    engine::copy_bytes(ds.data(), DeviceType::kCuda, send, DeviceType::kCpu, send_t.bytes());
    comm_.all_to_all(ds, dr);
    engine::copy_bytes(recv, DeviceType::kCpu, dr.data(), DeviceType::kCuda, recv_t.bytes());
  } else {
    comm_.all_to_all(send_t, recv_t);
  }

  // ---- server: average the decompressed chunks, compensate, compress again ---
  // se becomes w = mean over ranks + server_error (the mean accumulated in
  // double, ranks in order), then w's compression error.
  const std::int64_t mine = server_count();
  {
    std::vector<float> scales(p);
    for (int q = 0; q < p; ++q) scales[q] = bits_float(recv[q * W + sign_words]);
    const float* sc = scales.data();
#pragma omp parallel for schedule(static) if (mine * p >= kParallelMin)
    for (std::int64_t i = 0; i < mine; ++i) {
      double sum = 0.0;
      for (int q = 0; q < p; ++q) sum += bit(recv + q * W, i) ? sc[q] : -sc[q];
      se[i] += static_cast<float>(sum / p);
    }
  }
  std::uint32_t* my_msg = recv + rank_ * W;  // all_gather in place: my slice of the output
  const std::int64_t used = packed_sign_words(mine);
  const float server_scale =
      compress_with_error(std::span<float>(se, mine), std::span<std::uint32_t>(my_msg, used), scale_kind_);
  std::fill(my_msg + used, my_msg + sign_words, 0u);
  my_msg[sign_words] = float_bits(server_scale);

  // ---- exchange 2: every rank receives every server chunk ---------------------
  if (device_ == DeviceType::kCuda) {
    const Tensor dr(dev_recv_.data(), Shape{p * W}, DType::kI32, DeviceType::kCuda);
    engine::copy_bytes(static_cast<std::uint32_t*>(dev_recv_.data()) + rank_ * W, DeviceType::kCuda, my_msg,
                       DeviceType::kCpu, static_cast<std::size_t>(W) * sizeof(std::uint32_t));
    comm_.all_gather(dr.flat_slice(rank_ * W, W), dr);
    engine::copy_bytes(recv, DeviceType::kCpu, dr.data(), DeviceType::kCuda, recv_t.bytes());
  } else {
    comm_.all_gather(recv_t.flat_slice(rank_ * W, W), recv_t);
  }

  // ---- decompress the full result into x ----------------------------------------
  for (int j = 0; j < p; ++j) {
    const std::uint32_t* msg = recv + j * W;
    const std::int64_t count = chunk_count(j);
    unpack_signs(std::span<const std::uint32_t>(msg, packed_sign_words(count)), bits_float(msg[sign_words]),
                 std::span<float>(xs + chunk_begin(j), count));
  }
  if (device_ == DeviceType::kCuda)
    engine::copy_bytes(x.data(), DeviceType::kCuda, xs, DeviceType::kCpu, x.bytes());
}

}  // namespace parallel
