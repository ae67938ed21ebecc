// The safetensors file format (https://github.com/huggingface/safetensors, README "Format"):
//
//   bytes [0, 8)        N, a little-endian u64: the size of the header
//   bytes [8, 8 + N)    the header, UTF-8 JSON: an object mapping each tensor name to
//                       {"dtype": "F32", "shape": [2, 2], "data_offsets": [begin, end]}, plus an
//                       optional "__metadata__" object whose values are all strings
//   bytes [8 + N, EOF)  the data buffer; a tensor's bytes are [begin, end) of it, little-endian,
//                       row-major
//
// The reader trusts nothing in the file: every size read from it is checked against the bytes that
// are actually there before anything is allocated, all arithmetic on them is overflow-checked, and
// every failure is one format_error naming the source, the tensor and the rule. It is as strict as
// the reference Rust implementation (the offsets must tile the data buffer exactly, the header is
// at most 100 MB) and stricter where that one is lax: duplicate keys, unknown fields, empty names
// and a "__metadata__" that is not an object of strings are rejected, not silently dropped.
//
// The writer is deterministic: keys sorted, compact JSON, the header padded with spaces to a
// multiple of 8 bytes (as the Python library writes it, so the data buffer starts 8-aligned), data
// laid out in sorted-name order.
//
// Only nlohmann::json and the standard library (plus POSIX for the atomic write): no MPFR here, so
// the libFuzzer harness in fuzz/ builds from this header alone.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/io/tensor.hpp"

namespace kalman_oracle::safetensors {

enum class dtype { f64, f32, f16, bf16, i64, i32, i8, u8 };

/// The dtype's name in a safetensors header.
inline std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
    case dtype::i8: return "I8";
    case dtype::u8: return "U8";
  }
  return "?";
}

/// Bytes per element.
inline std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f64:
    case dtype::i64: return 8;
    case dtype::f32:
    case dtype::i32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::i8:
    case dtype::u8: return 1;
  }
  return 0;
}

/// The dtype a header name denotes; nullopt for names this reader does not support (the format
/// also has BOOL, I16, U16, U32, U64 and the 8-bit floats, which no model here reads).
inline std::optional<dtype> parse_dtype(std::string_view name) {
  for (dtype t : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32, dtype::i8, dtype::u8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

/// Thrown for any malformed file; the message names the source (file path or label), the tensor
/// where there is one, and the rule broken, e.g.
/// "cand.safetensors: tensor 'o': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16"
class format_error : public input_error {
 public:
  using input_error::input_error;
};

struct tensor_entry {
  std::string name;
  dtype type = dtype::f64;
  shape_t shape;
  std::vector<std::uint8_t> bytes;  // little-endian, row-major, exactly element_count(shape)*dtype_size(type)

  friend bool operator==(const tensor_entry&, const tensor_entry&) = default;
};

/// The reference Rust implementation's limit: a header of at most 100 MB. This reader also caps the
/// rank: the models' tensors have a handful of axes ([B, T, H, D], states [B, H, K, V]); 16 leaves
/// room and bounds what a header can make the reader store per tensor.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
inline constexpr std::size_t max_rank = 16;

namespace detail {

inline std::string quote_name(std::string_view name) { return "'" + std::string(name) + "'"; }

/// "<source>: tensor 'x': " -- the prefix of every message about one tensor.
inline std::string tensor_prefix(std::string_view source, std::string_view name) {
  return std::string(source) + ": tensor " + quote_name(name) + ": ";
}

/// element_count(shape) * dtype_size(t), or nullopt when it overflows 64 bits. The product is
/// folded left to right as the reference Rust implementation does (checked_mul per axis), so
/// [2^32, 2^32, 0] overflows there and here alike, while [0, 2^32, 2^32] holds no element.
inline std::optional<std::uint64_t> checked_byte_count(const shape_t& shape, dtype t) {
  std::uint64_t n = 1;
  for (std::size_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
  if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dtype_size(t)), &n)) return std::nullopt;
  return n;
}

/// bytes.size() must be the shape's element count times the dtype's size; `where` prefixes the message.
inline void require_byte_count(const tensor_entry& t, const std::string& where) {
  const auto need = checked_byte_count(t.shape, t.type);
  if (!need)
    throw format_error(where + std::string(dtype_name(t.type)) + " " + to_string(t.shape) +
                       ": the byte count overflows 64 bits");
  if (t.bytes.size() != *need)
    throw format_error(where + "holds " + std::to_string(t.bytes.size()) + " bytes, but " +
                       std::string(dtype_name(t.type)) + " " + to_string(t.shape) + " needs " + std::to_string(*need));
}

/// The row-major multi-index of a flat offset, for messages.
inline std::string index_string(const shape_t& shape, std::size_t flat) {
  shape_t idx(shape.size());
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    idx[axis] = shape[axis] ? flat % shape[axis] : 0;
    if (shape[axis]) flat /= shape[axis];
  }
  return to_string(idx);
}

