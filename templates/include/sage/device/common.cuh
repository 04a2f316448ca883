// Device-side basics shared by every kernel: fixed-width types without system headers
// (NVRTC provides none reliably), PTX wrappers for the instructions the pipelines use, and
// the element conversions. Everything here is header-only and architecture-guarded by the
// caller (a variant that needs sm_89 FP8 never instantiates the FP8 paths on sm_80).
#pragma once
#include "sage/params.h"

#define SAGE_DEV __device__ __forceinline__

namespace sage {
namespace dev {

typedef sage_i8 i8;
typedef sage_u8 u8;
typedef sage_i32 i32;
typedef sage_u32 u32;
typedef sage_i64 i64;
typedef unsigned short u16;

struct alignas(16) u32x4 { u32 x, y, z, w; };
struct alignas(8) u32x2 { u32 x, y; };

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kFp8Max = 448.0f;
constexpr float kLog2Fp8Max = 8.807354922057604f;  // log2(448)
constexpr float kLog2U8Max = 7.994353436858858f;   // log2(255)

// How the probabilities P are scaled before they become MMA operands: not at all (FP16), to
// fill E4M3's range (x448), or to fill u8 (x255); e4m3_lazy: x4, for E4M3 P against a lazily
// moved reference maximum (the native kernel's FP8 P V: P at most 64 before the factor, so at
// most 256 after it). The softmax adds the log2 of the factor to every exponent; the epilogue
// takes it out of the LSE (O/l is unaffected).
enum class PScale { one, e4m3, u8, e4m3_lazy };
__host__ __device__ constexpr float p_log2_scale(PScale s) {
  return s == PScale::e4m3 ? kLog2Fp8Max : s == PScale::u8 ? kLog2U8Max : s == PScale::e4m3_lazy ? 2.f : 0.f;
}

SAGE_DEV float neg_inf() { return __int_as_float(0xff800000); }

template <class T> SAGE_DEV T max_(T a, T b) { return a > b ? a : b; }
template <class T> SAGE_DEV T min_(T a, T b) { return a < b ? a : b; }
template <class T> __host__ __device__ constexpr T cdiv(T a, T b) { return (a + b - 1) / b; }
// q = a / b, r = a % b for a >= 0, b > 0 (unsigned: about half the instructions of int division).
SAGE_DEV void udivmod(int a, int b, int& q, int& r) {
  q = int(unsigned(a) / unsigned(b));
  r = a - q * b;
}

// ---- conversions ---------------------------------------------------------------------------
SAGE_DEV float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
SAGE_DEV float bf16_to_f32(u16 h) { return __uint_as_float(u32(h) << 16); }
// Element i (0 or 1) of a packed pair of 16-bit floats of the given dtype.
SAGE_DEV float lo16_to_f32(u32 v, int dtype) {
  return dtype == SAGE_DTYPE_BF16 ? __uint_as_float(v << 16) : f16_to_f32(u16(v & 0xffff));
}
SAGE_DEV float hi16_to_f32(u32 v, int dtype) {
  return dtype == SAGE_DTYPE_BF16 ? __uint_as_float(v & 0xffff0000u) : f16_to_f32(u16(v >> 16));
}
// 8 fp16/bf16 values (16 bytes) -> 8 floats.
SAGE_DEV void unpack8(const u32x4& v, int dtype, float (&f)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = lo16_to_f32(w[i], dtype);
    f[2 * i + 1] = hi16_to_f32(w[i], dtype);
  }
}
// Two floats -> packed f16x2 / bf16x2 (round to nearest even); `lo` lands in the low half.
SAGE_DEV u32 pack_f16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
SAGE_DEV u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
SAGE_DEV u32 pack_x2(float lo, float hi, int dtype) {
  return dtype == SAGE_DTYPE_BF16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi);
}
// BF16 rows into FP16 by a power of two (the FP8 pages' kernels, whose MMAs are FP16 for BF16
// queries too): the larger magnitude of a bf16x2 word's two values and mx; the exponent sg that
// takes mx, a row's largest magnitude, to 2^14 .. 2^15 (FP16 then holds every element exactly
// but those under 2^-28 of mx; at most 100: rows of zeros or BF16 subnormals); a word's two values
// times 2^sg (f) as an f16x2 word.
SAGE_DEV float bf16x2_absmax(u32 x, float mx) {
  return fmaxf(mx, fmaxf(fabsf(__uint_as_float(x << 16)), fabsf(__uint_as_float(x & 0xffff0000u))));
}
SAGE_DEV int f16_row_exponent(float mx) {
  return mx > 0.f ? min_(14 - (((__float_as_int(mx) >> 23) & 0xff) - 127), 100) : 0;
}
SAGE_DEV float pow2f(int e) { return __int_as_float((e + 127) << 23); }  // 2^e, -126 <= e <= 127
SAGE_DEV u32 bf16x2_to_f16x2(u32 x, float f) {
  return pack_f16x2(__uint_as_float(x << 16) * f, __uint_as_float(x & 0xffff0000u) * f);
}
// Four FP8 e4m3 values (x's bytes, byte 0 first) -> two f16x2 (BF16: bf16x2) words, exactly: each
// byte's sign, exponent and mantissa bits moved to the 16-bit type's places, then a product by
// the power of two between the exponent biases (2^8 for FP16, 2^120 for BF16) rebiases them;
// zeros and e4m3's subnormals come out exact too. (e4m3's NaN, 0x7f / 0xff, comes out as 480.)
// `lo`: bytes 0 and 1 (byte 0 in the low half), `hi`: bytes 2 and 3. sm_80+; FP16 on sm_89+ (FP8
// hardware): one cvt a pair, exact as well (NaN stays NaN there).
SAGE_DEV void e4m3x4_to_x2(u32 x, bool bf16, u32& lo, u32& hi) {
#if defined(SAGE_HAS_FP8)
  if (!bf16) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(u16(x & 0xffffu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(u16(x >> 16)));
    return;
  }
#endif
  const u32 a = __byte_perm(x, 0u, 0x1404), b = __byte_perm(x, 0u, 0x3424);  // bytes 0, 1 / 2, 3 at bits 8-15 of each half
  if (bf16) {
    const u32 fa = (a & 0x80008000u) | ((a >> 4) & 0x07f007f0u), fb = (b & 0x80008000u) | ((b >> 4) & 0x07f007f0u);
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(lo) : "r"(fa), "r"(0x7b807b80u), "r"(0x80008000u));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(hi) : "r"(fb), "r"(0x7b807b80u), "r"(0x80008000u));
  } else {
    const u32 fa = (a & 0x80008000u) | ((a >> 1) & 0x3f803f80u), fb = (b & 0x80008000u) | ((b >> 1) & 0x3f803f80u);
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(fa), "r"(0x5c005c00u));
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(fb), "r"(0x5c005c00u));
  }
}
// Round to nearest even, saturating to [-127, 127] (callers scale so |x| <= 127 anyway;
// saturation guards the boundary).
SAGE_DEV i32 quant_s8(float x) {
  i32 r;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
SAGE_DEV u32 pack_s8x4(i32 a, i32 b, i32 c, i32 d) {
  return (u32(a) & 0xffu) | ((u32(b) & 0xffu) << 8) | ((u32(c) & 0xffu) << 16) | (u32(d) << 24);
}
// round(a * s) .. round(d * s) -> four s8 (round to nearest even), a in the low byte, for
// products within [-127, 127]: one FFMA per value adds 1.5 * 2^23 to the exact product, which
// leaves its rounded value in the low bits of the float (two's complement when negative), and
// three byte permutes gather the low bytes.
SAGE_DEV u32 pack_s8x4_scaled(float a, float b, float c, float d, float s) {
  const u32 ia = __float_as_uint(fmaf(a, s, 12582912.0f)), ib = __float_as_uint(fmaf(b, s, 12582912.0f));
  const u32 ic = __float_as_uint(fmaf(c, s, 12582912.0f)), id = __float_as_uint(fmaf(d, s, 12582912.0f));
  return __byte_perm(__byte_perm(ia, ib, 0x0040), __byte_perm(ic, id, 0x0040), 0x5410);
}
// Four floats already within [-127, 127] -> four s8, the same with s = 1 (an FADD per value).
SAGE_DEV u32 pack_s8x4_rn(float a, float b, float c, float d) { return pack_s8x4_scaled(a, b, c, d, 1.0f); }
// INT4: round to nearest even, clamp to [-7, 7]; element 0 in the low nibble.
SAGE_DEV i32 quant_s4(float x) {
  i32 r;
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return max_(-7, min_(7, r));
}
// Four floats in [0, 255.5) -> four u8 (round to nearest even), a in the low byte: each pair
// goes to f16x2 (exact to 1/8 below 256), then 1024 is added in f16, whose spacing there is
// 1, so every half becomes 0x6400 + round(x) and its low byte is the integer.
SAGE_DEV u32 pack_u8x4(float a, float b, float c, float d) {
  u32 lo, hi;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(d), "f"(c));
  asm("add.rn.f16x2 %0, %0, %1;" : "+r"(lo) : "r"(0x64006400u));
  asm("add.rn.f16x2 %0, %0, %1;" : "+r"(hi) : "r"(0x64006400u));
  return __byte_perm(lo, hi, 0x6420);
}
#if defined(SAGE_HAS_FP8)
// Two floats -> packed e4m3x2 (round to nearest even, saturating to +-448); `lo` in the low byte.
SAGE_DEV u16 pack_e4m3x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
SAGE_DEV u32 pack_e4m3x4(float a, float b, float c, float d) {
  return u32(pack_e4m3x2(a, b)) | (u32(pack_e4m3x2(c, d)) << 16);
}
#endif

