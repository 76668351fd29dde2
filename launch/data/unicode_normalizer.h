// Unicode normalization form C (NFC, UAX #15), what a tokenizer.json's
// {"type": "NFC"} normalizer does before pre-tokenizing (Qwen2's has one):
// the same text as Hugging Face `tokenizers` (Rust's unicode-normalization)
// gives, from utf8proc's Unicode tables.
//
// utf8proc decomposes and composes; the canonical ordering between the two
// (each run of combining marks stably sorted by combining class) is done
// here with std::stable_sort, because utf8proc's own is an exchange sort:
// quadratic in the length of a run of marks (64 kB of them took 5 s; ICU's
// is quadratic too), where Rust's takes 0.2 s for 1 MB.
//
// Our input is bytes: each stretch of valid UTF-8 is normalized on its own
// and bytes that start no valid character are kept as they are, between them
// (regex_split.h's barriers: the pre-tokenizers then give them pieces of
// their own).
#pragma once

#include <string>
#include <string_view>

namespace launch {

// NFC of `text`, stretch by stretch of valid UTF-8 (above). ASCII text is
// returned unchanged without being looked at character by character.
std::string normalize_nfc(std::string_view text);

// The utf8proc version and the Unicode version of its tables, for messages
// and the README: characters assigned after that version are left as they
// are.
std::string nfc_library_version();

}  // namespace launch
