// The runtime's two latency budgets, on this GPU:
//   BM_FirstCall_WarmDb         the first sage_attention() of a fresh process whose user DB
//                               holds the winner and its cubin (budget: <= 20 ms). Each
//                               iteration is a new process (this binary re-executed): CUDA
//                               context creation is done before the clock starts, as in an
//                               application (PyTorch) that already uses the GPU.
//   BM_SteadyState_*            host time of one call after the first, tiny problem, real
//                               launches on a stream (budget: <= 10 us per call), with the
//                               caller's workspace and with the pooled one, against the bare
//                               launcher (AttnKernel::run) as the floor.
//
//   ./build/bench/bench_runtime
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/gen/search_space.h"
#include "sage/internal/device_buffer.h"
#include "sage/internal/runtime.h"
#include "sage/sage.h"
#include "sage/tuner/compiler.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/store.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace sage;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Device buffers of one problem, inputs Gaussian.
struct Buffers {
  explicit Buffers(const AttnProblem& p)
      : q(std::size_t(p.q_elems()) * 2), k(std::size_t(p.kv_elems()) * 2), v(std::size_t(p.kv_elems()) * 2),
        o(std::size_t(p.q_elems()) * 2) {
    std::vector<std::uint16_t> h(std::size_t(std::max(p.q_elems(), p.kv_elems())));
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> bits(0x3000, 0x3c00);  // FP16 values in [2^-3, 1]
    for (auto& x : h) x = std::uint16_t(bits(rng));
    q.upload(h.data(), q.size());
    k.upload(h.data(), k.size());
    v.upload(h.data(), v.size());
  }
  DeviceBuffer q, k, v, o;
};

sage_attention_desc desc_of(const AttnProblem& p) {
  return sage_attention_desc_init(p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim);
}

AttnProblem first_call_problem() {
  AttnProblem p;
  p.batch = 4;
  p.heads_q = p.heads_kv = 32;
  p.seq_q = p.seq_kv = 4096;
  p.head_dim = 128;
  return p;
}

// ---- first call ------------------------------------------------------------------------------

