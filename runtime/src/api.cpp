// The C API (sage/sage.h): every entry point runs its body through guarded(), the one place
// where exceptions become status codes and the calling thread's last-error message.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/internal/runtime.h"
#include "sage/sage.h"

namespace sage::rt {
namespace {

// The calling thread's last failure. clear() on success keeps the capacity: the fast path
// allocates nothing.
std::string& last_error() {
  thread_local std::string s;
  return s;
}

sage_status status_of(Errc c) {
  switch (c) {
    case Errc::invalid_argument: return SAGE_ERR_INVALID_ARGUMENT;
    case Errc::unsupported: return SAGE_ERR_UNSUPPORTED;
    // A variant or default missing from the build's configuration means the device or problem
    // has no support here.
    case Errc::not_found: return SAGE_ERR_UNSUPPORTED;
    case Errc::compile_failed: return SAGE_ERR_COMPILE;
    case Errc::cuda_error: return SAGE_ERR_CUDA;
    case Errc::no_device: return SAGE_ERR_NO_DEVICE;
    case Errc::io_error:
    case Errc::corrupt: return SAGE_ERR_DATABASE;
    case Errc::not_in_build: return SAGE_ERR_NOT_IN_BUILD;
    case Errc::jit_disabled: return SAGE_ERR_JIT_DISABLED;
    case Errc::parse_error:  // the embedded configuration is broken: a bug of the build
    case Errc::internal: return SAGE_ERR_INTERNAL;
  }
  return SAGE_ERR_INTERNAL;
}

sage_status fail(sage_status s, const char* what) noexcept {
  try {
    last_error() = what;
  } catch (...) {
    // Out of memory for the message itself: the status still tells the category.
  }
  return s;
}

template <class F>
sage_status guarded(F&& body) noexcept {
  try {
    body();
    last_error().clear();
    return SAGE_OK;
  } catch (const WorkspaceTooSmall& e) {
    return fail(SAGE_ERR_WORKSPACE, e.what());
  } catch (const Error& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(SAGE_ERR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(SAGE_ERR_INTERNAL, (std::string("unexpected error: ") + e.what()).c_str());
  } catch (...) {
    return fail(SAGE_ERR_INTERNAL, "unexpected non-standard exception");
  }
}

AttnProblem checked_problem(const sage_attention_desc* d, Policy* policy) {
  if (!d) throw Error(Errc::invalid_argument, "desc is NULL");
  DescView v{d->batch, d->heads_q, d->heads_kv, d->seq_q, d->seq_kv, d->head_dim, int(d->layout), int(d->dtype),
             d->causal, d->sm_scale, int(d->policy), d->window};
  return problem_of(v, policy);
}

// One call's tensors (checked by check_pointers after).
AttnArgs args_of(const void* q, const void* k, const void* v, void* o, float* lse) {
  AttnArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  return a;
}

AttnProblem checked_varlen_problem(const sage_attention_desc* d, const sage_varlen* vl, Policy* policy) {
  if (!d) throw Error(Errc::invalid_argument, "desc is NULL");
  if (!vl) throw Error(Errc::invalid_argument, "varlen is NULL");
  DescView v{d->batch, d->heads_q, d->heads_kv, d->seq_q, d->seq_kv, d->head_dim, int(d->layout), int(d->dtype),
             d->causal, d->sm_scale, int(d->policy), d->window};
  return varlen_problem_of(v, vl->total_q, vl->total_kv, policy);
}

AttnProblem checked_paged_problem(const sage_attention_desc* d, const sage_paged_kv* kv, Policy* policy) {
  if (!d) throw Error(Errc::invalid_argument, "desc is NULL");
  if (!kv) throw Error(Errc::invalid_argument, "kv is NULL");
  DescView v{d->batch, d->heads_q, d->heads_kv, d->seq_q, d->seq_kv, d->head_dim, int(d->layout), int(d->dtype),
             d->causal, d->sm_scale, int(d->policy), d->window};
  AttnProblem p = paged_problem_of(v, kv->page_size, kv->max_pages, kv->num_pages, policy);
  set_kv_dtype(p, kv->kv_dtype);
  return p;
}

AttnProblem checked_varlen_paged_problem(const sage_attention_desc* d, int total_q, const sage_paged_kv* kv,
                                         Policy* policy) {
  if (!d) throw Error(Errc::invalid_argument, "desc is NULL");
  if (!kv) throw Error(Errc::invalid_argument, "kv is NULL");
  DescView v{d->batch, d->heads_q, d->heads_kv, d->seq_q, d->seq_kv, d->head_dim, int(d->layout), int(d->dtype),
             d->causal, d->sm_scale, int(d->policy), d->window};
  AttnProblem p = varlen_paged_problem_of(v, total_q, kv->page_size, kv->max_pages, kv->num_pages, policy);
  set_kv_dtype(p, kv->kv_dtype);
  return p;
}

// The variant that serves `p` (as the call of that problem selects it) into name[capacity].
void write_variant_name(const AttnProblem& p, Policy policy, char* name, size_t capacity) {
  const std::string& v = selection_for(p, policy).variant;
  const std::size_t n = std::min(v.size(), capacity - 1);
  std::memcpy(name, v.data(), n);
  name[n] = '\0';
}
void check_name(const char* name, size_t capacity) {
  if (!name || capacity == 0) throw Error(Errc::invalid_argument, "name is NULL or capacity is 0");
}

}  // namespace
}  // namespace sage::rt

using namespace sage;

extern "C" {

SAGE_API sage_attention_desc sage_attention_desc_init(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv,
                                                      int head_dim) {
  sage_attention_desc d;
  std::memset(&d, 0, sizeof d);
  d.batch = batch;
  d.heads_q = heads_q;
  d.heads_kv = heads_kv;
  d.seq_q = seq_q;
  d.seq_kv = seq_kv;
  d.head_dim = head_dim;
  d.layout = SAGE_LAYOUT_HND;
  d.dtype = SAGE_FP16;
  d.causal = 0;
  d.sm_scale = 0.f;
  d.policy = SAGE_POLICY_BALANCED;
  return d;
}

SAGE_API sage_status sage_workspace_size(const sage_attention_desc* desc, size_t* bytes) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_problem(desc, &policy);
    if (!bytes) throw Error(Errc::invalid_argument, "bytes is NULL");
    rt::trim_window(p, nullptr);
    *bytes = rt::workspace_size(p, policy);
  });
}