template <class U>
U load_le(const std::uint8_t* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(static_cast<U>(p[i]) << (8 * i));
  return v;
}

template <class U>
void store_le(std::vector<std::uint8_t>& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// The exact double of an IEEE 754 binary pattern with `fraction_bits` trailing significand bits
/// and `exponent_bits` exponent bits (binary16, bfloat16, binary32: all of them widen exactly,
/// their subnormals included, since double has more precision and range). A NaN keeps its sign and
/// its payload, moved to the top of double's fraction as a hardware widening does, but without
/// quieting a signalling NaN: the bits are data here, not an operand.
inline double binary_bits_to_double(std::uint32_t bits, int fraction_bits, int exponent_bits) {
  const std::uint32_t exponent_mask = (std::uint32_t{1} << exponent_bits) - 1;
  const bool negative = ((bits >> (fraction_bits + exponent_bits)) & 1) != 0;
  const std::uint32_t biased = (bits >> fraction_bits) & exponent_mask;
  const std::uint32_t fraction = bits & ((std::uint32_t{1} << fraction_bits) - 1);
  const std::uint64_t sign = negative ? std::uint64_t{1} << 63 : 0;
  if (biased == exponent_mask)  // inf (fraction 0) or NaN
    return std::bit_cast<double>(sign | (std::uint64_t{0x7FF} << 52) |
                                 (static_cast<std::uint64_t>(fraction) << (52 - fraction_bits)));
  if (biased == 0 && fraction == 0) return std::bit_cast<double>(sign);  // +-0
  // Normal: (2^f + fraction) 2^(biased - bias - f); subnormal: fraction 2^(1 - bias - f).
  const int bias = static_cast<int>(exponent_mask >> 1);
  const std::uint32_t significand = biased == 0 ? fraction : fraction | (std::uint32_t{1} << fraction_bits);
  const int exponent = (biased == 0 ? 1 : static_cast<int>(biased)) - bias - fraction_bits;
  const double magnitude = std::ldexp(static_cast<double>(significand), exponent);  // exact: a power-of-two scaling
  return negative ? -magnitude : magnitude;
}

/// The header, read by a SAX handler instead of into a DOM: the rules are checked as each token
/// arrives, so a 100 MB header of nested arrays or junk keys is refused at its first wrong token
/// instead of being built first, and duplicate keys (which a DOM silently merges) are seen.
/// depth_ counts the open containers: inside the root object (1) are the tensors' objects and
/// "__metadata__", inside those (2) the fields and the metadata strings, inside shape and
/// data_offsets (3) the integers. A container anywhere else is refused at its opening token.
struct header_entry {
  std::optional<dtype> type;
  std::optional<shape_t> shape;
  std::optional<std::array<std::uint64_t, 2>> offsets;
  std::vector<std::uint64_t> numbers;  // the integers of the array being read
};

class header_reader {
 public:
  using json = nlohmann::json;

  explicit header_reader(const std::string& source) : source_(source) {}

  std::map<std::string, header_entry> tensors;
  std::map<std::string, std::string> metadata;

  // --- nlohmann::json_sax interface -------------------------------------------------------
  bool null() { return scalar("null"); }
  bool boolean(bool v) { return scalar(v ? "true" : "false"); }
  // nlohmann reports only negative integers here (non-negative ones are number_unsigned), so a 0
  // can only have been written "-0".
  bool number_integer(json::number_integer_t v) { return scalar(v == 0 ? "-0" : std::to_string(v)); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ == 3) return element(v);
    return scalar(std::to_string(v));
  }
  bool number_float(json::number_float_t, const json::string_t& text) { return scalar(text); }
  bool binary(json::binary_t&) { return scalar("binary"); }
  bool string(json::string_t& v) {
    if (depth_ == 2 && in_metadata_) {
      metadata[key2_] = v;
      return true;
    }
    if (depth_ == 2 && key2_ == "dtype") {
      const auto t = parse_dtype(v);
      if (!t)
        throw format_error(tensor_prefix(source_, key1_) + "unknown dtype " + quote_name(v) +
                           " (supported: F64, F32, F16, BF16, I64, I32, I8, U8)");
      tensors[key1_].type = t;
      return true;
    }
    return scalar(json(v).dump());
  }

  bool start_object(std::size_t) {
    switch (depth_) {
      case 0: break;
      case 1:
        if (!in_metadata_) tensors[key1_];  // the entry, so that end_object can find missing fields
        break;
      default: wrong_type("object");
    }
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ == 1 && !in_metadata_) {
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (seen_fields_.count(field) == 0)
          throw format_error(tensor_prefix(source_, key1_) + "missing field '" + field +
                             "' (a tensor has exactly dtype, shape, data_offsets)");
    }
    if (depth_ == 1) {
      seen_fields_.clear();
      in_metadata_ = false;
    }
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) {  // a tensor name or "__metadata__"
      if (!root_keys_.insert(k).second) throw format_error(source_ + ": header: duplicate key " + quote_name(k));
      if (k.empty()) throw format_error(source_ + ": tensor '': empty tensor name (rule: names are non-empty)");
      key1_ = k;
      in_metadata_ = k == "__metadata__";
    } else {  // depth 2: a field of a tensor, or a metadata key
      if (!seen_fields_.insert(k).second) {
        if (in_metadata_) throw format_error(source_ + ": __metadata__: duplicate key " + quote_name(k));
        throw format_error(tensor_prefix(source_, key1_) + "duplicate field " + quote_name(k));
      }
      if (!in_metadata_ && k != "dtype" && k != "shape" && k != "data_offsets")
        throw format_error(tensor_prefix(source_, key1_) + "unknown field " + quote_name(k) +
                           " (a tensor has exactly dtype, shape, data_offsets)");
      key2_ = k;
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (depth_ != 2 || in_metadata_ || key2_ == "dtype") wrong_type("array");
    tensors[key1_].numbers.clear();
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    header_entry& e = tensors[key1_];
    if (key2_ == "shape") {
      e.shape = shape_t(e.numbers.begin(), e.numbers.end());
    } else {  // data_offsets
      if (e.numbers.size() != 2)
        throw format_error(tensor_prefix(source_, key1_) +
                           "data_offsets must be an array of two non-negative integers, got " +
                           std::to_string(e.numbers.size()) + " elements");
      e.offsets = std::array<std::uint64_t, 2>{e.numbers[0], e.numbers[1]};
    }
    e.numbers.clear();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    throw format_error(source_ + ": header: not valid JSON: " + ex.what());
  }

 private:
  /// What a value at the current place must be, for messages.
  std::string expectation() const {
    if (depth_ == 0) return source_ + ": header: must be a JSON object";
    if (depth_ == 1)
      return in_metadata_ ? source_ + ": __metadata__: must be an object of strings"
                          : tensor_prefix(source_, key1_) + "must be an object with fields dtype, shape, data_offsets";
    if (in_metadata_) return source_ + ": __metadata__: value of " + quote_name(key2_) + " must be a string";
    const std::string p = tensor_prefix(source_, key1_);
    if (depth_ == 2) {
      if (key2_ == "dtype") return p + "dtype must be a string";
      if (key2_ == "shape") return p + "shape must be an array of non-negative integers";
      return p + "data_offsets must be an array of two non-negative integers";
    }
    // depth 3: an element of shape or data_offsets
    return p + key2_ + "[" + std::to_string(tensors.at(key1_).numbers.size()) + "] must be a non-negative integer";
  }

  [[noreturn]] void wrong_type(const std::string& got) const { throw format_error(expectation() + ", got " + got); }
  bool scalar(const std::string& text) {
    wrong_type(text);
    return false;
  }

  bool element(std::uint64_t v) {
    std::vector<std::uint64_t>& numbers = tensors[key1_].numbers;
    // Refused at the first element too many, before it is stored: the header cannot make this
    // reader hold more than 16 numbers per array.
    if (key2_ == "shape" && numbers.size() == max_rank)
      throw format_error(tensor_prefix(source_, key1_) + "shape has more than " + std::to_string(max_rank) +
                         " dimensions (the limit)");
    if (key2_ == "data_offsets" && numbers.size() == 2)
      throw format_error(tensor_prefix(source_, key1_) +
                         "data_offsets must be an array of two non-negative integers, got more than 2 elements");
    numbers.push_back(v);
    return true;
  }

  const std::string& source_;
  int depth_ = 0;
  std::string key1_;  // the tensor name (or "__metadata__") being read
  std::string key2_;  // the field (or metadata key) being read
  bool in_metadata_ = false;
  std::set<std::string> root_keys_;
  std::set<std::string> seen_fields_;  // of the tensor (or metadata) being read
};

}  // namespace detail

