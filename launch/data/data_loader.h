// The training data as an endless, reproducible stream of sequences.
//
// Dataset: the token shards matching a glob, sorted by name. Shard s holds
// n_s = (ntok_s - 1) / T sequences; sequence j of shard s is the tokens
// [j*T, j*T + T + 1) of that shard: inputs are the first T, targets the last
// T (the inputs shifted by one). Sequences never cross shards, and the epoch
// is the concatenation of all shards' sequences in order: global sequence
// index g in [0, N), N = sum of n_s. The tail of a shard that does not fill a
// whole sequence is never read.
//
// Stream: position p is sequence g = p % N of epoch e = p / N, or, with
// shuffling, g = perm_e[p % N] where perm_e is a permutation of [0, N) drawn
// from (seed, e). The loader keeps no cursor: read_sequences(p, count) is a
// pure function of its arguments, so a resumed run only needs its step
// number, and every rank computes its own slice of a step without talking to
// the others (ARCHITECTURE.md, "Data does not depend on the layout"; see BatchLayout below).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "launch/data/token_shard.h"

namespace launch {

class DataLoader {
 public:
  // Opens every shard matching `pattern` (validating each, see TokenShard;
  // version 1 and version 2 shards may be mixed). Throws engine::Error if
  // seq_len < 1, vocab_size < 1, or the shards together hold no complete
  // sequence.
  DataLoader(const std::string& pattern, int seq_len, int vocab_size, bool shuffle, std::uint64_t seed);

  // Fills `count` sequences starting at stream position `first_sequence`:
  // inputs and targets are both (count, T), row-major. Stateless and safe to
  // call from several threads. Every token is checked against the vocabulary;
  // an id >= vocab_size throws engine::Error naming the file, the token's
  // index in it, its value and the vocab size.
  void read_sequences(std::int64_t first_sequence, std::int64_t count, std::int32_t* inputs /* (count, T) */,
                      std::int32_t* targets /* (count, T) */) const;

  // Checks every token of each shard that the `count` sequences from stream
  // position `first_sequence` read, the first time the shard is needed: a
  // shard is scanned whole, once, so a bad one is found before any of its
  // tokens is used (the trainer calls this before each step). Throws
  // engine::Error naming the file, the token's index, its value and the
  // vocab size.
  void verify_sequences(std::int64_t first_sequence, std::int64_t count) const;
  // Checks every token of every shard (validation data, at start-up).
  void verify_all() const;

  // The global sequence index g in [0, N) that stream position p reads.
  std::int64_t sequence_at(std::int64_t stream_position) const;

  std::int64_t sequences_per_epoch() const { return sequences_per_epoch_; }  // N
  std::int64_t total_tokens() const { return total_tokens_; }  // sum of ntok over all shards
  int seq_len() const { return seq_len_; }
  int vocab_size() const { return vocab_size_; }
  bool shuffle() const { return shuffle_; }
  const std::vector<std::string>& files() const { return files_; }

  // 16 hex digits: FNV-1a over each shard's file name (without directory, so
  // moving the data does not change it) and token count, in order. A resumed
  // run compares it with the one its checkpoint recorded to make sure it is
  // reading the same data. Token contents are not hashed: that would mean
  // reading the whole dataset at start-up.
  std::string fingerprint() const;

 private:
  // Fisher-Yates permutation of [0, N) for `epoch`, from mt19937_64.
  std::vector<std::uint32_t> make_permutation(std::int64_t epoch) const;
  // The shard holding global sequence g.
  std::size_t shard_of(std::int64_t g) const;
  // Scans shard s for out-of-vocabulary tokens unless already done.
  void verify_shard(std::size_t s) const;
  // Copies global sequence g into one (T) row of inputs and targets, reading
  // its T + 1 tokens through `tokens` (room for T + 1).
  void copy_sequence(std::int64_t g, std::uint32_t* tokens, std::int32_t* inputs, std::int32_t* targets) const;

  std::vector<std::string> files_;
  std::vector<TokenShard> shards_;
  // first_sequence_of_shard_[s] = sum of n_r for r < s; one extra entry = N.
  std::vector<std::int64_t> first_sequence_of_shard_;
  int seq_len_;
  int vocab_size_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t sequences_per_epoch_ = 0;
  std::int64_t total_tokens_ = 0;

  // The permutation of the most recently read epoch: reads are almost always
  // in the same epoch as the last one, so it is built once per epoch. Mutable
  // because caching does not change what read_sequences returns.
  mutable std::mutex permutation_mutex_;
  mutable std::int64_t permutation_epoch_ = -1;
  mutable std::vector<std::uint32_t> permutation_;
  // Which shards verify_shard has scanned (1) so far.
  mutable std::mutex verified_mutex_;
  mutable std::vector<char> verified_;
  mutable std::atomic<bool> all_verified_{false};
};

// Which stream positions one rank reads for one micro-batch of one optimizer
// step. The step's global batch is always stream positions
// [step * global_sequences, (step + 1) * global_sequences), whatever the
// layout; data-parallel rank r takes the r-th contiguous share of it, and cuts
// its share into micro-batches in order. Concatenating all ranks' micro-batches
// rank-major therefore gives exactly the single-process batch, which is what
// lets every layout be tested against one process.
struct BatchLayout {
  std::int64_t global_sequences;  // sequences per optimizer step, all data-parallel ranks together
  int dp_size;
  int dp_rank;
  std::int64_t micro_batch;  // sequences per micro-batch per rank

  // Throws engine::Error unless every field is positive, dp_rank is in
  // [0, dp_size), global_sequences divides by dp_size and the per-rank share
  // divides by micro_batch.
  void validate() const;
  // These two assume a valid layout (call validate() first).
  std::int64_t sequences_per_rank() const { return global_sequences / dp_size; }
  int micro_batches() const { return static_cast<int>(sequences_per_rank() / micro_batch); }
  // = step * global_sequences + dp_rank * (global_sequences / dp_size) + micro * micro_batch.
  // Validates the layout, step >= 0 and micro in [0, micro_batches()).
  std::int64_t first_sequence(std::int64_t step, int micro) const;
};

}  // namespace launch
