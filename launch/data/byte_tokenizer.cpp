#include "launch/data/byte_tokenizer.h"

namespace launch {

namespace {

template <typename Id>
std::string decode_ids(std::span<const Id> ids) {
  std::string text;
  text.reserve(ids.size());
  for (const Id id : ids) {
    const auto value = static_cast<std::int64_t>(id);  // one comparison for signed and unsigned ids
    if (value >= 0 && value < ByteTokenizer::kVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else {
      text.append(ByteTokenizer::kReplacement);
    }
  }
  return text;
}

}  // namespace

std::vector<std::uint16_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::uint16_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const { return decode_ids(ids); }

std::string ByteTokenizer::decode(std::span<const std::uint16_t> ids) const { return decode_ids(ids); }

}  // namespace launch
