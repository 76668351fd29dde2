#include "launch/data/prepare_encode.h"

#include <sched.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/check.h"
#include "launch/data/byte_tokenizer.h"

namespace launch::prepare {

BlockEncoder::BlockEncoder(const std::string& tokenizer_path, int threads) : threads_(threads) {
  ENGINE_CHECK(threads >= 1, "--threads ", threads, ": expected at least 1");
  if (tokenizer_path.empty()) return;
  bpe_.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) bpe_.push_back(BpeTokenizer::from_file(tokenizer_path));
  document_start_.assign(bpe_.front().document_start().begin(), bpe_.front().document_start().end());
}

BlockEncoder::~BlockEncoder() = default;

std::int32_t BlockEncoder::vocab_size() const {
  return bpe_.empty() ? ByteTokenizer().vocab_size() : bpe_.front().vocab_size();
}

void BlockEncoder::encode_one(int thread, const Block& block, EncodedBlock& out) const {
  const auto encode = [&](std::string_view text, std::vector<std::uint32_t>& ids) {
    if (bpe_.empty()) {
      const std::vector<std::uint16_t> bytes = ByteTokenizer().encode(text);
      ids.insert(ids.end(), bytes.begin(), bytes.end());
      return;
    }
    // In [0, vocab_size()): checked when a shard is loaded.
    const std::vector<std::int32_t> bpe_ids = bpe_[static_cast<std::size_t>(thread)].encode(text);
    ids.insert(ids.end(), bpe_ids.begin(), bpe_ids.end());
  };
  if (block.document_start) out.train = document_start_;
  encode(block.train, out.train);
  encode(block.val, out.val);
}

std::vector<EncodedBlock> BlockEncoder::encode(const std::vector<Block>& blocks) {
  std::vector<EncodedBlock> out(blocks.size());
  const int workers = std::min<int>(threads_, static_cast<int>(blocks.size()));
  if (workers <= 1) {
    for (std::size_t i = 0; i < blocks.size(); ++i) encode_one(0, blocks[i], out[i]);
    return out;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto work = [&](int thread) {
    try {
      for (std::size_t i = next++; i < blocks.size(); i = next++) encode_one(thread, blocks[i], out[i]);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = blocks.size();  // the others stop at their next block
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < workers; ++t) pool.emplace_back(work, t);
    work(0);
  }  // joined
  if (error) std::rethrow_exception(error);
  return out;
}

int default_prepare_threads() {
  // The CPUs this process may run on (taskset, a container's cpuset, Slurm's
  // binding), not the machine's: more threads than those only take turns.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace launch::prepare
