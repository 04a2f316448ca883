/* A program of the C API's calls of every kind, built twice by tests/runtime/gpu_test_export.cpp:
 * against a JIT runtime and against a static runtime made by `sage-tune export`. For each call
 * it prints its status and an FNV-1a hash of O's and the LSE's bytes; the two builds must print
 * the same lines (the same kernels, chosen the same way, give the same bits).
 *
 * Usage: export_probe D  (the head dim of every call but the rows16 one; 64 or 128)
 * The driver API is declared here rather than taken from cuda.h: the program needs only a few
 * entry points, and builds with nothing but a C compiler, sage.h and libcuda. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sage/sage.h"

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
int cuInit(unsigned flags);
int cuDevicePrimaryCtxRetain(CUcontext* ctx, int dev);
int cuCtxSetCurrent(CUcontext ctx);
int cuMemAlloc_v2(CUdeviceptr* p, size_t bytes);
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes);
int cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes);
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n);
int cuCtxSynchronize(void);

#define ELEMS (16u << 20) /* halves in each of Q, K, V, O: 32 MiB */
#define CHECK(x)                                           \
  do {                                                     \
    int rc_ = (x);                                         \
    if (rc_) {                                             \
      fprintf(stderr, "%s failed: %d\n", #x, rc_);         \
      exit(1);                                             \
    }                                                      \
  } while (0)

static CUdeviceptr q, k, v, o, lse, tables, ints;
static CUdeviceptr k8, v8, scales; /* FP8 pages: ELEMS bytes each; K's and V's scales */
static unsigned char host[ELEMS * 2];

static uint64_t fnv(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Random FP16 bit patterns of magnitude 1/8 to 2 (no NaN or infinity): a fixed LCG. */
static void fill(CUdeviceptr dst, uint32_t seed) {
  uint32_t s = seed;
  uint16_t* h = (uint16_t*)host;
  for (size_t i = 0; i < ELEMS; ++i) {
    s = s * 1664525u + 1013904223u;
    const uint16_t sign = (uint16_t)((s >> 31) << 15), exp = (uint16_t)(12 + ((s >> 28) & 3)), man = (uint16_t)((s >> 8) & 1023);
    h[i] = (uint16_t)(sign | (exp << 10) | man);
  }
  CHECK(cuMemcpyHtoD_v2(dst, host, ELEMS * 2));
}

/* FP8 e4m3 bytes of magnitudes up to 1.875 (no NaN code, 0x7f / 0xff), signs random. */
static void fill8(CUdeviceptr dst, uint32_t seed) {
  uint32_t s = seed;
  for (size_t i = 0; i < ELEMS; ++i) {
    s = s * 1664525u + 1013904223u;
    host[i] = (unsigned char)(((s >> 31) << 7) | ((s >> 8) & 0x3f));
  }
  CHECK(cuMemcpyHtoD_v2(dst, host, ELEMS));
}

static void clear_out(void) {
  CHECK(cuMemsetD8_v2(o, 0, ELEMS * 2));
  CHECK(cuMemsetD8_v2(lse, 0, 16u << 20));
}

/* Prints the call's line: its status, and on success the hash of O's and the LSE's bytes. */
static void report(const char* name, sage_status s, size_t o_elems, size_t lse_elems) {
  if (s != SAGE_OK) {
    printf("%s status %d %s\n", name, (int)s, sage_last_error());
    return;
  }
  CHECK(cuCtxSynchronize());
  uint64_t h = 1469598103934665603ull;
  CHECK(cuMemcpyDtoH_v2(host, o, o_elems * 2));
  h = fnv(h, host, o_elems * 2);
  CHECK(cuMemcpyDtoH_v2(host, lse, lse_elems * 4));
  h = fnv(h, host, lse_elems * 4);
  printf("%s ok %016llx\n", name, (unsigned long long)h);
}

static void dense(const char* name, int b, int hq, int hkv, int n_q, int n_kv, int d, int causal, int window) {
  sage_attention_desc desc = sage_attention_desc_init(b, hq, hkv, n_q, n_kv, d);
  desc.causal = causal;
  desc.window = window;
  clear_out();
  sage_status s = sage_attention(&desc, (void*)q, (void*)k, (void*)v, (void*)o, (float*)lse, NULL, 0, NULL);
  report(name, s, (size_t)b * hq * n_q * d, (size_t)b * hq * n_q);
}

/* A packed batch of `n` sequences of q_lens[i] queries over kv_lens[i] keys (NHD). */
static void varlen(const char* name, int n, const int* q_lens, const int* kv_lens, int hq, int hkv, int d, int causal) {
  int32_t cu[64];
  int max_q = 0, max_kv = 0;
  cu[0] = 0;
  for (int i = 0; i < n; ++i) cu[i + 1] = cu[i] + q_lens[i];
  int32_t cu_kv[32];
  cu_kv[0] = 0;
  for (int i = 0; i < n; ++i) {
    cu_kv[i + 1] = cu_kv[i] + kv_lens[i];
    if (q_lens[i] > max_q) max_q = q_lens[i];
    if (kv_lens[i] > max_kv) max_kv = kv_lens[i];
  }
  memcpy(cu + 32, cu_kv, sizeof cu_kv);
  CHECK(cuMemcpyHtoD_v2(ints, cu, sizeof cu));
  sage_attention_desc desc = sage_attention_desc_init(n, hq, hkv, max_q, max_kv, d);
  desc.layout = SAGE_LAYOUT_NHD;
  desc.causal = causal;
  sage_varlen vl = {(const int32_t*)ints, (const int32_t*)(ints + 32 * 4), cu[n], cu_kv[n]};
  clear_out();
  sage_status s = sage_attention_varlen(&desc, &vl, (void*)q, (void*)k, (void*)v, (void*)o, (float*)lse, NULL, 0, NULL);
  report(name, s, (size_t)cu[n] * hq * d, (size_t)cu[n] * hq);
}

/* `n` sequences over a paged cache of pages of `page` slots (NHD pages), their pages in a
 * scrambled order; q_lens NULL: dense queries of `seq_q` each (sage_attention_paged), else packed
 * variable-length queries (sage_attention_varlen_paged). */
static void paged(const char* name, int n, const int* q_lens, int seq_q, const int* kv_lens, int hq, int hkv, int d,
                  int causal, int page, int fp8) {
  int max_kv = 0, max_q = seq_q;
  for (int i = 0; i < n; ++i) {
    if (kv_lens[i] > max_kv) max_kv = kv_lens[i];
    if (q_lens && q_lens[i] > max_q) max_q = q_lens[i];
  }
  const int max_pages = (max_kv + page - 1) / page;
  const int num_pages = (int)(ELEMS / ((size_t)page * hkv * d));
  int32_t* table = (int32_t*)malloc(sizeof(int32_t) * (size_t)n * max_pages);
  for (int i = 0; i < n * max_pages; ++i) table[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)num_pages);
  CHECK(cuMemcpyHtoD_v2(tables, table, sizeof(int32_t) * (size_t)n * max_pages));
  free(table);
  int32_t buf[128];
  for (int i = 0; i < n; ++i) buf[i] = kv_lens[i];
  int total_q = 0;
  buf[64] = 0;
  for (int i = 0; q_lens && i < n; ++i) buf[65 + i] = buf[64 + i] + q_lens[i];
  if (q_lens) total_q = buf[64 + n];
  CHECK(cuMemcpyHtoD_v2(ints, buf, sizeof buf));
  sage_paged_kv kv;
  memset(&kv, 0, sizeof kv);
  kv.k_pages = (const void*)k;
  kv.v_pages = (const void*)v;
  kv.block_table = (const int32_t*)tables;
  kv.seqlens_kv = (const int32_t*)ints;
  kv.page_size = page;
  kv.max_pages = max_pages;
  kv.num_pages = num_pages;
  if (fp8) { /* FP8 pages (ELEMS bytes: as many pages of bytes as the FP16 ones), one scale each */
    kv.k_pages = (const void*)k8;
    kv.v_pages = (const void*)v8;
    kv.kv_dtype = SAGE_KV_DTYPE_FP8_E4M3;
    kv.k_scale = (const float*)scales;
    kv.v_scale = (const float*)(scales + 4);
  }
  sage_attention_desc desc = sage_attention_desc_init(n, hq, hkv, max_q, max_kv, d);
  desc.layout = SAGE_LAYOUT_NHD;
  desc.causal = causal;
  clear_out();
  sage_status s;
  if (q_lens) {
    s = sage_attention_varlen_paged(&desc, (const int32_t*)(ints + 64 * 4), total_q, &kv, (void*)q, (void*)o,
                                    (float*)lse, NULL, 0, NULL);
    report(name, s, (size_t)total_q * hq * d, (size_t)total_q * hq);
  } else {
    s = sage_attention_paged(&desc, &kv, (void*)q, (void*)o, (float*)lse, NULL, 0, NULL);
    report(name, s, (size_t)n * hq * seq_q * d, (size_t)n * hq * seq_q);
  }
}

int main(int argc, char** argv) {
  const int d = argc > 1 ? atoi(argv[1]) : 128;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuMemAlloc_v2(&q, ELEMS * 2));
  CHECK(cuMemAlloc_v2(&k, ELEMS * 2));
  CHECK(cuMemAlloc_v2(&v, ELEMS * 2));
  CHECK(cuMemAlloc_v2(&o, ELEMS * 2));
  CHECK(cuMemAlloc_v2(&lse, 16u << 20));
  CHECK(cuMemAlloc_v2(&tables, 1u << 20));
  CHECK(cuMemAlloc_v2(&ints, 4096));
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  CHECK(cuMemAlloc_v2(&k8, ELEMS));
  CHECK(cuMemAlloc_v2(&v8, ELEMS));
  CHECK(cuMemAlloc_v2(&scales, 256));
  fill8(k8, 4);
  fill8(v8, 5);
  {
    const float sc[2] = {0.37f, 1.9f};
    CHECK(cuMemcpyHtoD_v2(scales, sc, sizeof sc));
  }

  /* Dense calls: short and long, causal, GQA, few (sequence, head) pairs (the defaults by the
   * call's own batch x query heads), decoding, a head dim below the kernels' (rows16 at 72 or 40). */
  dense("dense_1k", 2, 16, 16, 1024, 1024, d, 0, 0);
  dense("dense_causal_2k_gqa", 2, 32, 8, 2048, 2048, d, 1, 0);
  dense("dense_4k_8pairs", 1, 8, 8, 4096, 4096, d, 0, 0);
  dense("dense_8k_causal", 1, 16, 4, 8192, 8192, d, 1, 0);
  dense("dense_rows16", 2, 16, 16, 2048, 2048, d == 128 ? 72 : 40, 0, 0);
  dense("decode_1q", 4, 32, 8, 1, 4096, d, 1, 0);
  dense("decode_4q", 4, 32, 8, 4, 4096, d, 1, 0);
  dense("chunk_64q", 2, 32, 8, 64, 4096, d, 1, 0);
  dense("window_256", 1, 16, 4, 2048, 2048, d, 1, 256);
  {
    const int ql[3] = {300, 1000, 64}, kl[3] = {300, 1000, 64};
    varlen("varlen_3", 3, ql, kl, 16, 4, d, 1);
  }
  {
    const int kl[4] = {4096, 1000, 17, 3000};
    paged("paged_decode", 4, NULL, 1, kl, 32, 8, d, 1, 16, 0);
    paged("paged_chunk_200", 4, NULL, 200, kl, 32, 8, d, 1, 64, 0);
    paged("paged_decode_fp8", 4, NULL, 1, kl, 32, 8, d, 1, 16, 1);
  }
  {
    const int ql[6] = {1, 1, 1, 1, 1, 300}, kl[6] = {2048, 100, 777, 1500, 3, 1200};
    paged("varlen_paged_mixed", 6, ql, 0, kl, 32, 8, d, 1, 16, 0);
    paged("varlen_paged_mixed_fp8", 6, ql, 0, kl, 32, 8, d, 1, 16, 1);
  }
  return 0;
}
