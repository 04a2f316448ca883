#include "sage/tuner/variants.h"

#include <map>
#include <mutex>

#include "sage/common/embedded.h"
#include "sage/common/error.h"
#include "sage/common/sha256.h"
#include "sage/common/strings.h"

namespace sage::tuner {

KernelConfig kernel_config(const gen::Variant& v) {
  KernelConfig c;
  c.pipeline = v.pipeline;
  c.name = v.name;
  if (v.pipeline != "mma" && v.pipeline != "wgmma") return c;
  c.head_dim = int(v.get_int("head_dim"));
  c.block_m = int(v.get_int("block_m"));
  c.block_n = int(v.get_int("block_n"));
  // wgmma: warpgroups of 4 warps, each warp 16 query rows (what the scale groups follow).
  c.warps = v.pipeline == "wgmma" ? 4 * int(v.get_int("warpgroups")) : int(v.get_int("warps"));
  c.stages = int(v.get_int("stages"));
  c.qk = v.get_string("qk");
  c.pv = v.get_string("pv");
  c.granularity = v.get_string("granularity");
  c.smooth_k = v.get_bool("smooth_k");
  c.smooth_q = v.params.count("smooth_q") ? v.get_bool("smooth_q") : false;
  c.smooth_v = v.get_bool("smooth_v");
  c.schedule = v.get_string("schedule");
  c.min_ctas = int(v.get_int("min_ctas"));
  c.tma = v.params.count("tma") ? v.get_bool("tma") : false;
  c.fuse_q = v.params.count("fuse_q") ? v.get_bool("fuse_q") : false;
  c.threads = int(v.get_int("threads"));
  c.smem_bytes = int(v.get_int("smem_bytes"));
  return c;
}

std::string generator_hash() {
  static const std::string h = Sha256()
                                   .field("sage-tune generator v1")
                                   .field(embedded_templates::bundle_hash())
                                   .field(embedded_configs::bundle_hash())
                                   .hex();
  return h;
}

VariantBuilder::VariantBuilder(CompileOptions opts)
    : opts_(std::move(opts)), env_(std::make_shared<tmpl::Environment>(tmpl::embedded_loader())) {}

std::string VariantBuilder::render(const gen::Variant& v) const { return gen::render_variant(*env_, v); }

CompileResult VariantBuilder::compile(const gen::Variant& v) const {
  if (v.arch != opts_.arch)
    throw Error(Errc::invalid_argument, cat("variant ", v.name, " is for ", v.arch, ", builder for ", opts_.arch));
  return tuner::compile(v.name, render(v), opts_);
}

std::vector<CompileResult> VariantBuilder::compile_all(const std::vector<gen::Variant>& vs, unsigned threads,
                                                       const std::function<void(const Progress&)>& cb) const {
  std::vector<CompileJob> jobs;
  jobs.reserve(vs.size());
  for (const auto& v : vs) jobs.push_back({v.name, render(v)});
  return tuner::compile_all(jobs, opts_, threads, cb);
}

std::shared_ptr<Module> reference_module(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::pair<std::string, CUcontext>, std::shared_ptr<Module>> cache;  // per context
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(arch, use_device(-1));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  gen::SearchSpace space = gen::SearchSpace::builtin();
  gen::EnumerateOptions eo;
  eo.archs = {arch};
  eo.pipelines = {"reference"};
  gen::Enumeration e = space.enumerate(eo);
  if (e.variants.empty()) throw Error(Errc::not_found, "the search space has no reference variant for " + arch);
  CompileOptions co;
  co.arch = arch;
  VariantBuilder b(co);
  CompileResult r = b.compile(e.variants.front());
  if (!r.ok)
    throw Error(Errc::compile_failed, "the FP32 reference failed to compile:\n" + join(error_lines(r.log), "\n"),
                e.variants.front().name);
  auto m = Module::load(r.cubin);
  cache[key] = m;
  return m;
}

std::shared_ptr<AttnKernel> load_attention(const gen::Variant& v, const CompileResult& compiled) {
  if (!compiled.ok) throw Error(Errc::compile_failed, "not compiled: " + join(error_lines(compiled.log), "\n"), v.name);
  return std::make_shared<AttnKernel>(kernel_config(v), Module::load(compiled.cubin));
}

}  // namespace sage::tuner
