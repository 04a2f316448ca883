#include "sage/internal/launch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <mutex>

#include "sage/common/cuda_driver.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/params.h"

namespace sage {
namespace {

constexpr int kPrepThreads = 256;  // templates/include/sage/device/attn_config.cuh

std::size_t align_up(std::size_t x, std::size_t a = 256) { return (x + a - 1) / a * a; }
int cdiv(std::int64_t a, std::int64_t b) { return int((a + b - 1) / b); }

// `dependent`: programmatic stream serialization (sm_90+): the kernel may start while the one
// before it on the stream still runs, and waits for it with griddepcontrol.wait (common.cuh:
// only kernels that do so may be launched this way).
// `cluster` > 1: thread block clusters of that many CTAs along x (gx a multiple of it).
void launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem, CUstream s,
            const SageAttnParams& p, bool dependent = false, unsigned cluster = 0) {
  void* args[] = {const_cast<SageAttnParams*>(&p)};
  if (!dependent && cluster <= 1) {
    SAGE_CU(cuLaunchKernel(f, gx, gy, gz, threads, 1, 1, smem, s, args, nullptr));
    return;
  }
  CUlaunchAttribute attr{};
  if (dependent) {
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
  } else {
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
  }
  CUlaunchConfig cfg{};
  cfg.gridDimX = gx;
  cfg.gridDimY = gy;
  cfg.gridDimZ = gz;
  cfg.blockDimX = threads;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem;
  cfg.hStream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  SAGE_CU(cuLaunchKernelEx(&cfg, f, args, nullptr));
}

// The problem's shape, options and input tensors into either kernel's parameters
// (SageAttnParams and SageRefParams name these fields alike).
template <class Params>
void set_problem(const AttnProblem& p, const AttnArgs& a, Params& s) {
  s.q.ptr = a.q;
  s.k.ptr = a.k;
  s.v.ptr = a.v;
  if (a.strided) {
    auto set = [](SageTensor& t, const TensorStrides& x) {
      t.stride_b = x.b;
      t.stride_h = x.h;
      t.stride_n = x.n;
    };
    set(s.q, a.sq);
    set(s.k, a.sk);
    set(s.v, a.sv);
  } else {
    p.strides(p.heads_q, p.seq_q, &s.q.stride_b, &s.q.stride_h, &s.q.stride_n);
    p.strides(p.heads_kv, p.seq_kv, &s.k.stride_b, &s.k.stride_h, &s.k.stride_n);
    s.v.stride_b = s.k.stride_b;
    s.v.stride_h = s.k.stride_h;
    s.v.stride_n = s.k.stride_n;
  }
  s.batch = p.batch;
  s.heads_q = p.heads_q;
  s.heads_kv = p.heads_kv;
  s.seq_q = p.seq_q;
  s.seq_kv = p.seq_kv;
  s.head_dim = p.head_dim;
  s.dtype = p.dtype == DType::bf16 ? SAGE_DTYPE_BF16 : SAGE_DTYPE_FP16;
  s.causal = p.causal ? 1 : 0;
  s.window = p.causal ? p.window : 0;
  s.sm_scale = p.scale();
}

// A 40-bit tag unique to each launch of the preparation in this process (and unlikely to
// repeat across processes sharing memory): the statistics counters in the workspace carry it,
// so a workspace never needs zeroing and a stale counter never passes for a fresh one.
unsigned long long next_generation() {
  static std::atomic<std::uint64_t> counter{[] {
    std::random_device rd;
    return (std::uint64_t(rd()) << 20) ^ std::uint64_t(rd());
  }()};
  std::uint64_t g;
  do g = (counter.fetch_add(1, std::memory_order_relaxed) + 1) & ((1ull << 40) - 1);
  while (g == 0);
  return g;
}

int q_groups(const KernelConfig& c) {
  if (c.granularity == "per_thread") return c.warps * 8;
  if (c.granularity == "per_warp") return c.warps;
  return 1;
}
int k_groups(const KernelConfig& c) { return c.granularity == "per_thread" ? 4 : 1; }
// Q tiles per preparation job: MmaAttnConfig::Q_TILES_PER_JOB (attn_config.cuh), or 1 where
// the attention kernel quantizes Q (prep_kernel's JT in quant.cuh): the same rule.
int q_tiles_per_job(const KernelConfig& c) {
  const bool one = c.block_m >= 128 || 128 % c.block_m != 0 || c.smooth_q || c.granularity == "per_block" || c.fuse_q;
  return one ? 1 : 128 / c.block_m;
}
int qrow_bytes(const KernelConfig& c) { return c.qk == "int4" ? c.head_dim / 2 : c.head_dim; }
// V prepared as an 8-bit V^T with per-channel scales (FP8 or INT8 P.V).
bool v_8bit(const KernelConfig& c) { return c.pv == "fp8" || c.pv == "int8"; }
// Kinds of statistics CTAs per (split, batch, kv head): quant.cuh's stat_kinds (K's sum when
// smoothing K; V's sum, max and min when smoothing V or quantizing it to 8 bits).
int stat_kinds(const KernelConfig& c) { return int(c.smooth_k) + int(c.smooth_v || v_8bit(c)); }
// Rows of K and V the statistics sample per (batch, kv head) once the sequence is longer (so
// K and V cross DRAM once, not twice; quant.cuh). A mean from 512 rows is within 1/22 of a
// standard deviation of the whole sequence's, which leaves K's smoothing and V's range as
// good as exact; INT8 V (127 levels, no exponent) keeps exact statistics.
constexpr int kStatSampleRows = 512;
constexpr int kGridYZLimit = 65535;  // a launch grid's y and z dimensions
// FP8 pages without a window: the window their entries run with (past every key a call holds:
// validate.cpp bounds seq_kv far below it, so kv_range and the masks leave every key in).
constexpr int kFp8NoWindow = 1 << 30;

// A variable-length batch's packed tensors as the maps describe them: one sequence of every row,
// [1, total, heads, D]. A map needs a row: a batch without keys (or queries) has a map of one row
// it never reads. Other calls: `p` itself.
AttnProblem packed_problem(const AttnProblem& p) {
  AttnProblem packed = p;
  if (!p.varlen) return packed;
  packed.batch = 1;
  packed.seq_q = std::max(p.total_q, 1);
  packed.seq_kv = std::max(p.total_kv, 1);
  packed.varlen = false;
  return packed;
}

}  // namespace

int causal_group(const AttnProblem& p, const KernelConfig& c) {
  const int pairs = p.batch * p.heads_q;
  if (p.seq_kv > kCausalLptMaxKeys) return pairs > kGridYZLimit ? pairs : 1;
  const std::int64_t key_bytes =
      c.qk == "native" ? 4 * c.head_dim : qrow_bytes(c) + (v_8bit(c) ? 1 : 2) * c.head_dim;
  const int per_kv = p.heads_q / p.heads_kv;
  const std::int64_t fit = std::max<std::int64_t>(1, kCausalGroupBytes / (std::int64_t(p.seq_kv) * key_bytes)) * per_kv;
  int g = int(std::min<std::int64_t>(fit, pairs)) / per_kv * per_kv;
  while (pairs % g != 0) g -= per_kv;
  return pairs / g > kGridYZLimit ? pairs : g;
}

// ---- KernelConfig --------------------------------------------------------------------------

KernelConfig KernelConfig::parse(const std::string& text) {
  KernelConfig c;
  for (const std::string& item : split(text, ';')) {
    if (trim(item).empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) throw Error(Errc::parse_error, "kernel config item without '=': '" + item + "'");
    std::string k = trim(item.substr(0, eq)), v = trim(item.substr(eq + 1));
    auto as_int = [&]() {
      try {
        std::size_t used = 0;
        int x = std::stoi(v, &used);
        if (used != v.size()) throw 0;
        return x;
      } catch (...) {
        throw Error(Errc::parse_error, "kernel config '" + k + "' is not an integer: '" + v + "'");
      }
    };
    auto as_bool = [&]() {
      if (v == "true" || v == "1") return true;
      if (v == "false" || v == "0") return false;
      throw Error(Errc::parse_error, "kernel config '" + k + "' is not a boolean: '" + v + "'");
    };
    if (k == "pipeline") c.pipeline = v;
    else if (k == "name") c.name = v;
    else if (k == "head_dim") c.head_dim = as_int();
    else if (k == "block_m") c.block_m = as_int();
    else if (k == "block_n") c.block_n = as_int();
    else if (k == "warps") c.warps = as_int();
    else if (k == "stages") c.stages = as_int();
    else if (k == "qk") c.qk = v;
    else if (k == "pv") c.pv = v;
    else if (k == "granularity") c.granularity = v;
    else if (k == "smooth_k") c.smooth_k = as_bool();
    else if (k == "smooth_q") c.smooth_q = as_bool();
    else if (k == "smooth_v") c.smooth_v = as_bool();
    else if (k == "schedule") c.schedule = v;
    else if (k == "min_ctas") c.min_ctas = as_int();
    else if (k == "tma") c.tma = as_bool();
    else if (k == "fuse_q") c.fuse_q = as_bool();
    else if (k == "threads") c.threads = as_int();
    else if (k == "smem_bytes") c.smem_bytes = as_int();
    else throw Error(Errc::parse_error, "unknown kernel config key '" + k + "'");
  }
  if (c.pipeline.empty()) throw Error(Errc::parse_error, "kernel config without a pipeline: '" + text + "'");
  return c;
}

std::string KernelConfig::str() const {
  auto b = [](bool x) { return x ? "true" : "false"; };
  return cat("pipeline=", pipeline, ";name=", name, ";head_dim=", head_dim, ";block_m=", block_m, ";block_n=", block_n,
             ";warps=", warps, ";stages=", stages, ";qk=", qk, ";pv=", pv, ";granularity=", granularity,
             ";smooth_k=", b(smooth_k), ";smooth_q=", b(smooth_q), ";smooth_v=", b(smooth_v), ";schedule=", schedule,
             ";min_ctas=", min_ctas, tma ? ";tma=true" : "", fuse_q ? ";fuse_q=true" : "", ";threads=", threads,
             ";smem_bytes=", smem_bytes);
}

