// Model files in llm.c's GPT-2 format (Karpathy, llm.c train_gpt2.c), which
// --init-from reads and --save-model and every single-rank checkpoint write:
// a 256 int32 header (magic 20240326, version 3 = fp32, max_seq_len,
// vocab_size, n_layer, n_head, n_embd, padded_vocab), then the tensors in
// llm.c's order: wte, wpe, then each of ln1w, ln1b, qkvw, qkvb, attprojw,
// attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb stacked over layers, then
// lnfw, lnfb.
//
// The format has no checksum, so a file read is at least checked for
// non-finite values (a damaged exponent byte shows up as a NaN or infinity
// far more often than as a plausible number).
#pragma once

#include <string>

#include "launch/files/atomic_file.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

constexpr int kLlmcModelMagic = 20240326;
constexpr int kLlmcModelVersionFp32 = 3;

// "" when llm.c's format can hold `config`'s model, else why not: it holds a
// GPT-2 with a head tied to wte and GPT-2's layer-norm eps, and nothing else.
std::string llmc_format_refusal(const model::GptConfig& config);

model::GptConfig read_llmc_config(const std::string& path);
// `master` is a flat f32 buffer laid out by `registry` (whole, unsharded model).
// Returns the file's size and checksum.
WrittenFile write_llmc_model(const std::string& path, const model::GptConfig& config, const model::ParamRegistry& registry,
                      const float* master);
// Refuses a file whose shape differs from `expected`, naming both shapes, a
// truncated or over-long file, and one holding a NaN or infinity, naming the
// tensor.
void read_llmc_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                     float* master);

}  // namespace launch