SAGE_API sage_status sage_workspace_size_on_stream(const sage_attention_desc* desc, void* stream, size_t* bytes) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_problem(desc, &policy);
    if (!bytes) throw Error(Errc::invalid_argument, "bytes is NULL");
    rt::trim_window(p, nullptr);
    *bytes = rt::workspace_size(p, policy, static_cast<CUstream>(stream));
  });
}

SAGE_API sage_status sage_attention(const sage_attention_desc* desc, const void* q, const void* k, const void* v,
                                    void* o, float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  // Contiguous tensors: the strided call without strides (it then runs exactly this call).
  return sage_attention_strided(desc, q, nullptr, k, nullptr, v, nullptr, o, nullptr, lse, workspace, workspace_bytes,
                                stream);
}

SAGE_API sage_status sage_attention_strided(const sage_attention_desc* desc, const void* q, const sage_strides* q_strides,
                                            const void* k, const sage_strides* k_strides, const void* v,
                                            const sage_strides* v_strides, void* o, const sage_strides* o_strides,
                                            float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  return rt::guarded([&] {
    rt::Policy policy;
    if (!desc) throw Error(Errc::invalid_argument, "desc is NULL");
    AttnArgs a = rt::args_of(q, k, v, o, lse);
    rt::check_pointers(a, workspace);
    AttnProblem p = rt::checked_problem(desc, &policy);
    p.return_lse = lse != nullptr;
    if (q_strides || k_strides || v_strides || o_strides) {
      // NULL: contiguous in desc->layout.
      std::int64_t b, h, n;
      p.strides(p.heads_q, p.seq_q, &b, &h, &n);
      const TensorStrides cq{b, h, n};
      p.strides(p.heads_kv, p.seq_kv, &b, &h, &n);
      const TensorStrides ckv{b, h, n};
      auto pick = [](const sage_strides* s, const TensorStrides& dflt) {
        return s ? TensorStrides{s->batch, s->head, s->seq} : dflt;
      };
      a.strided = true;
      a.sq = pick(q_strides, cq);
      a.sk = pick(k_strides, ckv);
      a.sv = pick(v_strides, ckv);
      a.so = pick(o_strides, cq);
      rt::check_strides(p, a);
    }
    rt::trim_window(p, &a);
    rt::run(p, policy, a, workspace, workspace_bytes, static_cast<CUstream>(stream));
  });
}

SAGE_API sage_status sage_workspace_size_varlen(const sage_attention_desc* desc, const sage_varlen* varlen,
                                                size_t* bytes) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_varlen_problem(desc, varlen, &policy);
    if (!bytes) throw Error(Errc::invalid_argument, "bytes is NULL");
    rt::trim_window(p, nullptr);
    *bytes = rt::workspace_size(p, policy);
  });
}

SAGE_API sage_status sage_attention_varlen(const sage_attention_desc* desc, const sage_varlen* varlen, const void* q,
                                           const void* k, const void* v, void* o, float* lse, void* workspace,
                                           size_t workspace_bytes, void* stream) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_varlen_problem(desc, varlen, &policy);
    AttnArgs a = rt::args_of(q, k, v, o, lse);
    a.cu_seqlens_q = varlen->cu_seqlens_q;
    a.cu_seqlens_kv = varlen->cu_seqlens_kv;
    rt::check_pointers(a, workspace);
    p.return_lse = lse != nullptr;
    rt::trim_window(p, &a);
    rt::run(p, policy, a, workspace, workspace_bytes, static_cast<CUstream>(stream));
  });
}

