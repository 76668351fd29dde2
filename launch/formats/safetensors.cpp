#include "launch/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/files/untrusted_json.h"
#include "launch/formats/untrusted_files.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian; so is every host we run on");

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a
// damaged length would otherwise ask for gigabytes).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// A regular file only: a FIFO would block the reader, a device read garbage.
ReadFile open_file(const std::string& path) {
  std::string why;
  ReadFile f = open_regular_file(path, why);
  ENGINE_CHECK(f != nullptr, "safetensors file '", path, "' ", why);
  return f;
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) value = std::ldexp(static_cast<float>(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) value = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -value : value;
}

}  // namespace

SafetensorsDType parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return SafetensorsDType::kF32;
  if (name == "BF16") return SafetensorsDType::kBF16;
  if (name == "F16") return SafetensorsDType::kF16;
  ENGINE_CHECK(false, "unsupported safetensors dtype '", name, "': expected F32, BF16 or F16");
  return SafetensorsDType::kF32;
}

const char* safetensors_dtype_name(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32: return "F32";
    case SafetensorsDType::kBF16: return "BF16";
    case SafetensorsDType::kF16: return "F16";
  }
  return "?";
}

std::size_t safetensors_dtype_bytes(SafetensorsDType dtype) { return dtype == SafetensorsDType::kF32 ? 4 : 2; }

std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // stays a (quiet) NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                                           // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_to_float(std::uint16_t value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16); }

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

WrittenFile write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                              SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the tensors in the order they are written,
  // which is the order of their bytes (readers do not depend on it).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = meta;
  }
  const std::size_t element = safetensors_dtype_bytes(dtype);
  std::uint64_t offset = 0;
  std::vector<std::int64_t> numels;
  for (const SafetensorsOutput& t : tensors) {
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) n *= d;
    numels.push_back(n);
    const std::uint64_t bytes = static_cast<std::uint64_t>(n) * element;
    header[t.name] = {{"dtype", safetensors_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t length = text.size();
  AtomicFile file(path);
  file.write(&length, sizeof length);
  file.write(text);
  std::vector<float> values;
  std::vector<std::uint16_t> halves;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    values.assign(static_cast<std::size_t>(numels[i]), 0.0f);
    tensors[i].fill(values.data());
    if (dtype == SafetensorsDType::kF32) {
      file.write(values.data(), values.size() * sizeof(float));
      continue;
    }
    ENGINE_CHECK(dtype == SafetensorsDType::kBF16, "write_safetensors writes F32 or BF16, not ", safetensors_dtype_name(dtype));
    halves.resize(values.size());
    for (std::size_t j = 0; j < values.size(); ++j) halves[j] = float_to_bf16(values[j]);
    file.write(halves.data(), halves.size() * sizeof(std::uint16_t));
  }
  return file.commit();
}

// (A function-try-block: every message below may quote the file's bytes or
// names, which must print on one line as valid UTF-8.)
SafetensorsFile::SafetensorsFile(std::string path) try : path_(std::move(path)) {
  const std::string not_regular = regular_file_problem(path_);
  ENGINE_CHECK(not_regular.empty(), "safetensors file '", path_, "' ", not_regular);
  std::error_code error;
  const std::uint64_t file_size = std::filesystem::file_size(path_, error);
  ENGINE_CHECK(!error, "cannot read safetensors file '", path_, "': ", error.message());
  ENGINE_CHECK(file_size >= 8, "safetensors file '", path_, "' is truncated: ", file_size,
               " bytes, less than the 8-byte header length");
  ReadFile f = open_file(path_);
  std::uint64_t length = 0;
  ENGINE_CHECK(std::fread(&length, 1, 8, f.get()) == 8, "safetensors file '", path_, "': cannot read the header length");
  ENGINE_CHECK(length <= file_size - 8, "safetensors file '", path_, "' is truncated or not a safetensors file: its header length ",
               length, " exceeds the ", file_size - 8, " bytes after it");
  ENGINE_CHECK(length <= kMaxHeaderBytes, "safetensors file '", path_, "': header length ", length,
               " exceeds the format's limit of ", kMaxHeaderBytes, " bytes");
  std::string text(length, '\0');
  ENGINE_CHECK(std::fread(text.data(), 1, length, f.get()) == length, "safetensors file '", path_, "': cannot read its header");
  data_start_ = 8 + length;
  const std::uint64_t data_bytes = file_size - data_start_;

  nlohmann::json header;
  try {
    check_json_text(text, "safetensors file '" + path_ + "': its header", kMaxHeaderBytes);  // nesting bounded
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ENGINE_CHECK(false, "safetensors file '", path_, "': the header is not valid JSON (", e.what(), ")");
  }
  ENGINE_CHECK(header.is_object(), "safetensors file '", path_, "': the header is not a JSON object");
  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        ENGINE_CHECK(value.is_object(), "safetensors file '", path_, "': \"__metadata__\" is ", json_excerpt(value),
                     ", expected an object of strings");
        for (const auto& [key, v] : value.items())
          metadata_[key] = v.is_string() ? v.get<std::string>() : v.dump();
        continue;
      }
      entries_.emplace(name, parse_entry(name, value, data_bytes));
    }
  } catch (const nlohmann::json::exception& e) {
    ENGINE_CHECK(false, "safetensors file '", path_, "': malformed header entry (", e.what(), ")");
  }
  // No two tensors share bytes (an empty tensor shares none).
  std::vector<const SafetensorsEntry*> by_begin;
  for (const auto& [name, e] : entries_)
    if (e.begin < e.end) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_begin.size(); ++i)
    ENGINE_CHECK(by_begin[i]->begin >= by_begin[i - 1]->end, "safetensors file '", path_, "' is damaged: tensors '",
                 by_begin[i - 1]->name, "' and '", by_begin[i]->name, "' overlap (bytes [", by_begin[i]->begin, ", ",
                 by_begin[i - 1]->end, ") of the data section)");
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

