// fastmt's float32 matrix product for a few rows (1 to 8: a decoder step or a window of positions at batch 1, a batch
// of up to 8), for x86 CPUs with AVX-512, as an XLA FFI custom call.
//
// Why it exists (docs/BENCHMARKS.md sections 5 and 8): XLA:CPU runs a one-row product as its own
// matrix-vector loop, but hands every product of two rows or more to YNNPACK fusions. Inside a decoder step
// those cost 1.6-2.7x the one-row product for the same weights, plus a wait on YNNPACK's thread pool at every
// call, so a call over W positions (Jacobi and speculative windows, interleaved steps, HRT's second pass) costs
// far more than the bytes of weights it reads. Here every weight is read once for all the rows; the blocks of
// columns are shared out between the calling thread and XLA's intra-op threads (parallel_blocks.h), since one
// core reads memory at well below the rate two do.
//
// Arithmetic: out[m, n] = bias[n] + sum_k x[m, k] w[k, n], each output a single chain of fused multiply-adds in
// k order, whatever the number of rows and whichever group of rows it is computed in: a row's result does not
// depend on the other rows of the call. It is float32 rounding of the exact product, as XLA's, in another order
// (so the two agree to a few ulps, not to the bit).
//
// Packed weights: for each block of 16 output columns, the block's K rows of 16 floats (64 bytes) in k order.
// Shape [N / 16, K, 16], made by fastmt.kernels.pack_float32_weights (columns padded to a multiple of 16).

#include <cstdint>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"
#include "parallel_blocks.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kBlock = 16;  // output columns per 512-bit register

// R rows times C consecutive blocks of 16 columns: R * C independent accumulators (enough of them to hide the
// latency of the multiply-adds), each weight vector loaded once and used by the R rows.
template <int R, int C>
__attribute__((target("avx512f")))
void RowsTimesBlocks(const float* x, int64_t k, const float* w, int64_t block_stride, const float* bias,
                     int64_t n, float* out) {
  __m512 acc[R][C];
  for (int c = 0; c < C; ++c) {
    const __m512 b = _mm512_loadu_ps(bias + c * kBlock);
    for (int r = 0; r < R; ++r) acc[r][c] = b;
  }
  for (int64_t i = 0; i < k; ++i) {
    __m512 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_ps(w + c * block_stride + i * kBlock);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * k + i]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + r * n + c * kBlock, acc[r][c]);
  }
}

// Rows r0 .. r0 + R - 1 over blocks [begin, end): four blocks at a time for one or two rows (4-8 accumulators),
// two for more (6-16), then one at a time for what is left.
template <int R>
void RowsTimesAll(const float* x, int64_t k, const float* w, const float* bias, int64_t n, float* out,
                  int64_t begin, int64_t end) {
  constexpr int C = R <= 2 ? 4 : 2;
  const int64_t stride = k * kBlock;
  int64_t b = begin;
  for (; b + C <= end; b += C) {
    RowsTimesBlocks<R, C>(x, k, w + b * stride, stride, bias + b * kBlock, n, out + b * kBlock);
  }
  for (; b < end; ++b) {
    RowsTimesBlocks<R, 1>(x, k, w + b * stride, stride, bias + b * kBlock, n, out + b * kBlock);
  }
}

// Rows in groups of up to 8 (at most 16 accumulators, two weight vectors and a broadcast: within 32 registers),
// over blocks [begin, end).
void Rows(const float* x, int64_t m, int64_t k, const float* w, const float* bias, int64_t n, float* out,
          int64_t begin, int64_t end) {
  int64_t row = 0;
  for (; row + 8 <= m; row += 8) RowsTimesAll<8>(x + row * k, k, w, bias, n, out + row * n, begin, end);
  const float* xr = x + row * k;
  float* o = out + row * n;
  switch (m - row) {
    case 7: RowsTimesAll<7>(xr, k, w, bias, n, o, begin, end); break;
    case 6: RowsTimesAll<6>(xr, k, w, bias, n, o, begin, end); break;
    case 5: RowsTimesAll<5>(xr, k, w, bias, n, o, begin, end); break;
    case 4: RowsTimesAll<4>(xr, k, w, bias, n, o, begin, end); break;
    case 3: RowsTimesAll<3>(xr, k, w, bias, n, o, begin, end); break;
    case 2: RowsTimesAll<2>(xr, k, w, bias, n, o, begin, end); break;
    case 1: RowsTimesAll<1>(xr, k, w, bias, n, o, begin, end); break;
    default: break;
  }
}

bool CpuSupported() { return __builtin_cpu_supports("avx512f"); }

ffi::Error Float32MatmulImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> packed, ffi::Buffer<ffi::F32> bias,
                             ffi::ResultBuffer<ffi::F32> out, ffi::ThreadPool pool) {
  if (!CpuSupported()) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "fastmt_float32_matmul needs AVX-512");
  }
  auto x_dims = x.dimensions();
  auto p_dims = packed.dimensions();
  if (x_dims.size() != 2 || p_dims.size() != 3 || p_dims[2] != kBlock) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "fastmt_float32_matmul: x [M, K], packed [N/16, K, 16]");
  }
  const int64_t m = x_dims[0], k = x_dims[1], n = p_dims[0] * kBlock;
  auto out_dims = out->dimensions();
  if (p_dims[1] != k || bias.element_count() != static_cast<size_t>(n) || out_dims.size() != 2 ||
      out_dims[0] != m || out_dims[1] != n) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "fastmt_float32_matmul: shapes do not match");
  }
  // Blocks of columns over both cores: chunks of at least 128 KiB of weights (k * 64 bytes a block).
  const int64_t min_chunk = std::max<int64_t>(1, 131072 / (k * kBlock * 4));
  fastmt::ParallelBlocks(pool, n / kBlock, min_chunk, [&](int64_t begin, int64_t end) {
    Rows(x.typed_data(), m, k, packed.typed_data(), bias.typed_data(), n, out->typed_data(), begin, end);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FastmtFloat32Matmul, Float32MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ctx<ffi::ThreadPool>());

extern "C" int FastmtFloat32MatmulSupported() { return CpuSupported() ? 1 : 0; }
