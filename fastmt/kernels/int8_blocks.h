// fastmt's int8 products of a few rows by 1-byte weights packed for AVX-512 VNNI's `vpdpbusd`, shared by the
// kernels that run them (int8_matmul.cc: one product; int8_decoder_step.cc: a whole decoder call).
//
// The arithmetic is fastmt.quantize.int8_matmul's, operation for operation, so the two agree to the last bit:
//   row scale s = max|x| / 127 (1 for an all-zero row);  q = clip(round_half_even(x / s), -127, 127)
//   out[m, n] = (float(sum_k q[m, k] w[k, n]) * s[m]) * scale[n]
// vpdpbusd multiplies unsigned by signed bytes, so the rows are fed as q + 128 (0..254) and 128 * colsum[n]
// (colsum[n] = sum_k w[k, n], computed when the weights are packed) is subtracted.
//
// Packed weights: for each block of 16 output columns, for each group of 4 inputs, 64 bytes holding
// w[4g .. 4g+3, 16b .. 16b+15] column by column (4 bytes per column: one 32-bit lane of vpdpbusd).
// Shape [N / 16, K / 4, 64], made by fastmt.kernels.pack_weights.

#ifndef FASTMT_KERNELS_INT8_BLOCKS_H_
#define FASTMT_KERNELS_INT8_BLOCKS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace fastmt {

constexpr int kInt8Block = 16;  // output columns per 512-bit accumulator

// Quantizes one row of activations into q + 128 (unsigned), returning its scale. Vectorised; every step is
// exact IEEE arithmetic (division, round half to even), so the result is the scalar formula's.
__attribute__((target("avx512f,avx512bw")))
inline float QuantizeRow(const float* x, int64_t k, uint8_t* out) {
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
inline void RowsTimesBlock(const uint8_t* xq, const float* row_scales, int64_t r0, const int8_t* w, __m512i correction,
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
inline void RowTimesBlock(const uint8_t* x, float row_scale, const int8_t* w, __m512i correction, __m512 column_scale,
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
inline void BlockTimesRows(const uint8_t* xq, const float* row_scales, int64_t m, const int8_t* w,
                           const int32_t* colsum, const float* scale, int64_t k, int64_t n, float* out) {
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

inline bool Int8CpuSupported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

}  // namespace fastmt

#endif  // FASTMT_KERNELS_INT8_BLOCKS_H_
