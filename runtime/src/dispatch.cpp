// The call path: bucket -> in-memory cache (context, bucket) -> loaded kernel -> launch, with
// the selection made once per key (single flight) on a miss.
//
// Fast path (every call after the first of its bucket): compute the bucket key (plain
// integers), read the current context, look the key up under a shared lock released before
// anything else happens, plan the workspace, take it from the caller or the stream-ordered
// pool, launch. No heap allocation and no lock held across the launch.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "log.h"
#include "provider.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/internal/runtime.h"
#include "sage/internal/single_flight.h"

namespace sage::rt {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A bucket's loaded kernel on one context.
struct Entry {
  std::shared_ptr<AttnKernel> kernel;
  Selection selection;
  CUmemoryPool pool = nullptr;  // this context's workspace pool (nullptr: the device's default pool)
};

struct Runtime {
  SingleFlightCache<CacheKey, Entry, CacheKeyHash> cache;
  std::atomic<std::uint64_t> selections{0}, loads{0};
  std::atomic<int> check_pointers{-1};  // SAGE_CHECK_POINTERS, read at the first call
  std::mutex pool_mu;
  // By context ID (context_id), as every cache here: a primary context that is reset keeps its
  // handle, and its old modules and pool are gone.
  std::map<std::uint64_t, CUmemoryPool> pools;  // kept across reset(): allocations may be in flight
  // Loaded kernels by (context, cubin hash): buckets served by one kernel share its module
  // (each load costs milliseconds and device memory for the code).
  std::mutex kernels_mu;
  std::map<std::pair<std::uint64_t, std::string>, std::shared_ptr<AttnKernel>> kernels;
};

// Never destroyed: at process exit the driver may already be torn down, and unloading
// modules or pools then would fail or crash. The operating system reclaims everything.
Runtime& runtime() {
  static Runtime* r = new Runtime;
  return *r;
}

provider::Device query_device(CUcontext ctx) {
  provider::Device d;
  d.ctx = ctx;
  SAGE_CU(cuCtxGetDevice(&d.dev));
  int major = 0, minor = 0;
  SAGE_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.dev));
  SAGE_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.dev));
  d.cc = major * 10 + minor;
  char name[256] = {0};
  SAGE_CU(cuDeviceGetName(name, sizeof name - 1, d.dev));
  d.name = name;
  SAGE_CU(cuDeviceGetAttribute(&d.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.dev));
  return d;
}

// The workspace pool of a context: a private pool rather than the device's default one, so
// that its release threshold can be raised without changing other libraries' allocations.
// With the threshold at "never", freed workspace stays reserved for the next call instead
// of going back to the driver at every synchronization.
CUmemoryPool pool_for(const provider::Device& d, std::uint64_t ctx_id, std::vector<std::string>* notes) {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.pool_mu);
  auto it = rt.pools.find(ctx_id);
  if (it != rt.pools.end()) return it->second;
  const cu::Api& a = cu::api();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = int(d.dev);
  CUmemoryPool pool = nullptr;
  CUresult r = a.cuMemPoolCreate(&pool, &props);
  if (r == CUDA_SUCCESS) {
    cuuint64_t keep = ~cuuint64_t(0);
    r = a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  }
  if (r != CUDA_SUCCESS) {
    notes->push_back("no private workspace pool (" + cu::error_string(r) + "): using the device's default pool");
    pool = nullptr;
  }
  rt.pools[ctx_id] = pool;
  return pool;
}

