#include "launch/data/data_loader.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "engine/check.h"

namespace launch {

namespace {

// SplitMix64 finaliser (Steele et al., "Fast splittable pseudorandom number
// generators", OOPSLA'14): turns (seed, epoch) into well-spread generator
// seeds, so neighbouring seeds or epochs give unrelated permutations.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound) by rejection. std::uniform_int_distribution
// is not specified exactly, so libstdc++ and libc++ would shuffle differently;
// mt19937_64's output is, and so is this, which keeps the data order the same
// on every platform.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  // Reject the lowest (2^64 mod bound) values so every residue is equally likely.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

// FNV-1a, 64 bit.
void fnv1a(std::uint64_t& hash, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 0x100000001B3ull;
  }
}

// Each open shard holds a descriptor (see TokenShard), and a dataset of a
// thousand shards would pass the usual soft limit of 1024: raise the soft
// limit towards the hard one when the shards need it. If even that is too
// low, the shard that cannot be opened says so.
void allow_open_files(std::size_t shards) {
  constexpr rlim_t kSpare = 256;  // MPI, NCCL, logs, checkpoints
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(shards) + kSpare;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

DataLoader::DataLoader(const std::string& pattern, int seq_len, int vocab_size, bool shuffle, std::uint64_t seed)
    : seq_len_(seq_len), vocab_size_(vocab_size), shuffle_(shuffle), seed_(seed) {
  ENGINE_CHECK(seq_len >= 1, "data loader: seq_len is ", seq_len, ", expected at least 1");
  ENGINE_CHECK(vocab_size >= 1, "data loader: vocab_size is ", vocab_size, ", expected at least 1");

  files_ = expand_shard_pattern(pattern);
  allow_open_files(files_.size());
  shards_.reserve(files_.size());
  first_sequence_of_shard_.reserve(files_.size() + 1);
  for (const std::string& file : files_) {
    shards_.emplace_back(file);
    first_sequence_of_shard_.push_back(sequences_per_epoch_);
    const std::int64_t ntok = shards_.back().num_tokens();
    total_tokens_ += ntok;
    sequences_per_epoch_ += (ntok - 1) / seq_len;
  }
  first_sequence_of_shard_.push_back(sequences_per_epoch_);

  ENGINE_CHECK(sequences_per_epoch_ > 0, "data loader: the ", files_.size(), " shard(s) matching '", pattern,
               "' hold ", total_tokens_, " tokens, but seq_len ", seq_len, " needs at least ", seq_len + 1,
               " tokens in one shard (sequences never cross shards)");
  // The permutation stores uint32 indices to halve its memory (one copy per
  // rank); 2^32 sequences of even 128 tokens is half a trillion tokens.
  ENGINE_CHECK(!shuffle || sequences_per_epoch_ <= std::numeric_limits<std::uint32_t>::max(),
               "data loader: ", sequences_per_epoch_, " sequences per epoch is too many to shuffle, expected at most ",
               std::numeric_limits<std::uint32_t>::max());
}

std::vector<std::uint32_t> DataLoader::make_permutation(std::int64_t epoch) const {
  std::vector<std::uint32_t> perm(static_cast<std::size_t>(sequences_per_epoch_));
  std::iota(perm.begin(), perm.end(), std::uint32_t{0});
  std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(epoch))));
  // Fisher-Yates (Knuth, TAOCP vol. 2, Algorithm 3.4.2 P): every one of the
  // N! orders is equally likely.
  for (std::int64_t i = sequences_per_epoch_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(rng, static_cast<std::uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::int64_t DataLoader::sequence_at(std::int64_t stream_position) const {
  ENGINE_CHECK(stream_position >= 0, "data loader: stream position ", stream_position, ", expected >= 0");
  const std::int64_t epoch = stream_position / sequences_per_epoch_;
  const std::int64_t index = stream_position % sequences_per_epoch_;
  if (!shuffle_) return index;
  std::lock_guard<std::mutex> lock(permutation_mutex_);
  if (permutation_epoch_ != epoch) {
    permutation_ = make_permutation(epoch);
    permutation_epoch_ = epoch;
  }
  return permutation_[static_cast<std::size_t>(index)];
}

std::size_t DataLoader::shard_of(std::int64_t g) const {
  // The last s with first_sequence_of_shard_[s] <= g. (Shards too short for
  // one sequence share their start with the next shard; upper_bound skips
  // past them to the one that really holds g.)
  const auto after = std::upper_bound(first_sequence_of_shard_.begin(), first_sequence_of_shard_.end(), g);
  return static_cast<std::size_t>(after - first_sequence_of_shard_.begin() - 1);
}

void DataLoader::verify_shard(std::size_t s) const {
  std::lock_guard<std::mutex> lock(verified_mutex_);
  if (verified_.empty()) verified_.assign(shards_.size(), 0);
  if (verified_[s]) return;
  // In chunks: a shard can be many GB, and the buffer is reused.
  const TokenShard& shard = shards_[s];
  constexpr std::int64_t kChunk = 1 << 20;
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(std::min(kChunk, shard.num_tokens())));
  // Unsigned: a version 2 id of 2^31 or more is out of range, not negative.
  const auto vocab = static_cast<std::uint32_t>(vocab_size_);
  for (std::int64_t first = 0; first < shard.num_tokens(); first += kChunk) {
    const std::int64_t count = std::min(kChunk, shard.num_tokens() - first);
    shard.read_tokens(first, count, tokens.data());
    const auto end = tokens.begin() + count;
    // One pass for the maximum (vectorises), a second only to locate a bad one.
    std::uint32_t largest = 0;
    for (auto it = tokens.begin(); it != end; ++it) largest = std::max(largest, *it);
    if (largest >= vocab) {
      const auto bad = std::find_if(tokens.begin(), end, [&](std::uint32_t id) { return id >= vocab; });
      ENGINE_FAIL("token shard ", shard.path(), ": token ", first + (bad - tokens.begin()), " is ", *bad,
                  ", outside the vocabulary of size ", vocab_size_);
    }
  }
  verified_[s] = 1;
  if (std::all_of(verified_.begin(), verified_.end(), [](char v) { return v != 0; })) all_verified_.store(true);
}

void DataLoader::verify_sequences(std::int64_t first_sequence, std::int64_t count) const {
  // Once every shard is verified (after the first epoch at the latest) the
  // per-step call costs one atomic load.
  if (all_verified_.load(std::memory_order_relaxed)) return;
  for (std::int64_t k = 0; k < count; ++k) verify_shard(shard_of(sequence_at(first_sequence + k)));
}

void DataLoader::verify_all() const {
  for (std::size_t s = 0; s < shards_.size(); ++s) verify_shard(s);
}

void DataLoader::copy_sequence(std::int64_t g, std::uint32_t* tokens, std::int32_t* inputs,
                               std::int32_t* targets) const {
  const std::size_t s = shard_of(g);
  const TokenShard& shard = shards_[s];
  const std::int64_t first_token = (g - first_sequence_of_shard_[s]) * seq_len_;
  shard.read_tokens(first_token, seq_len_ + 1, tokens);

  // T + 1 tokens give T (input, target) pairs.
  for (int t = 0; t <= seq_len_; ++t) {
    const std::uint32_t raw = tokens[t];
    ENGINE_CHECK(raw < static_cast<std::uint32_t>(vocab_size_), "token shard ", shard.path(), ": token ",
                 first_token + t, " is ", raw, ", outside the vocabulary of size ", vocab_size_);
    const auto id = static_cast<std::int32_t>(raw);  // < vocab_size_, an int
    if (t < seq_len_) inputs[t] = id;
    if (t > 0) targets[t - 1] = id;
  }
}

void DataLoader::read_sequences(std::int64_t first_sequence, std::int64_t count, std::int32_t* inputs,
                                std::int32_t* targets) const {
  ENGINE_CHECK(first_sequence >= 0, "data loader: first_sequence is ", first_sequence, ", expected >= 0");
  ENGINE_CHECK(count >= 0, "data loader: count is ", count, ", expected >= 0");
  ENGINE_CHECK(count == 0 || (inputs != nullptr && targets != nullptr),
               "data loader: null inputs or targets buffer for ", count, " sequences");
  ENGINE_CHECK(first_sequence <= std::numeric_limits<std::int64_t>::max() - count, "data loader: stream positions ",
               first_sequence, " + ", count, " overflow int64");
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(seq_len_) + 1);  // per call: thread-safe
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t g = sequence_at(first_sequence + k);
    copy_sequence(g, tokens.data(), inputs + k * seq_len_, targets + k * seq_len_);
  }
}

