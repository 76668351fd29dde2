// The safetensors file format (Hugging Face, github.com/huggingface/safetensors),
// a small reader and writer of our own:
//   8 bytes   N, the header's length, unsigned little-endian
//   N bytes   a JSON object: {"NAME": {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
//             padded with spaces to a multiple of 8 (so the data is aligned)
//   the rest  every tensor's raw little-endian bytes, row-major; offsets are
//             relative to the end of the header.
// Only what a GPT needs is read: F32, BF16 and F16, converted to f32. A file
// is refused, on one line naming the file and what is wrong, when it is not
// a regular file, its header length exceeds the file, its JSON does not
// parse, a dtype is unknown, a shape or an offset is not a non-negative
// integer, an element count or a size overflows 64 bits, a tensor's bytes do
// not match its shape, its offsets fall outside the data, or two tensors
// overlap. Every field is checked before any byte of a tensor is read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/files/atomic_file.h"

namespace launch {

enum class SafetensorsDType { kF32, kBF16, kF16 };

SafetensorsDType parse_safetensors_dtype(const std::string& name);  // "F32" | "BF16" | "F16", else throws
const char* safetensors_dtype_name(SafetensorsDType dtype);
std::size_t safetensors_dtype_bytes(SafetensorsDType dtype);

// fp32 -> bf16 rounding to nearest, ties to even (NaN kept a NaN).
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t value);

struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to the start of the data
  std::int64_t numel() const;
};

// One tensor to write: its values as f32 in the file's row-major layout,
// produced on demand (so the writer holds one tensor's copy at a time).
struct SafetensorsOutput {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<void(float* out)> fill;  // writes numel() values
};

// Writes `tensors` in order, converted to `dtype`, under a temporary name
// renamed into place (launch/files/atomic_file.h). `metadata` becomes
// "__metadata__" (string values only, as the format requires).
WrittenFile write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                              SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);

// A parsed, validated file; tensors are read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming the missing tensor
  // Reads tensor `name` converted to f32 into out[0, numel).
  void read_f32(const std::string& name, float* out) const;

 private:
  // One tensor's header entry, every field checked (types, ranges, overflow,
  // offsets against the data section's `data_bytes`).
  SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value, std::uint64_t data_bytes) const;

  std::string path_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

std::string format_shape(const std::vector<std::int64_t>& shape);  // "[768, 2304]"

}  // namespace launch