// The first call of a bucket may come while a stream is being captured into a CUDA graph (a
// serving framework capturing a batch size it has not run yet). Selecting, compiling and
// loading the kernel are not stream work, but in a capture of the default (global) mode the
// driver refuses what it counts as unsafe in the capturing thread, and in every thread while
// another thread captures that way: loading a module, creating the workspace pool, allocating
// from it. For these this thread's capture mode is relaxed, as PyTorch does for its own lazy
// set-up, and restored after, so that the first call is captured like any other.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { exchanged_ = cu::api().cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS; }
  ~RelaxedCaptureMode() {
    if (exchanged_) cu::api().cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

std::shared_ptr<const Entry> build(CUcontext ctx, std::uint64_t ctx_id, const BucketKey& key, const AttnProblem& p) {
  const auto t0 = Clock::now();
  const RelaxedCaptureMode relaxed;
  const provider::Device dev = query_device(ctx);
  if (dev.cc < 80)
    throw Error(Errc::unsupported, cat(dev.name, " has compute capability ", dev.cc / 10, ".", dev.cc % 10,
                                       "; the kernels need 8.0 (Ampere) or newer"));
  provider::Resolved r = provider::resolve(key, p, dev);
  auto e = std::make_shared<Entry>();
  e->selection = std::move(r.selection);
  const auto tl = Clock::now();
  Runtime& rt = runtime();
  const auto kernel_key = std::make_pair(ctx_id, e->selection.kernel_hash);
  if (!kernel_key.second.empty()) {
    std::lock_guard lock(rt.kernels_mu);
    auto it = rt.kernels.find(kernel_key);
    if (it != rt.kernels.end() && it->second->config().name == e->selection.config.name) e->kernel = it->second;
  }
  if (!e->kernel) {
    // Module::load wants the bytes in a string; a static table's array is copied once here.
    std::shared_ptr<Module> module =
        Module::load(r.cubin_storage.empty() ? std::string(r.cubin, r.cubin_size) : std::move(r.cubin_storage));
    e->kernel = std::make_shared<AttnKernel>(e->selection.config, std::move(module));
    rt.loads.fetch_add(1);
    if (!kernel_key.second.empty()) {
      std::lock_guard lock(rt.kernels_mu);
      rt.kernels.emplace(kernel_key, e->kernel);  // a concurrent load of the same kernel keeps the first
    }
  } else {
    e->selection.notes.push_back("module shared with another bucket served by the same kernel");
  }
  e->selection.load_ms = ms_since(tl);
  e->pool = pool_for(dev, ctx_id, &e->selection.notes);
  e->selection.select_ms = ms_since(t0);
  rt.selections.fetch_add(1);
  return e;
}

// The entry serving (current context, bucket of p); *built tells whether this call made it.
const Entry& entry_for(const AttnProblem& p, Policy policy, bool* built, int call_head_dim) {
  const BucketKey key = provider::buckets().key_of(p, policy, call_head_dim);
  provider::precheck(key);             // "not in this build" is known without a device
  const CUcontext ctx = use_device(-1);  // the caller's context; device 0's primary when none
  const std::uint64_t ctx_id = context_id(ctx);
  const CacheKey ck{ctx_id, key, p.batch * p.heads_q, p.sms};
  Runtime& rt = runtime();
  if (const Entry* e = rt.cache.find(ck)) {
    *built = false;
    return *e;
  }
  return rt.cache.get(ck, [&] { return build(ctx, ctx_id, key, p); }, built);
}

bool check_pointers_enabled() {
  Runtime& rt = runtime();
  int v = rt.check_pointers.load(std::memory_order_relaxed);
  if (v < 0) {
    v = env_flag("SAGE_CHECK_POINTERS") ? 1 : 0;
    rt.check_pointers.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// SAGE_CHECK_POINTERS=1: `bytes` from `ptr` on must lie in one allocation known to CUDA.
void check_memory(const void* ptr, std::size_t bytes, const char* name) {
  const cu::Api& a = cu::api();
  const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr start = 0;
  std::size_t size = 0;
  CUresult r = a.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p);
  if (r == CUDA_SUCCESS) r = a.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
  if (r != CUDA_SUCCESS)
    throw Error(Errc::invalid_argument, cat(name, " (", ptr, ") is not device memory known to CUDA (", cu::error_string(r), ")"));
  if (p + bytes > start + size)
    throw Error(Errc::invalid_argument, cat(name, " (", ptr, ") needs ", bytes, " bytes but its allocation ends ",
                                            start + size - p, " bytes after it"));
}

// FP8 pages' scales: one FP32 value each, or one a kv head.
static void check_page_scales(const AttnProblem& p, const AttnArgs& a) {
  if (!p.kv_fp8) return;
  const std::size_t n = std::size_t(a.kv_scale_stride ? p.heads_kv : 1) * sizeof(float);
  if (a.kv_k_scale) check_memory(a.kv_k_scale, n, "kv->k_scale");
  if (a.kv_v_scale) check_memory(a.kv_v_scale, n, "kv->v_scale");
}

void check_call_memory(const AttnProblem& p, const AttnArgs& a, const void* ws, std::size_t ws_need) {
  const std::size_t elem = 2;  // FP16 and BF16
  const std::size_t kv_elem = p.kv_fp8 ? 1 : 2;  // a paged cache's: FP8 pages hold bytes
  if (p.varlen && p.paged) {  // packed queries [total_q, heads_q, D] and LSE [heads_q, total_q]; the caches; the tables
    if (p.total_q > 0) {
      check_memory(a.q, std::size_t(p.total_q) * p.heads_q * p.head_dim * elem, "q");
      check_memory(a.o, std::size_t(p.total_q) * p.heads_q * p.head_dim * elem, "o");
      if (a.lse) check_memory(a.lse, std::size_t(p.heads_q) * p.total_q * sizeof(float), "lse");
    }
    check_memory(a.k, std::size_t(extent_elems(a.sk, a.num_pages, p.heads_kv, p.page_size, p.head_dim)) * kv_elem, "kv->k_pages");
    check_memory(a.v, std::size_t(extent_elems(a.sv, a.num_pages, p.heads_kv, p.page_size, p.head_dim)) * kv_elem, "kv->v_pages");
    check_memory(a.cu_seqlens_q, std::size_t(p.batch + 1) * sizeof(std::int32_t), "cu_seqlens_q");
    check_memory(a.block_table, std::size_t(p.batch) * a.bt_stride * sizeof(std::int32_t), "kv->block_table");
    check_memory(a.seqlens_kv, std::size_t(p.batch) * sizeof(std::int32_t), "kv->seqlens_kv");
    check_page_scales(p, a);
    if (ws) check_memory(ws, ws_need, "workspace");
    return;
  }
  if (p.varlen) {  // packed [total, heads, D] tensors, [heads_q, total_q] LSE, batch + 1 offsets each
    const std::size_t q = std::size_t(p.total_q) * p.heads_q * p.head_dim * elem;
    const std::size_t kv = std::size_t(p.total_kv) * p.heads_kv * p.head_dim * elem;
    if (q > 0) {
      check_memory(a.q, q, "q");
      check_memory(a.o, q, "o");
    }
    if (kv > 0) {
      check_memory(a.k, kv, "k");
      check_memory(a.v, kv, "v");
    }
    if (a.lse && p.total_q > 0) check_memory(a.lse, std::size_t(p.heads_q) * p.total_q * sizeof(float), "lse");
    check_memory(a.cu_seqlens_q, std::size_t(p.batch + 1) * sizeof(std::int32_t), "cu_seqlens_q");
    check_memory(a.cu_seqlens_kv, std::size_t(p.batch + 1) * sizeof(std::int32_t), "cu_seqlens_kv");
    if (ws) check_memory(ws, ws_need, "workspace");
    return;
  }
  if (p.paged) {  // dense Q, O and LSE; the caches' pages; the tables
    check_memory(a.q, std::size_t(p.q_elems()) * elem, "q");
    check_memory(a.o, std::size_t(p.q_elems()) * elem, "o");
    check_memory(a.k, std::size_t(extent_elems(a.sk, a.num_pages, p.heads_kv, p.page_size, p.head_dim)) * kv_elem, "kv->k_pages");
    check_memory(a.v, std::size_t(extent_elems(a.sv, a.num_pages, p.heads_kv, p.page_size, p.head_dim)) * kv_elem, "kv->v_pages");
    if (a.lse) check_memory(a.lse, std::size_t(p.batch) * p.heads_q * p.seq_q * sizeof(float), "lse");
    check_memory(a.block_table, std::size_t(p.batch) * a.bt_stride * sizeof(std::int32_t), "kv->block_table");
    check_memory(a.seqlens_kv, std::size_t(p.batch) * sizeof(std::int32_t), "kv->seqlens_kv");
    check_page_scales(p, a);
    if (ws) check_memory(ws, ws_need, "workspace");
    return;
  }
  auto span = [&](const TensorStrides& s, bool is_q, std::int64_t contiguous) {
    return std::size_t(a.strided ? extent_elems(s, p.batch, is_q ? p.heads_q : p.heads_kv, is_q ? p.seq_q : p.seq_kv,
                                                p.head_dim)
                                 : contiguous) * elem;
  };
  check_memory(a.q, span(a.sq, true, p.q_elems()), "q");
  check_memory(a.k, span(a.sk, false, p.kv_elems()), "k");
  check_memory(a.v, span(a.sv, false, p.kv_elems()), "v");
  check_memory(a.o, span(a.so, true, p.q_elems()), "o");
  if (a.lse) check_memory(a.lse, std::size_t(p.batch) * p.heads_q * p.seq_q * sizeof(float), "lse");
  if (ws) check_memory(ws, ws_need, "workspace");
}

// A call whose head dim the kernels lack (below the largest they have) runs on the kernel of
// the next head dim, selected as that head dim's call. A multiple of 8 runs on the caller's
// tensors: the kernels read their rows as zero-padded to the kernel's head dim (TMA's
// out-of-bounds fill, zero-filled 16-byte copies) and write only the caller's columns of O
// (KernelConfig::cannot_implement, SageAttnParams::head_dim). Any other runs on zero-padded
// copies: Q, K and V are copied row by row (2-D copies) into the workspace with zeros after
// each row's d values, which leave Q K^T unchanged and give O zeros in the padded columns; O
// comes back from its padded copy the same way. The scale stays the call's own (1/sqrt(d) by
// default). The kernels' workspace comes first, the padded tensors after it (each 256-byte
// aligned).
struct Padding {
  AttnProblem kp;                        // the kernels' problem (the call's own when not padded)
  bool active = false;
  std::size_t kernel_bytes = 0;          // the kernels' workspace
  std::size_t q_bytes = 0, kv_bytes = 0; // one padded Q or O, one padded K or V
  std::size_t bytes() const { return active ? round_up(kernel_bytes) + 2 * round_up(q_bytes) + 2 * round_up(kv_bytes) : kernel_bytes; }
  static std::size_t round_up(std::size_t x) { return (x + 255) / 256 * 256; }
};

AttnProblem kernel_problem(const AttnProblem& p) {
  AttnProblem kp = p;
  kp.head_dim = kernel_head_dim(p.head_dim);
  if (kp.head_dim != p.head_dim) kp.sm_scale = p.scale();
  return kp;
}

// The call p as the kernel k serves it; kp = kernel_problem(p), which selected k.
Padding padding_for(const AttnProblem& p, const AttnProblem& kp, const AttnKernel& k) {
  Padding pad;
  pad.kp = kp;
  pad.active = pad.kp.head_dim != p.head_dim && p.head_dim % 8 != 0;
  pad.kernel_bytes = k.workspace_size(pad.active ? pad.kp : p);  // the kernel runs on p where it reads p's tensors
  pad.q_bytes = std::size_t(pad.kp.q_elems()) * 2;
  pad.kv_bytes = std::size_t(pad.kp.kv_elems()) * 2;
  return pad;
}

// `rows` rows of `width` bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart).
void copy_rows(CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src, std::size_t src_pitch, std::size_t width,
               std::int64_t rows, CUstream stream) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.srcPitch = src_pitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = dst_pitch;
  c.WidthInBytes = width;
  c.Height = std::size_t(rows);
  SAGE_CU(cuMemcpy2DAsync(&c, stream));
}

// rows x d 16-bit values (rows d apart) into rows dp apart (dp even), zeros after each row's d values.
void pad_rows(CUdeviceptr dst, const void* src, std::int64_t rows, int d, int dp, CUstream stream) {
  // The whole buffer, then the rows over it: a 2-D memset of the padding columns alone (short
  // strided rows) made the copies 2.9 ms instead of 1.1 at B=4 H=32 N=8K d=96 (H100,
  // docs/runtime.md).
  SAGE_CU(cuMemsetD32Async(dst, 0, std::size_t(rows) * std::size_t(dp) / 2, stream));
  copy_rows(dst, std::size_t(dp) * 2, reinterpret_cast<CUdeviceptr>(src), std::size_t(d) * 2, std::size_t(d) * 2, rows,
            stream);
}

// The kernel's run, on padded copies where the call needs them.
void run_padded(const AttnKernel& k, const Padding& pad, const AttnProblem& p, const AttnArgs& a, void* workspace,
                CUstream stream) {
  if (!pad.active) {
    k.run(p, a, workspace, stream);
    return;
  }
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(workspace);
  const CUdeviceptr q = base + Padding::round_up(pad.kernel_bytes), o = q + Padding::round_up(pad.q_bytes);
  const CUdeviceptr kk = o + Padding::round_up(pad.q_bytes), v = kk + Padding::round_up(pad.kv_bytes);
  const int d = p.head_dim, dp = pad.kp.head_dim;
  const std::int64_t q_rows = std::int64_t(p.batch) * p.heads_q * p.seq_q;
  const std::int64_t kv_rows = std::int64_t(p.batch) * p.heads_kv * p.seq_kv;
  pad_rows(q, a.q, q_rows, d, dp, stream);
  pad_rows(kk, a.k, kv_rows, d, dp, stream);
  pad_rows(v, a.v, kv_rows, d, dp, stream);
  AttnArgs pa = a;
  pa.q = reinterpret_cast<const void*>(q);
  pa.k = reinterpret_cast<const void*>(kk);
  pa.v = reinterpret_cast<const void*>(v);
  pa.o = reinterpret_cast<void*>(o);
  k.run(pad.kp, pa, workspace, stream);
  copy_rows(reinterpret_cast<CUdeviceptr>(a.o), std::size_t(d) * 2, o, std::size_t(dp) * 2, std::size_t(d) * 2, q_rows,
            stream);
}

// A call on a stream of another context than the thread's current one (a stream of device 1
// while device 0 is current, as in a thread that never called cudaSetDevice) runs in the
// stream's context, where its work goes: its kernels, pool and workspace plan are that
// context's. Kernels of the current context cannot run on it ("invalid resource handle").
class StreamContextScope {
 public:
  explicit StreamContextScope(CUcontext stream_ctx) {
    if (!stream_ctx) return;
    CUcontext cur = nullptr;
    if (cu::api().cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == stream_ctx) return;
    SAGE_CU(cuCtxPushCurrent(stream_ctx));
    pushed_ = true;
  }
  ~StreamContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) cu::api().cuCtxPopCurrent(&popped);
  }
  StreamContextScope(const StreamContextScope&) = delete;
  StreamContextScope& operator=(const StreamContextScope&) = delete;

 private:
  bool pushed_ = false;
};