struct file {
  std::map<std::string, std::string> metadata;  // the "__metadata__" object (string -> string); may be empty
  std::vector<tensor_entry> tensors;            // any order in memory; written sorted by name (parse returns them sorted)

  const tensor_entry* find(std::string_view name) const {
    for (const tensor_entry& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  const tensor_entry& at(std::string_view name, std::string_view source) const {
    if (const tensor_entry* t = find(name)) return *t;
    throw format_error(std::string(source) + ": no tensor " + detail::quote_name(name));
  }

  friend bool operator==(const file&, const file&) = default;
};

/// Parses and validates a whole safetensors file held in memory; `source` names it in messages.
inline file parse(std::span<const std::uint8_t> bytes, const std::string& source) {
  if (bytes.size() < 8)
    throw format_error(source + ": file is " + std::to_string(bytes.size()) +
                       " bytes, shorter than the 8-byte header length that starts a safetensors file");
  const auto header_size = detail::load_le<std::uint64_t>(bytes.data());
  if (header_size > max_header_bytes)
    throw format_error(source + ": header length " + std::to_string(header_size) + " exceeds the limit of " +
                       std::to_string(max_header_bytes) + " bytes");
  if (header_size > bytes.size() - 8)
    throw format_error(source + ": header length " + std::to_string(header_size) + " exceeds the " +
                       std::to_string(bytes.size() - 8) + " bytes after the length field (truncated file?)");
  const auto header = bytes.subspan(8, static_cast<std::size_t>(header_size));
  const auto data = bytes.subspan(8 + static_cast<std::size_t>(header_size));

  // nlohmann's lexer skips a byte order mark; JSON (RFC 8259 section 8.1) and the Rust reader do not.
  if (header.size() >= 3 && header[0] == 0xEF && header[1] == 0xBB && header[2] == 0xBF)
    throw format_error(source + ": header: starts with a UTF-8 byte order mark, which is not JSON");

  // nlohmann's lexer also takes a NUL byte for the end of the input, so "{}\0junk" would pass. JSON
  // has no raw NUL anywhere (inside strings it must be escaped), and the Rust reader refuses the
  // trailing bytes: refuse it here first.
  if (const auto nul = std::find(header.begin(), header.end(), std::uint8_t{0}); nul != header.end())
    throw format_error(source + ": header: not valid JSON: a NUL byte at offset " +
                       std::to_string(nul - header.begin()) + " of the header");

  detail::header_reader reader(source);
  const char* first = reinterpret_cast<const char*>(header.data());
  try {
    nlohmann::json::sax_parse(first, first + header.size(), &reader);
  } catch (const format_error&) {
    throw;
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw format_error(source + ": header: not valid JSON: " + e.what());
  }

  // Each tensor's own rules, then how the tensors share the data buffer.
  struct span_of {
    std::uint64_t begin, end;
    const std::string* name;
  };
  std::vector<span_of> spans;
  spans.reserve(reader.tensors.size());
  for (const auto& [name, e] : reader.tensors) {
    const std::string p = detail::tensor_prefix(source, name);
    // end_object checked that all three fields are present, and the SAX events their types.
    const auto [begin, end] = *e.offsets;
    const std::string offsets = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (begin > end) throw format_error(p + offsets + " run backwards (begin > end)");
    if (end > data.size())
      throw format_error(p + offsets + " end beyond the " + std::to_string(data.size()) + "-byte data buffer");
    const auto need = detail::checked_byte_count(*e.shape, *e.type);
    if (!need)
      throw format_error(p + std::string(dtype_name(*e.type)) + " " + to_string(*e.shape) +
                         ": the byte count overflows 64 bits");
    if (end - begin != *need)
      throw format_error(p + offsets + " hold " + std::to_string(end - begin) + " bytes, but " +
                         std::string(dtype_name(*e.type)) + " " + to_string(*e.shape) + " needs " +
                         std::to_string(*need));
    spans.push_back({begin, end, &name});
  }

  // The reference Rust implementation sorts by offsets and requires each tensor to start where the
  // previous one ended and the last to end at the buffer's end: no overlap, no hole, no trailing
  // bytes. Empty tensors may sit at any boundary.
  std::sort(spans.begin(), spans.end(), [](const span_of& a, const span_of& b) {
    return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
  });
  std::uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const span_of& s : spans) {
    const std::string offsets = "data_offsets [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + "]";
    if (s.begin < covered)
      throw format_error(detail::tensor_prefix(source, *s.name) + offsets + " overlap tensor " +
                         detail::quote_name(*previous) + ", which ends at " + std::to_string(covered) +
                         " (rule: tensors tile the data buffer)");
    if (s.begin > covered)
      throw format_error(detail::tensor_prefix(source, *s.name) + offsets + " leave a hole: bytes [" +
                         std::to_string(covered) + ", " + std::to_string(s.begin) +
                         ") belong to no tensor (rule: tensors tile the data buffer)");
    covered = s.end;
    previous = s.name;
  }
  if (covered != data.size())
    throw format_error(source + ": data buffer is " + std::to_string(data.size()) + " bytes, but the tensors cover " +
                       std::to_string(covered) + ": bytes [" + std::to_string(covered) + ", " +
                       std::to_string(data.size()) + ") belong to no tensor (rule: tensors tile the data buffer)");

