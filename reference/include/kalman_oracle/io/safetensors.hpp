// The safetensors file format (https://github.com/huggingface/safetensors, README "Format"):
//
//   bytes [0, 8)        N, a little-endian u64: the size of the header
//   bytes [8, 8 + N)    the header, UTF-8 JSON: an object mapping each tensor name to
//                       {"dtype": "F32", "shape": [2, 2], "data_offsets": [begin, end]}, plus an
//                       optional "__metadata__" object whose values are all strings
//   bytes [8 + N, EOF)  the data buffer; a tensor's bytes are [begin, end) of it, little-endian,
//                       row-major
//
// The reader (io/safetensors/read.hpp) trusts nothing in the file and is as strict as the reference
// Rust implementation, stricter where that one is lax; the writer (io/safetensors/write.hpp) is
// deterministic. One concern per header under io/safetensors/: dtypes, the error and its messages,
// the byte encoding, the in-memory file, the JSON header, reading, writing, and values.
//
// Only nlohmann::json and the standard library (plus POSIX for the atomic write): no MPFR here, so
// the libFuzzer harness in fuzz/ builds from these headers alone.
#pragma once

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/encoding.hpp"
#include "kalman_oracle/io/safetensors/file.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"
#include "kalman_oracle/io/safetensors/header.hpp"
#include "kalman_oracle/io/safetensors/read.hpp"
#include "kalman_oracle/io/safetensors/values.hpp"
#include "kalman_oracle/io/safetensors/write.hpp"
