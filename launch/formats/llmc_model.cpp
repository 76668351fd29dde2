#include "launch/formats/llmc_model.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/formats/untrusted_files.h"
#include "model/gpt_params.h"

namespace launch {

using model::GptConfig;
using model::ParamInfo;
using model::ParamRegistry;

namespace {

constexpr int kHeaderInts = 256;

// The per-layer tensors of llm.c's file, in its order.
constexpr std::array<const char*, 12> kLlmcLayerTensors = {
    "ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
    "ln_2.weight",      "ln_2.bias",      "mlp.fc.weight",   "mlp.fc.bias",   "mlp.proj.weight",  "mlp.proj.bias"};

// Every registry entry in llm.c's file order.
std::vector<const ParamInfo*> llmc_order(const GptConfig& config, const ParamRegistry& registry) {
  std::vector<const ParamInfo*> order{&registry.find("wte"), &registry.find("wpe")};
  for (const char* suffix : kLlmcLayerTensors)
    for (std::int64_t l = 0; l < config.n_layer; ++l) order.push_back(&registry.find(model::block_param_name(l, suffix)));
  order.push_back(&registry.find("ln_f.weight"));
  order.push_back(&registry.find("ln_f.bias"));
  return order;
}

}  // namespace

std::string llmc_format_refusal(const GptConfig& config) {
  if (config.is_llama()) return "a " + std::string(model::architecture_name(config.arch)) + " model";
  if (!config.tied_embeddings) return "an untied output head (lm_head.weight)";
  if (config.norm_eps != GptConfig::kGpt2NormEps) return "a layer-norm eps other than GPT-2's 1e-5";
  return "";
}

namespace {

// A regular file only: a FIFO would block the reader, a device read garbage.
ReadFile open_model(const std::string& path) {
  std::string why;
  ReadFile f = open_regular_file(path, why);
  ENGINE_CHECK(f != nullptr, "model file '", path, "' ", why);
  return f;
}

void read_exact(std::FILE* f, void* out, std::size_t bytes, const std::string& path) {
  ENGINE_CHECK(std::fread(out, 1, bytes, f) == bytes, "model file '", path, "' is truncated: expected ", bytes,
               " more bytes");
}

}  // namespace

GptConfig read_llmc_config(const std::string& path) {
  ReadFile f = open_model(path);
  std::array<std::int32_t, kHeaderInts> header{};
  read_exact(f.get(), header.data(), sizeof header, path);
  ENGINE_CHECK(header[0] == kLlmcModelMagic, "model file '", path, "' has magic ", header[0], ", expected ",
               kLlmcModelMagic, " (an llm.c GPT-2 checkpoint)");
  ENGINE_CHECK(header[1] == kLlmcModelVersionFp32, "model file '", path, "' has version ", header[1],
               ", expected ", kLlmcModelVersionFp32, " (fp32; llm.c's bf16 version 5 is not read)");
  GptConfig c;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.n_layer = header[4];
  c.n_head = header[5];
  c.n_embd = header[6];
  c.validate();
  ENGINE_CHECK(header[7] == c.padded_vocab(), "model file '", path, "' pads the vocabulary to ", header[7],
               ", this engine pads ", c.vocab_size, " to ", c.padded_vocab());
  return c;
}

WrittenFile write_llmc_model(const std::string& path, const GptConfig& config, const ParamRegistry& registry,
                      const float* master) {
  const std::string refusal = llmc_format_refusal(config);
  ENGINE_CHECK(refusal.empty(), "model file '", path, "': llm.c's GPT-2 format cannot hold ", refusal);
  std::array<std::int32_t, kHeaderInts> header{};
  header[0] = kLlmcModelMagic;
  header[1] = kLlmcModelVersionFp32;
  header[2] = static_cast<std::int32_t>(config.max_seq_len);
  header[3] = static_cast<std::int32_t>(config.vocab_size);
  header[4] = static_cast<std::int32_t>(config.n_layer);
  header[5] = static_cast<std::int32_t>(config.n_head);
  header[6] = static_cast<std::int32_t>(config.n_embd);
  header[7] = static_cast<std::int32_t>(config.padded_vocab());
  AtomicFile file(path);
  file.write(header.data(), sizeof header);
  for (const ParamInfo* p : llmc_order(config, registry)) {
    ENGINE_CHECK(p->shape == p->global_shape, "write_llmc_model needs the whole model; '", p->name,
                 "' is a slice");
    file.write(master + p->offset, static_cast<std::size_t>(p->numel()) * sizeof(float));
  }
  return file.commit();
}

void read_llmc_model(const std::string& path, const GptConfig& expected, const ParamRegistry& registry, float* master) {
  const GptConfig found = read_llmc_config(path);
  ENGINE_CHECK(found == expected, "model file '", path, "' holds a model of another shape: ", found.describe(),
               "; this run's model is ", expected.describe());
  ReadFile f = open_model(path);
  ENGINE_CHECK(std::fseek(f.get(), kHeaderInts * sizeof(std::int32_t), SEEK_SET) == 0, "seek in '", path, "' failed");
  for (const ParamInfo* p : llmc_order(expected, registry)) {
    float* values = master + p->offset;
    read_exact(f.get(), values, static_cast<std::size_t>(p->numel()) * sizeof(float), path);
    for (std::int64_t i = 0; i < p->numel(); ++i)
      ENGINE_CHECK(std::isfinite(values[i]), "model file '", path, "': tensor '", p->name, "' holds ", values[i],
                   " at element ", i, " (llm.c files carry no checksum; this one is damaged or diverged)");
  }
  char extra;
  ENGINE_CHECK(std::fread(&extra, 1, 1, f.get()) == 0, "model file '", path,
               "' is longer than its header's model needs (trailing bytes)");
}

}  // namespace launch
