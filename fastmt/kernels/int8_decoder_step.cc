// A whole decoder call of an int8 model (fastmt.quantize's 'int8' scheme) as one XLA FFI custom call, for x86
// CPUs with AVX-512 VNNI: the call that `--drafter int8` (speculative decoding's drafter, the model's own int8
// copy) makes W - 1 times per iteration.
//
// Why it exists (docs/BENCHMARKS.md section 7): on XLA:CPU one such call of a Transformer-base-sized decoder at
// batch 1 is about 350 operations (LayerNorms, the attention's reshapes, transposes, masks and softmax, bias
// adds, the cache writes), most of them too small to fuse and each paying a microsecond or two of dispatch,
// while its int8 products (int8_matmul.cc) are only about a third of the call. Here the whole call is one
// operation: the products as int8_matmul.cc's, everything between them in plain loops over a few rows.
//
// What it computes: fastmt.models.Transformer.decode (a pre-LayerNorm decoder) over T new positions per row,
// from their embedded inputs (the caller embeds them: Transformer.decoder_input), without the output
// projection: per layer, LayerNorm, self-attention over the cache (the new positions' keys and values written
// first at each row's write offset, so that they attend to themselves as in decode), LayerNorm,
// cross-attention over the memory, LayerNorm, the ReLU feed-forward layer, each with its residual; then the
// final LayerNorm. Products: int8_blocks.h, the bits of the int8 kernel for the same inputs. LayerNorm: flax's
// (variance as E[x^2] - E[x]^2). Attention: float32 scores, divided by sqrt(depth), softmax over the slots the
// mask allows (where XLA's path gives a masked slot the weight exp(-1e9 - max) = 0; a row that allows no slot
// at all gets uniform weights over every slot, as there). The same function as XLA's path, with sums taken in
// another order: outputs agree to float rounding, not to the bit (a drafter's token can differ on a near
// tie; drafts are verified, so a translation never does).
//
// Buffers, all read through RemainingArgs (L = the attribute num_layers):
//   0  x        f32  [R, E]     the embedded inputs, R = B * T rows (row b * T + t)
//   1  offsets  s32  [B]        where each row's T new keys and values go (clamped as dynamic_update_slice)
//   2  mask     pred [B, T, M]  the self-attention mask over the cache's M slots
//   3  memory mask  pred [B, S]
//   4, 5        f32  [E]        the final LayerNorm's scale and bias
//   per layer, kLayerArgs buffers: the scale and bias of its three LayerNorms (self, cross, mlp); for each of
//     its 8 matrices (self query, key, value, out; cross query, out; Dense_0, Dense_1): packed s8
//     [N'/16, K/4, 64] (int8_blocks.h), colsum s32 [N'], scale f32 [N'] and bias f32 [N'] (scale and bias padded
//     with zeros to the packed columns N', so padded columns come out 0); the memory's keys and values f32
//     [B, H, D, S] (fastmt.layers.MEMORY_LAYOUT)
//   then the cache: keys of layers 0 .. L-1, values of layers 0 .. L-1, f32 [B, M, H, D]
// Results: 0 the hidden states f32 [R, E] (after the final LayerNorm); 1 .. 2L the cache, in the arguments'
// order, aliased to them (written in place: only the T new slots of each row change).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"
#include "int8_blocks.h"
#include "parallel_blocks.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kBlock = fastmt::kInt8Block;
constexpr int kHeadArgs = 6;  // x, offsets, mask, memory mask, final LayerNorm scale and bias
constexpr int kMatrices = 8;
constexpr int kLayerArgs = 6 + 4 * kMatrices + 2;
enum MatrixIndex { kQuery, kKey, kValue, kOut, kCrossQuery, kCrossOut, kDense0, kDense1 };

struct Matrix {
  const int8_t* packed;
  const int32_t* colsum;
  const float* scale;
  const float* bias;
  int64_t k, n;  // inputs; packed output columns (a multiple of 16)
};

// A product's input rows, quantized once for every matrix that reads them.
struct QuantizedRows {
  std::vector<uint8_t> values;
  std::vector<float> scales;
  int64_t count = 0, k = 0;
};