std::string KernelConfig::cannot_implement(const AttnProblem& p) const {
  if (pipeline != "mma" && pipeline != "wgmma") return "pipeline '" + pipeline + "' is not an attention pipeline";
  // Below the variant's head dim, the kernels read the caller's rows as zero-padded to it: the
  // 16-byte chunks (TMA: the tensor maps' row strides) need a multiple of 8.
  if (p.head_dim > head_dim || p.head_dim % 8 != 0)
    return cat("head_dim ", p.head_dim, ": the variant's is ", head_dim,
               " (below it, a multiple of 8 runs as zero-padded to it)");
  if (p.heads_q % p.heads_kv != 0) return "heads_q must be a multiple of heads_kv";
  if (p.varlen && !p.paged && !has_varlen_entry(*this))
    return "variable-length batches run on the native (unquantized) kernels of the plain schedule, head dims 64 and "
           "128 (wgmma: and 256), and on the quantized wgmma kernels of FP8 P.V, the TMA loader and the plain or turns "
           "schedule that quantize Q themselves (fuse_q)";
  if (p.kv_fp8 && !has_paged_fp8_entry(*this))
    return "FP8 pages run on the native (unquantized) mma.sync kernels of two stages or more of the decode schedule, "
           "and of the plain schedule at head dims 64 and 128, and on the native wgmma kernels of the plain schedule "
           "whose FP8 tiles fit shared memory";
  if (p.kv_fp8 && p.window > 0 && pipeline == "wgmma")
    return "FP8 pages with a sliding window run on the native mma.sync kernels (the wgmma kernels' take no window)";
  if (p.window > 0 && p.paged && !has_paged_window_entry(*this))
    return "sliding windows over a paged KV cache run on the native (unquantized) mma.sync kernels of the decode "
           "schedule, and of the plain schedule at head dims 64 and 128";
  if (p.window > 0 && !p.paged && !has_window_entry(*this))
    return "sliding windows run on the kernels that take variable-length batches: the native (unquantized) kernels of "
           "the plain schedule (mma.sync at head dims 64 and 128), and the quantized wgmma kernels of FP8 P.V, the TMA "
           "loader and the plain or turns schedule that quantize Q themselves (fuse_q); and, for dense calls, on the "
           "quantized mma.sync kernels of INT8 Q.K^T at per-thread granularity, FP16 or FP8 P.V and the plain schedule, "
           "and the native mma.sync kernels of the decode schedule";
  if (p.paged && !has_paged_entry(*this))
    return "paged KV caches (with dense or variable-length queries) run on the native (unquantized) mma.sync kernels "
           "of the decode schedule, and of the plain schedule at head dims 64 and 128, and on the native wgmma kernels "
           "of the plain schedule";
  if (tma && qk != "native" && block_m > 0 && block_n > 0) {
    // TMA coordinates are 32-bit: the rows of the tiled Q and K must stay below 2^31 (a
    // variable-length batch: K's kv_tile_pitch tiles a head, V^T's columns as many tokens).
    // (fuse_q: Q is read from the caller's tensor through a 4-D map, its rows below seq_q)
    const std::int64_t q_rows = fuse_q ? 0 : std::int64_t(p.batch) * p.heads_q * cdiv(p.seq_q, block_m) * block_m;
    const std::int64_t k_rows = p.varlen ? std::int64_t(p.heads_kv) * (p.total_kv / block_n + p.batch) * block_n
                                         : std::int64_t(p.batch) * p.heads_kv * cdiv(p.seq_kv, block_n) * block_n;
    if (std::max(q_rows, k_rows) >= (std::int64_t(1) << 31))
      return cat("batch x heads x padded sequence (", std::max(q_rows, k_rows),
                 " rows) exceeds the 2^31 rows a TMA variant addresses");
  }
  if (qk == "native" && pv == "fp8" && block_n > 0) {
    // The V8 jobs (attn_native.cuh): tickets count to jobs + CTAs in 24 bits, and the FP8 V^T
    // tiles' rows (head_dim a job) are TMA coordinates.
    const std::int64_t jobs = std::int64_t(p.batch) * p.heads_kv * cdiv(p.seq_kv, block_n);
    if (jobs >= (std::int64_t(1) << 22) || jobs * head_dim >= (std::int64_t(1) << 31))
      return cat("batch x kv heads x key tiles (", jobs, ") exceeds the 2^22 V tiles FP8 P.V converts in the kernel");
  }
  return {};
}

// ---- Module ---------------------------------------------------------------------------------

std::shared_ptr<Module> Module::load(const std::string& cubin) {
  CUcontext ctx = use_device(-1);
  CUmodule m = nullptr;
  SAGE_CU(cuModuleLoadData(&m, cubin.data()));
  return std::shared_ptr<Module>(new Module(m, ctx));
}

Module::~Module() {
  if (const cu::Api* a = cu::try_api()) {
    CUcontext prev = nullptr;
    a->cuCtxGetCurrent(&prev);
    if (prev != ctx_) a->cuCtxSetCurrent(ctx_);
    a->cuModuleUnload(mod_);
    if (prev != ctx_) a->cuCtxSetCurrent(prev);
  }
}

CUfunction Module::function(const char* name) const {
  CUfunction f = nullptr;
  CUresult r = cu::api().cuModuleGetFunction(&f, mod_, name);
  if (r != CUDA_SUCCESS) throw Error(Errc::not_found, cat("kernel '", name, "' not in module: ", cu::error_string(r)));
  return f;
}

CUcontext use_device(int device) {
  const cu::Api& a = cu::api();
  CUcontext cur = nullptr;
  SAGE_CU(cuCtxGetCurrent(&cur));
  if (device < 0 && cur) return cur;  // the caller's context (e.g. PyTorch's)
  if (device < 0) device = 0;
  static std::mutex mu;
  static std::map<int, CUcontext> retained;
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = retained.find(device);
    if (it == retained.end()) {
      CUdevice dev;
      SAGE_CU(cuDeviceGet(&dev, device));
      SAGE_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
      retained[device] = ctx;
    } else {
      ctx = it->second;
      // A primary context reset under the library (cudaDeviceReset, cuDevicePrimaryCtxReset)
      // keeps its handle and this process's retain, but stays inactive until it is retained
      // again (the CUDA runtime does so at its next call): calls on it fail with "context is
      // destroyed" until then. Its new life has a new ID (context_id), so nothing cached for
      // the old one is used.
      CUdevice dev;
      unsigned flags = 0;
      int active = 1;
      SAGE_CU(cuDeviceGet(&dev, device));
      if (a.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
        SAGE_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    }
  }
  if (cur != ctx) SAGE_CU(cuCtxSetCurrent(ctx));
  return ctx;
}

std::uint64_t context_id(CUcontext ctx) {
  const cu::Api& a = cu::api();
  unsigned long long id = 0;
  if (a.cuCtxGetId && a.cuCtxGetId(ctx, &id) == CUDA_SUCCESS) return id;
  return std::uint64_t(reinterpret_cast<std::uintptr_t>(ctx));
}

// ---- AttnKernel -----------------------------------------------------------------------------

// The variants whose module has the entry sage_attn_varlen (the templates' rule): the native
// kernels of the plain schedule with FP16/BF16 P.V, at head dims 64 and 128, and on the wgmma
// pipeline 256 too (the mma.sync entry spilled there); and the quantized wgmma kernels of FP8
// P.V, the TMA loader and the plain or turns schedule that quantize Q themselves (fuse_q), with
// sage_prep_varlen and sage_prep_v_varlen (their preparation keeps no Q in the workspace).
bool has_varlen_entry(const KernelConfig& c) {
  if (c.pipeline == "wgmma" && c.qk != "native")  // quantized: those that quantize Q themselves (attn_wgmma.cu.j2)
    return c.pv == "fp8" && c.tma && c.fuse_q && (c.schedule == "plain" || c.schedule == "turns");
  return (c.pipeline == "mma" || c.pipeline == "wgmma") && c.qk == "native" && c.pv == "native" &&
         c.schedule == "plain" && (c.head_dim == 64 || c.head_dim == 128 || (c.pipeline == "wgmma" && c.head_dim == 256));
}

// The variants whose module has the entry sage_attn_window (sliding windows), whose kernels start
// each query tile at its window's first key tile (mma_attn::kv_range): those with sage_attn_varlen
// (the templates' rule), where it takes dense and packed calls; and the quantized mma.sync kernels
// of INT8 Q.K^T at per-thread granularity, FP16 or FP8 P.V and the plain schedule, where it takes
// dense calls only (their Q is quantized by the preparation, which has no per-sequence Q tiles:
// attn_mma.cu.j2), as the native mma.sync kernels of the decode schedule. Every `varlen` default of configs/defaults.yaml is one, which window calls take
// after the `window` entries (BucketKey::window).
bool has_window_entry(const KernelConfig& c) {
  // (the native mma.sync kernels of the decode schedule: dense calls, draft tokens over a window)
  if (c.pipeline == "mma" && c.qk == "native" && c.schedule == "decode") return true;
  if (c.pipeline == "mma" && c.qk == "int8")
    return c.granularity == "per_thread" && c.schedule == "plain" && (c.pv == "fp16" || c.pv == "fp16acc" || c.pv == "fp8");
  return has_varlen_entry(c);
}

// The variants whose module has the entry sage_attn_paged (the templates' rule): the native
// mma.sync kernels of the decode schedule (every head dim), and of the plain schedule at head
// dims 64 and 128 (those with sage_attn_varlen), whose cp.async loads look each row up in the
// block table (attn_mma.cuh: KvLoader::load_paged); and the native wgmma kernels of the plain
// schedule (every head dim), whose TMA loads take a tile as boxes of its pages (attn_native.cuh:
// PagedBoxes). Each of them also has sage_attn_varlen_paged (variable-length queries over a
// paged cache).
bool has_paged_entry(const KernelConfig& c) {
  if (c.pipeline == "wgmma") return c.qk == "native" && c.pv == "native" && c.schedule == "plain";
  return c.pipeline == "mma" && c.qk == "native" && c.pv == "native" &&
         (c.schedule == "decode" || (c.schedule == "plain" && (c.head_dim == 64 || c.head_dim == 128)));
}

// The variants whose module has the entries of sliding windows over a paged cache (the templates'
// rule): the mma.sync ones of sage_attn_paged, whose tiles start at their window's first key
// tile (attn_mma.cuh: kv_range<true>; the decode kernel's range alike). The wgmma kernels' TMA
// boxes of pages have no window (attn_native.cuh).
bool has_paged_window_entry(const KernelConfig& c) { return c.pipeline == "mma" && has_paged_entry(c); }

// The dynamic shared memory of a native wgmma kernel's FP8 entries (the templates' rule,
// attn_native_fp8.cuh: Fp8PagesLayout): Q, two FP16 slots of K and V, two FP8 slots of K and V
// where they fit 227 KiB, else one (or O's staging rows, if more), and 1 KiB of alignment.
int paged_fp8_smem_bytes(const KernelConfig& c) {
  const int base = c.block_m * c.head_dim * 2 + 4 * c.block_n * c.head_dim * 2;
  const int slots = base + 4 * c.block_n * c.head_dim + 1024 <= 227 * 1024 ? 2 : 1;
  const int main = base + 2 * slots * c.block_n * c.head_dim;
  const int epi = c.block_m * (c.head_dim * 2 + 16);
  return std::max(main, epi) + 1024;
}

// The FP8 entries' CTA (the templates' rule, Fp8PagesLayout::WS and THREADS): two consumer
// warpgroups and two converting ones where the FP8 tiles leave one CTA an SM (its shared memory,
// or the variant's occupancy target), at head dim 64 or 128.
int paged_fp8_threads(const KernelConfig& c) {
  if (c.pipeline != "wgmma" || c.warps != 8 || c.head_dim > 128) return c.threads;
  const int ctas_smem = (228 * 1024) / (paged_fp8_smem_bytes(c) + 1024);
  const int min_ctas = ctas_smem < c.min_ctas ? std::max(ctas_smem, 1) : c.min_ctas;
  return min_ctas == 1 ? c.threads + 256 : c.threads;
}

// The variants whose module has the entries of FP8 pages (the templates' rule): the mma.sync ones
// of sage_attn_paged_window with two stages or more (attn_mma.cuh: Fp8Pages, a ring of FP8 stages
// where the FP16 stages 1.. were), and the wgmma ones of sage_attn_paged whose FP8 entries' tiles
// fit an SM's 227 KiB (attn_native_fp8.cuh: each tile converted into the FP16/BF16 tile wgmma reads).
bool has_paged_fp8_entry(const KernelConfig& c) {
  if (c.pipeline == "wgmma") return has_paged_entry(c) && paged_fp8_smem_bytes(c) <= 227 * 1024;
  return has_paged_window_entry(c) && c.stages >= 2;
}

// The variants whose module has an entry of its own for calls of up to three quarters of the
// head dim, sage_attn_q3 (the templates' rule). Head dim 256 (calls of up to 192 columns):
// every wgmma one, and on the mma.sync pipeline the unquantized ones and those of FP16 P.V.
// Head dim 128 (up to 96 columns): the persistent native wgmma kernels, the quantized wgmma
// kernels of the TMA loader and the plain or turns schedule but those of INT8 P.V (which have
// an LSE entry, sage_attn_lse, instead); on the mma.sync pipeline the
// unquantized ones and INT8 Q.K^T with FP16, FP16-accumulator or FP8 P.V.
bool has_q3_entry(const KernelConfig& c) {
  if (c.head_dim == 256) return c.pipeline == "wgmma" || c.qk == "native" || c.pv == "fp16";
  if (c.head_dim != 128) return false;
  if (c.pipeline == "mma") return c.qk == "native" || (c.qk == "int8" && (c.pv == "fp16" || c.pv == "fp16acc" || c.pv == "fp8"));
  if (c.qk == "native") return c.schedule.rfind("persistent", 0) == 0;
  return c.tma && (c.schedule == "plain" || c.schedule == "turns") && c.pv != "int8";
}

