// libFuzzer harness for the safetensors reader (reference/include/kalman_oracle/io/safetensors.hpp).
//
// The reader takes files from outside (candidate kernels' outputs), so every byte string must end
// in a parsed file or a format_error: no crash, no sanitizer report, no other exception. What
// parse accepts must also survive the writer: serialise -> parse gives the same file, and
// serialising again gives the same bytes (the writer is deterministic and canonical).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "kalman_oracle/io/safetensors.hpp"

namespace st = kalman_oracle::safetensors;

namespace {

[[noreturn]] void fail(const char* what, const char* detail = "") {
  std::fprintf(stderr, "safetensors_fuzzer: %s %s\n", what, detail);
  std::abort();
}

bool is_float(st::dtype t) {
  return t == st::dtype::f64 || t == st::dtype::f32 || t == st::dtype::f16 || t == st::dtype::bf16;
}

/// How many tensors carry `name`, or 0 when find and at disagree (1 for a parsed file: names are unique).
int find_count(const st::file& f, const std::string& name) {
  const st::tensor_entry* p = f.find(name);
  if (p == nullptr || &f.at(name, "fuzz") != p) return 0;
  int n = 0;
  for (const st::tensor_entry& t : f.tensors) n += t.name == name;
  return n;
}

void check_accepted(const st::file& f) {
  const std::vector<std::uint8_t> bytes = st::serialise(f);  // must not throw for a parsed file
  if ((bytes.size() < 8) || ((bytes[0] | (bytes[1] << 8)) % 8 != 0)) fail("serialise: header not padded to 8");
  const st::file again = st::parse(bytes, "reserialised");
  if (!(again == f)) fail("serialise -> parse changed the file");
  if (st::serialise(again) != bytes) fail("serialise is not deterministic");

  for (const st::tensor_entry& t : f.tensors) {
    if (find_count(f, t.name) != 1) fail("find does not find", t.name.c_str());
    if (is_float(t.type)) {
      if (st::to_doubles(t).size() * st::dtype_size(t.type) != t.bytes.size()) fail("to_doubles size", t.name.c_str());
      try {
        (void)st::to_int64s(t);
        fail("to_int64s accepted a float dtype", t.name.c_str());
      } catch (const st::format_error&) {
      }
    } else {
      if (st::to_int64s(t).size() * st::dtype_size(t.type) != t.bytes.size()) fail("to_int64s size", t.name.c_str());
      try {
        (void)st::to_doubles(t);  // may refuse an I64 beyond 2^53, and only with format_error
      } catch (const st::format_error&) {
        if (t.type != st::dtype::i64) fail("to_doubles refused a small integer dtype", t.name.c_str());
      }
    }
  }
}

/// One input through parse and, when accepted, through everything downstream.
void exercise(std::span<const std::uint8_t> bytes) {
  st::file f;
  try {
    f = st::parse(bytes, "fuzz");
  } catch (const st::format_error&) {
    return;  // the one acceptable way to refuse
  } catch (const std::exception& e) {
    fail("parse threw a non-format_error:", e.what());
  } catch (...) {
    fail("parse threw a non-std exception");
  }
  try {
    check_accepted(f);
  } catch (const std::exception& e) {
    fail("an accepted file failed a later step:", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  exercise({data, size});
  // A mutation that edits the header almost always breaks the 8-byte length in front of it, and
  // the file dies at the first check. So the same bytes are also tried with the length repaired to
  // end the header at the last '}' (and the space padding after it), which lets mutations reach
  // the JSON and tensor rules.
  if (size > 8) {
    std::size_t last = size;
    for (std::size_t i = size; i-- > 8;)
      if (data[i] == '}') {
        last = i;
        break;
      }
    if (last != size) {
      while (last + 1 < size && data[last + 1] == ' ') ++last;
      std::vector<std::uint8_t> repaired(data, data + size);
      const std::uint64_t n = last + 1 - 8;
      for (int b = 0; b < 8; ++b) repaired[b] = static_cast<std::uint8_t>(n >> (8 * b));
      if (!std::equal(repaired.begin(), repaired.begin() + 8, data)) exercise(repaired);
    }
  }
  return 0;
}