// ---- fast math -----------------------------------------------------------------------------
SAGE_DEV float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1 / x within 1 ulp (MUFU.RCP alone; __fdividef adds range checks for |x| > 2^126).
SAGE_DEV float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
SAGE_DEV float lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Half-precision exponentials, two per instruction (the MUFU pipe's rate doubles): the
// probabilities go to FP16 or FP8 operands anyway, whose rounding (2^-11, 2^-4) is at or above
// ex2.approx.f16's error (2^-9.9 relative).
SAGE_DEV u32 ex2_f16x2(u32 x) {
  u32 y;
  asm("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
SAGE_DEV u32 hadd2(u32 a, u32 b) {
  u32 y;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(y) : "r"(a), "r"(b));
  return y;
}
SAGE_DEV u32 hmul2(u32 a, u32 b) {
  u32 y;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(y) : "r"(a), "r"(b));
  return y;
}
// a - b on two halves: FP16, or BF16.
template <bool BF16>
SAGE_DEV u32 sub2(u32 a, u32 b) {
  u32 y;
  if constexpr (BF16) asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(y) : "r"(a), "r"(b));
  else asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(y) : "r"(a), "r"(b));
  return y;
}
// Sum of the two halves of an f16x2, in FP32.
SAGE_DEV float f16x2_sum(u32 v) { return f16_to_f32(u16(v & 0xffff)) + f16_to_f32(u16(v >> 16)); }
#if defined(SAGE_HAS_FP8)
// f16x2 -> e4m3x2 (round to nearest even, saturating), the low half in the low byte.
SAGE_DEV u16 f16x2_to_e4m3x2(u32 v) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(v));
  return r;
}
SAGE_DEV u32 pack_e4m3x4_h(u32 lo, u32 hi) { return u32(f16x2_to_e4m3x2(lo)) | (u32(f16x2_to_e4m3x2(hi)) << 16); }
#endif
// int32 -> float without the conversion unit: exact for |x| < 2^22 (the int8 QK dot
// products of head_dim <= 128 are below 128*127*127 = 2,064,512). The result is
// x + 12582912.0f; callers fold the -12582912 into an FMA constant.
constexpr float kMagic = 12582912.0f;
SAGE_DEV float magic_i2f(i32 x) { return __int_as_float(x + 0x4B400000); }