bool runs_q3_entry(const KernelConfig& c, int head_dim) { return has_q3_entry(c) && 4 * head_dim <= 3 * c.head_dim; }

AttnKernel::AttnKernel(KernelConfig cfg, std::shared_ptr<Module> module) : cfg_(std::move(cfg)), module_(std::move(module)) {
  if (cfg_.pipeline != "mma" && cfg_.pipeline != "wgmma")
    throw Error(Errc::invalid_argument, "AttnKernel needs an attention variant (mma, wgmma), got '" + cfg_.pipeline + "'");
  // The native (unquantized) family has no preparation kernel.
  if (!native()) prep_ = module_->function("sage_prep");
  // The quantized wgmma kernels (sm_90a) wait for the preparation with griddepcontrol.wait,
  // so they launch as its programmatic dependents: their launch and set-up overlap its last
  // CTAs (sage_prep_v's too).
  dependent_ = cfg_.pipeline == "wgmma" && !native();
  if (cfg_.pv == "fp8" && !native()) prep_v_ = module_->function("sage_prep_v");
  attn_ = module_->function("sage_attn");
  // int8 P.V: a second entry for calls that return the LSE (it also sums P before rounding).
  if (cfg_.pv == "int8") attn_lse_ = module_->function("sage_attn_lse");
  if (has_q3_entry(cfg_)) attn_q3_ = module_->function("sage_attn_q3");
  if (has_window_entry(cfg_)) attn_window_ = module_->function("sage_attn_window");
  if (has_paged_entry(cfg_)) {
    attn_paged_ = module_->function("sage_attn_paged");
    attn_varlen_paged_ = module_->function("sage_attn_varlen_paged");
  }
  if (has_paged_window_entry(cfg_)) {
    attn_paged_window_ = module_->function("sage_attn_paged_window");
    attn_varlen_paged_window_ = module_->function("sage_attn_varlen_paged_window");
  }
  if (has_paged_fp8_entry(cfg_)) {
    attn_paged_fp8_ = module_->function("sage_attn_paged_fp8");
    attn_varlen_paged_fp8_ = module_->function("sage_attn_varlen_paged_fp8");
  }
  if (has_varlen_entry(cfg_)) {
    attn_varlen_ = module_->function("sage_attn_varlen");
    if (!native()) {
      prep_varlen_ = module_->function("sage_prep_varlen");
      prep_v_varlen_ = module_->function("sage_prep_v_varlen");
    }
  }
  const cu::Api& a = cu::api();
  // The wgmma kernels' FP8 entries have shared memory of their own (paged_fp8_smem_bytes).
  fp8_smem_ = cfg_.pipeline == "wgmma" && attn_paged_fp8_ ? paged_fp8_smem_bytes(cfg_) : cfg_.smem_bytes;
  fp8_threads_ = attn_paged_fp8_ ? paged_fp8_threads(cfg_) : cfg_.threads;
  if (cfg_.smem_bytes > 48 * 1024)
    for (CUfunction f : {attn_, attn_lse_, attn_q3_, attn_varlen_, attn_window_, attn_paged_, attn_varlen_paged_,
                         attn_paged_window_, attn_varlen_paged_window_})
      if (f) SAGE_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cfg_.smem_bytes));
  if (fp8_smem_ > 48 * 1024)
    for (CUfunction f : {attn_paged_fp8_, attn_varlen_paged_fp8_})
      if (f) SAGE_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fp8_smem_));
  CUdevice dev;
  SAGE_CU(cuCtxGetDevice(&dev));
  SAGE_CU(cuDeviceGetAttribute(&num_sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  // The persistent kernels' grid, and the CTAs the native mma.sync kernel's split keys fill.
  if (persistent() || mma_native()) {
    int per_sm = 0;
    SAGE_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_, cfg_.threads, cfg_.smem_bytes));
    if (per_sm < 1) throw Error(Errc::unsupported, cat(cfg_.name, ": no CTA of this variant fits an SM"));
    per_sm_ = per_sm;
    // FP8 pages run their own entry, whose registers may let more CTAs share an SM (the decode
    // kernel's at head dim 64: two, against one of its dense entry): their splits fill those.
    if (mma_native() && attn_paged_fp8_) {
      SAGE_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_paged_fp8_, fp8_threads_, fp8_smem_));
      per_sm_fp8_ = std::max(per_sm, 1);
    }
  }
  // The decode schedule's shortest range in keys (diagnosis, A/B timing; default decode_min_keys;
  // set, it also lifts the merge cap).
  if (decode()) decode_min_keys_ = std::atoi(env("SAGE_DECODE_MIN_KEYS").c_str());
  // SAGE_PACK_HEADS=0: no GQA heads packed into one tile; 1: wherever the tile holds the group,
  // however few the key tiles (diagnosis, A/B timing, tests of the packed paths).
  const std::string pack_env = env("SAGE_PACK_HEADS");
  pack_heads_ = pack_env == "0" ? 0 : pack_env == "1" ? 2 : 1;
  // Decoding's split in clusters: how many clusters of 2, 4 and 8 CTAs run at once (a
  // cluster's CTAs share a GPC). SAGE_SPLIT_CLUSTERS=N caps the size at N; 0 keeps the merge
  // through L2 (diagnosis, A/B timing).
  const std::string cap_env = env("SAGE_SPLIT_CLUSTERS");
  const int cap = cap_env.empty() ? 8 : std::atoi(cap_env.c_str());
  // SAGE_SPLIT_CLUSTER_SPAN=N: a unit's ranges over at most N clusters (default kClusterMaxSpan;
  // diagnosis, A/B timing).
  cluster_span_ = std::atoi(env("SAGE_SPLIT_CLUSTER_SPAN").c_str());
  // Decoding's share merge: SAGE_SPLIT_SHARE=0 keeps the owner's (diagnosis, A/B timing);
  // SAGE_SPLIT_SHARE_TILES=N sets its shortest range in key tiles.
  share_ = env("SAGE_SPLIT_SHARE") == "0" ? 0 : 1;
  share_min_tiles_ = std::atoi(env("SAGE_SPLIT_SHARE_TILES").c_str());
  if (native() && cfg_.schedule == "persistent_split" && cap >= 2) {
    for (int i = 0; i < int(max_clusters_.size()); ++i) {
      const unsigned c = 2u << i;
      if (int(c) > cap) break;
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attr.value.clusterDim.x = c;
      attr.value.clusterDim.y = 1;
      attr.value.clusterDim.z = 1;
      CUlaunchConfig lc{};
      lc.gridDimX = c * unsigned(std::max(1, num_sms_));
      lc.gridDimY = lc.gridDimZ = 1;
      lc.blockDimX = unsigned(cfg_.threads);
      lc.blockDimY = lc.blockDimZ = 1;
      lc.sharedMemBytes = unsigned(cfg_.smem_bytes);
      lc.attrs = &attr;
      lc.numAttrs = 1;
      int n = 0;
      if (a.cuOccupancyMaxActiveClusters(&n, attn_, &lc) == CUDA_SUCCESS) max_clusters_[std::size_t(i)] = n;
    }
  }
}

// The kernel walks a static list of work units (persistent_units in attn_native.cuh): a query
// tile, or for causal masks a pair of one head's tiles; one CTA per SM and occupancy slot, or
// one per unit where there are fewer (unless those units' keys are split over every CTA).
std::int64_t AttnKernel::persistent_units(const AttnProblem& p) const {
  if (pack_rows(p) > 0) return std::int64_t(p.heads_kv) * p.batch * q_tiles(p);
  const std::int64_t q_tiles = cdiv(p.seq_q, cfg_.block_m);
  return (p.causal && !causal_single(p) ? (q_tiles + 1) / 2 : q_tiles) * p.heads_q * p.batch;
}

// Causal units are pairs of a head's query tiles (the longest with the shortest), so that a
// CTA walking several units gets about the same work as the others. Where the tiles are no
// more than the CTAs, each tile is a unit of its own instead: every CTA then runs at most one,
// and pairing would leave half the SMs idle while the others run two tiles in turn (a 512-
// query causal block of 32 heads over a long KV cache: 64 pairs on 132 SMs).
bool AttnKernel::causal_single(const AttnProblem& p) const {
  if (!native() || !persistent() || !p.causal) return false;
  const std::int64_t q_tiles = cdiv(p.seq_q, cfg_.block_m);
  return q_tiles > 1 && q_tiles * p.heads_q * p.batch <= slots(p);
}

// Packed GQA heads (SageAttnParams::pack_rows): where a kv head's query heads (g of them) fit
// one query tile at a power of two of at least 16 rows each (tile_pack_rows), the persistent
// native kernels take them in one tile: each K/V tile is read once for the group instead of g
// times, and the group is one work unit. Decoding with GQA (one query, or a few) is the case;
// with more queries than the rows a head gets, the heads stay a tile each. Since 2026-11-27
// (w) groups that do not divide the tile pack too, in persistent_split and the native mma.sync
// kernel: Qwen2.5's 7 heads a kv head at 16 rows each, 112 of 128 rows, the last warp's rows
// idle. The native mma.sync kernel packs where each head's rows are whole warps' (a multiple
// of block_m / warps rows): each warp's rows then belong to one head.
bool pack_pays(std::int64_t kv_heads, std::int64_t key_tiles) {
  return kv_heads > 0 && (kv_heads >= kPackMinUnits || kv_heads * key_tiles >= kPackMinTiles);
}
int tile_pack_rows_over_tiles(int block_m, int seq_q) {
  int rows = 16;
  while (rows < seq_q) rows *= 2;
  return 2 * rows <= block_m ? rows : 0;
}
int tile_pack_rows(int block_m, int group, int seq_q, int warp_rows, bool fill) {
  if (block_m <= 0 || group <= 1) return 0;
  int rows = 16;
  while (rows * 2 * group <= block_m) rows *= 2;
  if (rows * group > block_m || seq_q > rows) return 0;
  if (fill && rows * group != block_m) return 0;
  if (warp_rows > 0 && rows % warp_rows != 0) return 0;
  return rows;
}
int AttnKernel::pack_rows(const AttnProblem& p) const { return pack_rows_for(cfg_, p, pack_heads_); }
int pack_rows_for(const KernelConfig& cfg_, const AttnProblem& p, int pack_heads) {
  const bool native = cfg_.qk == "native", mma_native = native && cfg_.pipeline == "mma";
  const bool persistent = cfg_.schedule.rfind("persistent", 0) == 0;
  // (variable-length queries: only the mma.sync kernels' paged entry keeps the paged call's grid,
  // its tiles laid out for the longest sequence's queries)
  if (pack_heads == 0 || !native || !(persistent || mma_native) || p.heads_kv <= 0 || p.heads_q <= p.heads_kv ||
      (p.varlen && !(p.paged && mma_native)))
    return 0;
  const int g = p.heads_q / p.heads_kv;
  if (mma_native && cfg_.schedule == "decode") return decode_pack_rows(cfg_.block_m, g, p.seq_q);
  if (mma_native && cfg_.warps <= 0) return 0;
  if (persistent && pack_heads == 1 && !pack_pays(std::int64_t(p.batch) * p.heads_kv, cdiv(p.seq_kv, cfg_.block_n)))
    return 0;
  // Of the persistent schedules only persistent_split's kernel idles the warps past a group
  // that does not fill the tile (attn_native.cuh: warp_rows); the others pack a group only
  // where it fills the tile (a 192-row tile takes 3 heads at 64 rows, not 2 at 64). The native
  // mma.sync kernel idles them too (7 heads at 16 rows of a 128-row tile of 8 warps).
  const bool split = !mma_native && cfg_.schedule == "persistent_split";
  const int rows = tile_pack_rows(cfg_.block_m, g, p.seq_q, mma_native ? cfg_.block_m / cfg_.warps : 0,
                                  !split && !mma_native);
  // persistent_split also packs a group of more heads than a tile holds over several tiles
  // (q_tiles), where a tile holds two heads or more.
  return rows == 0 && split ? tile_pack_rows_over_tiles(cfg_.block_m, p.seq_q) : rows;
}