std::string DataLoader::fingerprint() const {
  std::uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a offset basis
  for (const TokenShard& shard : shards_) {
    const std::string name = std::filesystem::path(shard.path()).filename().string();
    fnv1a(hash, name.data(), name.size());
    fnv1a(hash, "", 1);  // separator, so ("ab", "c") and ("a", "bc") differ
    const std::int64_t ntok = shard.num_tokens();
    fnv1a(hash, &ntok, sizeof(ntok));
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

void BatchLayout::validate() const {
  ENGINE_CHECK(global_sequences >= 1, "batch layout: global_sequences (sequences per optimizer step) is ",
               global_sequences, ", expected at least 1");
  ENGINE_CHECK(dp_size >= 1, "batch layout: dp_size is ", dp_size, ", expected at least 1");
  ENGINE_CHECK(dp_rank >= 0 && dp_rank < dp_size, "batch layout: dp_rank is ", dp_rank, ", expected 0..",
               dp_size - 1);
  ENGINE_CHECK(micro_batch >= 1, "batch layout: micro_batch is ", micro_batch, ", expected at least 1");
  ENGINE_CHECK(global_sequences % dp_size == 0, "batch layout: global batch of ", global_sequences,
               " sequences does not divide among dp_size ", dp_size, " data-parallel ranks");
  const std::int64_t per_rank = global_sequences / dp_size;
  ENGINE_CHECK(per_rank % micro_batch == 0, "batch layout: each data-parallel rank gets ", per_rank,
               " sequences (", global_sequences, " / dp_size ", dp_size, "), which does not divide into micro-batches of ",
               micro_batch, " sequences");
  ENGINE_CHECK(per_rank / micro_batch <= std::numeric_limits<int>::max(), "batch layout: ", per_rank / micro_batch,
               " micro-batches per step, expected at most ", std::numeric_limits<int>::max());
}

std::int64_t BatchLayout::first_sequence(std::int64_t step, int micro) const {
  validate();  // a handful of integer checks; cheaper than debugging a bad layout
  ENGINE_CHECK(step >= 0, "batch layout: step is ", step, ", expected >= 0");
  ENGINE_CHECK(micro >= 0 && micro < micro_batches(), "batch layout: micro-batch ", micro, ", expected 0..",
               micro_batches() - 1);
  return step * global_sequences + dp_rank * sequences_per_rank() + micro * micro_batch;
}

}  // namespace launch