  file out;
  out.metadata = std::move(reader.metadata);
  out.tensors.reserve(reader.tensors.size());
  for (auto& [name, e] : reader.tensors) {
    const auto [begin, end] = *e.offsets;
    out.tensors.push_back(tensor_entry{name, *e.type, std::move(*e.shape),
                                       std::vector<std::uint8_t>(data.begin() + static_cast<std::ptrdiff_t>(begin),
                                                                 data.begin() + static_cast<std::ptrdiff_t>(end))});
  }
  return out;
}

/// Reads and parses the whole file at `path`; I/O failures are format_errors naming the path.
inline file read(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw format_error(source + ": cannot read: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw format_error(source + ": cannot open: " + std::strerror(errno));
  // Read in chunks rather than trusting a size up front: the allocation follows the bytes that
  // really arrive (the file may change or be a pipe).
  std::vector<std::uint8_t> bytes;
  std::array<char, 1 << 16> chunk;
  while (in) {
    in.read(chunk.data(), chunk.size());
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + in.gcount());
  }
  if (in.bad()) throw format_error(source + ": cannot read: " + std::strerror(errno));
  return parse(bytes, source);
}

/// The deterministic bytes of `f`. Throws format_error (source "serialise") for a file that parse
/// would refuse: an empty, duplicate or reserved name, more than 16 dimensions, bytes that do not
/// match dtype and shape, a name or metadata string that is not UTF-8.
inline std::vector<std::uint8_t> serialise(const file& f) {
  using json = nlohmann::json;
  const std::string source = "serialise";
  const auto utf8 = [&](const std::string& s, const std::string& what) {
    try {
      (void)json(s).dump();  // the strict error handler throws on invalid UTF-8
    } catch (const json::exception&) {
      throw format_error(source + ": " + what + " is not valid UTF-8");
    }
  };

  std::vector<const tensor_entry*> order;
  order.reserve(f.tensors.size());
  for (const tensor_entry& t : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const tensor_entry* a, const tensor_entry* b) { return a->name < b->name; });

  json header = json::object();
  if (!f.metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : f.metadata) {
      utf8(k, "__metadata__ key " + detail::quote_name(k));
      utf8(v, "__metadata__ value of " + detail::quote_name(k));
      meta[k] = v;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const tensor_entry& t = *order[i];
    const std::string p = detail::tensor_prefix(source, t.name);
    if (t.name.empty()) throw format_error(p + "empty tensor name (rule: names are non-empty)");
    if (t.name == "__metadata__") throw format_error(p + "the name is reserved for the metadata");
    if (i > 0 && order[i - 1]->name == t.name) throw format_error(p + "duplicate tensor name");
    utf8(t.name, "tensor name " + detail::quote_name(t.name));
    if (t.shape.size() > max_rank)
      throw format_error(p + "shape has " + std::to_string(t.shape.size()) + " dimensions, more than the limit of " +
                         std::to_string(max_rank));
    detail::require_byte_count(t, p);
    const std::uint64_t end = offset + t.bytes.size();
    header[t.name] = {{"dtype", std::string(dtype_name(t.type))}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }

  std::string text = header.dump();  // compact: no spaces; keys sorted (nlohmann's object is a std::map)
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > max_header_bytes)
    throw format_error(source + ": header is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                       std::to_string(max_header_bytes));
  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + offset);
  detail::store_le<std::uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const tensor_entry* t : order) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