// The native mma.sync kernel's query tiles: q_tiles a (batch, kv head) with packed heads (one,
// but a large group's in the decode schedule), else q_tiles a (batch, query head).
std::int64_t AttnKernel::mma_units(const AttnProblem& p) const {
  return std::int64_t(p.batch) * (pack_rows(p) > 0 ? p.heads_kv : p.heads_q) * q_tiles(p);
}
int AttnKernel::q_tiles(const AttnProblem& p) const {
  const int pack = pack_rows(p);
  if (pack > 0) return decode_pack_tiles(cfg_.block_m, p.heads_q / p.heads_kv, pack);
  return int(cdiv(p.seq_q, cfg_.block_m));
}

// The native mma.sync kernel, query tiles that fill less than half of the CTAs that fit the GPU
// at once (decoding, a short chunk over a long KV cache): each tile's keys are cut into ranges,
// as many as one wave of CTAs holds, of at least kMmaSplitMinKeys keys each (H100, 64-key
// tiles: against four tiles a range, one query over 8K keys 38 against 48 us at D=128, 30
// against 39 at D=64; 128-key tiles unchanged, 32K level); every range
// is a CTA, and the last of a tile's CTAs to finish merges their partials (attn_mma.cuh:
// split_partial, split_merge). Causal calls too: each tile cuts the key tiles it sees.
// That merge is one CTA's: its warps take the tile's rows in turn, reading kMmaMergeBatch
// ranges of a row per round trip to L2, so the ranges are also capped at kMmaMergeTrips
// round trips a warp (H100, 16 causal queries of a 4:1 group over 32K keys, 64x64 tiles: 33
// ranges of 64 rows took 171 us against 97 for one query's 4 rows).
constexpr std::int64_t kMmaSplitMinKeys = 512, kMmaMergeBatch = 8, kMmaMergeTrips = 16;
std::vector<QueryBand> decode_bands(const KernelConfig& selected, int seq_q, int edge, int forced) {
  std::vector<QueryBand> bands;
  if (selected.pipeline == "mma" && selected.schedule == "decode") return bands;
  if (forced >= 0) {
    if (forced > 0 && seq_q > 1) bands.push_back({1, std::min(forced, seq_q - 1)});
    return bands;
  }
  if (edge <= 0 || seq_q <= 1) return bands;
  bands.push_back({1, std::min(edge, seq_q - 1)});
  if (selected.pipeline == "wgmma" && selected.head_dim == 64 && edge < 8 && seq_q > edge + 1)
    bands.push_back({edge + 1, std::min(8, seq_q - 1)});
  return bands;
}

int decode_pack_rows(int block_m, int group, int seq_q) {
  if (block_m <= 0 || group <= 1 || seq_q <= 0) return 0;
  const int rows = block_m / group;
  if (rows >= 1 && seq_q <= rows) return rows;  // the whole group in one tile
  return 2 * seq_q <= block_m ? seq_q : 0;      // the group over several tiles of two heads or more
}
int decode_pack_tiles(int block_m, int group, int pack_rows) {
  if (block_m <= 0 || pack_rows <= 0 || pack_rows > block_m) return 1;
  const int heads = block_m / pack_rows;
  return (group + heads - 1) / heads;
}
std::int64_t decode_merge_cap(std::int64_t rows, int head_dim, int threads) {
  const std::int64_t items = std::max<std::int64_t>(1, rows * (head_dim / 4));
  const std::int64_t parts = std::max<std::int64_t>(1, threads / items);
  return 2 * kMmaMergeBatch * parts;
}
std::int64_t decode_min_keys(int head_dim, int seq_kv, std::int64_t units) {
  if (seq_kv < kDecodeShortKeysFrom) return kDecodeSplitMinKeys;
  const bool shorter =
      head_dim >= 256 || (head_dim == 128 && seq_kv <= kDecodeShortKeys && units <= kDecodeShortMaxUnits);
  return shorter ? kDecodeShortMinKeys : kDecodeSplitMinKeys;
}
int decode_split_ranges(std::int64_t units, std::int64_t slots, int seq_kv, std::int64_t min_keys,
                        std::int64_t merge_cap) {
  if (units <= 0 || units * 2 > slots) return 0;
  if (min_keys <= 0) min_keys = kDecodeSplitMinKeys;
  std::int64_t ranges = std::min({slots / units, std::int64_t(seq_kv) / min_keys, kDecodeMaxRanges});
  if (merge_cap > 0) ranges = std::min(ranges, std::max(merge_cap, (kDecodeMinCtas + units - 1) / units));
  return ranges >= 2 ? int(ranges) : 0;
}
int AttnKernel::mma_split_ranges(const AttnProblem& p) const {
  // Each CTA runs its sequence's query tile whole (attn_mma.cuh: varlen_view), but in the entry
  // for variable-length queries over a paged cache (the paged call's grid, its units those of the
  // longest sequence's query tiles; a unit of a shorter sequence's ranges all return at once).
  if (p.varlen && !p.paged) return 0;
  const std::int64_t units = mma_units(p), slots = std::max<std::int64_t>(1, this->slots(p));
  const int pack = pack_rows(p);
  const std::int64_t rows = pack > 0 ? std::int64_t(std::min(pack, p.seq_q)) *
                                           std::min(p.heads_q / p.heads_kv, cfg_.block_m / pack)
                                     : std::min(cfg_.block_m, p.seq_q);
  // The keys a tile sees: with a sliding window (a paged cache's; a dense call's K and V start at
  // its first query's window already, rt::trim_window) those of its rows' windows.
  const int tile_rows = pack > 0 ? std::min(pack, p.seq_q) : std::min(cfg_.block_m, p.seq_q);
  const int keys = p.window > 0 && p.causal ? int(std::min<std::int64_t>(p.seq_kv, std::int64_t(p.window) + tile_rows - 1))
                                            : p.seq_kv;
  // A group over several tiles (decode_pack_tiles) reads each kv head's keys once from DRAM and
  // again from L2 for every further tile: there the ranges fill the wave, with no merge cap (H100,
  // one query over 32K / 128K keys: 48 / 1 at D=128 24 / 51 us against 27.5 / 67 with the cap,
  // 71 / 1 at D=64 20 / 39 against 24 / 61; docs/kernels.md, 2026-11-27 (z)).
  if (decode())
    return decode_split_ranges(
        units, slots, keys,
        decode_min_keys_ > 0 ? decode_min_keys_ : decode_min_keys(cfg_.head_dim, keys, units),
        decode_min_keys_ > 0 || (pack > 0 && units > std::int64_t(p.batch) * p.heads_kv)
            ? 0
            : decode_merge_cap(rows, cfg_.head_dim, cfg_.threads));
  if (units * 2 > slots) return 0;
  const std::int64_t rows_per_warp = cdiv(rows, std::max(1, cfg_.warps));
  const std::int64_t merge_cap = std::max<std::int64_t>(2, kMmaMergeBatch * kMmaMergeTrips / rows_per_warp);
  const std::int64_t ranges = std::min({slots / units, std::int64_t(keys) / kMmaSplitMinKeys, merge_cap});
  return ranges >= 2 ? int(ranges) : 0;
}
std::int64_t AttnKernel::persistent_grid(const AttnProblem& p) const {
  const std::int64_t units = persistent_units(p);
  if (const auto cp = cluster_plan(p); cp.first > 0)  // a CTA a range, in whole clusters
    return (cp.second + cp.first - 1) / cp.first * cp.first;
  const std::int64_t resident = slots(p);
  if (units < resident && split_ranges(p) > 0) return resident;
  return std::max<std::int64_t>(1, std::min(units, resident));
}

// The split tail (attn_native.cuh: TailSplit), in key tiles of time: without it the last round
// takes a unit's T tiles while G - units % G CTAs idle; cut into ranges of L tiles it takes
// about L, plus a second piece's start and end and the partial's write (kSplitPieceTiles), plus
// the owner's merge of about T / L partials (kSplitMergeTiles each, one after the other). L is
// at least sqrt(T * merge cost), where those terms balance, so a short tail goes to fewer CTAs
// than G. Split where that saves at least a quarter of T (the last round of an unsplit call
// also runs faster than a full one: fewer SMs share the power and the memory). Measured on the
// H100 (D=128, the split over every CTA; docs/kernels.md): B=4 H=32 1K keys (T=8, L=6.1 over every
// CTA) 1.5-3% slower split, 2K (T=16, L=8.2) level to 1% faster; B=1 H=17 8K (T=64, L=15.5)
// 6% faster.
// Fewer units than CTAs (decoding, a few heads over a long KV cache) are all "the last round":
// the launch then takes every CTA, and the units' keys are cut over them (flash-decoding). A
// causal call qualifies where each head has one query tile (seq_q <= block_m): every unit
// then sees every key tile (bottom-right aligned, the tile's last row sees them all), the
// diagonal's masking being the kernel's usual one by absolute key tile. With more query tiles
// a causal unit's keys depend on its tiles, which the ranges do not follow.
constexpr double kSplitPieceTiles = 4.0, kSplitMergeTiles = 1.0, kSplitMinGain = 0.25;
// Decoding in clusters (attn_native.cuh: cluster_merge). The two-level merge through L2 above
// waits on the DRAM stream's queues: with every CTA streaming, a partial's write and its
// flag's read take microseconds each, and its longest path holds four of them (H100, one
// query over 32K keys of a 4:1 group: 11.5 us from the last key loop's end to the last exit;
// docs/kernels.md). Launched in clusters of C CTAs, the ranges of a unit within one cluster
// hand their rows of queries to the first of them through distributed shared memory instead,
// and only those go through L2, to the owner, which merges them in turn. Every unit gets R
// ranges (a range never holds two units) of at least kClusterMinTiles key tiles, or of 2 where
// that makes no more than kClusterShortRanges ranges (short caches: H100, one query of a 4:1
// group, D=128, 1K keys 14.5-15.0 us in 2-tile ranges against 17.2-17.8 in 4-tile ones, 4K
// 22.9 against 21.2-21.3), or of one where a unit has kClusterOneTileFrom to
// kClusterShortRanges tiles and that makes at most kClusterOneTileCtas CTAs (512 keys 12.6-13.7
// us against 13.4-14.3 in 2-tile ranges, 768 keys 14.9-15.6 against 16.6-17.5; 1K keys level at
// 64 CTAs, and two sequences of 1K 18.7-19.1 against 14.9-15.8 at 128; 2 and 3 tiles stay
// unsplit: 256 keys 11.8-11.9 in two 1-tile ranges against 10.1-10.3 in one CTA), and at most
// kClusterMaxSpan clusters' worth (the owner's merges);
// the grid is R x units rounded up to whole clusters, all of them resident at once (a CTA
// waits for others). C (2, 4 or 8) is the largest size whose members' rows (4 (D + 16) bytes
// each) fit the leader's K/V ring and whose clusters run at least 7/8 of the ranges that any
// size runs (the GPCs' sizes limit how many clusters of each size fit: on the H100 15 of 8
// CTAs); no clusters where none fits or where the most ranges any size runs are fewer than
// 7/8 of those the merge through L2 alone would cut (host tests:
// tests/runtime/test_split_clusters.cpp). (Clusters of 16, past the portable size, measured level or
// 1-3% slower than 8: their leaders fold twice the members.) SAGE_SPLIT_CLUSTERS=N caps C at N
// (0: no clusters).
SplitClusters choose_split_clusters(const SplitClusterInputs& in) {
  if (in.units <= 0 || in.tiles <= 0) return {};
  const std::int64_t shortest = cluster_one_tile_ranges(in.units, in.tiles) ? 1 : 2;
  const std::int64_t r_max = std::min(
      in.slots / in.units, std::max(in.tiles / kClusterMinTiles, std::min(in.tiles / shortest, kClusterShortRanges)));
  std::array<std::int64_t, 3> r = {};
  for (std::size_t i = 0; i < r.size(); ++i) {
    const int c = 2 << i;
    if (in.max_clusters[i] <= 0 || (c - 1) * in.row_bytes > in.ring_bytes) continue;
    r[i] = std::min({r_max, std::int64_t(in.max_clusters[i]) * c / in.units, (in.max_span > 0 ? in.max_span : kClusterMaxSpan) * c});
  }
  // None where the merge through L2 alone would cut clearly more ranges than any size runs;
  // else the largest size within 7/8 of the most ranges.
  const std::int64_t best = *std::max_element(r.begin(), r.end());
  if (best < 2 || best * 8 * in.units < in.l2_ranges * 7) return {};
  for (int i = int(r.size()) - 1; i >= 0; --i)
    if (r[std::size_t(i)] * 8 >= best * 7) return {2 << i, int(r[std::size_t(i)])};
  return {};
}

