// `prepare`'s encoding step: blocks of text (prepare_split.h) turned into ids
// on several threads, handed back in the blocks' order.
//
// Every block is encoded on its own already (a BPE never merges across a cut,
// see the top of launch/prepare_main.cpp), so blocks can be encoded in any
// order on any thread and the shards are byte-identical for every --threads.
// Each thread has its own tokenizer: BpeTokenizer caches pre-tokens in a
// mutable table (bpe_tokenizer.h) and is not safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "launch/data/bpe_tokenizer.h"
#include "launch/data/prepare_split.h"

namespace launch::prepare {

struct EncodedBlock {
  std::vector<std::uint32_t> train, val;  // train starts with the document-start ids where the block starts a file
};

class BlockEncoder {
 public:
  // tokenizer_path: a tokenizer.json, or "" for the byte-level tokenizer.
  // threads >= 1 (each loads the tokenizer once).
  BlockEncoder(const std::string& tokenizer_path, int threads);
  ~BlockEncoder();

  // The first thread's tokenizer, or nullptr for bytes (for what prepare
  // prints about it).
  const BpeTokenizer* bpe() const { return bpe_.empty() ? nullptr : &bpe_.front(); }
  int threads() const { return threads_; }
  std::int32_t vocab_size() const;

  // Encodes every block; out[i] is blocks[i]'s ids. Blocks are taken by the
  // threads one at a time (they differ in size: a file's last is short).
  std::vector<EncodedBlock> encode(const std::vector<Block>& blocks);

 private:
  void encode_one(int thread, const Block& block, EncodedBlock& out) const;

  int threads_;
  std::vector<BpeTokenizer> bpe_;             // one per thread; empty: bytes
  std::vector<std::uint32_t> document_start_;  // ids before each document
};

// The number of threads `prepare` uses when --threads is not given: the
// cores this process may run on.
int default_prepare_threads();

}  // namespace launch::prepare
