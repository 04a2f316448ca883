// sage_example: one attention call through the sage-tune runtime's C++ API, checked against a
// plain CPU computation for a few query rows, then timed.
//
// Grouped-query attention (16 query heads over 4 KV heads), causal, FP16, HND layout, with the
// log-sum-exp output. Run with SAGE_LOG=1 to see which kernel the runtime chose and why.
// Exit status: 0 success, 1 a failed call or a wrong result, 2 no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "sage/sage.hpp"

namespace {

// IEEE half precision from float, rounding to nearest even (inputs here are normal numbers).
std::uint16_t to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = int((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp >= 31) return std::uint16_t(sign | 0x7c00u);
  if (exp <= 0) {  // subnormal half
    if (exp < -10) return std::uint16_t(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return std::uint16_t(sign | h);
  }
  std::uint32_t h = (std::uint32_t(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry rounds into the exponent
  return std::uint16_t(sign | h);
}

float from_half(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  }
  const std::uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: nothing to run\n");
    return 2;
  }
  const int B = 2, Hq = 16, Hkv = 4, N = 1024, D = 128;
  const std::size_t q_elems = std::size_t(B) * Hq * N * D, kv_elems = std::size_t(B) * Hkv * N * D;

  // Gaussian inputs, rounded to FP16 once: the CPU check uses exactly what the GPU reads.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> hq(q_elems), hk(kv_elems), hv(kv_elems), ho(q_elems);
  for (auto& x : hq) x = to_half(normal(rng));
  for (auto& x : hk) x = to_half(normal(rng));
  for (auto& x : hv) x = to_half(normal(rng));

  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  cudaStream_t stream = nullptr;
  if (!cuda_ok(cudaMalloc(&q, q_elems * 2), "cudaMalloc") || !cuda_ok(cudaMalloc(&k, kv_elems * 2), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&v, kv_elems * 2), "cudaMalloc") || !cuda_ok(cudaMalloc(&o, q_elems * 2), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(reinterpret_cast<void**>(&lse), std::size_t(B) * Hq * N * 4), "cudaMalloc") ||
      !cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
    return 1;
  cudaMemcpy(q, hq.data(), q_elems * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(k, hk.data(), kv_elems * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(v, hv.data(), kv_elems * 2, cudaMemcpyHostToDevice);

  sage::Attention attn(B, Hq, Hkv, N, N, D);
  attn.causal().dtype(SAGE_FP16).layout(SAGE_LAYOUT_HND);
  try {
    sage::RunOptions opt;
    opt.lse = lse;
    attn.run(q, k, v, o, stream, opt);  // first call: selects, maybe compiles, then launches
    if (!cuda_ok(cudaStreamSynchronize(stream), "attention")) return 1;
    std::printf("variant: %s\n", attn.variant().c_str());

    // A few query rows against a plain softmax(QK^T / sqrt(D)) V on the CPU.
    cudaMemcpy(ho.data(), o, q_elems * 2, cudaMemcpyDeviceToHost);
    double err = 0, ref_sum = 0;
    const float scale = 1.0f / std::sqrt(float(D));
    for (int b : {0, B - 1})
      for (int h : {0, Hq - 1})
        for (int i : {0, 1, N / 2, N - 1}) {
          const int kvh = h / (Hq / Hkv);
          const std::uint16_t* qi = &hq[((std::size_t(b) * Hq + h) * N + i) * D];
          std::vector<double> p(std::size_t(i) + 1);  // causal with seq_q == seq_kv: keys 0..i
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= i; ++j) {
            const std::uint16_t* kj = &hk[((std::size_t(b) * Hkv + kvh) * N + j) * D];
            double s = 0;
            for (int d = 0; d < D; ++d) s += double(from_half(qi[d])) * from_half(kj[d]);
            p[j] = s * scale;
            mx = std::max(mx, p[j]);
          }
          for (double& x : p) sum += (x = std::exp(x - mx));
          for (int d = 0; d < D; ++d) {
            double ref = 0;
            for (int j = 0; j <= i; ++j) ref += p[j] / sum * from_half(hv[((std::size_t(b) * Hkv + kvh) * N + j) * D + d]);
            const double out = from_half(ho[((std::size_t(b) * Hq + h) * N + i) * D + d]);
            err += std::fabs(out - ref);
            ref_sum += std::fabs(ref);
          }
        }
    const double rel_l1 = err / ref_sum;
    std::printf("relative L1 error vs CPU on 16 rows: %.4f (quantized INT8 Q.K^T: ~0.01-0.04 expected)\n", rel_l1);

    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    const int reps = 20;
    cudaEventRecord(t0, stream);
    for (int r = 0; r < reps; ++r) attn.run(q, k, v, o, stream, opt);
    cudaEventRecord(t1, stream);
    if (!cuda_ok(cudaEventSynchronize(t1), "timed runs")) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    const double flops = 4.0 * B * Hq * double(N) * N * D / 2;  // causal: half the pairs
    std::printf("%.3f ms per call, %.1f TOPS\n", ms / reps, flops / (ms / reps * 1e-3) / 1e12);
    if (!(rel_l1 < 0.08)) {
      std::fprintf(stderr, "error too large\n");
      return 1;
    }
  } catch (const sage::ApiError& e) {
    std::fprintf(stderr, "sage: %s\n", e.what());
    return 1;
  }
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(lse);
  cudaStreamDestroy(stream);
  return 0;
}