/// Writes `f` to `path` through a temporary file in the same directory (same file system, so the
/// rename is atomic): readers see the old file or the whole new one, never a half-written one. On
/// failure the temporary is removed and std::runtime_error names the path; an invalid `f` throws
/// serialise's format_error before anything is touched.
inline void write_atomic(const std::filesystem::path& path, const file& f) {
  const std::vector<std::uint8_t> bytes = serialise(f);
  const auto fail = [&](const std::string& what, int err) {
    throw std::runtime_error("write_atomic: cannot write '" + path.string() + "': " + what + ": " +
                             std::strerror(err));
  };
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");

  // A fresh name, created exclusively (O_EXCL), so two writers never share a temporary; mode 0666
  // lets the umask decide the permissions as for any new file.
  static std::atomic<unsigned> counter{0};
  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                  std::to_string(counter.fetch_add(1)));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt > 100)) fail("cannot create a temporary file in '" + dir.string() + "'", errno);
  }
  const auto fail_and_remove = [&](const std::string& what) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    fail(what, err);
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_and_remove("write");
    }
    done += static_cast<std::size_t>(n);
  }
  // Data on disk before the rename makes it visible: otherwise a crash could leave a renamed but
  // empty file.
  if (::fsync(fd) != 0) fail_and_remove("fsync");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail_and_remove("close");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail_and_remove("rename");
  // Best effort: make the rename itself durable.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// --- building and reading tensors ---------------------------------------------------------------

