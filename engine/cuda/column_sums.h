// Deterministic column sums of a (chunks, C) table of f32 partial sums, the
// second half of every "sum over rows" reduction of the CUDA backend
// (LayerNorm's dweight and dbias, matmul's dbias): a first kernel writes one
// partial row per fixed chunk of rows, and this adds the chunks in a fixed
// order into the f32 parameter gradient.
//
// The order depends on `chunks` and C only, never on the GPU or on timing,
// so a run repeats bit for bit. Block (32 columns x 8 warps): warp w adds
// chunks w, w + 8, w + 16, ...; the 8 warp sums are then added in w order.
// That gives each column 8 independent load chains of chunks / 8 loads
// instead of one of `chunks`: the version before it (one thread per column
// walking all 64 chunks) was a chain of dependent L2 round trips, on few
// blocks (C / 256 of them) for the whole GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/tensor.h"

namespace engine::cuda {

// One reduction: out[c] += sum over k of partial[k * C + c], k in [0, chunks).
struct ChunkSums {
  float* out = nullptr;            // (C) f32, accumulated
  const float* partial = nullptr;  // (chunks, C) f32
};

// Runs up to two reductions of the same shape in one launch (LayerNorm's
// dweight and dbias share it). `count` is 1 or 2.
void add_chunk_sums(const ChunkSums* sums, int count, std::int64_t chunks, std::int64_t C, cudaStream_t stream);

// The chunking every row reduction uses: at most 64 chunks of at least
// `min_rows` rows, a function of N alone.
struct RowChunks {
  std::int64_t chunks = 0;
  std::int64_t rows_per_chunk = 0;
};
RowChunks row_chunks(std::int64_t N, std::int64_t min_rows = 64, std::int64_t max_chunks = 64);

// out[c] += sum_n x[n, c] for x of N rows of C (f32 or bf16), out f32: the
// partial sums of row_chunks(N) into the device's scratch (16-byte loads when
// C is a whole number of packs and x is 16-byte aligned), then add_chunk_sums.
void add_column_sums(float* out, const Tensor& x, std::int64_t N, std::int64_t C, cudaStream_t stream);

}  // namespace engine::cuda