// The warm database: this GPU's default variant compiled once and stored as the bucket's
// winner (with its cubin) in a user DB of its own. Made once per benchmark process.
struct WarmDb {
  std::string dir, db;
  std::string error;  // why it could not be made
};
const WarmDb& warm_db() {
  static const WarmDb w = [] {
    WarmDb out;
    try {
      std::string tmpl = (fs::temp_directory_path() / "sage-bench-runtime-XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) throw Error(Errc::io_error, "mkdtemp failed");
      out.dir = tmpl;
      out.db = out.dir + "/user.db";
      use_device(0);
      const tuner::DeviceFingerprint fp = tuner::fingerprint_device(0);
      const std::string arch = tuner::arch_for_cc(fp.cc);
      const AttnProblem p = first_call_problem();
      const std::string name = tuner::default_variant(arch, p.head_dim, "balanced", p.seq_kv);
      const auto v = gen::SearchSpace::builtin().find(name);
      if (!v) throw Error(Errc::not_found, "no variant " + name);
      tuner::CompileOptions co;
      co.arch = arch;
      const tuner::CompileResult r = tuner::VariantBuilder(co).compile(*v);
      if (!r.ok) throw Error(Errc::compile_failed, r.log);
      tuner::Store s(out.db);
      // What `sage-tune tune` writes for a winner: its variant (with the launcher config the
      // runtime reads), its kernel and the winner row.
      tuner::VariantRecord vr;
      vr.name = name;
      vr.params_hash = v->params_hash;
      vr.params_json = tuner::variant_record_json(*v);
      vr.generator_hash = tuner::generator_hash();
      s.record_variant(vr);
      const tuner::KernelRecord k = tuner::make_kernel_record(r, name, arch, tuner::nvrtc_version(), tuner::generator_hash());
      s.record_kernel(k);
      tuner::Winner win;
      win.key = {fp, tuner::ProblemsConfig::builtin().key_of(p, "balanced"), tuner::generator_hash(), tuner::nvrtc_version()};
      win.variant = name;
      win.kernel_hash = k.hash;
      win.median_us = 1000;
      s.set_winner(win);
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  }();
  return w;
}

// In a child process: context and buffers first, then the timed first call. Writes
// "<call ms> <call+sync ms> db|other <selection ms> <module load ms> (<source>, kernel from
// <where>)" or "error <message>".
int first_call_child(const char* out) {
  std::string line;
  try {
    use_device(0);  // context creation: not part of the runtime's first call
    const AttnProblem p = first_call_problem();
    Buffers b(p);
    const sage_attention_desc d = desc_of(p);
    const auto t0 = Clock::now();
    const sage_status s = sage_attention(&d, b.q.get(), b.k.get(), b.v.get(), b.o.get(), nullptr, nullptr, 0, nullptr);
    const auto t1 = Clock::now();
    SAGE_CU(cuCtxSynchronize());
    const auto t2 = Clock::now();
    if (s != SAGE_OK) throw Error(Errc::internal, sage_last_error());
    const rt::Selection& sel = rt::selection_for(p, rt::Policy::balanced);
    const bool from_db = sel.source == rt::Source::user_db && sel.kernel_from == "database";
    line = cat(ms_between(t0, t1), " ", ms_between(t0, t2), " ", from_db ? "db" : "other", " ", sel.select_ms, " ",
               sel.load_ms, " (", rt::to_string(sel.source), ", kernel from ", sel.kernel_from, ")");
  } catch (const std::exception& e) {
    line = std::string("error ") + e.what();
  }
  write_file_atomic(out, line + "\n");
  return 0;
}

void BM_FirstCall_WarmDb(benchmark::State& state) {
  std::string why;
  if (!cu::have_device(&why)) return state.SkipWithError(("no GPU: " + why).c_str());
  const WarmDb& w = warm_db();
  if (!w.error.empty()) return state.SkipWithError(("cannot make the warm DB: " + w.error).c_str());
  const std::string result = w.dir + "/first_call.txt", empty_cache = w.dir + "/no-cubin-cache";
  double worst = 0, with_sync = 0, select_sum = 0, load_sum = 0;
  int n = 0;
  // The child's environment, made before fork(): between fork and exec the child only calls
  // execve, since a CUDA driver thread of this process may hold the allocator's lock.
  std::vector<std::string> env{"SAGE_BENCH_FIRST_CALL=" + result, "SAGE_DB=" + w.db,
                               "SAGE_SYSTEM_DB=" + w.dir + "/none.db",
                               // The DB must serve the cubin: no cubin cache to fall back on, no JIT.
                               "SAGE_CACHE_DIR=" + empty_cache, "SAGE_DISABLE_JIT=1"};
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name != "SAGE_BENCH_FIRST_CALL" && name != "SAGE_DB" && name != "SAGE_SYSTEM_DB" && name != "SAGE_CACHE_DIR" &&
        name != "SAGE_DISABLE_JIT" && name != "SAGE_LOG")
      env.push_back(entry);
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char arg0[] = "bench_runtime";
  char* argv[] = {arg0, nullptr};
  for (auto _ : state) {
    fs::remove(result);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execve("/proc/self/exe", argv, envp.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    double call_ms = 0, sync_ms = 0;
    double select_ms = 0, load_ms = 0;
    char source[16] = "";
    const std::string text = fs::exists(result) ? read_file(result) : "error: the child wrote no result";
    if (std::sscanf(text.c_str(), "%lf %lf %15s %lf %lf", &call_ms, &sync_ms, source, &select_ms, &load_ms) != 5)
      return state.SkipWithError(("first call failed: " + text).c_str());
    if (std::string(source) != "db")
      return state.SkipWithError(("the first call did not take the cubin from the DB: " + text).c_str());
    state.SetIterationTime(call_ms / 1e3);
    worst = std::max(worst, call_ms);
    with_sync += sync_ms;
    select_sum += select_ms;
    load_sum += load_ms;
    ++n;
  }
  // Where the time goes: selection (lookup, module load included) vs the rest of the call
  // (workspace from the pool, launches).
  state.counters["worst_ms"] = worst;
  state.counters["with_sync_ms"] = n ? with_sync / n : 0;
  state.counters["select_ms"] = n ? select_sum / n : 0;
  state.counters["module_load_ms"] = n ? load_sum / n : 0;
}
// A fork, exec, CUDA context and DB open per iteration (~0.5 s): a few iterations suffice.
BENCHMARK(BM_FirstCall_WarmDb)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- steady state ----------------------------------------------------------------------------

AttnProblem tiny_problem() {
  AttnProblem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seq_q = p.seq_kv = 128;
  p.head_dim = 128;
  return p;
}

// Keeps the launch queue shallow: tiny kernels still take a few microseconds each on the GPU,
// more than a call takes on the host, so an unsynchronized loop would end up timing the wait
// for queue slots instead of the host path.
constexpr int kSyncEvery = 64;

struct SteadyFixture {
  std::optional<Buffers> b;
  CUstream stream = nullptr;
  std::string error;
  SteadyFixture() {
    std::string why;
    if (!cu::have_device(&why)) {
      error = "no GPU: " + why;
      return;
    }
    use_device(0);
    b.emplace(tiny_problem());
    SAGE_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }
};
SteadyFixture& steady() {
  static SteadyFixture f;
  return f;
}

template <class Call>
void steady_loop(benchmark::State& state, Call&& call) {
  SteadyFixture& f = steady();
  if (!call()) return state.SkipWithError(sage_last_error());  // first call: selection
  SAGE_CU(cuStreamSynchronize(f.stream));
  std::int64_t i = 0;
  for (auto _ : state) {
    if (!call()) return state.SkipWithError(sage_last_error());
    if (++i % kSyncEvery == 0) {
      state.PauseTiming();
      SAGE_CU(cuStreamSynchronize(f.stream));
      state.ResumeTiming();
    }
  }
  SAGE_CU(cuStreamSynchronize(f.stream));
  state.SetItemsProcessed(state.iterations());  // calls per second; the time column is per call
}

void BM_SteadyState_CallerWorkspace(benchmark::State& state) {
  SteadyFixture& f = steady();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const sage_attention_desc d = desc_of(tiny_problem());
  std::size_t bytes = 0;
  if (sage_workspace_size(&d, &bytes) != SAGE_OK) return state.SkipWithError(sage_last_error());
  DeviceBuffer ws(bytes);
  steady_loop(state, [&] {
    return sage_attention(&d, f.b->q.get(), f.b->k.get(), f.b->v.get(), f.b->o.get(), nullptr, ws.get(), bytes,
                          f.stream) == SAGE_OK;
  });
}
BENCHMARK(BM_SteadyState_CallerWorkspace)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_SteadyState_PooledWorkspace(benchmark::State& state) {
  SteadyFixture& f = steady();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const sage_attention_desc d = desc_of(tiny_problem());
  steady_loop(state, [&] {
    return sage_attention(&d, f.b->q.get(), f.b->k.get(), f.b->v.get(), f.b->o.get(), nullptr, nullptr, 0, f.stream) ==
           SAGE_OK;
  });
}
BENCHMARK(BM_SteadyState_PooledWorkspace)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The floor: a kernel through the launcher alone (no validation, lookup or pool). `variant`:
// the search space's name, or empty for the default the runtime selects for the problem.
void launcher_loop(benchmark::State& state, const std::string& variant) {
  SteadyFixture& f = steady();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const AttnProblem p = tiny_problem();
  const tuner::DeviceFingerprint fp = tuner::fingerprint_device(0);
  const std::string arch = tuner::arch_for_cc(fp.cc);
  const std::string name = variant.empty() ? rt::selection_for(p, rt::Policy::balanced).variant : variant;
  const auto v = gen::SearchSpace::builtin().find(name);
  if (!v) return state.SkipWithError(("variant not found: " + name).c_str());
  if (v->arch != arch) return state.SkipWithError((name + " is an " + v->arch + " variant; this GPU is " + arch).c_str());
  tuner::CompileOptions co;
  co.arch = arch;
  auto k = tuner::load_attention(*v, tuner::VariantBuilder(co).compile(*v));
  DeviceBuffer ws(k->workspace_size(p));
  AttnArgs a;
  a.q = f.b->q.get();
  a.k = f.b->k.get();
  a.v = f.b->v.get();
  a.o = f.b->o.get();
  steady_loop(state, [&] {
    k->run(p, a, ws.get(), f.stream);
    return true;
  });
}
void BM_SteadyState_LauncherOnly(benchmark::State& state) { launcher_loop(state, ""); }
BENCHMARK(BM_SteadyState_LauncherOnly)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The native FP8 P.V kernel (sm_90a) through the launcher: one launch, whose parameters carry
// six tensor maps, four over the caller's tensors and two over the workspace (its FP8 V^T
// tiles and their scales), all reused from the launcher's cache while pointers and shape stay.
void BM_SteadyState_LauncherOnly_NativeFp8Pv(benchmark::State& state) {
  launcher_loop(state, "attn_sm90a_wgmma_d128_m128_n128_wg2_s2_qk-native_pv-fp8_tma_sch-ppingpong_occ1");
}
BENCHMARK(BM_SteadyState_LauncherOnly_NativeFp8Pv)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  if (const char* out = std::getenv("SAGE_BENCH_FIRST_CALL")) return first_call_child(out);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