int choose_share_ranges(std::int64_t units, std::int64_t tiles, std::int64_t slots, std::int64_t min_tiles) {
  if (units <= 0 || tiles < kShareMinUnitTiles) return 0;
  const std::int64_t r = std::min(slots / units, tiles / (min_tiles > 0 ? min_tiles : kShareMinTiles));
  if (r < kShareMinRanges) return 0;
  if (units * tiles * units * r >= (std::int64_t(1) << 31)) return 0;  // the kernel's 32-bit range arithmetic
  return int(r);
}

std::pair<int, int> AttnKernel::share_plan(const AttnProblem& p) const {
  if (!native() || cfg_.schedule != "persistent_split" || share_ == 0) return {0, 0};
  if (pack_rows(p) == 0 && p.seq_q > cfg_.block_m) return {0, 0};  // one query tile a unit
  const int r = choose_share_ranges(persistent_units(p), cdiv(p.seq_kv, cfg_.block_n), slots(p),
                                    share_min_tiles_);
  return {r, r};  // every range merges a share
}

std::pair<int, int> AttnKernel::cluster_plan(const AttnProblem& p) const {
  if (!native() || cfg_.schedule != "persistent_split" || max_clusters_[0] <= 0) return {0, 0};
  if (partial(p)) return {0, 0};  // a partition of the SMs: through L2 (max_clusters_)
  if (share_plan(p).first > 0) return {0, 0};
  const int pack = pack_rows(p);
  if (pack == 0 && p.seq_q > cfg_.block_m) return {0, 0};  // one query tile a unit
  SplitClusterInputs in;
  in.units = persistent_units(p);
  in.tiles = cdiv(p.seq_kv, cfg_.block_n);
  in.slots = slots(p);
  std::int64_t rows = 0;  // attn_native.cuh: cluster_rows over the consumer warps
  const int g = p.heads_q / std::max(1, p.heads_kv);
  for (int w = 0; w < (cfg_.threads - 128) / 32; ++w) {
    if (pack > 0 && w * 16 / pack >= g) continue;  // past the group's heads: no rows
    const int row0 = pack > 0 ? (w * 16) & (pack - 1) : w * 16;
    rows += std::clamp(p.seq_q - row0, 0, 16);
  }
  in.row_bytes = rows * 4 * (cfg_.head_dim + 16);
  in.ring_bytes = std::int64_t(cfg_.stages) * 2 * cfg_.block_n * cfg_.head_dim * 2;
  in.max_clusters = max_clusters_;
  in.max_span = cluster_span_;
  in.l2_ranges = l2_split_ranges(p);
  const SplitClusters sc = choose_split_clusters(in);
  if (sc.cluster == 0) return {0, 0};
  const std::int64_t ranges = in.units * sc.ranges_per_unit;
  if (in.units * in.tiles * ranges >= (std::int64_t(1) << 31)) return {0, 0};  // 32-bit range arithmetic
  return {sc.cluster, int(ranges)};
}
int AttnKernel::split_cluster(const AttnProblem& p) const { return cluster_plan(p).first; }

int AttnKernel::split_ranges(const AttnProblem& p) const {
  if (mma_native()) return mma_split_ranges(p);
  if (cfg_.schedule != "persistent_split") return 0;
  if (const auto sp = share_plan(p); sp.first > 0) return int(persistent_units(p) * sp.first);
  if (const auto cp = cluster_plan(p); cp.first > 0) return cp.second;
  return l2_split_ranges(p);
}
int AttnKernel::l2_split_ranges(const AttnProblem& p) const {
  if (p.causal && cdiv(p.seq_q, cfg_.block_m) > 1) return 0;
  const std::int64_t units = persistent_units(p), grid = std::max<std::int64_t>(1, slots(p));
  if (units % grid == 0) return 0;
  const std::int64_t tiles = cdiv(p.seq_kv, cfg_.block_n), work = (units % grid) * tiles;
  const double len = std::max(double(work) / double(grid), std::sqrt(double(tiles) * kSplitMergeTiles));
  const std::int64_t ranges = std::clamp<std::int64_t>(std::int64_t(double(work) / len), 1, grid);
  const double per = double(work) / double(ranges);
  const double split = per + kSplitPieceTiles + double(tiles) / per * kSplitMergeTiles;
  if (split > double(tiles) * (1.0 - kSplitMinGain)) return 0;
  if (work * ranges >= (std::int64_t(1) << 31)) return 0;  // the kernel's range arithmetic is 32-bit
  return int(ranges);
}