void Quantize(const float* x, int64_t rows, int64_t stride, int64_t k, QuantizedRows* out) {
  out->values.resize(rows * k);
  out->scales.resize(rows);
  out->count = rows;
  out->k = k;
  for (int64_t r = 0; r < rows; ++r) {
    out->scales[r] = fastmt::QuantizeRow(x + r * stride, k, out->values.data() + r * k);
  }
}

// outs[i] [rows, mats[i].n] = rows x mats[i] + bias, for up to 3 matrices of the same inputs: the blocks of
// all of them shared out over the threads together (one wake-up of the pool, not one per matrix).
void Products(ffi::ThreadPool& pool, const QuantizedRows& rows, const Matrix* const* mats, float* const* outs,
              int count) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += mats[i]->n / kBlock;
  const int64_t min_chunk = std::max<int64_t>(1, 131072 / (rows.k * kBlock));  // as int8_matmul.cc's
  fastmt::ParallelBlocks(pool, total, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      int i = 0;
      int64_t local = b;
      while (local >= mats[i]->n / kBlock) local -= mats[i++]->n / kBlock;
      const Matrix& m = *mats[i];
      float* out = outs[i] + local * kBlock;
      fastmt::BlockTimesRows(rows.values.data(), rows.scales.data(), rows.count, m.packed + local * (m.k / 4) * 64,
                             m.colsum + local * kBlock, m.scale + local * kBlock, m.k, m.n, out);
      for (int64_t r = 0; r < rows.count; ++r) {
        for (int c = 0; c < kBlock; ++c) out[r * m.n + c] += m.bias[local * kBlock + c];
      }
    }
  });
}

__attribute__((target("avx512f")))
inline float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + i), _mm512_maskz_loadu_ps(tail, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// y[0 .. n) += w * x[0 .. n)
__attribute__((target("avx512f")))
inline void AddScaled(float w, const float* x, float* y, int64_t n) {
  const __m512 vw = _mm512_set1_ps(w);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vw, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, tail,
                          _mm512_fmadd_ps(vw, _mm512_maskz_loadu_ps(tail, x + i), _mm512_maskz_loadu_ps(tail, y + i)));
  }
}

// flax.linen.LayerNorm (epsilon, fast variance) of each row.
void LayerNorm(const float* x, int64_t rows, int64_t e, const float* scale, const float* bias, float epsilon,
               float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * e;
    double sum = 0, sum_squares = 0;
    for (int64_t i = 0; i < e; ++i) {
      sum += row[i];
      sum_squares += static_cast<double>(row[i]) * row[i];
    }
    const float mean = static_cast<float>(sum / e);
    const float variance = std::max(static_cast<float>(sum_squares / e) - mean * mean, 0.0f);
    const float inverse = 1.0f / std::sqrt(variance + epsilon);
    for (int64_t i = 0; i < e; ++i) out[r * e + i] = (row[i] - mean) * (inverse * scale[i]) + bias[i];
  }
}

// Softmax of scores[j] over the j with allowed[j] (weights 0 elsewhere); uniform over all when none is allowed.
void MaskedSoftmax(float* scores, const bool* allowed, int64_t n) {
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    if (allowed[j]) top = std::max(top, scores[j]);
  }
  if (top == -INFINITY) {  // no slot allowed
    for (int64_t j = 0; j < n; ++j) scores[j] = 1.0f / n;
    return;
  }
  float total = 0;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = allowed[j] ? std::exp(scores[j] - top) : 0.0f;
    total += scores[j];
  }
  for (int64_t j = 0; j < n; ++j) scores[j] /= total;
}

struct Shapes {
  int64_t batch, steps, rows, emb, heads, depth, slots, sources;
};

// fn(row, head, batch row, scores) for every (row, head) pair of the call, the pairs shared out over the threads;
// scores: a scratch of `keys` floats per thread, for the pair's attention weights.
template <typename Fn>
void ForEachRowAndHead(ffi::ThreadPool& pool, const Shapes& s, int64_t keys, const Fn& fn) {
  const int64_t min_chunk = std::max<int64_t>(1, 32768 / (keys * s.depth));  // pairs worth a thread's wake-up
  fastmt::ParallelBlocks(pool, s.rows * s.heads, min_chunk, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(keys);
    for (int64_t p = begin; p < end; ++p) fn(p / s.heads, p % s.heads, p / s.heads / s.steps, scores.data());
  });
}

