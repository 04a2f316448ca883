// The validated in-memory model of a search space, shared by the loader
// (search_space_load.cpp), enumeration (search_space.cpp) and naming (variant.cpp).
#pragma once
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sage/gen/search_space.h"
#include "sage/gen/template.h"

namespace sage::gen::detail {

enum class AxisType { integer, enumeration, boolean };

// One entry of `axes:`: the legal vocabulary of a parameter and how names spell it.
struct Axis {
  std::string name;
  AxisType type = AxisType::integer;
  std::vector<tmpl::Value> values;  // vocabulary, declaration order
  std::string label;                // letters only; "d" for head_dim, "qk", "smk"
  std::vector<std::pair<std::string, std::string>> abbrev;  // enum value -> name text
  std::string join;                 // axis whose name part this one extends ("qk-int8-thread")
  std::string description;
  std::string where;                // file:line:col of the declaration

  // How one value reads inside a variant name (without the label for enums).
  std::string value_text(const tmpl::Value& v) const;
  bool allows(const tmpl::Value& v) const;
  std::string allowed_list() const;  // "fp16, fp16acc, fp8"
};

// An expression or template taken from the YAML, with its place for error messages.
struct Expr {
  std::string key;    // "pipelines.mma.derived.smem_bytes"
  std::string text;
  std::string where;  // file:line:col of the scalar
};

struct Constraint {
  std::string name;  // rule name shown in --explain ("smem_limit"); defaults to the `when` text
  Expr when;
  Expr reason;
};

// `requires: {axis: {value: [features]}}`: a variant with axis=value needs every feature.
struct Requirement {
  std::string axis;
  tmpl::Value value;
  std::vector<std::string> features;
};

struct Set {
  std::string name;
  std::vector<std::vector<tmpl::Value>> tiles;  // rows in the pipeline's tile_columns order
  std::vector<std::pair<std::string, std::vector<tmpl::Value>>> axes;  // canonical axis order
};

struct Pipeline {
  std::string name;
  std::string template_name;
  std::vector<std::string> archs;
  std::string description;
  std::string name_stem;                  // "attn_{arch}_mma"; {arch} becomes the arch tag
  std::vector<std::string> tile_columns;  // axis names of the tiles table's columns
  std::vector<Set> sets;                  // at least one (an empty set for a pipeline without axes)
  std::vector<std::string> axes;          // every axis a variant has, canonical (declaration) order
  std::vector<Requirement> requires_;
  std::vector<std::pair<std::string, Expr>> derived;  // evaluation order
  std::vector<Constraint> constraints;
  std::string where;
};

}  // namespace sage::gen::detail

namespace sage::gen {

struct SearchSpace::Impl {
  std::string display_name;
  std::vector<ArchInfo> archs;
  std::vector<detail::Axis> axes;
  std::vector<detail::Pipeline> pipelines;
  // Evaluates derived values, constraints and reasons; needs no templates.
  tmpl::Environment env{tmpl::map_loader({})};

  const detail::Axis* find_axis(const std::string& name) const;
  const ArchInfo* find_arch(const std::string& name) const;

  // SearchSpace::find's index of every kept variant by name, built at its first call (an
  // enumeration of the whole space renders and hashes each variant: ~0.5 s on 2 cores).
  mutable std::once_flag by_name_once;
  mutable std::unordered_map<std::string, Variant> by_name;
};

namespace detail {
// Parses and validates YAML text into `impl` (search_space_load.cpp).
void load(SearchSpace::Impl& impl, const std::string& yaml);
// The readable name of a variant of `p` (variant.cpp).
std::string variant_name(const SearchSpace::Impl& impl, const Pipeline& p, const ArchInfo& arch,
                         const tmpl::Map& params);
// sha256 over pipeline, template, arch and params in canonical (sorted key) order.
std::string params_hash(const std::string& pipeline, const std::string& template_name,
                        const std::string& arch, const tmpl::Map& params);
// The context expressions are evaluated in while a variant is being built.
tmpl::Map base_context(const Variant& v);
// "sm_89+" or "sm_80, sm_86, sm_89": the declared archs that have `feature`.
std::string archs_with(const SearchSpace::Impl& impl, const std::string& feature);
}  // namespace detail

}  // namespace sage::gen
