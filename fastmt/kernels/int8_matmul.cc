// fastmt's int8 matrix product for x86 CPUs with AVX-512 VNNI, as an XLA FFI custom call.
//
// Why it exists (docs/BENCHMARKS.md section 9): XLA:CPU has no int8 matrix-vector product. It widens int8
// weights to int32 once, outside the decoding loop, so every batch-1 step reads 4-byte weights, and it hands
// only products of two rows or more to YNNPACK's int8 GEMM. This kernel reads the 1-byte weights, packed once
// for `vpdpbusd`, and quantizes the activations itself, so a decoder step's products cost what their weights'
// bytes cost. The blocks of columns are shared out between the calling thread and XLA's intra-op threads
// (parallel_blocks.h): one core reads memory at well below the rate two do.
//
// The arithmetic (fastmt.quantize.int8_matmul's, to the last bit) and the packed weights' layout: int8_blocks.h.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "int8_blocks.h"
#include "parallel_blocks.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kBlock = fastmt::kInt8Block;  // output columns per 512-bit accumulator
using fastmt::BlockTimesRows;
using fastmt::QuantizeRow;

ffi::Error Int8MatmulImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> packed, ffi::Buffer<ffi::S32> colsum,
                          ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> out, ffi::ThreadPool pool) {
  if (!fastmt::Int8CpuSupported()) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "fastmt_int8_matmul needs AVX-512 VNNI");
  }
  auto x_dims = x.dimensions();
  auto p_dims = packed.dimensions();
  if (x_dims.size() != 2 || p_dims.size() != 3 || p_dims[2] != 64) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "fastmt_int8_matmul: x [M, K], packed [N/16, K/4, 64]");
  }
  const int64_t m = x_dims[0], k = x_dims[1], n = p_dims[0] * kBlock;
  if (k % 4 != 0 || p_dims[1] != k / 4 || colsum.element_count() != static_cast<size_t>(n) ||
      scale.element_count() != static_cast<size_t>(n)) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "fastmt_int8_matmul: shapes do not match");
  }
  std::vector<uint8_t> xq(m * k);
  std::vector<float> row_scales(m);
  for (int64_t row = 0; row < m; ++row) {
    row_scales[row] = QuantizeRow(x.typed_data() + row * k, k, xq.data() + row * k);
  }
  const int8_t* weights = packed.typed_data();
  const int32_t* sums = colsum.typed_data();
  const float* scales = scale.typed_data();
  float* result = out->typed_data();
  // Blocks of columns over both cores: chunks of at least 128 KiB of weights (k * 16 bytes a block).
  const int64_t min_chunk = std::max<int64_t>(1, 131072 / (k * kBlock));
  fastmt::ParallelBlocks(pool, n / kBlock, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      BlockTimesRows(xq.data(), row_scales.data(), m, weights + b * (k / 4) * 64, sums + b * kBlock,
                     scales + b * kBlock, k, n, result + b * kBlock);
    }
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FastmtInt8Matmul, Int8MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ctx<ffi::ThreadPool>());

extern "C" int FastmtInt8MatmulSupported() { return fastmt::Int8CpuSupported() ? 1 : 0; }
