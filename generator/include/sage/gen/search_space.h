// The search space (configs/search_space.yaml, format in docs/search_space.md): per pipeline,
// which architectures it runs on, an explicit table of tiles, the other axes, derived values
// (expressions over the parameters, e.g. shared-memory bytes) and constraints that prune what
// cannot work. Enumeration yields Variants; every pruned combination is kept with its reason.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sage/gen/template.h"

namespace sage::gen {

// Facts about one compile target, from the search space's `archs:` table.
struct ArchInfo {
  std::string name;        // "sm_80", "sm_86", "sm_89", "sm_90a"
  int cc = 0;              // 80, 86, 89, 90
  int smem_max = 0;        // max dynamic shared memory per block (opt-in), bytes
  int regs_max = 255;      // registers per thread
  std::vector<std::string> features;  // "mma_int8", "mma_int4", "mma_fp8", "cp_async", "wgmma", "tma"
  std::string description;
  bool has(const std::string& feature) const;
  // The name as it appears inside variant names: "sm_90a" -> "sm90a".
  std::string tag() const;
  // The `arch` map of a template context: name, tag, cc, smem_max, regs_max, features.
  tmpl::Value to_value() const;
};

// One point of the search space.
struct Variant {
  std::string pipeline;       // e.g. "mma", "wgmma", "reference"
  std::string template_name;  // e.g. "attn_mma.cu.j2"
  std::string arch;           // e.g. "sm_90a"
  tmpl::Map params;           // axis -> value (ints, strings, bools)
  tmpl::Map derived;          // derived name -> value (e.g. smem_bytes, threads)
  std::string name;           // readable, encodes every parameter; unique in the space
  std::string params_hash;    // sha256 of pipeline, template, arch and params (stable id)
  tmpl::Value arch_info;      // the `arch` map (ArchInfo::to_value()) of the context

  // Typed access to params, then derived values. Throws Error(not_found) naming the variant
  // and key when neither has it, Error(invalid_argument) when the value has another type.
  std::int64_t get_int(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // The template context: every param and derived value by its own name, `params` and
  // `derived` (the two maps), `arch` (ArchInfo as a map), `pipeline`, `template`, `name`,
  // `params_hash`.
  tmpl::Value context() const;
};

// A combination the enumeration dropped, and why.
struct PrunedVariant {
  Variant variant;      // name and params filled; derived holds what was computed before
  std::string rule;     // which rule dropped it, the same for every variant it drops:
                        // "requires qk=int4: mma_int4", a constraint's name, "regs_estimate",
                        // "filter"
  std::string reason;   // readable and specific: "pv=fp8 needs mma_fp8 (sm_89+), sm_80 lacks
                        // it", "smem 240 KiB > 227 KiB on sm_90a", "excluded by filter"
};

struct Enumeration {
  std::vector<Variant> variants;
  std::vector<PrunedVariant> pruned;
};

struct EnumerateOptions {
  std::vector<std::string> archs;      // empty: every arch of every pipeline
  std::string filter;                  // ECMAScript regex searched in the variant name; empty: all
  std::vector<std::string> pipelines;  // empty: all
};

class SearchSpace {
 public:
  // Parses and validates; errors are Error(parse_error) with where() = "file:line:col" and
  // the offending key in the message ("key 'pipelines.mma.sets[0].axes.pv': unknown value
  // 'fp9' (allowed: fp16, fp16acc, fp8, int8, native)"). from_file throws Error(not_found) for a missing file.
  static SearchSpace from_file(const std::string& path);
  static SearchSpace from_string(const std::string& yaml, const std::string& display_name);
  // configs/search_space.yaml as embedded in the binary.
  static SearchSpace builtin();

  SearchSpace(SearchSpace&&) noexcept;
  SearchSpace& operator=(SearchSpace&&) noexcept;
  ~SearchSpace();

  // The name given to from_string / the path given to from_file.
  const std::string& display_name() const;
  std::vector<std::string> pipelines() const;       // declaration order
  std::vector<std::string> archs() const;           // all declared, declaration order
  const ArchInfo& arch(const std::string& name) const;  // throws Error(invalid_argument)
  // Every combination of the selected pipelines and archs, once: kept ones in `variants`,
  // dropped ones in `pruned`, both in a stable order (pipeline, arch, set, tile, axes).
  // Throws Error(invalid_argument) for an unknown arch or pipeline or a bad filter regex,
  // Error(parse_error) naming the expression's place when a derived value or constraint
  // cannot be evaluated for some variant.
  Enumeration enumerate(const EnumerateOptions& opts = {}) const;
  // Looks up one kept variant of the (unfiltered) space by its readable name.
  std::optional<Variant> find(const std::string& name) const;

  struct Impl;  // the validated model; opaque outside generator/src

 private:
  SearchSpace();
  std::unique_ptr<Impl> impl_;
};

// Renders a variant's CUDA source with its template. With `emit_header`, the text starts
// with a "generated by sage-tune — do not edit" comment naming the variant, template and
// params hash. A missing template is Error(not_found) naming the template and the variant.
std::string render_variant(const tmpl::Environment& env, const Variant& v, bool emit_header = false);

}  // namespace sage::gen
