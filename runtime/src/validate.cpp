// Argument checks of the C API: everything that can be decided without a device, each
// failure naming the field and the value.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/runtime.h"

namespace sage::rt {
namespace {

// The attention kernel's grid is (q tiles, heads_q, batch); CUDA limits y and z to 65535.
constexpr int kMaxGridYZ = 65535;

void positive(int v, const char* name) {
  if (v < 1) throw Error(Errc::invalid_argument, cat("desc->", name, " must be >= 1, got ", v));
}

std::string dims_list() {
  std::string s;
  for (int d : supported_head_dims()) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

void aligned(const void* p, std::uintptr_t a, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(p) % a != 0)
    throw Error(Errc::invalid_argument, cat(name, " (", p, ") must be ", a, "-byte aligned"));
}

// A sliding window: >= 0, and only with a causal mask (checked after desc->causal is 0 or 1).
void check_window(const DescView& d) {
  if (d.window < 0) throw Error(Errc::invalid_argument, cat("desc->window must be >= 0 (0: no sliding window), got ", d.window));
  if (d.window > 0 && d.causal != 1)
    throw Error(Errc::invalid_argument, cat("desc->window (", d.window, ") is a sliding window over the most recent keys: "
                                            "it needs desc->causal = 1"));
}

}  // namespace

AttnProblem problem_of(const DescView& d, Policy* policy) {
  positive(d.batch, "batch");
  positive(d.heads_q, "heads_q");
  positive(d.heads_kv, "heads_kv");
  positive(d.seq_q, "seq_q");
  positive(d.seq_kv, "seq_kv");
  positive(d.head_dim, "head_dim");
  if (d.heads_q % d.heads_kv != 0)
    throw Error(Errc::invalid_argument,
                cat("desc->heads_q (", d.heads_q, ") must be a multiple of desc->heads_kv (", d.heads_kv, ")"));
  if (d.layout != 0 && d.layout != 1)
    throw Error(Errc::invalid_argument, cat("desc->layout ", d.layout, " is neither SAGE_LAYOUT_HND (0) nor SAGE_LAYOUT_NHD (1)"));
  if (d.dtype != 0 && d.dtype != 1)
    throw Error(Errc::invalid_argument, cat("desc->dtype ", d.dtype, " is neither SAGE_FP16 (0) nor SAGE_BF16 (1)"));
  if (d.policy < 0 || d.policy > 2)
    throw Error(Errc::invalid_argument, cat("desc->policy ", d.policy, " is not SAGE_POLICY_BALANCED (0), _ACCURATE (1) or _FAST (2)"));
  if (d.causal != 0 && d.causal != 1) throw Error(Errc::invalid_argument, cat("desc->causal must be 0 or 1, got ", d.causal));
  if (!std::isfinite(d.sm_scale) || d.sm_scale < 0.f)
    throw Error(Errc::invalid_argument, cat("desc->sm_scale must be finite and >= 0 (0 means 1/sqrt(head_dim)), got ", d.sm_scale));
  if (d.causal && d.seq_q > d.seq_kv)
    throw Error(Errc::invalid_argument,
                cat("causal attention needs seq_q <= seq_kv (the mask is bottom-right aligned: query i sees keys "
                    "j <= i + seq_kv - seq_q), got seq_q ", d.seq_q, " > seq_kv ", d.seq_kv));
  check_window(d);
  if (kernel_head_dim(d.head_dim) == 0)
    throw Error(Errc::unsupported, cat("head_dim ", d.head_dim, " is not supported (the kernels' head dims are ", dims_list(),
                                       "; any other up to ", supported_head_dims().back(),
                                       " runs on the next one's kernels)"));
  if (d.heads_q > kMaxGridYZ || d.batch > kMaxGridYZ)
    throw Error(Errc::unsupported, cat("batch (", d.batch, ") and heads_q (", d.heads_q, ") must each be <= ", kMaxGridYZ,
                                       " (CUDA grid limit)"));

  AttnProblem p;
  p.batch = d.batch;
  p.heads_q = d.heads_q;
  p.heads_kv = d.heads_kv;
  p.seq_q = d.seq_q;
  p.seq_kv = d.seq_kv;
  p.head_dim = d.head_dim;
  p.layout = d.layout == 1 ? Layout::NHD : Layout::HND;
  p.dtype = d.dtype == 1 ? DType::bf16 : DType::fp16;
  p.causal = d.causal == 1;
  p.window = d.window;
  p.sm_scale = d.sm_scale;
  *policy = d.policy == 1 ? Policy::accurate : d.policy == 2 ? Policy::fast : Policy::balanced;
  return p;
}

AttnProblem varlen_problem_of(const DescView& d, int total_q, int total_kv, Policy* policy) {
  if (d.layout != 1)
    throw Error(Errc::invalid_argument, cat("desc->layout must be SAGE_LAYOUT_NHD (1) for a variable-length batch, whose "
                                            "tensors are packed [total, heads, head_dim]; got ", d.layout));
  // Causal sequences of more queries than keys are allowed here (their first rows see no key: O
  // 0, LSE -inf); the dense call's check is on the longest sequences only, which says nothing.
  DescView dense = d;
  dense.causal = 0;
  dense.window = 0;
  AttnProblem p = problem_of(dense, policy);
  check_window(d);
  p.causal = d.causal == 1;
  p.window = d.window;
  if (total_q < 0 || total_kv < 0)
    throw Error(Errc::invalid_argument, cat("varlen->total_q and total_kv must be >= 0, got ", total_q, " and ", total_kv));
  const int kd = kernel_head_dim(d.head_dim);
  if (kd != d.head_dim && d.head_dim % 8 != 0)
    throw Error(Errc::unsupported, cat("head_dim ", d.head_dim, ": variable-length batches run on the kernels of head "
                                       "dims 64 and 128 (on sm_90a also 256), and on a multiple of 8 below one of them "
                                       "(read as zero-padded); any other would need padded copies"));
  p.varlen = true;
  p.total_q = total_q;
  p.total_kv = total_kv;
  return p;
}

AttnProblem paged_problem_of(const DescView& d, int page_size, int max_pages, int num_pages, Policy* policy) {
  AttnProblem p = problem_of(d, policy);  // a window: >= 0, causal only (check_window)
  if (d.head_dim % 8 != 0)
    throw Error(Errc::unsupported, cat("head_dim ", d.head_dim, ": a paged KV cache's rows are read in place as 16-byte "
                                       "chunks, so its head dim must be a multiple of 8"));
  if (page_size < 1 || page_size > (1 << 24) || (page_size & (page_size - 1)) != 0)
    throw Error(Errc::invalid_argument, cat("kv->page_size must be a power of two (up to 2^24), got ", page_size));
  if (num_pages < 1) throw Error(Errc::invalid_argument, cat("kv->num_pages must be >= 1, got ", num_pages));
  if (max_pages < 1 || std::int64_t(max_pages) * page_size < d.seq_kv)
    throw Error(Errc::invalid_argument, cat("kv->max_pages (", max_pages, ") pages of ", page_size,
                                            " slots cannot hold desc->seq_kv (", d.seq_kv, ") keys"));
  if (std::int64_t(d.batch) * max_pages > (std::int64_t(1) << 31) - 1)
    throw Error(Errc::invalid_argument, cat("the block table's batch x max_pages (", d.batch, " x ", max_pages,
                                            ") must fit 2^31 entries"));
  p.paged = true;
  p.page_size = page_size;
  // A window of every key a query can see (desc->seq_kv bounds each sequence's) is none.
  if (p.window >= p.seq_kv) p.window = 0;
  return p;
}

AttnProblem varlen_paged_problem_of(const DescView& d, int total_q, int page_size, int max_pages, int num_pages,
                                    Policy* policy) {
  if (d.layout != 1)
    throw Error(Errc::invalid_argument, cat("desc->layout must be SAGE_LAYOUT_NHD (1) for variable-length queries, whose "
                                            "q and o are packed [total_q, heads, head_dim]; got ", d.layout));
  // Causal sequences of more queries than keys are allowed (their first rows see no key), as in
  // a variable-length batch: the longest sequences' lengths say nothing of any one sequence.
  DescView dense = d;
  dense.causal = 0;
  dense.window = 0;
  AttnProblem p = paged_problem_of(dense, page_size, max_pages, num_pages, policy);
  if (d.causal != 0 && d.causal != 1) throw Error(Errc::invalid_argument, cat("desc->causal must be 0 or 1, got ", d.causal));
  check_window(d);
  p.causal = d.causal == 1;
  p.window = d.window < p.seq_kv ? d.window : 0;
  if (total_q < 0) throw Error(Errc::invalid_argument, cat("total_q must be >= 0, got ", total_q));
  p.varlen = true;
  p.total_q = total_q;
  p.total_kv = 0;
  return p;
}

void set_kv_dtype(AttnProblem& p, int kv_dtype) {
  if (kv_dtype == 0) return;
  if (kv_dtype != 1)
    throw Error(Errc::invalid_argument, cat("kv->kv_dtype must be SAGE_KV_DTYPE_INPUT (0) or SAGE_KV_DTYPE_FP8_E4M3 (1), got ",
                                            kv_dtype));
  if (p.head_dim % 16 != 0)
    throw Error(Errc::unsupported, cat("head_dim ", p.head_dim, ": FP8 pages' rows are read as 16-byte chunks of 16 "
                                       "elements, so their head dim must be a multiple of 16"));
  if (p.seq_kv >= (1 << 30))
    throw Error(Errc::unsupported, cat("desc->seq_kv ", p.seq_kv, ": FP8 pages take fewer than 2^30 keys a sequence"));
  p.kv_fp8 = true;
}

void set_page_scales(const AttnProblem& p, AttnArgs& a, const float* k_scale, const float* v_scale, int per_head) {
  if (!p.kv_fp8) return;  // the queries' type: no scales read
  if (per_head != 0 && per_head != 1)
    throw Error(Errc::invalid_argument, cat("kv->scale_per_head must be 0 or 1, got ", per_head));
  if (k_scale) aligned(k_scale, 4, "kv->k_scale");
  if (v_scale) aligned(v_scale, 4, "kv->v_scale");
  a.kv_k_scale = k_scale;
  a.kv_v_scale = v_scale;
  a.kv_scale_stride = per_head;
}

void set_paged_args(const AttnProblem& p, AttnArgs& a, const TensorStrides& ks, const TensorStrides& vs,
                    const std::int32_t* block_table, const std::int32_t* seqlens_kv, int max_pages, int num_pages) {
  if (!a.k) throw Error(Errc::invalid_argument, "kv->k_pages is NULL");
  if (!a.v) throw Error(Errc::invalid_argument, "kv->v_pages is NULL");
  aligned(a.k, 16, "kv->k_pages");
  aligned(a.v, 16, "kv->v_pages");
  if (!block_table) throw Error(Errc::invalid_argument, "kv->block_table is NULL");
  if (!seqlens_kv) throw Error(Errc::invalid_argument, "kv->seqlens_kv is NULL");
  aligned(block_table, 4, "kv->block_table");
  aligned(seqlens_kv, 4, "kv->seqlens_kv");
  a.block_table = block_table;
  a.seqlens_kv = seqlens_kv;
  a.bt_stride = max_pages;
  a.num_pages = num_pages;
  std::int64_t b, h, n;
  p.strides(p.heads_q, p.seq_q, &b, &h, &n);  // varlen: NHD, the packed rows (no batch stride read)
  a.sq = a.so = TensorStrides{b, h, n};
  const TensorStrides dense{std::int64_t(p.page_size) * p.heads_kv * p.head_dim, p.head_dim,
                            std::int64_t(p.heads_kv) * p.head_dim};
  auto one = [&](TensorStrides s, const char* name) {
    if (s.b == 0 && s.h == 0 && s.n == 0) s = dense;
    std::int64_t* v[3] = {&s.b, &s.h, &s.n};
    const int size[3] = {num_pages, p.heads_kv, p.page_size};
    const char* dim[3] = {"batch (pages)", "head", "seq (slots)"};
    for (int i = 0; i < 3; ++i) {
      if (size[i] == 1) {
        *v[i] = 0;  // never stepped over
        continue;
      }
      if (p.kv_fp8 && *v[i] >= (std::int64_t(1) << 31))  // the FP8 kernels' strides are 32-bit (Fp8Pages)
        throw Error(Errc::invalid_argument, cat("kv->", name, "_strides.", dim[i], " must be below 2^31 bytes for FP8 "
                                                "pages, got ", *v[i]));
      const int m = p.kv_fp8 ? 16 : 8;  // elements in 16 bytes
      if (*v[i] <= 0 || *v[i] % m != 0)
        throw Error(Errc::invalid_argument, cat("kv->", name, "_strides.", dim[i], " must be a positive multiple of ", m,
                                                " elements (16 bytes", p.kv_fp8 ? " of FP8" : "", "), got ", *v[i]));
    }
    return s;
  };
  a.sk = one(ks, "k");
  a.sv = one(vs, "v");
  a.strided = true;
}

void trim_window(AttnProblem& p, AttnArgs* a) {
  const int skip = p.window_skip();
  if (skip > 0 && a) {
    if (!a->strided) {  // contiguous in p.layout: the same tensors as strided views
      std::int64_t b, h, n;
      p.strides(p.heads_q, p.seq_q, &b, &h, &n);
      a->sq = a->so = TensorStrides{b, h, n};
      p.strides(p.heads_kv, p.seq_kv, &b, &h, &n);
      a->sk = a->sv = TensorStrides{b, h, n};
      a->strided = true;
    }
    a->k = static_cast<const char*>(a->k) + skip * a->sk.n * 2;
    a->v = static_cast<const char*>(a->v) + skip * a->sv.n * 2;
  }
  p.trim_window();
}

void check_pointers(const AttnArgs& a, const void* workspace) {
  if (!a.q) throw Error(Errc::invalid_argument, "q is NULL");
  if (!a.k) throw Error(Errc::invalid_argument, "k is NULL");
  if (!a.v) throw Error(Errc::invalid_argument, "v is NULL");
  if (!a.o) throw Error(Errc::invalid_argument, "o is NULL");
  // 16 bytes: the kernels move Q, K, V and O in 128-bit vectors.
  aligned(a.q, 16, "q");
  aligned(a.k, 16, "k");
  aligned(a.v, 16, "v");
  aligned(a.o, 16, "o");
  if (a.lse) aligned(a.lse, 4, "lse");
  if (a.cu_seqlens_q && a.block_table) {  // variable-length queries over a paged cache: no key offsets
    aligned(a.cu_seqlens_q, 4, "cu_seqlens_q");
  } else if (a.cu_seqlens_q || a.cu_seqlens_kv) {  // a variable-length batch: both, as int32 arrays
    if (!a.cu_seqlens_q) throw Error(Errc::invalid_argument, "varlen->cu_seqlens_q is NULL");
    if (!a.cu_seqlens_kv) throw Error(Errc::invalid_argument, "varlen->cu_seqlens_kv is NULL");
    aligned(a.cu_seqlens_q, 4, "varlen->cu_seqlens_q");
    aligned(a.cu_seqlens_kv, 4, "varlen->cu_seqlens_kv");
  }
  // 256 bytes: the workspace plan aligns every region to 256 from the base.
  if (workspace) aligned(workspace, 256, "workspace");
}

void check_strides(const AttnProblem& p, AttnArgs& a) {
  if (!a.strided) return;
  if (p.head_dim % 8 != 0)
    throw Error(Errc::invalid_argument, cat("strided tensors need head_dim a multiple of 8 (16-byte rows), got ",
                                            p.head_dim, "; pass NULL strides (contiguous tensors)"));
  auto one = [&](TensorStrides& s, int heads, int seq, const char* name) {
    std::int64_t* v[3] = {&s.b, &s.h, &s.n};
    const int size[3] = {p.batch, heads, seq};
    const char* dim[3] = {"batch", "head", "seq"};
    for (int i = 0; i < 3; ++i) {
      if (size[i] == 1) {
        *v[i] = 0;  // never stepped over
        continue;
      }
      // > 0: TMA's tensor maps are not known to take a zero stride (an expanded tensor is copied
      // by the caller, or expressed as grouped-query heads).
      if (*v[i] <= 0 || *v[i] % 8 != 0)
        throw Error(Errc::invalid_argument, cat(name, "_strides->", dim[i], " must be a positive multiple of 8 elements "
                                                "(16 bytes), got ", *v[i]));
    }
  };
  one(a.sq, p.heads_q, p.seq_q, "q");
  one(a.sk, p.heads_kv, p.seq_kv, "k");
  one(a.sv, p.heads_kv, p.seq_kv, "v");
  one(a.so, p.heads_q, p.seq_q, "o");
  // O's rows must not overlap (the inputs' may: views of one packed buffer): each dimension of size > 1,
  // innermost first, steps past everything the inner ones span.
  struct Dim {
    std::int64_t stride, size;
    const char* name;
  } d[3] = {{a.so.b, p.batch, "batch"}, {a.so.h, p.heads_q, "head"}, {a.so.n, p.seq_q, "seq"}};
  std::sort(std::begin(d), std::end(d), [](const Dim& x, const Dim& y) { return x.stride < y.stride; });
  std::int64_t span = p.head_dim;  // elements the inner dimensions cover
  for (const Dim& x : d) {
    if (x.size == 1) continue;
    if (x.stride < span)
      throw Error(Errc::invalid_argument, cat("o_strides->", x.name, " (", x.stride, ") makes O's rows overlap: it must be >= ",
                                              span, ", what the inner dimensions span"));
    span = x.stride * (x.size - 1) + span;
  }
}

std::int64_t extent_elems(const TensorStrides& s, int batch, int heads, int seq, int head_dim) {
  return std::int64_t(batch - 1) * s.b + std::int64_t(heads - 1) * s.h + std::int64_t(seq - 1) * s.n + head_dim;
}

}  // namespace sage::rt
