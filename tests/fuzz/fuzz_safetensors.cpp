// A .safetensors file (`--init-from`, Hugging Face folders): the 8-byte
// header length, the JSON header (dtypes, shapes, data offsets, metadata)
// and the data section. An accepted file then reads every tensor it lists,
// as a reader of the model does.
#include <cstdint>
#include <optional>
#include <vector>

#include "launch/formats/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::input_file(data, size, "model.safetensors");
  std::optional<launch::SafetensorsFile> file;
  if (!fuzz::accepts([&] { file.emplace(path); })) return 0;
  std::vector<float> values;
  for (const auto& tensor : file->entries()) {
    values.resize(static_cast<std::size_t>(tensor.second.numel()));
    fuzz::accepts([&] { file->read_f32(tensor.first, values.data()); });
  }
  return 0;
}