// About 20 ns for an ordinary stream (cuStreamGetCtx_v2 alone), 0.4 us more for a green one
// (H100, driver 580), so it runs at every call: no cache to go stale when a green context is
// destroyed and its handle reused.
int stream_sms(CUstream stream, CUcontext* stream_ctx) {
  if (stream_ctx) *stream_ctx = nullptr;
  const cu::Api* a = cu::try_api();
  if (!a) return 0;
  CUcontext ctx = nullptr;
  if (!a->cuStreamGetCtx_v2 || !a->cuGreenCtxGetDevResource) {  // a driver before CUDA 12.5
    if (stream_ctx && a->cuStreamGetCtx(stream, &ctx) == CUDA_SUCCESS) *stream_ctx = ctx;
    return 0;
  }
  CUgreenCtx green = nullptr;
  CUdevResource r{};
  if (a->cuStreamGetCtx_v2(stream, &ctx, &green) == CUDA_SUCCESS) {
    if (!green) {
      if (stream_ctx) *stream_ctx = ctx;
      return 0;
    }
    if (a->cuGreenCtxGetDevResource(green, &r, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS) return 0;
    return int(r.sm.smCount);
  }
  // CU_STREAM_PER_THREAD while a green context is current: the driver refuses the query; the
  // current context's resources are the green context's.
  if (!a->cuCtxGetDevResource || a->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return 0;
  if (a->cuCtxGetDevResource(ctx, &r, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS) return 0;
  return int(r.sm.smCount);
}

std::string launch_text(const AttnKernel& k, const AttnProblem& kp) {
  const WorkspacePlan w = k.plan(kp);
  std::string t;
  if (k.persistent()) t = cat(k.persistent_grid(kp), " CTAs (persistent, ", k.persistent_units(kp), " work units)");
  else if (kp.varlen)
    t = cat(kp.batch, " sequences of up to ", w.q_tiles, " query tiles of up to ", w.k_tiles,
            " key tiles (variable lengths, a CTA a sequence's query tile)");
  else t = cat(w.q_tiles, " query tiles of ", w.k_tiles, " key tiles");
  if (w.split_ranges > 0) {
    t += cat("; keys split into ", w.split_ranges, " ranges");
    if (w.split_share > 0) t += ", each merging a share of its unit's partials (share merge)";
    else if (w.split_cluster > 1) t += cat(", merged in thread block clusters of ", w.split_cluster);
    else if (k.native() && !k.mma_native()) t += ", merged through L2";
  }
  if (const int pack = k.pack_rows(kp); pack > 0) t += cat("; GQA heads packed, ", pack, " rows a head");
  if (k.partial(kp)) t += cat("; on ", k.sms(kp), " SMs (a green context's)");
  return t;
}

WorkspacePlan AttnKernel::plan(const AttnProblem& p) const {
  const KernelConfig& c = cfg_;
  WorkspacePlan w;
  w.q_tiles = native() ? q_tiles(p) : int(cdiv(p.seq_q, c.block_m));
  w.k_tiles = cdiv(p.seq_kv, c.block_n);
  if (native()) {  // reads the caller's tensors: a workspace only for the split tail, or FP8 V
    std::size_t off = 0;
    if (native_pv8()) {  // attn_native.cuh, V8 jobs: FP8 V^T tiles, their scales, V's means, flags and counters
      const std::size_t jobs = std::size_t(p.batch) * p.heads_kv * w.k_tiles;
      w.has_v_prep = w.has_v_scale = w.has_v_mean = true;
      w.v_prep = 0;
      w.v_scale = off = align_up(jobs * c.block_n * c.head_dim);
      w.v_mean = off = align_up(off + sizeof(float) * 4 * jobs);  // 16 bytes a tile's scale (a TMA box, tma_vs)
      w.sync = off = align_up(off + sizeof(float) * std::size_t(p.batch) * p.heads_kv * c.head_dim);
      off = align_up(off + sizeof(std::uint64_t) * (jobs + 2 + std::size_t(p.batch) * p.heads_kv));
      w.total = off;
      return w;
    }
    w.split_ranges = split_ranges(p);
    if (w.split_ranges > 0 && mma_native()) {
      // split_o at 0: O of every range's tile rows, then their maxima and sums; a counter a tile
      const std::size_t rows = std::size_t(w.split_ranges) * mma_units(p) * c.block_m;
      off = align_up(sizeof(float) * rows * (c.head_dim + 2));
      w.sync = off;  // a counter a tile; the decode schedule: a flag a range (attn_decode.cuh)
      off = align_up(off + sizeof(std::uint64_t) * mma_units(p) * (decode() ? w.split_ranges : 1));
    } else if (w.split_ranges > 0) {  // split_o at 0, then the flags
      w.split_cluster = split_cluster(p);
      w.split_share = split_share(p);
      const std::size_t consumers = std::size_t(c.threads) - 128;  // the producer warpgroup is the last
      off = align_up(sizeof(float) * std::size_t(w.split_ranges) * (c.head_dim / 2 + 4) * consumers);
      w.sync = off;
      off = align_up(off + sizeof(std::uint64_t) * std::size_t(w.split_ranges) * (consumers / 32));
    }
    w.total = std::max<std::size_t>(off, 256);
    return w;
  }
  const std::int64_t bhq = std::int64_t(p.batch) * p.heads_q, bhk = std::int64_t(p.batch) * p.heads_kv;
  // A variable-length batch: each kv head's K and V tiles in a row of kv_tile_pitch (params.h),
  // the statistics, V's scales and means per (sequence, kv head) as a batch's.
  if (p.varlen) w.kv_tile_pitch = int(p.total_kv / c.block_n + p.batch);
  const std::int64_t npad = p.varlen ? std::int64_t(w.kv_tile_pitch) * c.block_n : std::int64_t(w.k_tiles) * c.block_n;
  const std::int64_t kv_rows = p.varlen ? std::int64_t(p.heads_kv) * npad : bhk * npad;  // K rows (V^T columns x rows / D)
  const bool v8 = v_8bit(c);
  w.has_stats = stat_kinds(c) > 0;
  w.has_q_mean = c.smooth_q;
  w.has_q_kmean = p.return_lse && c.smooth_k;
  // quant.cuh: v_prepared (FP16 V below the variant's head dim is copied zero-padded, so that
  // the quantized kernels read V's rows whole).
  w.has_v_prep = v8 || c.smooth_v || p.dtype == DType::bf16 || p.head_dim < c.head_dim;
  w.has_v_scale = v8;
  w.has_v_mean = c.smooth_v;
  // A variable-length batch: each sequence's view reads at most stat_rows of its keys, and the
  // exact pass always follows (its CTAs of sequences whose V stayed in range return at once), so
  // that a sequence longer than the caller's seq_kv (an upper bound, not checked on the host) is
  // still quantized from its whole range.
  w.stat_rows = c.pv == "int8" ? p.seq_kv : p.varlen ? kStatSampleRows : std::min(p.seq_kv, kStatSampleRows);
  const bool sampled = w.stat_rows < p.seq_kv;
  w.v_exact_pass = c.pv == "fp8" && (sampled || p.varlen);
  // Statistics over every row: enough splits of the sequence for about one CTA of each kind
  // per SM, each of at least 256 rows (measured on the H100 at N=1K: one per SM 2-4% faster
  // than two, four or eight per SM 7-25% slower; with K and V statistics in separate CTAs, two
  // per SM again 8% slower: the quantization CTAs, not the statistics, set the preparation's
  // pace). A sample: one CTA of each kind per (batch, kv head), which leaves room in the first
  // wave for quantization CTAs (H100, B=4 H=32, preparation ms against two splits: D=128 4K
  // 0.176-0.179 vs 0.194-0.195, 16K 0.61-0.62 vs 0.69-0.70; D=64 4K 0.135-0.136 vs 0.143-0.145).
  // A variable-length batch: one split (each sequence's statistics in one CTA of each kind).
  w.stat_splits = sampled || p.varlen
                      ? 1
                      : std::max(1, std::min<int>(cdiv(std::int64_t(sms(p)), bhk), cdiv(w.stat_rows, 256)));
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  if (w.has_stats) {
    w.stats = take(sizeof(float) * w.stat_splits * bhk * 4 * c.head_dim);
    w.sync = take(sizeof(std::uint64_t) * bhk * 2);  // counters, then V's flags
  }
  // fuse_q: the attention kernel quantizes Q itself (no Q in the workspace).
  if (!c.fuse_q) {
    w.q_quant = take(std::size_t(bhq) * w.q_tiles * c.block_m * qrow_bytes(c));
    w.q_scale = take(sizeof(float) * bhq * w.q_tiles * q_groups(c));
  }
  if (w.has_q_mean) {
    w.q_mean_quant = take(std::size_t(bhq) * w.q_tiles * qrow_bytes(c));
    w.q_mean_scale = take(sizeof(float) * bhq * w.q_tiles);
  }
  if (w.has_q_kmean) w.q_kmean = take(sizeof(float) * (p.varlen ? std::int64_t(p.heads_q) * p.total_q : bhq * p.seq_q));
  w.k_quant = take(std::size_t(kv_rows) * qrow_bytes(c));
  w.k_scale = take(sizeof(float) * (kv_rows / c.block_n) * k_groups(c));
  if (w.has_v_prep) w.v_prep = take(std::size_t(kv_rows) * c.head_dim * (v8 ? 1 : 2));
  if (w.has_v_scale) w.v_scale = take(sizeof(float) * bhk * c.head_dim);
  if (w.has_v_mean) w.v_mean = take(sizeof(float) * bhk * c.head_dim);
  w.total = std::max<std::size_t>(off, 256);
  return w;
}

double AttnKernel::prep_bytes(const AttnProblem& p) const {
  if (native()) return 0;
  const WorkspacePlan w = plan(p);
  // (a variable-length batch: the packed rows, and K's and V's tiles in rows of kv_tile_pitch)
  const double q = p.varlen ? double(p.heads_q) * p.total_q * p.head_dim : double(p.q_elems());
  const double kv = p.varlen ? double(p.heads_kv) * p.total_kv * p.head_dim : double(p.kv_elems());
  const double bhq = double(p.batch) * p.heads_q, bhk = double(p.batch) * p.heads_kv;
  const double kv_tiles = p.varlen ? double(p.heads_kv) * w.kv_tile_pitch : bhk * w.k_tiles;
  const double qrow = double(qrow_bytes(cfg_)) / cfg_.head_dim;  // bytes per quantized element
  const bool v8 = v_8bit(cfg_);
  double bytes = 0;
  if (w.has_stats) {  // stats: read K (smoothing) and V (8-bit range, smoothing), or a sample; write partials
    bytes += stat_kinds(cfg_) * kv * 2 * std::min(1.0, double(w.stat_rows) / std::max(p.seq_kv, 1));
    bytes += 4.0 * w.stat_splits * bhk * 4 * cfg_.head_dim + 8.0 * bhk;
  }
  // quant: reads Q, K (and V when prepared); writes them quantized (padded tiles) + scales.
  // fuse_q: Q is read only for the LSE correction, and nothing of it is written.
  if (!cfg_.fuse_q) {
    bytes += q * 2 + bhq * w.q_tiles * cfg_.block_m * cfg_.head_dim * qrow + 4.0 * bhq * w.q_tiles * q_groups(cfg_);
  } else if (w.has_q_kmean) {
    bytes += q * 2;
  }
  bytes += kv * 2 + kv_tiles * cfg_.block_n * cfg_.head_dim * qrow + 4.0 * kv_tiles * k_groups(cfg_);
  if (w.has_v_prep) bytes += kv * 2 + kv_tiles * cfg_.block_n * cfg_.head_dim * (v8 ? 1 : 2);
  if (w.has_q_kmean) bytes += 4.0 * (p.varlen ? double(p.heads_q) * p.total_q : bhq * p.seq_q);
  return bytes;
}

void AttnKernel::fill(const AttnProblem& p, const AttnArgs& a, void* ws, const WorkspacePlan& w,
                      ::SageAttnParams* out) const {
  std::string why = cfg_.cannot_implement(p);
  if (!why.empty()) throw Error(Errc::unsupported, cat(cfg_.name, ": ", why));
  char* base = static_cast<char*>(ws);
  SageAttnParams& s = *out;
  s = SageAttnParams{};
  set_problem(p, a, s);
  s.o = a.o;
  s.o_stride_b = a.strided ? a.so.b : s.q.stride_b;
  s.o_stride_h = a.strided ? a.so.h : s.q.stride_h;
  s.o_stride_n = a.strided ? a.so.n : s.q.stride_n;
  s.lse = p.return_lse ? a.lse : nullptr;
  s.q_tiles = w.q_tiles;
  s.k_tiles = w.k_tiles;
  s.num_sms = sms(p);
  if (p.varlen && p.paged) {
    // Variable-length queries over a paged cache: the kernel's view of each sequence
    // (attn_mma.cuh: varlen_paged_view) clamps its query offsets to the packed rows; its keys are
    // the paged call's (below).
    if (!a.cu_seqlens_q) throw Error(Errc::invalid_argument, "variable-length queries need cu_seqlens_q");
    s.cu_seqlens_q = a.cu_seqlens_q;
    s.seq_q = p.total_q;
    s.vq_min = a.vq_min;
    s.vq_max = a.vq_max;
  } else if (p.varlen) {
    // The kernel's view of each sequence (attn_mma.cuh: varlen_view) clamps every offset to the
    // packed rows, so cu_seqlens can send no access out of q, k, v, o or lse.
    if (!a.cu_seqlens_q || !a.cu_seqlens_kv)
      throw Error(Errc::invalid_argument, "a variable-length batch needs cu_seqlens_q and cu_seqlens_kv");
    s.cu_seqlens_q = a.cu_seqlens_q;
    s.cu_seqlens_kv = a.cu_seqlens_kv;
    s.seq_q = p.total_q;
    s.seq_kv = p.total_kv;
  }
  if (p.paged) {
    // The kernel's view of each sequence (attn_mma.cuh: paged_view) clamps its length to seq_kv
    // and each page to [0, num_pages), so the tables can send no access out of the caches.
    if (!a.block_table || !a.seqlens_kv)
      throw Error(Errc::invalid_argument, "a paged KV cache needs block_table and seqlens_kv");
    if (p.page_size < 1 || (p.page_size & (p.page_size - 1)) != 0 || a.num_pages < 1 ||
        std::int64_t(a.bt_stride) * p.page_size < p.seq_kv)
      throw Error(Errc::invalid_argument, cat("a paged KV cache of ", a.num_pages, " pages of ", p.page_size,
                                              " slots, ", a.bt_stride, " a sequence, cannot hold ", p.seq_kv, " keys"));
    s.block_table = a.block_table;
    s.seqlens_kv = a.seqlens_kv;
    s.bt_stride = a.bt_stride;
    s.num_pages = a.num_pages;
    int shift = 0;
    while ((1 << shift) < p.page_size) ++shift;
    s.page_shift = shift;
    if (p.kv_fp8) {
      // FP8 pages: their scales; the mma.sync entries have the window code, and a call without a
      // window runs them with one past every key (kFp8NoWindow: nothing masked by it); the wgmma
      // ones take no window.
      s.kv_k_scale = a.kv_k_scale;
      s.kv_v_scale = a.kv_v_scale;
      s.kv_scale_stride = a.kv_scale_stride;
      if (s.window <= 0 && cfg_.pipeline == "mma") s.window = kFp8NoWindow;
    }
  }
  if (native()) {
    s.pack_rows = pack_rows(p);
    s.causal_single = causal_single(p) ? 1 : 0;
    if (native_pv8()) {
      s.v_prep = base + w.v_prep;
      s.v_scale = reinterpret_cast<float*>(base + w.v_scale);
      s.v_mean = reinterpret_cast<float*>(base + w.v_mean);
      s.sync = reinterpret_cast<unsigned long long*>(base + w.sync);
      s.generation = next_generation();
    }
    if (w.split_ranges > 0) {
      s.split_ranges = w.split_ranges;
      s.split_cluster = w.split_cluster;
      s.split_share = w.split_share;
      s.split_o = reinterpret_cast<float*>(base + w.split_o);
      s.sync = reinterpret_cast<unsigned long long*>(base + w.sync);
      s.generation = next_generation();
    }
    if (mma_native()) {
      // cp.async reads the caller's rows in 16-byte chunks.
      for (const SageTensor* t : {&s.q, &s.k, &s.v})
        if (reinterpret_cast<std::uintptr_t>(t->ptr) % 16 != 0 || t->stride_b % 8 != 0 || t->stride_h % 8 != 0 ||
            t->stride_n % 8 != 0)
          throw Error(Errc::invalid_argument,
                      cat(cfg_.name, ": q, k and v must be 16-byte aligned, their strides multiples of 8 elements"));
      return;
    }
    if (p.varlen) {
      // The maps cover the packed tensors (packed_problem); each CTA reads its sequence's rows
      // from there (attn_native.cuh: attn_kernel_varlen; paged: Q's rows, K's and V's maps over
      // the caches).
      native_tensor_maps(packed_problem(p), s);
      return;
    }
    native_tensor_maps(p, s);
    return;
  }
  s.stat_splits = w.stat_splits;
  s.stat_rows = w.stat_rows;
  auto at = [&](bool has, std::size_t off) -> char* { return has ? base + off : nullptr; };
  s.stats = reinterpret_cast<float*>(at(w.has_stats, w.stats));
  s.sync = reinterpret_cast<unsigned long long*>(at(w.has_stats, w.sync));
  s.generation = next_generation();
  s.q_quant = reinterpret_cast<sage_i8*>(at(!cfg_.fuse_q, w.q_quant));
  s.q_scale = reinterpret_cast<float*>(at(!cfg_.fuse_q, w.q_scale));
  s.q_mean_quant = reinterpret_cast<sage_i8*>(at(w.has_q_mean, w.q_mean_quant));
  s.q_mean_scale = reinterpret_cast<float*>(at(w.has_q_mean, w.q_mean_scale));
  s.q_kmean = reinterpret_cast<float*>(at(w.has_q_kmean, w.q_kmean));
  s.k_quant = reinterpret_cast<sage_i8*>(base + w.k_quant);
  s.k_scale = reinterpret_cast<float*>(base + w.k_scale);
  s.v_prep = at(w.has_v_prep, w.v_prep);
  s.v_scale = reinterpret_cast<float*>(at(w.has_v_scale, w.v_scale));
  s.v_mean = reinterpret_cast<float*>(at(w.has_v_mean, w.v_mean));
  s.kv_tile_pitch = w.kv_tile_pitch;
  if (cfg_.tma) tensor_maps(w, p, s);
}

namespace {
// A 2-D tensor map of UINT8 rows `inner` bytes long (row pitch = inner), read in boxes of
// box_inner x box_rows into shared memory with the swizzle that matches the box's row bytes
// (the wgmma operand layouts: 128-byte rows -> 128B swizzle, 64-byte rows -> 64B).
void encode_rows(void* map, const void* base, std::int64_t inner, std::int64_t rows, int box_inner, int box_rows) {
  static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(inner)};
  const cuuint32_t box[2] = {cuuint32_t(box_inner), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUtensorMapSwizzle sw = box_inner >= 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                : box_inner >= 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                  : CU_TENSOR_MAP_SWIZZLE_32B;
  SAGE_CU(cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                                 const_cast<void*>(base), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// A 2-D tensor map over `tiles` rows of four FP32 (16 bytes), boxes of one row: the native
// FP8 P.V kernel's tile scales, read by a tensor TMA load on the V tile's barrier. A
// non-tensor bulk copy reads them as fast, but compute-sanitizer's racecheck tracks its
// writes and not a tensor load's, and cannot see the barrier that orders them. With no L2
// promotion the tensor load read 1-6% slower at 4K keys than the bulk copy, with 64-byte
// promotion level with it (H200, docs/kernels.md, 2026-11-28 (al)).
void encode_tile_scales(void* map, const float* base, std::int64_t tiles) {
  const cuuint64_t dims[2] = {4, cuuint64_t(tiles)};
  const cuuint64_t strides[1] = {4 * sizeof(float)};
  const cuuint32_t box[2] = {4, 1};
  const cuuint32_t elem_strides[2] = {1, 1};
  SAGE_CU(cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2,
                                 const_cast<float*>(base), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// A 4-D tensor map (head_dim bytes, page_size, Hkv, num_pages) over FP8 (e4m3) pages, boxes of
// `box_bytes` (the variant's head dim; columns past the call's read as zeros) by `box_rows`
// rows, no swizzle: a tile's boxes land as its rows in order (attn_native_fp8.cuh converts them).
void encode_fp8_pages(void* map, const SageTensor& x, const AttnProblem& p, int box_bytes, int box_rows, int num_pages) {
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(p.page_size), cuuint64_t(p.heads_kv),
                              cuuint64_t(num_pages)};
  const cuuint64_t strides[3] = {cuuint64_t(x.stride_n), cuuint64_t(x.stride_h), cuuint64_t(x.stride_b)};
  const cuuint32_t box[4] = {cuuint32_t(box_bytes), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const bool sector_rows = (x.stride_n | x.stride_h | x.stride_b) % 32 == 0 && reinterpret_cast<std::uintptr_t>(x.ptr) % 32 == 0;
  SAGE_CU(cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 4,
                                 const_cast<void*>(x.ptr), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 sector_rows ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// A 4-D tensor map (D, N, H, B) over one of the caller's tensors in its own dtype, boxes of
// 64 columns (128-byte rows, 128B swizzle) by `box_rows` rows; rows past the sequence's end
// read as zeros. Rows that do not all start on a 32-byte sector (a pitch or head offset not a
// multiple of 32 bytes: head dims 40, 72, 104, ...) are promoted into L2 128 bytes at a time instead of 256:
// H100, the native D=128 kernel, 2K keys, d = 72 / 104 / 120: 0.486 / 0.562 / 0.504 ms with
// 256-byte promotion, 0.427 / 0.505 / 0.462-0.479 with 128; D=64 at d = 40 0.323 -> 0.302; aligned
// pitches level (docs/kernels.md, 2026-11-27 (u)).
void encode_user(void* map, const SageTensor& x, const AttnProblem& p, int heads, int seq, int box_rows,
                 int box_heads = 1, int batch = -1) {
  const CUtensorMapDataType type =
      p.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(seq), cuuint64_t(heads),
                              cuuint64_t(batch >= 0 ? batch : p.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(x.stride_n) * 2, cuuint64_t(x.stride_h) * 2, cuuint64_t(x.stride_b) * 2};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), cuuint32_t(box_heads), 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const bool sector_rows = ((x.stride_n | x.stride_h | x.stride_b) * 2) % 32 == 0 &&
                           reinterpret_cast<std::uintptr_t>(x.ptr) % 32 == 0;
  const CUtensorMapL2promotion promo = sector_rows ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  SAGE_CU(cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(map), type, 4, const_cast<void*>(x.ptr), dims, strides, box,
                                 elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promo,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// The maps of the caller's tensors are re-encoded only when the pointers or this changes: the
// problem's shape and the tensors' strides (O's as the kernel's parameters hold them).
std::array<std::int64_t, 21> user_shape(const AttnProblem& p, const SageAttnParams& s) {
  return {p.batch,      p.heads_q,    p.heads_kv,   p.seq_q,      p.seq_kv,     p.head_dim,   int(p.dtype),
          s.q.stride_b, s.q.stride_h, s.q.stride_n, s.k.stride_b, s.k.stride_h, s.k.stride_n, s.v.stride_b,
          s.v.stride_h, s.v.stride_n, s.o_stride_b, s.o_stride_h, s.o_stride_n,
          p.paged ? (std::int64_t(s.num_pages) << 32) | p.page_size : 0, p.kv_fp8 ? 1 : 0};
}

// TMA reads the caller's tensors: each must start 16-byte aligned.
void require_tma_aligned(const std::string& variant, const char* what, std::initializer_list<const void*> ptrs) {
  for (const void* x : ptrs)
    if (reinterpret_cast<std::uintptr_t>(x) % 16 != 0)
      throw Error(Errc::invalid_argument, cat(variant, ": ", what, " must be 16-byte aligned (read by TMA)"));
}
}  // namespace

// The native family's maps: 4-D (D, N, H, B) over the caller's Q, K and V in their own
// dtype, boxes of 64 columns (128-byte rows, 128B swizzle) by BLOCK_M or BLOCK_N rows; rows
// past a sequence's end read as zeros (packed GQA heads: Q's boxes are pack_rows rows of each
// of a group's heads, which land as one tile of BLOCK_M rows, head after head). The persistent
// kernels also store O (Q's layout) through a map with boxes of 64 columns by 16 rows (one
// warp's rows). The FP8 P.V variant's maps over its workspace (V^T tiles in FP8 and their
// scales) are kept apart, keyed by the workspace's pointers and the tile count. All are
// re-encoded only when their pointers or the shape change.
void AttnKernel::native_tensor_maps(const AttnProblem& p, SageAttnParams& s) const {
  const KernelConfig& c = cfg_;
  require_tma_aligned(c.name, "Q, K and V", {s.q.ptr, s.k.ptr, s.v.ptr});
  SageTensor o{persistent() ? s.o : nullptr, s.o_stride_b, s.o_stride_h, s.o_stride_n};
  if (o.ptr) require_tma_aligned(c.name, "O", {o.ptr});
  const std::array<std::int64_t, 21> key = user_shape(p, s);
  std::lock_guard<std::mutex> lock(tma_mu_);
  TmaCache& t = tma_cache_;
  if (t.q != s.q.ptr || t.k != s.k.ptr || t.v != s.v.ptr || t.o != o.ptr || t.shape != key) {
    t.q = nullptr;  // invalid until all are encoded
    const int pack = pack_rows(p);
    if (pack > 0) encode_user(t.maps[0], s.q, p, p.heads_q, p.seq_q, pack, c.block_m / pack);
    else encode_user(t.maps[0], s.q, p, p.heads_q, p.seq_q, c.block_m);
    if (p.paged) {
      // The caches: (D, page_size, Hkv, num_pages), boxes of min(block_n, page_size) rows, a
      // tile's pages' boxes (attn_native.cuh: PagedBoxes).
      // (a dimension of one page, one kv head or one slot has stride 0, never stepped over:
      // the map takes the contiguous pages' stride there instead)
      const int rows = std::min(c.block_n, p.page_size);
      auto filled = [&](SageTensor x) {
        if (x.stride_n == 0) x.stride_n = std::int64_t(p.heads_kv) * p.head_dim;
        if (x.stride_h == 0) x.stride_h = p.head_dim;
        if (x.stride_b == 0) x.stride_b = std::int64_t(p.page_size) * p.heads_kv * p.head_dim;
        return x;
      };
      if (p.kv_fp8) {  // FP8 pages: boxes of whole FP8 rows (attn_native_fp8.cuh)
        encode_fp8_pages(t.maps[1], filled(s.k), p, c.head_dim, rows, s.num_pages);
        encode_fp8_pages(t.maps[2], filled(s.v), p, c.head_dim, rows, s.num_pages);
      } else {
        encode_user(t.maps[1], filled(s.k), p, p.heads_kv, p.page_size, rows, 1, s.num_pages);
        encode_user(t.maps[2], filled(s.v), p, p.heads_kv, p.page_size, rows, 1, s.num_pages);
      }
    } else {
      encode_user(t.maps[1], s.k, p, p.heads_kv, p.seq_kv, c.block_n);
      encode_user(t.maps[2], s.v, p, p.heads_kv, p.seq_kv, c.block_n);
    }
    if (o.ptr) encode_user(t.maps[3], o, p, p.heads_q, p.seq_q, 16);
    t.q = s.q.ptr;
    t.k = s.k.ptr;
    t.v = s.v.ptr;
    t.o = o.ptr;
    t.shape = key;
  }
  std::memcpy(&s.tma_q, t.maps[0], 128);
  std::memcpy(&s.tma_k, t.maps[1], 128);
  std::memcpy(&s.tma_v, t.maps[2], 128);
  if (o.ptr) std::memcpy(&s.tma_o, t.maps[3], 128);
  if (native_pv8()) {  // the workspace's FP8 V^T tiles (head_dim rows of block_n bytes a tile) and their scales
    require_tma_aligned(c.name, "the workspace", {s.v_prep, s.v_scale});
    const std::int64_t tiles = std::int64_t(p.batch) * p.heads_kv * s.k_tiles;
    if (t.v8 != s.v_prep || t.vs != s.v_scale || t.v8_tiles != tiles) {
      t.v8 = nullptr;  // invalid until both are encoded
      encode_rows(t.maps[4], s.v_prep, c.block_n, tiles * c.head_dim, c.block_n, c.head_dim);
      encode_tile_scales(t.maps[5], s.v_scale, tiles);
      t.v8 = s.v_prep;
      t.vs = s.v_scale;
      t.v8_tiles = tiles;
    }
    std::memcpy(&s.tma_v8, t.maps[4], 128);
    std::memcpy(&s.tma_vs, t.maps[5], 128);
  }
}

void AttnKernel::tensor_maps(const WorkspacePlan& w, const AttnProblem& p, SageAttnParams& s) const {
  const KernelConfig& c = cfg_;
  if (!v_8bit(c) || !s.v_prep)
    throw Error(Errc::unsupported, cat(c.name, ": the TMA loader reads prepared 8-bit V (FP8 or INT8)"));
  const std::int64_t qrow = qrow_bytes(c);
  // Rows longer than 128 bytes (INT8 head_dim 256) are read as boxes of 128 bytes (the 128B
  // swizzle's most), which the kernel loads side by side (WgmmaAttnConfig::QK_BOX).
  const int qk_box = int(std::min<std::int64_t>(qrow, 128));
  // A variable-length batch (w.kv_tile_pitch): K's and V's rows of tiles a kv head
  // (attn_wgmma.cuh: attn_kernel_tma), Q's map over the packed [1, total_q, Hq, D] tensor.
  const std::int64_t npad = std::int64_t(p.varlen ? w.kv_tile_pitch : w.k_tiles) * c.block_n;
  const std::int64_t kv_heads = std::int64_t(p.varlen ? 1 : p.batch) * p.heads_kv;
  const std::int64_t q_rows = std::int64_t(p.batch) * p.heads_q * w.q_tiles * c.block_m;
  const std::int64_t k_rows = kv_heads * npad;
  const std::int64_t v_rows = kv_heads * c.head_dim;
  if (p.varlen && !c.fuse_q) throw Error(Errc::unsupported, cat(c.name, ": variable-length batches need fuse_q"));
  const AttnProblem packed = packed_problem(p);
  static_assert(sizeof(s.tma_q) == 128 && alignof(decltype(s.tma_q)) == 64, "tensor map slots");
  // fuse_q: Q is the caller's tensor (4-D map, like the native family's), K and V the workspace's.
  const void* q_src = c.fuse_q ? s.q.ptr : static_cast<const void*>(s.q_quant);
  if (c.fuse_q) require_tma_aligned(c.name, "Q", {q_src});
  const std::array<std::int64_t, 21> key = c.fuse_q ? user_shape(packed, s) : std::array<std::int64_t, 21>{};
  std::lock_guard<std::mutex> lock(tma_mu_);
  TmaCache& t = tma_cache_;
  if (t.q != q_src || t.k != s.k_quant || t.v != s.v_prep || t.q_rows != q_rows || t.k_rows != k_rows ||
      t.v_rows != v_rows || t.npad != npad || t.shape != key) {
    t.q = nullptr;  // invalid until all three are encoded
    if (c.fuse_q) encode_user(t.maps[0], s.q, packed, packed.heads_q, packed.seq_q, c.block_m);
    else encode_rows(t.maps[0], s.q_quant, qrow, q_rows, qk_box, c.block_m);
    encode_rows(t.maps[1], s.k_quant, qrow, k_rows, qk_box, c.block_n);
    encode_rows(t.maps[2], s.v_prep, npad, v_rows, c.block_n, c.head_dim);
    t.shape = key;
    t.q = q_src;
    t.k = s.k_quant;
    t.v = s.v_prep;
    t.q_rows = q_rows;
    t.k_rows = k_rows;
    t.v_rows = v_rows;
    t.npad = npad;
  }
  std::memcpy(&s.tma_q, t.maps[0], 128);
  std::memcpy(&s.tma_k, t.maps[1], 128);
  std::memcpy(&s.tma_v, t.maps[2], 128);
}

// The parameters are filled once per call and shared by the launches (host overhead per call
// is mostly the cuLaunchKernel calls themselves: ~3 us each on the H100's host).
void AttnKernel::launch_prep(const AttnProblem& p, const WorkspacePlan& w, const SageAttnParams& s,
                             CUstream stream) const {
  if (!prep_) return;  // native: nothing to prepare
  if (p.varlen) {
    // (quant.cuh: prep_kernel_varlen) the statistics of each (sequence, kv head), then each kv
    // head's row of K and V tiles, then Q jobs for the LSE correction only (fuse_q).
    if (!prep_varlen_) throw Error(Errc::unsupported, cat(cfg_.name, ": no preparation for variable-length batches"));
    if (p.total_q == 0) return;  // nothing to compute (launch_attn launches nothing either)
    const std::int64_t stats = std::int64_t(stat_kinds(cfg_)) * p.batch * p.heads_kv;
    const std::int64_t jobs = std::int64_t(p.heads_kv) * w.kv_tile_pitch * (w.has_v_prep ? 2 : 1) +
                              (s.q_kmean ? std::int64_t(p.batch) * p.heads_q * w.q_tiles : 0);
    if (stats + jobs > 0x7fffffff) throw Error(Errc::unsupported, cat(p.str(), ": too many tiles for one launch"));
    launch(prep_varlen_, unsigned(stats + jobs), 1, 1, kPrepThreads, 0, stream, s);
    if (w.v_exact_pass)
      launch(prep_v_varlen_, unsigned(std::int64_t(p.batch) * p.heads_kv), 1, 1, kPrepThreads, 0, stream, s, dependent_);
    return;
  }
  // Statistics CTAs first (lower block indices: dispatched before any CTA that waits for them).
  const std::int64_t stats = std::int64_t(stat_kinds(cfg_)) * s.stat_splits * p.batch * p.heads_kv;
  // fuse_q: Q tiles only for the LSE correction (the kernel's Q_IN_ATTN rule).
  const bool q_jobs = !cfg_.fuse_q || s.q_kmean;
  const std::int64_t jobs = (q_jobs ? std::int64_t(p.batch) * p.heads_q * cdiv(w.q_tiles, q_tiles_per_job(cfg_)) : 0) +
                            std::int64_t(p.batch) * p.heads_kv * w.k_tiles * (w.has_v_prep ? 2 : 1);
  if (stats + jobs > 0x7fffffff) throw Error(Errc::unsupported, cat(p.str(), ": too many tiles for one launch"));
  launch(prep_, unsigned(stats + jobs), 1, 1, kPrepThreads, 0, stream, s);
  // FP8 V whose values went past the sampled range: again, exactly (one CTA per (batch, kv
  // head); those not flagged return at once).
  if (w.v_exact_pass)
    launch(prep_v_, unsigned(std::int64_t(p.batch) * p.heads_kv), 1, 1, kPrepThreads, 0, stream, s, dependent_);
}

void AttnKernel::launch_attn(const AttnProblem& p, const SageAttnParams& s, CUstream stream) const {
  // Calls of up to three quarters of the variant's head dim (192 of 256, 96 of 128) run the
  // three-quarter entry where the module has one.
  const bool q3 = attn_q3_ && runs_q3_entry(cfg_, p.head_dim);
  // A sliding window: the entry that takes one (dense or packed, its whole head dim).
  const bool window = s.window > 0;
  // A paged KV cache: the entry that reads it (dense queries, its whole head dim).
  const bool paged = s.block_table != nullptr;
  if (p.kv_fp8 && !attn_paged_fp8_) throw Error(Errc::unsupported, cat(cfg_.name, ": no entry for FP8 pages"));
  if (window && !p.kv_fp8 && !(paged ? attn_paged_window_ : attn_window_))
    throw Error(Errc::unsupported, cat(cfg_.name, ": no entry for sliding windows", paged ? " over a paged KV cache" : ""));
  if (paged && !attn_paged_) throw Error(Errc::unsupported, cat(cfg_.name, ": no entry for paged KV caches"));
  // (variable-length queries over it: their entry, on the paged call's grid on the mma.sync
  // pipeline, else on a variable-length batch's; with a window, the entries that take one)
  // (FP8 pages: their entries, which take a window or none)
  CUfunction paged_f = p.kv_fp8   ? (p.varlen ? attn_varlen_paged_fp8_ : attn_paged_fp8_)
                       : p.varlen ? (window ? attn_varlen_paged_window_ : attn_varlen_paged_)
                                  : (window ? attn_paged_window_ : attn_paged_);
  const unsigned smem = unsigned(paged && p.kv_fp8 ? fp8_smem_ : cfg_.smem_bytes);
  const unsigned threads = unsigned(paged && p.kv_fp8 ? fp8_threads_ : cfg_.threads);
  if (p.varlen && paged && mma_native()) {
    if (p.total_q == 0) return;  // no query rows: nothing to compute nor write
  } else if (p.varlen) {
    // (query tiles of the longest sequence, heads, sequences): a CTA past its sequence's tiles
    // returns at once
    if (p.total_q == 0) return;  // no query rows: nothing to compute nor write
    if (!(paged ? paged_f : attn_varlen_))
      throw Error(Errc::unsupported, cat(cfg_.name, ": no entry for variable-length batches"));
    if (s.q_tiles > 0x7fffffff || p.batch > kGridYZLimit)
      throw Error(Errc::unsupported, cat(p.str(), ": too many query tiles or sequences for one launch"));
    // (the quantized kernels' entry waits for the preparation: a programmatic dependent)
    launch(paged ? paged_f : window ? attn_window_ : attn_varlen_, unsigned(s.q_tiles), unsigned(p.heads_q),
           unsigned(p.batch), threads, smem, stream, s, dependent_);
    return;
  }
  if (mma_native() && (s.split_ranges > 0 || s.pack_rows > 0)) {
    // (query tiles x ranges, heads, batch): heads are kv heads where packed (attn_mma.cuh: cta_coords)
    const std::int64_t x = std::int64_t(s.q_tiles) * std::max(1, s.split_ranges);
    if (x > 0x7fffffff) throw Error(Errc::unsupported, cat(p.str(), ": too many query tiles for one launch"));
    launch(paged ? paged_f : window ? attn_window_ : q3 ? attn_q3_ : attn_, unsigned(x),
           unsigned(s.pack_rows > 0 ? p.heads_kv : p.heads_q),
           unsigned(p.batch), threads, smem, stream, s);
    return;
  }
  if (persistent()) {
    if (persistent_units(p) > 0x7fffffff) throw Error(Errc::unsupported, cat(p.str(), ": too many query tiles for one launch"));
    launch(q3 ? attn_q3_ : attn_, unsigned(persistent_grid(p)), 1, 1, unsigned(cfg_.threads),
           unsigned(cfg_.smem_bytes), stream, s, false, unsigned(s.split_cluster));
    return;
  }
  CUfunction f = s.lse && attn_lse_ ? attn_lse_ : attn_;
  if (q3) f = attn_q3_;
  if (window) f = attn_window_;
  if (paged) f = paged_f;
  if (p.causal) {
    if (s.q_tiles > kGridYZLimit) throw Error(Errc::unsupported, cat(p.str(), ": too many query tiles for a causal launch"));
    const int g = causal_group(p, cfg_);
    launch(f, unsigned(g), unsigned(s.q_tiles), unsigned(p.batch * p.heads_q / g), threads, smem,
           stream, s, dependent_);
    return;
  }
  launch(f, unsigned(s.q_tiles), unsigned(p.heads_q), unsigned(p.batch), threads, smem, stream, s,
         dependent_);
}

void AttnKernel::run_prep(const AttnProblem& p, const AttnArgs& a, void* ws, CUstream stream) const {
  const WorkspacePlan w = plan(p);
  SageAttnParams s;
  fill(p, a, ws, w, &s);
  launch_prep(p, w, s, stream);
}

void AttnKernel::run_attn(const AttnProblem& p, const AttnArgs& a, void* ws, CUstream stream) const {
  const WorkspacePlan w = plan(p);
  SageAttnParams s;
  fill(p, a, ws, w, &s);
  launch_attn(p, s, stream);
}

void AttnKernel::run(const AttnProblem& p, const AttnArgs& a, void* ws, CUstream stream) const {
  if (!a.q || !a.k || !a.v || !a.o) throw Error(Errc::invalid_argument, "null q, k, v or o pointer");
  if (p.return_lse && !a.lse) throw Error(Errc::invalid_argument, "return_lse without an lse pointer");
  if (!ws) throw Error(Errc::invalid_argument, "null workspace");
  const WorkspacePlan w = plan(p);
  SageAttnParams s;
  fill(p, a, ws, w, &s);
  launch_prep(p, w, s, stream);
  launch_attn(p, s, stream);
}

// ---- ReferenceKernel ------------------------------------------------------------------------

ReferenceKernel::ReferenceKernel(std::shared_ptr<Module> module) : module_(std::move(module)) {
  fn_ = module_->function("sage_reference");
}

void ReferenceKernel::run(const AttnProblem& p, const AttnArgs& in, float* o, float* lse, CUstream stream) const {
  p.validate();
  if (p.head_dim > 256) throw Error(Errc::unsupported, "the reference supports head_dim <= 256");
  SageRefParams r{};
  set_problem(p, in, r);
  r.o = o;
  r.lse = lse;
  void* args[] = {&r};
  SAGE_CU(cuLaunchKernel(fn_, unsigned(p.seq_q), unsigned(p.heads_q), unsigned(p.batch), 128, 1, 1, 0, stream, args, nullptr));
}

}  // namespace sage