// Variable-length queries over a paged cache (sage_attention_varlen_paged) whose kernel, selected
// for the longest sequence's queries, is not the decode schedule's: the sequences of few queries
// run on the decode schedule's kernel instead, a launch for each band of query counts
// (decode_bands: 1 to the paged defaults' decode edge, and at head dim 64 before a wgmma kernel
// also up to 8), tiled for the band's most queries; then the longer ones on the selected kernel.
// The decode kernel packs a decoding sequence's GQA heads into one tile and splits its keys, where
// the longer sequences' kernel would give each query head a tile of 64-128 rows for its few
// queries. Each CTA of a sequence that is not its launch's returns at once (AttnArgs::vq_min).
// `decode` is null where one launch takes them all.
struct DecodePart {
  const Entry* decode = nullptr;
  std::vector<QueryBand> bands;
  AttnProblem part(const AttnProblem& p, const QueryBand& b) const {  // a band's launch's problem
    AttnProblem d = p;
    d.seq_q = b.hi;
    return d;
  }
  std::size_t workspace(const AttnProblem& p) const {
    std::size_t n = 0;
    for (const QueryBand& b : bands) n = std::max(n, decode->kernel->workspace_size(part(p, b)));
    return n;
  }
};
DecodePart decode_part(const AttnProblem& kp, Policy policy, int call_head_dim, const AttnKernel& k) {
  DecodePart dp;
  if (!kp.varlen || !kp.paged || k.decode() || kp.seq_q <= 1) return dp;
  // SAGE_DECODE_PART=N: the sequences of up to N queries on the decode kernel, whatever the
  // defaults' edge; 0: one launch on the selected kernel.
  static const int forced = [] {
    const std::string v = env("SAGE_DECODE_PART");
    return v.empty() ? -1 : std::max(0, std::atoi(v.c_str()));
  }();
  // The edge: the most queries (4, 2 or 1) that the paged selection gives the decode schedule.
  int edge = 0;
  for (int t : {4, 2, 1}) {
    if (t >= kp.seq_q && forced < 0) continue;
    AttnProblem d = kp;
    d.seq_q = t;
    bool built = false;
    const Entry& e = entry_for(d, policy, &built, call_head_dim);
    if (built && log_enabled()) log_selection(e.selection, d, policy, -1, launch_text(*e.kernel, d));
    if (e.kernel->decode()) {
      dp.decode = &e;
      edge = t;
      break;
    }
  }
  if (dp.decode) dp.bands = decode_bands(k.config(), kp.seq_q, edge, forced);
  if (dp.bands.empty()) dp.decode = nullptr;
  return dp;
}