namespace detail {
template <class U, class T>
tensor_entry make_entry(std::string name, dtype type, shape_t shape, std::span<const T> values) {
  const auto need = checked_byte_count(shape, type);
  if (!need || *need / dtype_size(type) != values.size())
    throw input_error(name + ": shape " + to_string(shape) + " holds " +
                      (need ? std::to_string(*need / dtype_size(type)) : std::string("too many")) +
                      " elements, got " + std::to_string(values.size()));
  tensor_entry t{std::move(name), type, std::move(shape), {}};
  t.bytes.reserve(*need);
  for (const T& v : values) store_le<U>(t.bytes, std::bit_cast<U>(v));
  return t;
}
}  // namespace detail

inline tensor_entry make_f64(std::string name, shape_t shape, std::span<const double> values) {
  return detail::make_entry<std::uint64_t>(std::move(name), dtype::f64, std::move(shape), values);
}
inline tensor_entry make_f32(std::string name, shape_t shape, std::span<const float> values) {
  return detail::make_entry<std::uint32_t>(std::move(name), dtype::f32, std::move(shape), values);
}
/// Raw binary16 or bfloat16 patterns (the rounding to them is rounding.hpp's job).
inline tensor_entry make_bits16(std::string name, dtype type, shape_t shape, std::span<const std::uint16_t> bits) {
  if (type != dtype::f16 && type != dtype::bf16)
    throw input_error(name + ": make_bits16 takes F16 or BF16, got " + std::string(dtype_name(type)));
  return detail::make_entry<std::uint16_t>(std::move(name), type, std::move(shape), bits);
}
inline tensor_entry make_i64(std::string name, shape_t shape, std::span<const std::int64_t> values) {
  return detail::make_entry<std::uint64_t>(std::move(name), dtype::i64, std::move(shape), values);
}
inline tensor_entry make_i8(std::string name, shape_t shape, std::span<const std::int8_t> values) {
  return detail::make_entry<std::uint8_t>(std::move(name), dtype::i8, std::move(shape), values);
}

