// sage-tune bench: end-to-end TOPS (preparation included), the preparation's bandwidth and
// the attention kernel alone, over a grid of shapes, on this GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>
#include <tuple>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/internal/green.h"
#include "sage/tuner/accuracy.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/timing.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "store_cli.h"

namespace sage::cli {
namespace {

struct BenchArgs {
  std::vector<std::string> variants;
  std::vector<int> dims{64, 128};
  std::vector<int> seqs{1024, 4096, 16384, 32768};
  std::string causal = "both";
  int batch = 4, heads = 32, samples = 10;
  int seq_kv = 0, heads_kv = 0;  // 0: equal to the sequence length / heads
  int sms = 0;                   // > 0: run on a green context of this many SMs
  std::string layout = "HND", dtype = "fp16", policy = "balanced";
  std::string db;
  std::string order = "short-first";
  double cooldown_s = 1.0;  // GPU idle before each cell after the first
  double warmup_ms = 25;    // each measurement warms up at least this long (clocks out of idle)
  bool json = false, tuned = false;
  // --varlen: one variable-length batch of these sequences (keys = queries each) instead of the
  // grid of lengths, packed [total, heads, D] (sage_attention_varlen)
  std::vector<int> varlen;
  int window = 0;  // > 0: the causal cells' sliding window (keys a query sees)
  int paged = 0;   // > 0: the keys in a paged cache of pages of this many slots (sage_attention_paged)
  std::string paged_order = "shuffled";
  bool kv_fp8 = false;  // --paged: FP8 (e4m3) pages (sage_paged_kv::kv_dtype), scales one a kv head
  // --varlen with --paged: the sequences of up to this many queries on the decode kernel (-1: as
  // the runtime, the paged defaults' decode edge; 0: one kernel for all)
  int decode_part = -1;  // the pages' order in the cache: shuffled or in-order
};

// The (query, key) pairs a causal sequence of n queries and keys shows through a sliding window
// of w keys (each query its min(i + 1, w) most recent).
double window_pairs(int n, int w) {
  const double full = std::min(n, w);  // rows 0..full-1 see i + 1 keys, the rest w
  return full * (full + 1) / 2 + double(n - full) * w;
}

// "2048x8,64,1500": lengths, each optionally repeated (x count).
std::vector<int> varlen_lengths(const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split(s, ',')) {
    const auto x = item.find('x');
    auto number = [&](const std::string& t) {
      if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
        throw Error(Errc::invalid_argument, cat("--varlen: bad item '", item, "' (a length, or length x count: 2048x8)"));
      return std::stoi(t);
    };
    const int len = number(item.substr(0, x));
    const int count = x == std::string::npos ? 1 : number(item.substr(x + 1));
    if (len < 0 || count < 1 || count > 65535)
      throw Error(Errc::invalid_argument, cat("--varlen: '", item, "' needs a length >= 0 and a count of 1 to 65535"));
    out.insert(out.end(), std::size_t(count), len);
  }
  if (out.empty() || out.size() > 65535) throw Error(Errc::invalid_argument, "--varlen needs 1 to 65535 sequences");
  return out;
}

std::string f(double v, const char* fm) {
  char b[64];
  std::snprintf(b, sizeof b, fm, v);
  return b;
}
// Milliseconds to the microsecond, and below 0.1 ms (decoding calls) to a tenth of one.
std::string ms(double v) { return f(v, v < 0.1 ? "%.4f" : "%.3f"); }

int run_bench(const BenchArgs& a) {
  std::string why;
  if (!cu::have_device(&why)) throw Error(Errc::no_device, "bench needs a GPU: " + why);
  use_device(0);
  const tuner::DeviceFingerprint fp = tuner::fingerprint_device(0);
  const std::string arch = tuner::arch_for_cc(fp.cc);
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  eo.pipelines = {"mma", "wgmma"};
  const gen::Enumeration en = space.enumerate(eo);
  // The variants' head dim that serves a call of head dim d: the smallest at or above it (a
  // multiple of 8 below it runs on the caller's rows read as zero-padded, as the runtime runs it).
  auto kernel_dim = [&](int d) {
    int best = 0;
    for (const auto& v : en.variants) {
      const int x = static_cast<int>(v.get_int("head_dim"));
      if (x >= d && (best == 0 || x < best)) best = x;
    }
    if (best == 0 || (best != d && d % 8 != 0))
      throw Error(Errc::unsupported, cat("head_dim ", d, ": the ", arch, " variants serve their own head dims and the "
                                         "multiples of 8 below the largest (the runtime pads any other)"));
    return best;
  };
  auto find = [&](const std::string& name) -> const gen::Variant& {
    for (const auto& v : en.variants)
      if (v.name == name) return v;
    throw Error(Errc::not_found, "no variant '" + name + "' for " + arch + " (see: sage-tune generate --list)");
  };
  tuner::CompileOptions co;
  co.arch = arch;
  tuner::VariantBuilder builder(co);
  std::map<std::string, std::shared_ptr<AttnKernel>> loaded;
  auto kernel_for = [&](const std::string& name) {
    auto it = loaded.find(name);
    if (it != loaded.end()) return it->second;
    const gen::Variant& v = find(name);
    tuner::CompileResult r = builder.compile(v);
    auto k = tuner::load_attention(v, r);
    loaded[name] = k;
    return k;
  };
  const tuner::ProblemsConfig pcfg = tuner::ProblemsConfig::builtin();
  std::unique_ptr<tuner::Store> store;
  if (a.tuned) store = std::make_unique<tuner::Store>(store::open_for_read(a.db.empty() ? tuner::default_user_db_path() : a.db));
  auto refmod = tuner::reference_module(arch);
  // --sms: a green context's partition of the SMs, as a serving process that splits the GPU
  // runs the calls (the kernels size their grids to it, and the defaults read their wave edges
  // for it); else a stream of the whole device.
  std::unique_ptr<GreenPartition> green;
  if (a.sms > 0) {
    green = std::make_unique<GreenPartition>(a.sms);
    if (!a.json) std::fprintf(stderr, "on a green context of %d SMs (of %d)\n", green->sms(), fp.sm_count);
  }
  const int sms = green ? green->sms() : fp.sm_count;  // the SMs the calls run on
  CUstream stream = nullptr;
  if (green) stream = green->stream();
  else SAGE_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  tuner::Timer timer(stream);
  tuner::TimingOptions to;
  to.min_samples = a.samples;
  to.max_samples = a.samples;
  to.max_seconds = 0;
  to.warmup_ms = a.warmup_ms;

  std::vector<bool> causals;
  if (a.causal == "both" || a.causal == "no") causals.push_back(false);
  if (a.causal == "both" || a.causal == "yes") causals.push_back(true);
  if (causals.empty()) throw Error(Errc::invalid_argument, "--causal must be yes, no or both");
  if (a.window < 0) throw Error(Errc::invalid_argument, cat("--window must be >= 0, got ", a.window));
  if (a.window > 0 && a.causal == "no")
    throw Error(Errc::invalid_argument, "--window is a sliding window over the most recent keys: it needs --causal yes "
                                        "(or both: the causal cells take it)");
  if (a.paged < 0 || (a.paged & (a.paged - 1)) != 0)
    throw Error(Errc::invalid_argument, cat("--paged must be a page size, a power of two, got ", a.paged));
  if (a.paged_order != "shuffled" && a.paged_order != "in-order")
    throw Error(Errc::invalid_argument, cat("--paged-order must be shuffled or in-order, got '", a.paged_order, "'"));
  // --varlen with --paged: the sequences' queries over a paged cache of --seq-kv keys each
  // (sage_attention_varlen_paged: a serving step's decodes and prefill chunks).
  if (a.kv_fp8 && a.paged <= 0) throw Error(Errc::invalid_argument, "--kv-fp8 needs --paged (FP8 pages of a paged cache)");
  if (a.paged > 0 && !a.varlen.empty() && a.seq_kv <= 0)
    throw Error(Errc::invalid_argument, "--varlen with --paged needs --seq-kv: every sequence's keys");
  // The cells, in the order they are measured. short-first: by sequence length, then head
  // dim, then mask, so that no short cell runs right after a long one (a GPU that has just
  // run at its power cap runs the next short kernels slower for a while; measured on the
  // H100, docs/kernels.md); as-given: head dims, masks, then lengths, as the options list them.
  // Every shape is checked before any is measured.
  struct Cell {
    int d;
    bool causal;
    int n;
    AttnProblem p;
  };
  std::vector<Cell> cells;
  // --varlen: the sequences' offsets on the device, one cell a head dim and mask (n: the tokens).
  std::int64_t varlen_total = 0;
  double varlen_pairs = 0;  // the sequences' (query, key) pairs a head, without a mask
  double varlen_window_pairs = 0;  // ... visible through --window (causal)
  double varlen_causal_pairs = 0;  // ... under a causal mask (bottom-right: halved without --paged)
  DeviceBuffer cu_seqlens;
  if (!a.varlen.empty()) {
    std::vector<std::int32_t> cu{0};
    for (int l : a.varlen) {
      varlen_total += l;
      if (varlen_total > 0x7fffffff) throw Error(Errc::invalid_argument, "--varlen: more than 2^31 tokens");
      cu.push_back(std::int32_t(varlen_total));
      if (a.paged > 0) {  // l queries over seq_kv keys; causal, query i sees seq_kv - l + i + 1
        varlen_pairs += double(l) * a.seq_kv;
        varlen_causal_pairs += double(l) * a.seq_kv - double(l) * (l - 1) / 2;
      } else {
        varlen_pairs += double(l) * l;
        varlen_causal_pairs += double(l) * l / 2;
      }
      if (a.window > 0) varlen_window_pairs += window_pairs(l, a.window);
    }
    cu_seqlens = DeviceBuffer(cu.size() * sizeof(std::int32_t));
    cu_seqlens.upload(cu.data(), cu.size() * sizeof(std::int32_t));
    for (int d : a.dims)
      for (bool causal : causals) {
        AttnProblem p;
        p.batch = int(a.varlen.size());
        p.heads_q = p.heads_kv = a.heads;
        if (a.heads_kv > 0) p.heads_kv = a.heads_kv;
        p.seq_q = p.seq_kv = std::max(1, *std::max_element(a.varlen.begin(), a.varlen.end()));
        p.head_dim = d;
        kernel_dim(d);
        p.causal = causal;
        p.layout = Layout::NHD;
        p.dtype = parse_dtype(a.dtype);
        p.sms = green ? green->sms() : 0;
        p.varlen = true;
        p.window = causal ? a.window : 0;
        p.total_q = p.total_kv = int(varlen_total);
        if (a.paged > 0) {
          p.paged = true;
          p.page_size = a.paged;
          p.kv_fp8 = a.kv_fp8;
          p.seq_kv = a.seq_kv;
          p.total_kv = 0;
          if (p.seq_kv % p.page_size != 0)
            throw Error(Errc::invalid_argument, cat("--paged ", p.page_size, ": the keys (", p.seq_kv,
                                                    ") must fill whole pages"));
        }
        p.validate();
        cells.push_back({d, causal, int(varlen_total), p});
      }
  }
  for (int d : a.dims)
    for (bool causal : causals)
      for (int n : a.varlen.empty() ? a.seqs : std::vector<int>{}) {
        AttnProblem p;
        p.batch = a.batch;
        p.heads_q = p.heads_kv = a.heads;
        if (a.heads_kv > 0) p.heads_kv = a.heads_kv;
        p.seq_q = p.seq_kv = n;
        if (a.seq_kv > 0) p.seq_kv = a.seq_kv;
        p.head_dim = d;
        kernel_dim(d);  // checked before any cell is measured
        p.causal = causal;
        p.layout = parse_layout(a.layout);
        p.dtype = parse_dtype(a.dtype);
        p.sms = green ? green->sms() : 0;
        p.window = causal ? a.window : 0;
        p.paged = a.paged > 0;
        p.page_size = a.paged;
        p.kv_fp8 = a.kv_fp8;
        p.validate();
        if (p.paged && p.seq_kv % p.page_size != 0)
          throw Error(Errc::invalid_argument, cat("--paged ", p.page_size, ": the keys (", p.seq_kv,
                                                  ") must fill whole pages"));
        if (p.causal && p.seq_q > p.seq_kv)
          throw Error(Errc::invalid_argument, cat("causal needs seq <= --seq-kv (bottom-right aligned mask), got ",
                                                  p.seq_q, " > ", p.seq_kv));
        cells.push_back({d, causal, n, p});
      }
  std::vector<std::size_t> measure_order(cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) measure_order[i] = i;
  if (a.order == "short-first")
    std::stable_sort(measure_order.begin(), measure_order.end(), [&](std::size_t x, std::size_t y) {
      return std::make_tuple(cells[x].n, cells[x].d, cells[x].causal) < std::make_tuple(cells[y].n, cells[y].d, cells[y].causal);
    });
  // Rows and JSON entries are printed in the as-given order whatever the measurement order.
  std::vector<std::vector<std::vector<std::string>>> cell_rows(cells.size());
  std::vector<nlohmann::json> cell_out(cells.size(), nlohmann::json::array());
  bool first = true;
  for (std::size_t ci : measure_order) {
    const int d = cells[ci].d, n = cells[ci].n;
    const bool causal = cells[ci].causal;
    auto& rows = cell_rows[ci];
    auto& out = cell_out[ci];
    const AttnProblem& p = cells[ci].p;
    const int kd = kernel_dim(d);
    AttnProblem kp = p;  // the problem the variant is selected for
    kp.head_dim = kd;
    std::vector<std::string> names;
    for (const auto& v : a.variants)
      if (find(v).get_int("head_dim") == kd) names.push_back(v);
    // As the runtime: rows 16 but not 32 bytes long a multiple of (BucketKey::rows16) take a
    // default entry of their own ahead of a winner tuned on aligned rows (jit::choose).
    const bool rows16 = d < kd && d % 16 == 8;
    const int bh = p.batch * p.heads_q;
    // Only the varlen defaults serve a variable-length batch or a sliding window (the runtime's
    // selection; a window's read as non-causal sequences of the keys a query sees), and only the
    // paged ones a paged call.
    const bool varlen_defaults = p.varlen || p.window > 0 || p.paged;
    std::optional<std::string> own =
        rows16 && names.empty() && !varlen_defaults
            ? tuner::rows16_default(arch, kd, a.policy, p.seq_kv, p.causal ? 1 : 0, p.seq_q, bh, sms)
            : std::nullopt;
    // As the runtime: a batch x query heads whose default differs from the one at its bucket's
    // boundary (where a winner was timed) takes that default ahead of the winner.
    // A paged call without a window or variable-length queries has a paged bucket (its winners
    // read pages), a variable-length or window call its own (ProblemsConfig::key_of), as the
    // runtime's; a paged call with either takes the paged defaults, never a winner.
    const tuner::ProblemKey key = pcfg.key_of(kp, a.policy);
    const bool tunable = !(p.paged && (p.varlen || p.window > 0));
    if (!own && names.empty() && tunable) own = tuner::key_pairs_default(arch, key, rows16, bh, sms);
    if (names.empty() && store && !own && tunable) {
      tuner::WinnerKey wk{fp, key, tuner::generator_hash(), tuner::nvrtc_version()};
      if (auto w = store->winner(wk)) {
        // (a winner whose kernel does not serve such calls, as the runtime, is not served)
        const std::optional<KernelConfig> wc = tuner::variant_config(arch, w->variant);
        if (wc && tuner::serves(*wc, key)) names.push_back(w->variant);
      }
    }
    if (names.empty() && a.variants.empty())
      names.push_back(own ? *own
                          : tuner::default_variant(arch, kd, a.policy, p.window > 0 ? std::min(p.seq_kv, p.window) : p.seq_kv,
                                                   p.causal && (p.window == 0 || p.paged) ? 1 : 0, p.seq_q, false, bh, sms,
                                                   p.varlen && !p.paged, p.window > 0, p.paged, p.kv_fp8));
    for (const std::string& name : names) {
      auto k = kernel_for(name);
      if (!first && a.cooldown_s > 0) {
        SAGE_CU(cuStreamSynchronize(stream));
        std::this_thread::sleep_for(std::chrono::duration<double>(a.cooldown_s));
      }
      first = false;
      if (p.varlen && !p.paged && !has_varlen_entry(k->config()))
        throw Error(Errc::invalid_argument, cat(name, " has no entry for variable-length batches (", k->config().cannot_implement(p), ")"));
      if (p.paged && !has_paged_entry(k->config()))
        throw Error(Errc::invalid_argument, cat(name, " reads no paged KV cache (", k->config().cannot_implement(p), ")"));
      if (p.kv_fp8 && !has_paged_fp8_entry(k->config()))
        throw Error(Errc::invalid_argument, cat(name, " reads no FP8 pages (", k->config().cannot_implement(p), ")"));
      if (p.window > 0 && !(p.paged ? has_paged_window_entry(k->config()) : has_window_entry(k->config())))
        throw Error(Errc::invalid_argument, cat(name, " takes no sliding window (", k->config().cannot_implement(p), ")"));
      // A variable-length batch's packed tensors are a dense [1, total, heads, D] call's.
      AttnProblem buffers = p;
      if (p.varlen) {
        buffers.varlen = false;
        buffers.batch = 1;
        buffers.seq_q = buffers.seq_kv = std::max(1, p.total_q);
        if (p.paged) buffers.seq_kv = p.batch * p.seq_kv;  // the pages, as a dense call's rows
        buffers.paged = false;
      }
      std::vector<tuner::AttnBuffers> in;
      for (int s = 0; s < 2; ++s) {
        in.emplace_back(buffers);
        in.back().fill(*refmod, tuner::InputKind::gaussian, 77 + s, stream);
      }
      // --paged: each input's K and V buffers read as contiguous [pages, page, Hkv, D] pages, every
      // sequence full (seq_kv keys), its pages in a shuffled order (a serving engine's cache after
      // some churn: no two consecutive pages of a sequence adjacent in memory, as a rule).
      DeviceBuffer table, lens;
      // --kv-fp8: each input's K and V as FP8 pages (e4m3 of N(0, 1) values over scales of one a kv
      // head, as vLLM's amax / 448), in buffers of their own, and the scales.
      std::vector<DeviceBuffer> k8, v8;
      DeviceBuffer ksc, vsc;
      if (p.kv_fp8) {
        std::vector<float> sk(std::size_t(p.heads_kv)), sv(std::size_t(p.heads_kv));
        for (int h = 0; h < p.heads_kv; ++h) {
          sk[std::size_t(h)] = 4.5f / 448.f;
          sv[std::size_t(h)] = 4.0f / 448.f;
        }
        ksc = DeviceBuffer(sk.size() * 4);
        vsc = DeviceBuffer(sv.size() * 4);
        ksc.upload(sk.data(), sk.size() * 4);
        vsc.upload(sv.data(), sv.size() * 4);
        // A block of codes repeated over the caches (timing does not depend on the values).
        std::vector<std::uint8_t> block(std::size_t(1) << 20);
        std::mt19937 rng(11);
        std::normal_distribution<float> nd;
        for (auto& x : block) x = tuner::float_to_e4m3(nd(rng) / sk[0]);
        const std::size_t bytes = std::size_t(buffers.kv_elems());
        std::vector<std::uint8_t> host(bytes);
        for (std::size_t i = 0; i < bytes; i += block.size())
          std::memcpy(host.data() + i, block.data(), std::min(block.size(), bytes - i));
        for (int s = 0; s < 2; ++s) {
          k8.emplace_back(bytes);
          v8.emplace_back(bytes);
          k8.back().upload(host.data(), bytes);
          v8.back().upload(host.data(), bytes);
        }
      }
      if (p.paged) {
        const int per_seq = p.seq_kv / p.page_size;
        std::vector<std::int32_t> t(std::size_t(p.batch) * per_seq), l(std::size_t(p.batch), p.seq_kv);
        for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::int32_t(i);
        if (a.paged_order == "shuffled") std::shuffle(t.begin(), t.end(), std::mt19937(7));
        table = DeviceBuffer(t.size() * sizeof(std::int32_t));
        table.upload(t.data(), t.size() * sizeof(std::int32_t));
        lens = DeviceBuffer(l.size() * sizeof(std::int32_t));
        lens.upload(l.data(), l.size() * sizeof(std::int32_t));
      }
      auto args = [&](int i) {
        AttnArgs x = in[i % 2].args();
        if (p.varlen) x.cu_seqlens_q = cu_seqlens.as<std::int32_t>();
        if (p.varlen && !p.paged) x.cu_seqlens_kv = x.cu_seqlens_q;
        if (p.paged) {
          const int per_seq = p.seq_kv / p.page_size;
          x = tuner::with_pages(x, p, p.kv_fp8 ? k8[std::size_t(i % 2)].get() : x.k,
                                p.kv_fp8 ? v8[std::size_t(i % 2)].get() : x.v, table.as<std::int32_t>(),
                                lens.as<std::int32_t>(), per_seq, p.batch * per_seq, ksc.as<float>(), vsc.as<float>());
        }
        return x;
      };
      // Variable-length queries over a paged cache on a kernel other than the decode schedule's, as
      // the runtime runs them (rt::run, DecodePart): the bands of sequences of few queries first on
      // the decode schedule's paged default (launch.h: decode_bands), then the rest.
      std::shared_ptr<AttnKernel> dk;
      std::vector<QueryBand> bands;
      if (p.varlen && p.paged && !k->decode() && a.variants.empty() && p.seq_q > 1) {
        int edge = 0;
        for (int t : {4, 2, 1}) {
          if (t >= p.seq_q && a.decode_part < 0) continue;
          auto c = kernel_for(tuner::default_variant(arch, kd, a.policy,
                                                     p.window > 0 ? std::min(p.seq_kv, p.window) : p.seq_kv,
                                                     p.causal ? 1 : 0, t, false, bh, sms, false, p.window > 0, true,
                                                     p.kv_fp8));
          if (c->decode()) {
            dk = c;
            edge = t;
            break;
          }
        }
        if (dk) bands = decode_bands(k->config(), p.seq_q, edge, a.decode_part);
        if (bands.empty()) dk.reset();
      }
      auto band_problem = [&](const QueryBand& b) {
        AttnProblem x = p;
        x.seq_q = b.hi;
        return x;
      };
      std::size_t ws_bytes = k->workspace_size(p);
      for (const QueryBand& b : bands) ws_bytes = std::max(ws_bytes, dk->workspace_size(band_problem(b)));
      DeviceBuffer ws(ws_bytes);
      auto run_call = [&](int i) {
        if (!dk) {
          k->run(p, args(i), ws.get(), stream);
          return;
        }
        for (const QueryBand& b : bands) {
          AttnArgs x = args(i);
          x.vq_min = b.lo;
          x.vq_max = b.hi;
          dk->run(band_problem(b), x, ws.get(), stream);
        }
        AttnArgs y = args(i);
        y.vq_min = bands.back().hi + 1;
        k->run(p, y, ws.get(), stream);
      };
      auto e2e = timer.time(run_call, to);
      // Native (unquantized) variants have no preparation: its columns read "-" (and 0 in JSON),
      // and their call is the attention kernel alone, so its columns are the e2e measurement (a
      // second measurement of the same launch, taken after the first under the H100's power
      // cap, read up to 15% apart from it, mostly slower).
      tuner::TimingResult prep{}, attn = e2e;
      if (k->has_prep()) {
        prep = timer.time([&](int i) { k->run_prep(p, args(i), ws.get(), stream); }, to);
        attn = timer.time([&](int i) { k->run_attn(p, args(i), ws.get(), stream); }, to);
      }
      // A variable-length batch: 4 x H x D x its sequences' pairs, halved for causal as the grid's
      // cells are (the pairs below the diagonal included).
      // With a window, the pairs it shows.
      const double flops =
          p.varlen ? 4.0 * p.heads_q * p.head_dim *
                         (p.window > 0 ? varlen_window_pairs : causal ? varlen_causal_pairs : varlen_pairs)
                   : p.flops();
      const double tops = flops / (e2e.median_ms * 1e-3) / 1e12;
      const double prep_tbs = k->has_prep() ? k->prep_bytes(p) / (prep.median_ms * 1e-3) / 1e12 : 0.0;
      const double attn_tops = flops / (attn.median_ms * 1e-3) / 1e12;
      std::string shown = name;
      if (dk) {
        std::string b;
        for (const QueryBand& x : bands) b += cat(b.empty() ? "" : ", ", x.lo, "-", x.hi);
        shown = cat(dk->config().name, " (", b, " queries) + ", name);
      }
      rows.push_back({cat(d), causal ? "yes" : "no", p.varlen ? cat(p.batch, " seqs, ", n) : cat(n), shown, ms(e2e.median_ms), f(tops, "%.0f"),
                      k->has_prep() ? ms(prep.median_ms) : "-", k->has_prep() ? f(prep_tbs, "%.2f") : "-",
                      ms(attn.median_ms), f(attn_tops, "%.0f"),
                      f(e2e.spread() * 100, "%.1f%%")});
      out.push_back({{"head_dim", d}, {"causal", causal}, {"seq", n}, {"batch", a.batch}, {"heads", a.heads},
                     {"variant", shown}, {"e2e_ms", e2e.median_ms}, {"tops", tops}, {"prep_ms", prep.median_ms},
                     {"prep_tbps", prep_tbs}, {"attn_ms", attn.median_ms}, {"attn_tops", attn_tops},
                     {"spread", e2e.spread()}, {"seq_kv", p.seq_kv}, {"heads_kv", p.heads_kv},
                     {"layout", to_string(p.layout)}, {"dtype", to_string(p.dtype)}, {"sms", sms},
                     {"launch", launch_text(*k, p)}});
      if (p.varlen) out.back()["varlen"] = a.varlen;
      if (p.window > 0) out.back()["window"] = p.window;
      if (p.paged) out.back()["page_size"] = p.page_size;
      if (p.kv_fp8) out.back()["kv_fp8"] = true;
      if (!a.json) {
        std::fprintf(stderr, "\r\033[K  d%d %s N=%d %s: %.0f TOPS", d, causal ? "causal" : "", n, name.c_str(), tops);
        std::fflush(stderr);
      }
    }
  }
  if (!green) cu::api().cuStreamDestroy(stream);
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (std::size_t ci = 0; ci < cells.size(); ++ci) {
    for (auto& r : cell_rows[ci]) rows.push_back(std::move(r));
    for (auto& j : cell_out[ci]) out.push_back(std::move(j));
  }
  if (a.json) {
    std::cout << nlohmann::json{{"device", fp.key()}, {"results", out}}.dump(2) << "\n";
  } else {
    std::fprintf(stderr, "\r\033[K");
    if (!a.varlen.empty())
      std::cout << "device: " << fp.key() << "  (a variable-length batch of " << a.varlen.size() << " sequences, "
                << varlen_total << " tokens, H=" << a.heads << ", NHD; TOPS = 4*H*D*sum(N^2) / time, halved for causal)\n\n";
    else
      std::cout << "device: " << fp.key() << "  (B=" << a.batch << ", H=" << a.heads
                << ", TOPS = 4*B*H*N^2*D / time, halved for causal; preparation included in e2e)\n\n";
    if (a.paged > 0)
      std::cout << "K and V in a paged cache of " << a.paged << "-slot pages, " << a.paged_order
                << (a.kv_fp8 ? ", FP8 e4m3 with a scale a kv head" : "") << " (sage_attention_paged)\n\n";
    if (a.window > 0)
      std::cout << "causal cells with a sliding window of " << a.window
                << " keys: TOPS count the (query, key) pairs it shows\n\n";
    store::print_table(std::cout, {"D", "causal", "N", "variant", "e2e ms", "TOPS", "prep ms", "prep TB/s", "attn ms",
                                   "attn TOPS", "spread"},
                       rows);
  }
  return kOk;
}

std::vector<int> ints(const std::string& s, const char* what) {
  std::vector<int> v;
  for (const auto& x : split(s, ',')) {
    try {
      v.push_back(std::stoi(x));
    } catch (...) {
      throw Error(Errc::invalid_argument, cat("bad ", what, " '", s, "'"));
    }
  }
  return v;
}

}  // namespace

