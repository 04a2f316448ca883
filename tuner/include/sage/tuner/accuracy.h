// Accuracy of a kernel's output against the FP32 reference: metrics, input generation on
// the device, and the host-side half-precision conversions the comparisons need.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sage/internal/device_buffer.h"
#include "sage/internal/launch.h"
#include "sage/tuner/problems.h"

namespace sage::tuner {

// Flattened comparison of an output with the reference (KERNELS.md §2).
struct Metrics {
  double cos = 0;          // cosine similarity
  double rel_l1 = 0;       // sum|o - ref| / sum|ref|
  double rmse = 0;
  double max_abs = 0;
  std::int64_t nonfinite = 0;  // NaN/Inf elements in the output
  std::string str() const;     // "cos 0.99991 rel-L1 0.0131 rmse 1.2e-03 max 0.05"
};
Metrics compare(const float* out, const float* ref, std::size_t n);

float half_to_float(std::uint16_t h);
float bf16_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);   // round to nearest even
std::uint16_t float_to_bf16(float f);   // round to nearest even
// FP8 e4m3 (OCP; torch.float8_e4m3fn: no infinities, 0x7f / 0xff NaN, 448 the largest): the
// value of a byte, and a float's byte rounded to nearest even, saturated to +-448 (NaN: 0x7f).
float e4m3_to_float(std::uint8_t b);
std::uint8_t float_to_e4m3(float f);

enum class InputKind { gaussian, outliers };  // outliers: K += 6 N(0,1), Q += 2, V += 4 per channel
const char* to_string(InputKind k);

// Q, K, V, O (and LSE) of one problem on the device, filled with seeded random values by
// the reference module's sage_fill_normal kernel.
class AttnBuffers {
 public:
  AttnBuffers(const AttnProblem& p);
  void fill(const Module& reference_module, InputKind kind, std::uint64_t seed, CUstream stream);
  AttnArgs args() const;
  // O converted to FP32 in [B, Hq, Nq, D] order (whatever the problem's layout).
  std::vector<float> output_hnd() const;
  void poison_output();  // NaN bytes, so unwritten elements fail the comparison

  AttnProblem problem;
  DeviceBuffer q, k, v, o, lse;
};

// A paged KV cache made of dense buffers' K and V (the tuner's paged buckets, ProblemKey::paged):
// `paged` is the call (AttnProblem::paged, page_size, kv_fp8), `dense` its buffers, made for
// dense_problem(paged) and filled. Each sequence's seq_kv keys go to pages of page_size slots
// ([num_pages, page_size, heads_kv, head_dim]) drawn in a shuffled order (seeded) from a pool with
// spare pages, as a serving engine's cache after some churn; the last page of a sequence may be
// partly filled. FP8 pages (kv_fp8): e4m3 bytes over one scale a kv head (amax / 448, as vLLM's),
// and the values they stand for are written back into `dense`, so that the reference run on
// `dense` sees what the kernel reads.
class PagedKv {
 public:
  // Waits for `stream` (where `dense` was filled) before reading it.
  PagedKv(const AttnProblem& paged, AttnBuffers& dense, std::uint64_t seed, CUstream stream);
  // dense's Q, O and LSE with the pages, tables and scales: the paged call's arguments.
  AttnArgs args(const AttnBuffers& dense) const;
  // `paged` as a dense call of the same shape (what AttnBuffers and the reference take).
  static AttnProblem dense_problem(const AttnProblem& paged);

  AttnProblem problem;
  int max_pages = 0, num_pages = 0;
  DeviceBuffer k, v, table, lens, k_scale, v_scale;
};

// `a` (Q, O and LSE contiguous in p.layout) as a paged call's arguments: its K and V the pages
// at k and v (contiguous [num_pages, page_size, heads_kv, head_dim]: strides {page, head, slot},
// in elements, FP8 pages' in bytes alike), sequence b's pages in table[b * max_pages ...] and its
// keys lens[b]; FP8 pages' scales (k_scale / v_scale, one a kv head) where p.kv_fp8.
AttnArgs with_pages(AttnArgs a, const AttnProblem& p, const void* k, const void* v, const std::int32_t* table,
                    const std::int32_t* lens, int max_pages, int num_pages, const float* k_scale = nullptr,
                    const float* v_scale = nullptr);

// Runs the reference for `buffers` and returns its O ([B,Hq,Nq,D] FP32) and LSE.
struct ReferenceResult {
  std::vector<float> o, lse;
};
ReferenceResult run_reference(const ReferenceKernel& ref, const AttnBuffers& b, CUstream stream);

// A variable-length batch (the tuner's varlen buckets, ProblemKey::varlen): `problem` is the call
// (with_sequences(..., lens)), `buffers` its sequences packed one after another ([total, heads,
// head_dim]: packed_problem, a dense call of one sequence of total_q queries and total_kv keys,
// NHD), their offsets on the device in cu_q / cu_kv.
class VarlenBatch {
 public:
  VarlenBatch(const AttnProblem& varlen, SeqLens lens);
  static AttnProblem packed_problem(const AttnProblem& varlen);
  AttnArgs args() const;  // buffers' with the offsets
  // Each sequence's FP32 reference alone (a dense call on views of its rows, with the call's mask
  // and window), O in buffers.output_hnd()'s order (no LSE).
  ReferenceResult reference(const ReferenceKernel& ref, CUstream stream) const;
  double flops() const;  // each sequence's, under its mask and window

  AttnProblem problem;
  SeqLens lens;
  AttnBuffers buffers;
  DeviceBuffer cu_q, cu_kv;
  std::vector<std::int32_t> offsets_q, offsets_kv;  // batch + 1 each
};

// The inputs a problem is timed on (`sage-tune tune`, `sage-tune verify`): `sets` Gaussian input
// sets (seeds seed, seed + 1, ...), rotated between samples; a paged problem's with pages made of
// each set's K and V (PagedKv); a variable-length one's packed sequences of `lens` (VarlenBatch).
class TimingInputs {
 public:
  TimingInputs(const AttnProblem& p, const Module& reference_module, int sets, std::uint64_t seed, CUstream stream,
               const SeqLens& lens = {});
  AttnArgs args(std::size_t i) const;  // set i % sets
  std::size_t size() const { return problem_.varlen ? varlen_.size() : dense_.size(); }
  // The FLOPs of one call (a variable-length batch's: its sequences'), for TOPS.
  double flops() const;

 private:
  AttnProblem problem_;
  std::vector<AttnBuffers> dense_;
  std::vector<PagedKv> pages_;
  std::vector<VarlenBatch> varlen_;
};

}  // namespace sage::tuner