SafetensorsEntry SafetensorsFile::parse_entry(const std::string& name, const nlohmann::json& value,
                                              std::uint64_t data_bytes) const {
  const std::string where = "safetensors file '" + path_ + "': tensor '" + name + "'";
  ENGINE_CHECK(value.is_object(), where, " is ", json_excerpt(value), ", expected {\"dtype\", \"shape\", \"data_offsets\"}");
  SafetensorsEntry e;
  e.name = name;
  try {
    e.dtype = parse_safetensors_dtype(value.at("dtype").get<std::string>());
  } catch (const engine::Error& bad) {
    ENGINE_CHECK(false, where, ": ", bad.what());
  }
  // Every number checked for its type and range before any arithmetic: a
  // float would be truncated, 2^64-1 read as -1, a product could overflow.
  const nlohmann::json& shape = value.at("shape");
  ENGINE_CHECK(shape.is_array(), where, " has shape ", json_excerpt(shape), ", expected an array of dimensions");
  for (const nlohmann::json& d : shape) {
    const std::optional<std::int64_t> dim = json_integer(d, 0, std::numeric_limits<std::int64_t>::max());
    ENGINE_CHECK(dim.has_value(), where, " has shape ", json_excerpt(shape),
                 ": each dimension must be a non-negative integer");
    e.shape.push_back(*dim);
  }
  const std::optional<std::int64_t> numel = checked_product(e.shape);
  ENGINE_CHECK(numel.has_value(), where, " has shape ", format_shape(e.shape),
               ", whose element count overflows a 64-bit integer");
  std::uint64_t expected = 0;
  ENGINE_CHECK(!__builtin_mul_overflow(static_cast<std::uint64_t>(*numel), safetensors_dtype_bytes(e.dtype), &expected),
               where, " has shape ", format_shape(e.shape), ", whose size in bytes overflows a 64-bit integer");
  const nlohmann::json& offsets = value.at("data_offsets");
  std::optional<std::int64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = json_integer(offsets[0], 0, std::numeric_limits<std::int64_t>::max());
    end = json_integer(offsets[1], 0, std::numeric_limits<std::int64_t>::max());
  }
  ENGINE_CHECK(begin && end, where, " has data_offsets ", json_excerpt(offsets),
               ", expected [begin, end], two non-negative integers");
  e.begin = static_cast<std::uint64_t>(*begin);
  e.end = static_cast<std::uint64_t>(*end);
  ENGINE_CHECK(e.begin <= e.end && e.end <= data_bytes, "safetensors file '", path_, "' is truncated or damaged: tensor '",
               name, "' spans bytes [", e.begin, ", ", e.end, ") of a data section of ", data_bytes, " bytes");
  ENGINE_CHECK(e.end - e.begin == expected, where, " (", safetensors_dtype_name(e.dtype), " ", format_shape(e.shape),
               ") needs ", expected, " bytes, its offsets give ", e.end - e.begin);
  return e;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  ENGINE_CHECK(it != entries_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return it->second;
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const SafetensorsEntry& e = entry(name);
  ReadFile f = open_file(path_);
  ENGINE_CHECK(std::fseek(f.get(), static_cast<long>(data_start_ + e.begin), SEEK_SET) == 0, "seek in '", path_, "' failed");
  const std::size_t n = static_cast<std::size_t>(e.numel());
  auto read = [&](void* dst, std::size_t bytes) {
    ENGINE_CHECK(std::fread(dst, 1, bytes, f.get()) == bytes, "safetensors file '", path_, "' is truncated in tensor '", name, "'");
  };
  if (e.dtype == SafetensorsDType::kF32) {
    read(out, n * sizeof(float));
    return;
  }
  std::vector<std::uint16_t> halves(n);
  read(halves.data(), n * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < n; ++i)
    out[i] = e.dtype == SafetensorsDType::kBF16 ? bf16_to_float(halves[i]) : f16_to_float(halves[i]);
}

}  // namespace launch