// The call's launches: the decode part's first, where there is one (they share the workspace,
// one after the other on the stream).
void run_parts(const AttnKernel& k, const Padding& pad, const DecodePart& dp, const AttnProblem& p, const AttnArgs& a,
               void* workspace, CUstream stream) {
  if (!dp.decode) {
    run_padded(k, pad, p, a, workspace, stream);
    return;
  }
  for (const QueryBand& b : dp.bands) {
    AttnArgs x = a;
    x.vq_min = b.lo;
    x.vq_max = b.hi;
    dp.decode->kernel->run(dp.part(p, b), x, workspace, stream);
  }
  AttnArgs rest = a;
  rest.vq_min = dp.bands.back().hi + 1;
  run_padded(k, pad, p, rest, workspace, stream);
}

}  // namespace

void run(const AttnProblem& call, Policy policy, const AttnArgs& a, void* workspace, std::size_t workspace_bytes,
         CUstream stream) {
  const auto t0 = Clock::now();
  bool built = false;
  // On a green context's stream the call runs on its partition of the SMs: the kernels' grids
  // and key splits are sized to it (a persistent grid of the whole device's CTAs would run in
  // two rounds, and a split whose CTAs wait for each other would never finish), and the
  // defaults' wave edges are read for it (tuner::default_match).
  AttnProblem p = call;
  CUcontext stream_ctx = nullptr;
  p.sms = stream_sms(stream, &stream_ctx);
  const StreamContextScope in_stream_ctx(stream_ctx);
  const AttnProblem kp = kernel_problem(p);
  const Entry& e = entry_for(kp, policy, &built, p.head_dim);
  const AttnKernel& k = *e.kernel;
  const Padding pad = padding_for(p, kp, k);
  const DecodePart dp = decode_part(kp, policy, p.head_dim, k);
  const std::size_t need = std::max(pad.bytes(), dp.decode ? dp.workspace(p) : 0);
  if (workspace && workspace_bytes < need)
    throw WorkspaceTooSmall(Errc::invalid_argument, cat("the workspace has ", workspace_bytes, " bytes; this call needs ",
                                                        need, " (sage_workspace_size)"));
  if (check_pointers_enabled()) check_call_memory(p, a, workspace, need);
  if (workspace) {
    run_parts(k, pad, dp, p, a, workspace, stream);
  } else {
    // While another thread captures a stream in global mode the driver refuses this thread a
    // pool allocation, even on a stream that is not being captured; on a stream of this thread
    // that is being captured, the allocation and the free become nodes of the graph in either
    // mode.
    const RelaxedCaptureMode relaxed;
    const cu::Api& api = cu::api();
    CUdeviceptr ws = 0;
    if (e.pool) SAGE_CU(cuMemAllocFromPoolAsync(&ws, need, e.pool, stream));
    else SAGE_CU(cuMemAllocAsync(&ws, need, stream));
    try {
      run_parts(k, pad, dp, p, a, reinterpret_cast<void*>(ws), stream);
    } catch (...) {
      api.cuMemFreeAsync(ws, stream);
      throw;
    }
    SAGE_CU(cuMemFreeAsync(ws, stream));
  }
  if (built && log_enabled())
    log_selection(e.selection, p, policy, std::chrono::duration<double, std::milli>(Clock::now() - t0).count(),
                  launch_text(k, kp));
}

