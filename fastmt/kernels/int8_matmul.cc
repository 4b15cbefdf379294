// fastmt's int8 matrix product for x86 CPUs with AVX-512 VNNI, as an XLA FFI custom call.
//
// Why it exists (docs/BENCHMARKS.md section 9): XLA:CPU has no int8 matrix-vector product. It widens int8
// weights to int32 once, outside the decoding loop, so every batch-1 step reads 4-byte weights, and it hands
// only products of two rows or more to YNNPACK's int8 GEMM. This kernel reads the 1-byte weights, packed once
// for `vpdpbusd`, and quantizes the activations itself, so a decoder step's products cost what their weights'
// bytes cost. The blocks of columns are shared out between the calling thread and XLA's intra-op threads
// (parallel_blocks.h): one core reads memory at well below the rate two do.
//
// The arithmetic is fastmt.quantize.int8_matmul's, operation for operation, so the two agree to the last bit:
//   row scale s = max|x| / 127 (1 for an all-zero row);  q = clip(round_half_even(x / s), -127, 127)
//   out[m, n] = (float(sum_k q[m, k] w[k, n]) * s[m]) * scale[n]
// vpdpbusd multiplies unsigned by signed bytes, so the kernel feeds q + 128 (0..254) and subtracts
// 128 * colsum[n] (colsum[n] = sum_k w[k, n], computed when the weights are packed).
//
// Packed weights: for each block of 16 output columns, for each group of 4 inputs, 64 bytes holding
// w[4g .. 4g+3, 16b .. 16b+15] column by column (4 bytes per column: one 32-bit lane of vpdpbusd).
// Shape [N / 16, K / 4, 64], made by fastmt.kernels.pack_weights.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"
#include "parallel_blocks.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kBlock = 16;  // output columns per 512-bit accumulator

// Quantizes one row of activations into q + 128 (unsigned), returning its scale. Vectorised; every step is
// exact IEEE arithmetic (division, round half to even), so the result is the scalar formula's.
__attribute__((target("avx512f,avx512bw")))
float QuantizeRow(const float* x, int64_t k, uint8_t* out) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  float amax = _mm512_reduce_max_ps(vmax);
  for (; i < k; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  const __m512 vscale = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (i = 0; i + 16 <= k; i += 16) {
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vscale),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(q), offset);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(u));
  }
  for (; i < k; ++i) {
    float q = std::nearbyint(x[i] / scale);  // the default rounding mode: half to even, as jnp.round
    q = std::fmin(std::fmax(q, -127.0f), 127.0f);
    out[i] = static_cast<uint8_t>(static_cast<int>(q) + 128);
  }
  return scale;
}

// Rows r0 .. r0+R-1 (R = 2..4) of one block: each 64-byte weight vector, loaded once, feeds R accumulators
// (R independent vpdpbusd chains), so R rows cost little more than one.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void RowsTimesBlock(const uint8_t* xq, const float* row_scales, int64_t r0, const int8_t* w, __m512i correction,
                    __m512 column_scale, int64_t k, int64_t n, float* out) {
  const int64_t groups = k / 4;
  __m512i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i wv = _mm512_loadu_si512(w + 64 * g);
    for (int r = 0; r < R; ++r) {
      int32_t x4;
      std::memcpy(&x4, xq + (r0 + r) * k + 4 * g, 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(x4), wv);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], correction)),
                             _mm512_set1_ps(row_scales[r0 + r]));
    _mm512_storeu_ps(out + (r0 + r) * n, _mm512_mul_ps(y, column_scale));
  }
}

// One row of one block: four accumulators over the groups, so that vpdpbusd's latency is hidden.
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void RowTimesBlock(const uint8_t* x, float row_scale, const int8_t* w, __m512i correction, __m512 column_scale,
                   int64_t k, float* out) {
  const int64_t groups = k / 4;
  __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) {
    int32_t x0, x1, x2, x3;
    std::memcpy(&x0, x + 4 * g, 4);
    std::memcpy(&x1, x + 4 * g + 4, 4);
    std::memcpy(&x2, x + 4 * g + 8, 4);
    std::memcpy(&x3, x + 4 * g + 12, 4);
    acc0 = _mm512_dpbusd_epi32(acc0, _mm512_set1_epi32(x0), _mm512_loadu_si512(w + 64 * g));
    acc1 = _mm512_dpbusd_epi32(acc1, _mm512_set1_epi32(x1), _mm512_loadu_si512(w + 64 * (g + 1)));
    acc2 = _mm512_dpbusd_epi32(acc2, _mm512_set1_epi32(x2), _mm512_loadu_si512(w + 64 * (g + 2)));
    acc3 = _mm512_dpbusd_epi32(acc3, _mm512_set1_epi32(x3), _mm512_loadu_si512(w + 64 * (g + 3)));
  }
  for (; g < groups; ++g) {
    int32_t x0;
    std::memcpy(&x0, x + 4 * g, 4);
    acc0 = _mm512_dpbusd_epi32(acc0, _mm512_set1_epi32(x0), _mm512_loadu_si512(w + 64 * g));
  }
  __m512i acc = _mm512_add_epi32(_mm512_add_epi32(acc0, acc1), _mm512_add_epi32(acc2, acc3));
  __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, correction)), _mm512_set1_ps(row_scale));
  _mm512_storeu_ps(out, _mm512_mul_ps(y, column_scale));
}

// One block of 16 output columns for every row: the block's packed weights (K * 16 bytes) stay in the L1
// cache while the rows go by, four at a time.
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void BlockTimesRows(const uint8_t* xq, const float* row_scales, int64_t m, const int8_t* w, const int32_t* colsum,
                    const float* scale, int64_t k, int64_t n, float* out) {
  const __m512i correction = _mm512_mullo_epi32(_mm512_set1_epi32(128), _mm512_loadu_si512(colsum));
  const __m512 column_scale = _mm512_loadu_ps(scale);
  int64_t row = 0;
  for (; row + 4 <= m; row += 4) RowsTimesBlock<4>(xq, row_scales, row, w, correction, column_scale, k, n, out);
  switch (m - row) {
    case 3: RowsTimesBlock<3>(xq, row_scales, row, w, correction, column_scale, k, n, out); break;
    case 2: RowsTimesBlock<2>(xq, row_scales, row, w, correction, column_scale, k, n, out); break;
    case 1: RowTimesBlock(xq + row * k, row_scales[row], w, correction, column_scale, k, out + row * n); break;
    default: break;
  }
}

bool CpuSupported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

ffi::Error Int8MatmulImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> packed, ffi::Buffer<ffi::S32> colsum,
                          ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> out, ffi::ThreadPool pool) {
  if (!CpuSupported()) {
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

extern "C" int FastmtInt8MatmulSupported() { return CpuSupported() ? 1 : 0; }
