// FP32 reference attention: the accuracy gate's ground truth. Deliberately simple: one CTA
// per (query row, head, batch), exact expf, FP32 accumulation, no quantization, any head
// dimension up to 256, both layouts, GQA, causal (bottom-right aligned), FP16/BF16 inputs.
// Output O [B, Hq, Nq, D] and LSE [B, Hq, Nq] in FP32.
#pragma once
#include "sage/device/common.cuh"

namespace sage {
namespace reference {
using namespace dev;

constexpr int kThreads = 128;
constexpr int kChunk = 128;   // keys scored per step
constexpr int kMaxDim = 256;

SAGE_DEV float load_elem(const SageTensor& t, int dtype, int b, int h, int n, int d) {
  const u16 x = static_cast<const u16*>(t.ptr)[b * t.stride_b + h * t.stride_h + i64(n) * t.stride_n + d];
  return dtype == SAGE_DTYPE_BF16 ? bf16_to_f32(x) : f16_to_f32(x);
}

SAGE_DEV float block_reduce(float v, float* scratch, bool is_max) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int i = 1; i < kThreads / 32; ++i) v = is_max ? fmaxf(v, scratch[i]) : v + scratch[i];
  return v;
}

// grid (Nq, Hq, B), kThreads threads.
SAGE_DEV void attention(const SageRefParams& p) {
  __shared__ float q[kMaxDim];
  __shared__ float s[kChunk];
  __shared__ float scratch[kThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hkv = h / (p.heads_q / p.heads_kv);
  const int D = p.head_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int d = threadIdx.x; d < D; d += kThreads) q[d] = load_elem(p.q, p.dtype, b, h, i, d) * p.sm_scale;
  int nkeys = p.seq_kv, key0 = 0;  // the keys [key0, nkeys)
  if (p.causal) {
    const int last = i + p.seq_kv - p.seq_q;
    nkeys = last < 0 ? 0 : min_(p.seq_kv, last + 1);
    if (p.window > 0) key0 = min_(nkeys, max_(0, last - p.window + 1));  // a sliding window's first key
  }
  float acc[kMaxDim / kThreads] = {0.f, 0.f};
  float m = neg_inf(), l = 0.f;
  __syncthreads();
  for (int j0 = key0; j0 < nkeys; j0 += kChunk) {
    const int nc = min_(kChunk, nkeys - j0);
    // One warp per key: lanes split the dot product over the head dimension.
    for (int jj = warp; jj < nc; jj += kThreads / 32) {
      float dot = 0.f;
      for (int d = lane; d < D; d += 32) dot += q[d] * load_elem(p.k, p.dtype, b, hkv, j0 + jj, d);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == 0) s[jj] = dot;
    }
    __syncthreads();
    const float cm = block_reduce(threadIdx.x < nc ? s[threadIdx.x] : neg_inf(), scratch, true);
    const float m_new = fmaxf(m, cm);
    const float corr = expf(m - m_new);
    const float pj = threadIdx.x < nc ? expf(s[threadIdx.x] - m_new) : 0.f;
    const float psum = block_reduce(pj, scratch, false);
    __syncthreads();
    if (threadIdx.x < nc) s[threadIdx.x] = pj;
    __syncthreads();
    l = l * corr + psum;
    m = m_new;
#pragma unroll
    for (int a = 0; a < kMaxDim / kThreads; ++a) {
      const int d = threadIdx.x + a * kThreads;
      if (d < D) {
        float sum = 0.f;
        for (int jj = 0; jj < nc; ++jj) sum += s[jj] * load_elem(p.v, p.dtype, b, hkv, j0 + jj, d);
        acc[a] = acc[a] * corr + sum;
      }
    }
    __syncthreads();
  }
  const i64 row = (i64(b) * p.heads_q + h) * p.seq_q + i;
#pragma unroll
  for (int a = 0; a < kMaxDim / kThreads; ++a) {
    const int d = threadIdx.x + a * kThreads;
    if (d < D) p.o[row * D + d] = l > 0.f ? acc[a] / l : 0.f;
  }
  if (threadIdx.x == 0 && p.lse) p.lse[row] = l > 0.f ? m + logf(l) : neg_inf();
}

}  // namespace reference
}  // namespace sage

namespace sage {
namespace reference {

// Counter-based Gaussian noise for test and tuning inputs, generated on the device so that
// large problems need no host transfer. splitmix64 -> two uniforms -> Box-Muller.
SAGE_DEV unsigned long long mix64(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
SAGE_DEV float normal01(unsigned long long seed, unsigned long long i) {
  const unsigned long long r = mix64(seed ^ mix64(i));
  const float u1 = (float((r >> 40) & 0xffffff) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = float((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// out: a contiguous [B, H, N, D] (layout 0) or [B, N, H, D] (layout 1) tensor of `count`
// elements. value = N(0,1) + bias_scale * N(0,1)_(b, h, d): a per-channel bias ("outliers").
SAGE_DEV void fill_normal(u16* out, i64 count, int H, int N, int D, int layout, int dtype, float bias_scale,
                          unsigned long long seed) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += i64(gridDim.x) * blockDim.x) {
    float x = normal01(seed, (unsigned long long)i);
    if (bias_scale != 0.f) {
      const int d = int(i % D);
      i64 b, h;
      if (layout == 0) {
        h = (i / (i64(N) * D)) % H;
        b = i / (i64(N) * D * H);
      } else {
        h = (i / D) % H;
        b = i / (i64(D) * H * N);
      }
      x += bias_scale * normal01(seed ^ 0x5bd1e995ull, (unsigned long long)((b * H + h) * D + d));
    }
    const u32 packed = dtype == SAGE_DTYPE_BF16 ? pack_bf16x2(x, 0.f) : pack_f16x2(x, 0.f);
    out[i] = u16(packed & 0xffff);
  }
}

}  // namespace reference
}  // namespace sage
