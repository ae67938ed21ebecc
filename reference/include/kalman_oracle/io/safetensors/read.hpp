// Reading a safetensors file. The reader trusts nothing in the file: every size read from it is
// checked against the bytes that are actually there before anything is allocated, all arithmetic
// on them is overflow-checked, and every failure is one format_error naming the source, the tensor
// and the rule. It is as strict as the reference Rust implementation (the offsets must tile the
// data buffer exactly, the header is at most 100 MB) and stricter where that one is lax: duplicate
// keys, unknown fields, empty names and a "__metadata__" that is not an object of strings are
// rejected, not silently dropped.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/encoding.hpp"
#include "kalman_oracle/io/safetensors/file.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"
#include "kalman_oracle/io/safetensors/header.hpp"

namespace kalman_oracle::safetensors {

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

namespace detail {

/// The data-buffer length a header declares (the largest data_offsets end; 0 without tensors).
/// The header is parsed by the same reader as parse(), so a malformed one fails with the same
/// message; the tensors' own rules are left to parse().
inline std::uint64_t declared_data_bytes(std::span<const std::uint8_t> header, const std::string& source) {
  if (std::find(header.begin(), header.end(), std::uint8_t{0}) != header.end())
    throw format_error(source + ": header: not valid JSON: a NUL byte in the header");
  header_reader reader(source);
  const char* first = reinterpret_cast<const char*>(header.data());
  try {
    nlohmann::json::sax_parse(first, first + header.size(), &reader);
  } catch (const format_error&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    throw format_error(source + ": header: not valid JSON: " + e.what());
  }
  std::uint64_t end = 0;
  for (const auto& [name, e] : reader.tensors) end = std::max(end, (*e.offsets)[1]);
  return end;
}

inline void read_exactly(std::ifstream& in, std::uint8_t* to, std::uint64_t count, const std::string& source) {
  in.read(reinterpret_cast<char*>(to), static_cast<std::streamsize>(count));
  if (static_cast<std::uint64_t>(in.gcount()) != count)
    throw format_error(source + ": cannot read: the file ended early (it changed while being read?)");
}

}  // namespace detail

/// Reads and parses the file at `path`; I/O failures are format_errors naming the path.
///
/// Only regular files are read (a FIFO would block, /dev/zero never ends), and no byte is read or
/// allocated beyond what the file's header declares: the 8-byte length and the header (at most
/// max_header_bytes) come first, the file's size must then equal 8 + header + the declared data
/// buffer, and only then is the data read. A 2 GB sparse file with a broken header is refused after
/// reading its first bytes.
inline file read(const std::filesystem::path& path) {
  const std::string source = path.string();
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // follows symbolic links: their target counts
  if (ec) throw format_error(source + ": cannot open: " + ec.message());
  if (fs::is_directory(status)) throw format_error(source + ": cannot read: is a directory");
  if (!fs::is_regular_file(status))
    throw format_error(source + ": cannot read: not a regular file (a device, FIFO or socket; rule: fixtures and " +
                       "candidates are regular files)");
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw format_error(source + ": cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw format_error(source + ": cannot open: " + std::strerror(errno));

  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::min<std::uint64_t>(size, 8)));
  detail::read_exactly(in, bytes.data(), bytes.size(), source);
  if (size < 8) return parse(bytes, source);  // parse names the short file
  const auto header_size = detail::load_le<std::uint64_t>(bytes.data());
  if (header_size > max_header_bytes || header_size > size - 8) return parse(bytes, source);  // ditto
  bytes.resize(static_cast<std::size_t>(8 + header_size));
  detail::read_exactly(in, bytes.data() + 8, header_size, source);
  const std::uint64_t declared = detail::declared_data_bytes(std::span<const std::uint8_t>(bytes).subspan(8), source);
  if (declared > size - 8 - header_size)
    throw format_error(source + ": file is " + std::to_string(size) + " bytes, but its header declares a " +
                       std::to_string(declared) + "-byte data buffer after the " + std::to_string(8 + header_size) +
                       " bytes of length and header (truncated file?)");
  if (declared < size - 8 - header_size)
    throw format_error(source + ": data buffer is " + std::to_string(size - 8 - header_size) +
                       " bytes, but the tensors cover " + std::to_string(declared) +
                       " (rule: tensors tile the data buffer)");
  bytes.resize(static_cast<std::size_t>(size));
  detail::read_exactly(in, bytes.data() + 8 + header_size, declared, source);
  return parse(bytes, source);
}

}  // namespace kalman_oracle::safetensors
