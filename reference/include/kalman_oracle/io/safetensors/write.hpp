// Writing a safetensors file. The writer is deterministic: keys sorted, compact JSON, the header
// padded with spaces to a multiple of 8 bytes (as the Python library writes it, so the data buffer
// starts 8-aligned), data laid out in sorted-name order; and the file appears atomically.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/encoding.hpp"
#include "kalman_oracle/io/safetensors/file.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"

namespace kalman_oracle::safetensors {

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
    throw std::runtime_error("write_atomic: cannot write '" + path.string() + "': " + what + ": " + std::strerror(err));
  };
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");

  // A fresh name, created exclusively (O_EXCL), so two writers never share a temporary; mode 0666
  // lets the umask decide the permissions as for any new file.
  static std::atomic<unsigned> counter{0};
  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    // Appended piece by piece: GCC 12 misreads "." + a std::string temporary, inlined here, as a copy
    // of ~2^63 bytes (a false -Wstringop-overflow).
    std::string name(1, '.');
    name.append(path.filename().string()).append(".tmp.").append(std::to_string(::getpid()));
    name.append(1, '.').append(std::to_string(counter.fetch_add(1)));
    temp = dir / name;
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt > 100))
      fail("cannot create a temporary file in '" + dir.string() + "'", errno);
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

}  // namespace kalman_oracle::safetensors
