// The former home of the tensor type, which now lives in tensor/ (tensor/tensor.hpp,
// tensor/broadcast_view.hpp; not an I/O concern). This header forwards to them only for the
// sources outside reference/, tests/ and properties/ that still name this path (fixtures/,
// examples/, fuzz/, properties/grad_*.cpp); they switch with
//   sed -i 's|kalman_oracle/io/tensor\.hpp|kalman_oracle/tensor/tensor.hpp|'
//   sed -i 's|kalman_oracle/io/validate\.hpp|kalman_oracle/tensor/validate.hpp|'
// and this header is then deleted.
#pragma once

#include "kalman_oracle/tensor/broadcast_view.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"
#include "kalman_oracle/tensor/tensor.hpp"