// ---- shared memory and async copies --------------------------------------------------------
SAGE_DEV u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// 16-byte global->shared copy; bytes past `src_bytes` (0 or 16) are zero-filled.
SAGE_DEV void cp_async16(u32 dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
SAGE_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
SAGE_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Byte offset of 16-byte chunk `c` of row `r` in a tile whose rows are CPR chunks long,
// XOR-swizzled so that the 8 rows an ldmatrix reads at one chunk column hit 8 different
// bank groups (a plain layout with 128-byte rows puts all 8 on the same banks: 8-way conflict).
template <int CPR>
SAGE_DEV int swz(int r, int c) {
  static_assert(CPR == 2 || CPR == 4 || CPR % 8 == 0, "rows must be 32, 64 or a multiple of 128 bytes");
  int x;
  if constexpr (CPR >= 8) x = c ^ (r & 7);
  else if constexpr (CPR == 4) x = c ^ ((r >> 1) & 3);
  else x = c ^ ((r >> 2) & 1);
  return (r * CPR + x) * 16;
}

SAGE_DEV void ldsm_x4(u32 (&d)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr));
}
SAGE_DEV void ldsm_x4_t(u32 (&d)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr));
}

// ---- warp reductions -----------------------------------------------------------------------
SAGE_DEV float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
SAGE_DEV float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
template <int WIDTH>
SAGE_DEV float group_max(float x) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int WIDTH>
SAGE_DEV float group_sum(float x) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Programmatic dependent launch (sm_90+; no-ops below): the launcher starts the wgmma
// pipeline's sage_prep_v and sage_attn with programmatic stream serialization, so their CTAs
// may become resident while the kernel before them still runs. griddep_wait() blocks until
// that kernel has completed and its writes are visible: it must come before any read of them.
// griddep_launch_dependents() lets the next such kernel launch once every CTA of this one
// has called it (or exited); a CTA calls it when it starts, so none of this kernel's CTAs
// waits for a slot behind a dependent's.
SAGE_DEV void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
SAGE_DEV void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A flag in global memory that orders other global writes and reads across CTAs: the writer's
// stores before st_release are visible to a reader once its ld_acquire has read the value.
SAGE_DEV void st_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
SAGE_DEV unsigned long long ld_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// n arrivals on a counter of this call's generation (generation << 24 | arrivals) that many
// threads hit at once; returns the arrivals before these. The first thread to find the counter
// stale (an earlier call's, or never written) restarts it at 0 with one compare-and-swap, which
// the others' fail; then every thread adds. (arrive_count below retries its compare-and-swap
// until it wins: one round trip per contender, too slow where every CTA takes tickets.)
SAGE_DEV unsigned add_count(unsigned long long* c, unsigned long long generation, unsigned n = 1) {
  const unsigned long long cur = *reinterpret_cast<volatile unsigned long long*>(c);
  if ((cur >> 24) != generation) atomicCAS(c, cur, generation << 24);
  return unsigned(atomicAdd(c, (unsigned long long)n) & 0xffffffull);
}

// One arrival on a counter of this call's generation (generation << 24 | arrivals; a counter an
// earlier call left restarts at 1); returns the arrivals with this one. The caller's writes
// before it are visible to whoever sees the count once it fenced them (__threadfence).
SAGE_DEV unsigned arrive_count(unsigned long long* c, unsigned long long generation) {
  unsigned long long cur = *reinterpret_cast<volatile unsigned long long*>(c);
  while (true) {
    const unsigned long long next = (cur >> 24) == generation ? cur + 1 : ((generation << 24) | 1ull);
    const unsigned long long prev = atomicCAS(c, cur, next);
    if (prev == cur) return unsigned(next & 0xffffffull);
    cur = prev;
  }
}

}  // namespace dev
}  // namespace sage