SAGE_API sage_status sage_workspace_size_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, size_t* bytes) {
  return rt::guarded([&] {
    rt::Policy policy;
    const AttnProblem p = rt::checked_paged_problem(desc, kv, &policy);
    if (!bytes) throw Error(Errc::invalid_argument, "bytes is NULL");
    *bytes = rt::workspace_size(p, policy);
  });
}

SAGE_API sage_status sage_attention_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, const void* q,
                                          void* o, float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_paged_problem(desc, kv, &policy);
    AttnArgs a = rt::args_of(q, kv->k_pages, kv->v_pages, o, lse);
    const TensorStrides ks{kv->k_strides.batch, kv->k_strides.head, kv->k_strides.seq};
    const TensorStrides vs{kv->v_strides.batch, kv->v_strides.head, kv->v_strides.seq};
    rt::set_paged_args(p, a, ks, vs, kv->block_table, kv->seqlens_kv, kv->max_pages, kv->num_pages);
    rt::set_page_scales(p, a, kv->k_scale, kv->v_scale, kv->scale_per_head);
    rt::check_pointers(a, workspace);
    p.return_lse = lse != nullptr;
    rt::run(p, policy, a, workspace, workspace_bytes, static_cast<CUstream>(stream));
  });
}

SAGE_API sage_status sage_workspace_size_varlen_paged(const sage_attention_desc* desc, int total_q,
                                                      const sage_paged_kv* kv, size_t* bytes) {
  return rt::guarded([&] {
    rt::Policy policy;
    const AttnProblem p = rt::checked_varlen_paged_problem(desc, total_q, kv, &policy);
    if (!bytes) throw Error(Errc::invalid_argument, "bytes is NULL");
    *bytes = rt::workspace_size(p, policy);
  });
}

SAGE_API sage_status sage_attention_varlen_paged(const sage_attention_desc* desc, const int32_t* cu_seqlens_q,
                                                 int total_q, const sage_paged_kv* kv, const void* q, void* o,
                                                 float* lse, void* workspace, size_t workspace_bytes, void* stream) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_varlen_paged_problem(desc, total_q, kv, &policy);
    if (!cu_seqlens_q) throw Error(Errc::invalid_argument, "cu_seqlens_q is NULL");
    AttnArgs a = rt::args_of(q, kv->k_pages, kv->v_pages, o, lse);
    const TensorStrides ks{kv->k_strides.batch, kv->k_strides.head, kv->k_strides.seq};
    const TensorStrides vs{kv->v_strides.batch, kv->v_strides.head, kv->v_strides.seq};
    rt::set_paged_args(p, a, ks, vs, kv->block_table, kv->seqlens_kv, kv->max_pages, kv->num_pages);
    rt::set_page_scales(p, a, kv->k_scale, kv->v_scale, kv->scale_per_head);
    a.cu_seqlens_q = cu_seqlens_q;
    rt::check_pointers(a, workspace);
    p.return_lse = lse != nullptr;
    rt::run(p, policy, a, workspace, workspace_bytes, static_cast<CUstream>(stream));
  });
}

SAGE_API sage_status sage_variant_name(const sage_attention_desc* desc, char* name, size_t capacity) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_problem(desc, &policy);
    rt::check_name(name, capacity);
    rt::trim_window(p, nullptr);
    rt::write_variant_name(p, policy, name, capacity);
  });
}

SAGE_API sage_status sage_variant_name_varlen(const sage_attention_desc* desc, const sage_varlen* varlen, char* name,
                                              size_t capacity) {
  return rt::guarded([&] {
    rt::Policy policy;
    AttnProblem p = rt::checked_varlen_problem(desc, varlen, &policy);
    rt::check_name(name, capacity);
    rt::trim_window(p, nullptr);
    rt::write_variant_name(p, policy, name, capacity);
  });
}

SAGE_API sage_status sage_variant_name_paged(const sage_attention_desc* desc, const sage_paged_kv* kv, char* name,
                                             size_t capacity) {
  return rt::guarded([&] {
    rt::Policy policy;
    const AttnProblem p = rt::checked_paged_problem(desc, kv, &policy);
    rt::check_name(name, capacity);
    rt::write_variant_name(p, policy, name, capacity);
  });
}

SAGE_API const char* sage_last_error(void) { return rt::last_error().c_str(); }

SAGE_API const char* sage_status_string(sage_status status) {
  switch (status) {
    case SAGE_OK: return "ok";
    case SAGE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SAGE_ERR_UNSUPPORTED: return "unsupported";
    case SAGE_ERR_NOT_IN_BUILD: return "not in this build";
    case SAGE_ERR_JIT_DISABLED: return "JIT disabled and kernel not compiled";
    case SAGE_ERR_COMPILE: return "kernel compile failed";
    case SAGE_ERR_CUDA: return "CUDA error";
    case SAGE_ERR_NO_DEVICE: return "no CUDA device";
    case SAGE_ERR_WORKSPACE: return "workspace too small";
    case SAGE_ERR_DATABASE: return "database or cache I/O error";
    case SAGE_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

}  // extern "C"
