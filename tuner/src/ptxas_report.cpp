// Parsing of ptxas' verbose report and of NVRTC error lines. The report is free text, so
// the parser reads it line by line, recognizes the few line shapes ptxas prints (captured
// from NVRTC 13.0 for sm_80..sm_90a; see tests/tuner/test_compiler_ptxas.cpp), and ignores
// any other line and any unknown item within a recognized line.
#include <cstdlib>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "sage/common/strings.h"
#include "sage/tuner/compiler.h"

namespace sage::tuner {
namespace {

// NVRTC joins the strings of ptxas' messages with NUL bytes (a remark, then the errors): a NUL
// ends a line too.
std::vector<std::string> lines_of(std::string text) {
  for (char& c : text)
    if (c == '\0') c = '\n';
  std::vector<std::string> out = split(text, '\n');
  for (auto& l : out)
    if (!l.empty() && l.back() == '\r') l.pop_back();
  return out;
}

// The text after "ptxas info    :" / "ptxas warning :" etc., trimmed; empty if not such a line.
std::string ptxas_body(const std::string& line, std::string* kind) {
  if (!starts_with(line, "ptxas")) return {};
  std::size_t colon = line.find(':');
  if (colon == std::string::npos) return {};
  if (kind) *kind = trim(std::string_view(line).substr(5, colon - 5));
  return trim(std::string_view(line).substr(colon + 1));
}

// The name between the first pair of single quotes after `from`, or empty.
std::string quoted(const std::string& s, std::size_t from = 0) {
  std::size_t a = s.find('\'', from);
  if (a == std::string::npos) return {};
  std::size_t b = s.find('\'', a + 1);
  if (b == std::string::npos) return {};
  return s.substr(a + 1, b - a - 1);
}

// Leading integer of s (after spaces), or -1.
long leading_int(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  std::size_t j = i;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
  if (j == i) return -1;
  return std::strtol(std::string(s.substr(i, j - i)).c_str(), nullptr, 10);
}

// "N bytes stack frame, N bytes spill stores, N bytes spill loads"
void parse_frame(const std::string& body, KernelResources& k) {
  for (const std::string& raw : split(body, ',')) {
    std::string item = trim(raw);
    long v = leading_int(item);
    if (v < 0) continue;
    if (item.find("stack frame") != std::string::npos) k.stack_frame = int(v);
    else if (item.find("spill stores") != std::string::npos) k.spill_stores = int(v);
    else if (item.find("spill loads") != std::string::npos) k.spill_loads = int(v);
  }
}

// "Used 18 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0], 5568 bytes
// cumulative stack size" (items vary by architecture and kernel).
void parse_usage(const std::string& body, KernelResources& k) {
  for (const std::string& raw : split(body, ',')) {
    std::string item = trim(raw);
    std::string lower = item;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (starts_with(lower, "used ")) {
      long v = leading_int(std::string_view(item).substr(5));
      if (v < 0) continue;
      if (lower.find("register") != std::string::npos) k.registers = int(v);
      else if (lower.find("barrier") != std::string::npos) k.barriers = int(v);
      continue;
    }
    long v = leading_int(item);
    if (v < 0) continue;
    if (lower.ends_with("bytes smem")) k.smem_static = int(v);
    else if (lower.ends_with("bytes cmem[0]")) k.cmem0 = int(v);
  }
}

}  // namespace

bool KernelResources::wgmma_serialized() const {
  for (const auto& n : notes)
    if (n.find("wgmma.mma_async instructions are serialized") != std::string::npos) return true;
  return false;
}

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  std::vector<KernelResources> out;
  struct Remark {
    std::string function, text;
  };
  std::vector<Remark> remarks;
  KernelResources* cur = nullptr;
  auto find = [&](const std::string& name) -> KernelResources* {
    for (auto& k : out)
      if (k.kernel == name) return &k;
    return nullptr;
  };
  for (const std::string& line : lines_of(log)) {
    if (!starts_with(line, "ptxas")) continue;
    std::string rest = trim(std::string_view(line).substr(5));
    if (starts_with(rest, ".")) {  // "ptxas         .     0 bytes stack frame, ..."
      if (cur) parse_frame(rest.substr(1), *cur);
      continue;
    }
    std::string body = ptxas_body(line, nullptr);
    if (body.empty()) continue;
    if (starts_with(body, "Compiling entry function")) {
      KernelResources k;
      k.kernel = quoted(body);
      out.push_back(std::move(k));
      cur = &out.back();
    } else if (starts_with(body, "Function properties for")) {
      std::string name = trim(std::string_view(body).substr(sizeof("Function properties for") - 1));
      // Properties of the entry just announced, or of a __device__ function that ptxas
      // compiled separately (it follows the entries and has no "Compiling" line).
      if (!cur || cur->kernel != name) {
        KernelResources k;
        k.kernel = name;
        k.entry = false;
        out.push_back(std::move(k));
      }
      cur = &out.back();
    } else if (starts_with(body, "Used ")) {
      if (cur) parse_usage(body, *cur);
    } else if (starts_with(body, "Compile time")) {
      std::size_t eq = body.find('=');
      if (cur && eq != std::string::npos) cur->ptxas_ms = std::strtod(body.c_str() + eq + 1, nullptr);
    } else if (body.find("function '") != std::string::npos) {
      // Remarks such as "(C7511) Potential Performance Loss: ... in the function 'k'" come
      // before the entry they name; attach them once every function is known.
      std::string fn = quoted(body, body.rfind("function '"));
      if (!fn.empty()) remarks.push_back({fn, body});
    }
  }
  for (const auto& r : remarks)
    if (KernelResources* k = find(r.function)) k->notes.push_back(r.text);
  return out;
}

std::vector<std::string> error_lines(const std::string& log, std::size_t max) {
  // file(line): [catastrophic ]error: message   (the NVRTC front end)
  static const std::regex front(R"(^(.+)\((\d+)\): ((?:catastrophic )?error)(?: #[-\w]+)?\s*:\s*(.*)$)");
  // ptxas application ptx input, line 26; error   : message   (ptxas on the generated PTX)
  static const std::regex ptxas(R"(^ptxas[^,]*, line (\d+); (error|fatal)\s*:\s*(.*)$)");
  std::vector<std::string> out;
  for (const std::string& line : lines_of(log)) {
    if (out.size() >= max) break;
    std::smatch m;
    if (std::regex_match(line, m, front)) {
      out.push_back(cat(m[1].str(), ":", m[2].str(), ": ", m[3].str(), ": ", m[4].str()));
    } else if (std::regex_match(line, m, ptxas)) {
      out.push_back(cat("<ptx>:", m[1].str(), ": ", m[2].str(), ": ", m[3].str()));
    } else if (starts_with(line, "nvrtc: error") || starts_with(line, "Command-line error")) {
      out.push_back(trim(line));
    } else if (std::string kind; !ptxas_body(line, &kind).empty() &&
               (starts_with(kind, "error") || starts_with(kind, "fatal"))) {
      // "ptxas fatal : Ptx assembly aborted due to errors" only repeats the errors above it.
      if (out.empty() || line.find("aborted due to errors") == std::string::npos)
        out.push_back(trim(line));
    }
  }
  return out;
}

}  // namespace sage::tuner