/// The exact value of an IEEE 754 binary16 pattern.
inline double half_to_double(std::uint16_t bits) { return detail::binary_bits_to_double(bits, 10, 5); }
/// The exact value of a bfloat16 pattern (binary32's top half).
inline double bfloat16_to_double(std::uint16_t bits) { return detail::binary_bits_to_double(bits, 7, 8); }

/// Every element as a double: exact for the float dtypes (subnormals, infinities, -0 and NaN
/// payloads kept) and for integers a double holds; an I64 element it does not (|v| > 2^53 and not
/// a multiple of the spacing there) is a format_error naming the tensor and the element.
inline std::vector<double> to_doubles(const tensor_entry& t) {
  const std::string p = "tensor " + detail::quote_name(t.name) + ": ";
  detail::require_byte_count(t, p);
  const std::size_t n = t.bytes.size() / dtype_size(t.type);
  const std::uint8_t* b = t.bytes.data();
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.type) {
      case dtype::f64: out[i] = std::bit_cast<double>(detail::load_le<std::uint64_t>(b + 8 * i)); break;
      case dtype::f32: out[i] = detail::binary_bits_to_double(detail::load_le<std::uint32_t>(b + 4 * i), 23, 8); break;
      case dtype::f16: out[i] = half_to_double(detail::load_le<std::uint16_t>(b + 2 * i)); break;
      case dtype::bf16: out[i] = bfloat16_to_double(detail::load_le<std::uint16_t>(b + 2 * i)); break;
      case dtype::i64: {
        const auto v = std::bit_cast<std::int64_t>(detail::load_le<std::uint64_t>(b + 8 * i));
        const auto d = static_cast<double>(v);  // rounds when |v| > 2^53
        // 2^63 itself is out of int64's range: the cast back is only defined below it.
        if (d >= 9223372036854775808.0 || static_cast<std::int64_t>(d) != v)
          throw format_error(p + "I64 element " + detail::index_string(t.shape, i) + " is " + std::to_string(v) +
                             ", which a double cannot hold exactly");
        out[i] = d;
        break;
      }
      case dtype::i32: out[i] = std::bit_cast<std::int32_t>(detail::load_le<std::uint32_t>(b + 4 * i)); break;
      case dtype::i8: out[i] = static_cast<std::int8_t>(b[i]); break;
      case dtype::u8: out[i] = b[i]; break;
    }
  }
  return out;
}

/// Every element of an integer tensor (I64, I32, I8, U8) as an int64; a float dtype is a
/// format_error (no silent truncation of a value that was meant as a real).
inline std::vector<std::int64_t> to_int64s(const tensor_entry& t) {
  const std::string p = "tensor " + detail::quote_name(t.name) + ": ";
  switch (t.type) {
    case dtype::f64:
    case dtype::f32:
    case dtype::f16:
    case dtype::bf16:
      throw format_error(p + "dtype " + std::string(dtype_name(t.type)) +
                         " is a floating-point type; integers are read from I64, I32, I8 or U8");
    default: break;
  }
  detail::require_byte_count(t, p);
  const std::size_t n = t.bytes.size() / dtype_size(t.type);
  const std::uint8_t* b = t.bytes.data();
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.type) {
      case dtype::i64: out[i] = std::bit_cast<std::int64_t>(detail::load_le<std::uint64_t>(b + 8 * i)); break;
      case dtype::i32: out[i] = std::bit_cast<std::int32_t>(detail::load_le<std::uint32_t>(b + 4 * i)); break;
      case dtype::i8: out[i] = static_cast<std::int8_t>(b[i]); break;
      default: out[i] = b[i]; break;  // u8
    }
  }
  return out;
}

}  // namespace kalman_oracle::safetensors
