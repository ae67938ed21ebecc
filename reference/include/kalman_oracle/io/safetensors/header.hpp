// The JSON header of a safetensors file, checked token by token (safetensors README, "Format": an
// object mapping each tensor name to {"dtype", "shape", "data_offsets"}, plus an optional
// "__metadata__" object of strings).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/file.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle::safetensors {

namespace detail {

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

}  // namespace kalman_oracle::safetensors