// Self-attention of every (row, head) over the cache (keys [B, M, H, D]), into out [R, H * D].
void SelfAttention(ffi::ThreadPool& pool, const Shapes& s, const float* queries, int64_t query_stride,
                   const float* keys, const float* values, const bool* mask, float* out) {
  const float root = std::sqrt(static_cast<float>(s.depth));
  ForEachRowAndHead(pool, s, s.slots, [&](int64_t r, int64_t h, int64_t b, float* scores) {
    const float* q = queries + r * query_stride + h * s.depth;
    const bool* allowed = mask + r * s.slots;  // mask [B, T, M]: row r = b * T + t
    for (int64_t j = 0; j < s.slots; ++j) {
      scores[j] = allowed[j] ? Dot(q, keys + ((b * s.slots + j) * s.heads + h) * s.depth, s.depth) / root : 0.0f;
    }
    MaskedSoftmax(scores, allowed, s.slots);
    float* o = out + r * s.heads * s.depth + h * s.depth;
    std::fill(o, o + s.depth, 0.0f);
    for (int64_t j = 0; j < s.slots; ++j) {
      if (scores[j] != 0.0f) AddScaled(scores[j], values + ((b * s.slots + j) * s.heads + h) * s.depth, o, s.depth);
    }
  });
}

// Cross-attention of every (row, head) over the memory (keys and values [B, H, D, S]), into out [R, H * D].
void CrossAttention(ffi::ThreadPool& pool, const Shapes& s, const float* queries, int64_t query_stride,
                    const float* keys, const float* values, const bool* memory_mask, float* out) {
  const float root = std::sqrt(static_cast<float>(s.depth));
  ForEachRowAndHead(pool, s, s.sources, [&](int64_t r, int64_t h, int64_t b, float* scores) {
    const float* q = queries + r * query_stride + h * s.depth;
    const float* head_keys = keys + (b * s.heads + h) * s.depth * s.sources;
    std::fill(scores, scores + s.sources, 0.0f);
    for (int64_t d = 0; d < s.depth; ++d) AddScaled(q[d], head_keys + d * s.sources, scores, s.sources);
    for (int64_t j = 0; j < s.sources; ++j) scores[j] /= root;
    MaskedSoftmax(scores, memory_mask + b * s.sources, s.sources);
    const float* head_values = values + (b * s.heads + h) * s.depth * s.sources;
    float* o = out + r * s.heads * s.depth + h * s.depth;
    for (int64_t d = 0; d < s.depth; ++d) o[d] = Dot(scores, head_values + d * s.sources, s.sources);
  });
}

ffi::Error Invalid(const char* what) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, std::string("fastmt_int8_decoder_step: ") + what);
}