std::size_t workspace_size(const AttnProblem& p, Policy policy) { return workspace_size(p, policy, nullptr); }

std::size_t workspace_size(const AttnProblem& p, Policy policy, CUstream stream) {
  AttnProblem with_lse = p;
  // The stream's SMs (NULL: the current context's, a green context's partition where one is
  // current), as run() reads them.
  CUcontext stream_ctx = nullptr;
  with_lse.sms = stream_sms(stream, &stream_ctx);
  const StreamContextScope in_stream_ctx(stream_ctx);  // as run() plans: in the stream's context
  with_lse.return_lse = true;  // LSE adds a region; a workspace sized for it serves both
  bool built = false;
  const AttnProblem kp = kernel_problem(with_lse);
  const Entry& e = entry_for(kp, policy, &built, p.head_dim);
  if (built && log_enabled()) log_selection(e.selection, with_lse, policy, -1, launch_text(*e.kernel, kp));
  const DecodePart dp = decode_part(kp, policy, p.head_dim, *e.kernel);
  return std::max(padding_for(with_lse, kp, *e.kernel).bytes(), dp.decode ? dp.workspace(with_lse) : 0);
}

const Selection& selection_for(const AttnProblem& call, Policy policy) {
  bool built = false;
  AttnProblem p = call;
  p.sms = stream_sms(nullptr);  // the current context's: a green context's partition
  const AttnProblem kp = kernel_problem(p);
  const Entry& e = entry_for(kp, policy, &built, p.head_dim);
  if (built && log_enabled()) log_selection(e.selection, p, policy, -1);
  return e.selection;
}

Counters counters() {
  Runtime& rt = runtime();
  Counters c;
  c.selections = rt.selections.load();
  c.loads = rt.loads.load();
  c.compiles = provider::compile_count();
  return c;
}

void reset() {
  Runtime& rt = runtime();
  rt.cache.clear();
  {
    std::lock_guard lock(rt.kernels_mu);
    rt.kernels.clear();
  }
  rt.selections = 0;
  rt.loads = 0;
  rt.check_pointers = -1;
  provider::reset();
}

}  // namespace sage::rt
