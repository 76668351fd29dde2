// A Hugging Face folder's config.json (`train --init-from FOLDER` without
// --model): model_type gpt2, llama or qwen2, their sizes, rope scaling, norm
// epsilon, tied embeddings, and the fields the engine refuses by name.
#include <cstdint>
#include <filesystem>
#include <string>

#include "launch/formats/model_files.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path config = fuzz::input_file(data, size, "config.json");
  // A Hugging Face folder also holds a model file; the shape comes from config.json alone.
  static const std::string model_file = fuzz::input_file(nullptr, 0, "model.safetensors");
  const std::string folder = config.parent_path().string();
  fuzz::accepts([&] { (void)launch::read_hf_config_shape(folder); });
  return 0;
}