ffi::Error DecoderStepImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t num_layers, float epsilon,
                           ffi::ThreadPool pool) {
  if (!fastmt::Int8CpuSupported()) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "fastmt_int8_decoder_step needs AVX-512 VNNI");
  }
  const int64_t layers = num_layers;
  if (layers < 1 || args.size() != static_cast<size_t>(kHeadArgs + layers * (kLayerArgs + 2)) ||
      rets.size() != static_cast<size_t>(1 + 2 * layers)) {
    return Invalid("wrong number of buffers for num_layers");
  }
  std::vector<ffi::AnyBuffer> in;
  for (size_t i = 0; i < args.size(); ++i) {
    auto buffer = args.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    in.push_back(*buffer);
  }
  auto f32 = [&](int i) { return static_cast<const float*>(in[i].untyped_data()); };
  const int cache_base = kHeadArgs + layers * kLayerArgs;
  auto x_dims = in[0].dimensions();
  auto cache_dims = in[cache_base].dimensions();
  auto mask_dims = in[2].dimensions();
  auto memory_mask_dims = in[3].dimensions();
  if (x_dims.size() != 2 || cache_dims.size() != 4 || mask_dims.size() != 3 || memory_mask_dims.size() != 2) {
    return Invalid("x [R, E], cache [B, M, H, D], mask [B, T, M], memory mask [B, S]");
  }
  Shapes s;
  s.batch = cache_dims[0];
  s.slots = cache_dims[1];
  s.heads = cache_dims[2];
  s.depth = cache_dims[3];
  s.steps = mask_dims[1];
  s.rows = x_dims[0];
  s.emb = x_dims[1];
  s.sources = memory_mask_dims[1];
  if (s.rows != s.batch * s.steps || mask_dims[0] != s.batch || mask_dims[2] != s.slots ||
      memory_mask_dims[0] != s.batch || in[1].element_count() != static_cast<size_t>(s.batch) ||
      s.steps > s.slots) {
    return Invalid("x, offsets, mask and cache disagree on the batch, steps or slots");
  }
  if (in[0].element_type() != ffi::F32 || in[1].element_type() != ffi::S32 || in[2].element_type() != ffi::PRED ||
      in[3].element_type() != ffi::PRED) {
    return Invalid("x f32, offsets s32, masks pred");
  }
  const int64_t width = s.heads * s.depth;

  // Each layer's matrices, checked against the shapes they are used with.
  std::vector<Matrix> matrices(layers * kMatrices);
  for (int64_t l = 0; l < layers; ++l) {
    const int base = kHeadArgs + l * kLayerArgs + 6;
    for (int i = 0; i < kMatrices; ++i) {
      const ffi::AnyBuffer& packed = in[base + 4 * i];
      auto dims = packed.dimensions();
      if (packed.element_type() != ffi::S8 || dims.size() != 3 || dims[2] != 64) {
        return Invalid("packed s8 [N'/16, K/4, 64]");
      }
      Matrix m{static_cast<const int8_t*>(packed.untyped_data()),
               static_cast<const int32_t*>(in[base + 4 * i + 1].untyped_data()), f32(base + 4 * i + 2),
               f32(base + 4 * i + 3), dims[1] * 4, dims[0] * kBlock};
      for (int j = 1; j < 4; ++j) {
        if (in[base + 4 * i + j].element_count() != static_cast<size_t>(m.n)) {
          return Invalid("colsum, scale, bias [N']");
        }
      }
      matrices[l * kMatrices + i] = m;
    }
    const Matrix* mat = &matrices[l * kMatrices];
    const int64_t ffn = mat[kDense0].n;
    if (mat[kQuery].k != s.emb || mat[kKey].k != s.emb || mat[kValue].k != s.emb || mat[kCrossQuery].k != s.emb ||
        mat[kDense0].k != s.emb || mat[kQuery].n < width || mat[kKey].n < width || mat[kValue].n < width ||
        mat[kCrossQuery].n < width || mat[kOut].k != width || mat[kCrossOut].k != width || mat[kOut].n < s.emb ||
        mat[kCrossOut].n < s.emb || mat[kDense1].n < s.emb || mat[kDense1].k > ffn) {
      return Invalid("a layer's matrices do not fit the model's width, heads and depth");
    }
    for (int j = 0; j < 2; ++j) {
      auto dims = in[base + 4 * kMatrices + j].dimensions();
      if (dims.size() != 4 || dims[0] != s.batch || dims[1] != s.heads || dims[2] != s.depth || dims[3] != s.sources) {
        return Invalid("memory keys and values [B, H, D, S]");
      }
    }
  }

  // The cache, written in place (the results alias the arguments; copied first if XLA gave other buffers).
  std::vector<float*> cache(2 * layers);
  const size_t cache_bytes = s.batch * s.slots * width * sizeof(float);
  for (int64_t i = 0; i < 2 * layers; ++i) {
    auto ret = rets.get<ffi::AnyBuffer>(1 + i);
    if (ret.has_error()) return ret.error();
    if (in[cache_base + i].element_count() * sizeof(float) != cache_bytes || (*ret)->size_bytes() != cache_bytes) {
      return Invalid("every layer's cache keys and values [B, M, H, D]");
    }
    cache[i] = static_cast<float*>((*ret)->untyped_data());
    if (cache[i] != in[cache_base + i].untyped_data()) {
      std::memcpy(cache[i], in[cache_base + i].untyped_data(), cache_bytes);
    }
  }
  auto hidden_ret = rets.get<ffi::AnyBuffer>(0);
  if (hidden_ret.has_error()) return hidden_ret.error();
  if ((*hidden_ret)->size_bytes() != s.rows * s.emb * sizeof(float)) return Invalid("hidden [R, E]");
  float* hidden = static_cast<float*>((*hidden_ret)->untyped_data());

  const int32_t* offsets = static_cast<const int32_t*>(in[1].untyped_data());
  const bool* mask = static_cast<const bool*>(in[2].untyped_data());
  const bool* memory_mask = static_cast<const bool*>(in[3].untyped_data());
  int64_t widest = s.emb;
  for (const Matrix& m : matrices) widest = std::max(widest, m.n);
  std::vector<float> x(f32(0), f32(0) + s.rows * s.emb), normed(s.rows * s.emb), attended(s.rows * width);
  std::vector<float> q(s.rows * widest), k(s.rows * widest), v(s.rows * widest), projected(s.rows * widest);
  QuantizedRows rows;
  // Quantizes the rows of `input` (row stride `stride`) for products with k inputs.
  auto quantize = [&](const float* input, int64_t stride, int64_t k) { Quantize(input, s.rows, stride, k, &rows); };
  // Quantizes LayerNorm(x), the norm whose scale and bias are arguments `at` and `at + 1`.
  auto quantize_normed = [&](int at) {
    LayerNorm(x.data(), s.rows, s.emb, f32(at), f32(at + 1), epsilon, normed.data());
    quantize(normed.data(), s.emb, s.emb);
  };
  // out = the quantized rows x m.
  auto product = [&](const Matrix& m, float* out) {
    const Matrix* matrix[1] = {&m};
    float* outs[1] = {out};
    Products(pool, rows, matrix, outs, 1);
  };
  // x += the quantized rows x m: a residual branch's last product.
  auto add_to_residual = [&](const Matrix& m) {
    product(m, projected.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t i = 0; i < s.emb; ++i) x[r * s.emb + i] += projected[r * m.n + i];
    }
  };

  for (int64_t l = 0; l < layers; ++l) {
    const int base = kHeadArgs + l * kLayerArgs;
    const Matrix* mat = &matrices[l * kMatrices];
    float* cache_keys = cache[l];
    float* cache_values = cache[layers + l];
    // Self-attention: the new keys and values go into the cache first, then every new position attends.
    quantize_normed(base);
    const Matrix* qkv[3] = {&mat[kQuery], &mat[kKey], &mat[kValue]};
    float* qkv_out[3] = {q.data(), k.data(), v.data()};
    Products(pool, rows, qkv, qkv_out, 3);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t start = std::clamp<int64_t>(offsets[b], 0, s.slots - s.steps);
      for (int64_t t = 0; t < s.steps; ++t) {
        const int64_t r = b * s.steps + t, slot = (b * s.slots + start + t) * width;
        std::memcpy(cache_keys + slot, k.data() + r * mat[kKey].n, width * sizeof(float));
        std::memcpy(cache_values + slot, v.data() + r * mat[kValue].n, width * sizeof(float));
      }
    }
    SelfAttention(pool, s, q.data(), mat[kQuery].n, cache_keys, cache_values, mask, attended.data());
    quantize(attended.data(), width, width);
    add_to_residual(mat[kOut]);
    // Cross-attention over the memory.
    quantize_normed(base + 2);
    product(mat[kCrossQuery], q.data());
    const int memory = base + 6 + 4 * kMatrices;
    CrossAttention(pool, s, q.data(), mat[kCrossQuery].n, f32(memory), f32(memory + 1), memory_mask, attended.data());
    quantize(attended.data(), width, width);
    add_to_residual(mat[kCrossOut]);
    // The feed-forward layer (its hidden units in q, ReLU in place).
    quantize_normed(base + 4);
    product(mat[kDense0], q.data());
    for (int64_t i = 0; i < s.rows * mat[kDense0].n; ++i) q[i] = std::max(q[i], 0.0f);
    quantize(q.data(), mat[kDense0].n, mat[kDense1].k);
    add_to_residual(mat[kDense1]);
  }
  LayerNorm(x.data(), s.rows, s.emb, f32(4), f32(5), epsilon, hidden);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FastmtInt8DecoderStep, DecoderStepImpl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("num_layers")
                                  .Attr<float>("epsilon")
                                  .Ctx<ffi::ThreadPool>());

extern "C" int FastmtInt8DecoderStepSupported() { return fastmt::Int8CpuSupported() ? 1 : 0; }