static Registrar reg_bench(
    "bench", "time end-to-end attention (preparation included), the preparation and the kernel on this GPU",
    [](CLI::App& sub) -> Action {
      auto a = std::make_shared<BenchArgs>();
      auto dims = std::make_shared<std::string>("64,128");
      auto seqs = std::make_shared<std::string>("1024,4096,16384,32768");
      sub.add_option("--variant", a->variants, "variant(s) to time (default: the tuned winner with --tuned, else the architecture default)");
      sub.add_option("--head-dim,-d", *dims,
                     "head dimensions, comma-separated (below the variants' own, a multiple of 8 runs on the next "
                     "one's variant, the rows read as zero-padded)")
          ->capture_default_str();
      sub.add_option("--seq,-n", *seqs, "sequence lengths (seq_q = seq_kv), comma-separated")->capture_default_str();
      sub.add_option("--causal", a->causal, "yes, no or both")->capture_default_str();
      sub.add_option("--window", a->window,
                     "sliding window of the causal cells: each query sees its W most recent keys (0: none; TOPS count "
                     "the pairs it shows)");
      sub.add_option("--paged", a->paged,
                     "K and V in a paged cache of pages of P slots (a power of two; sage_attention_paged), its pages "
                     "in shuffled order (--paged-order); the keys must fill whole pages. With --varlen: those "
                     "sequences' queries, each over --seq-kv keys (sage_attention_varlen_paged)");
      sub.add_option("--decode-part", a->decode_part,
                     "--varlen with --paged: the sequences of up to N queries on the decode kernel, the rest on the "
                     "longest's (default: as the runtime, the paged defaults' decode edge; 0: one kernel for all; "
                     "the runtime's SAGE_DECODE_PART)");
      sub.add_flag("--kv-fp8", a->kv_fp8,
                   "--paged: FP8 (e4m3) pages, one byte an element with scales of one a kv head "
                   "(sage_paged_kv::kv_dtype SAGE_KV_DTYPE_FP8_E4M3; the mma.sync kernels' FP8 entries)");
      sub.add_option("--paged-order", a->paged_order,
                     "--paged: the pages' order in the cache, shuffled (each sequence's pages scattered) or in-order")
          ->capture_default_str();
      sub.add_option("--batch,-b", a->batch, "batch size")->capture_default_str();
      sub.add_option("--heads", a->heads, "heads (q, and kv unless --heads-kv)")->capture_default_str();
      sub.add_option("--heads-kv", a->heads_kv, "kv heads (grouped-query attention; default: --heads)");
      sub.add_option("--seq-kv", a->seq_kv, "kv sequence length (default: each --seq)");
      sub.add_option("--layout", a->layout, "HND or NHD")->capture_default_str();
      sub.add_option("--dtype", a->dtype, "fp16 or bf16")->capture_default_str();
      sub.add_option("--policy", a->policy, "accuracy policy of the winner (--tuned) or default to time")->capture_default_str();
      sub.add_option("--samples", a->samples, "timed samples per measurement (median reported)")->capture_default_str();
      sub.add_option("--order", a->order,
                     "measurement order: short-first (by sequence length, then head dim and mask) or as-given "
                     "(head dims, masks, then lengths as listed); the table keeps the as-given order")
          ->capture_default_str();
      sub.add_option("--cooldown", a->cooldown_s, "seconds the GPU idles before each shape after the first")
          ->capture_default_str();
      sub.add_option("--warmup-ms", a->warmup_ms,
                     "each measurement first runs its call for at least this many milliseconds (a GPU out of "
                     "idle raises its clocks over milliseconds)")
          ->capture_default_str();
      sub.add_flag("--tuned", a->tuned, "time the database's winners");
      sub.add_option("--sms", a->sms,
                     "run on a green context of this many SMs (rounded up to the driver's step, 8 on Hopper), as a "
                     "process sharing the GPU would; the defaults read their wave edges for it")
          ->check(CLI::PositiveNumber);
      sub.add_option("--db", a->db, "tune database for --tuned");
      sub.add_flag("--json", a->json, "print JSON");
      auto varlen = std::make_shared<std::string>();
      sub.add_option("--varlen", *varlen,
                     "time one variable-length batch (sage_attention_varlen) of these sequence lengths instead of "
                     "the grid, keys = queries each, comma-separated, 'LxC' for C sequences of L: 2048x8,64,1500 "
                     "(--batch and --seq do not apply; the layout is NHD); with --paged, the queries of each "
                     "sequence over --seq-kv keys: 1x63,512 is 63 decoding sequences and a chunk of 512");
      return [=]() {
        BenchArgs x = *a;
        x.dims = ints(*dims, "--head-dim");
        x.seqs = ints(*seqs, "--seq");
        if (!varlen->empty()) x.varlen = varlen_lengths(*varlen);
        if (x.batch < 1 || x.heads < 1 || x.samples < 1) throw Error(Errc::invalid_argument, "--batch, --heads and --samples must be >= 1");
        if (x.heads_kv < 0 || x.seq_kv < 0) throw Error(Errc::invalid_argument, "--heads-kv and --seq-kv must be >= 1");
        if (x.order != "short-first" && x.order != "as-given")
          throw Error(Errc::invalid_argument, "--order must be short-first or as-given, got '" + x.order + "'");
        if (!(x.cooldown_s >= 0 && x.cooldown_s <= 600))
          throw Error(Errc::invalid_argument, "--cooldown must be 0 to 600 seconds");
        if (!(x.warmup_ms >= 0 && x.warmup_ms <= 10000))
          throw Error(Errc::invalid_argument, "--warmup-ms must be 0 to 10000");
        parse_layout(x.layout);
        parse_dtype(x.dtype);
        tuner::ProblemsConfig::builtin().policy(x.policy);  // Error(invalid_argument) naming the policies
        return run_bench(x);
      };
    },
    40);

}  // namespace sage::cli
