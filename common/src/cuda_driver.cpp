#include "sage/common/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

namespace sage::cu {
namespace {
#define SAGE_STR2(x) #x
#define SAGE_STR(x) SAGE_STR2(x)  // expands cuda.h's versioned names (cuMemAlloc -> cuMemAlloc_v2)

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    l.why = std::string("CUDA driver not found (dlopen libcuda.so.1: ") + dlerror() + ")";
    return l;
  }
#define SAGE_CU_LOAD(fn)                                                            \
  l.api.fn = reinterpret_cast<decltype(&::fn)>(dlsym(h, SAGE_STR(fn)));             \
  if (!l.api.fn) {                                                                  \
    l.why = "CUDA driver too old: missing symbol " SAGE_STR(fn);                    \
    return l;                                                                       \
  }
  SAGE_CU_FUNCTIONS(SAGE_CU_LOAD)
#undef SAGE_CU_LOAD
#define SAGE_CU_LOAD_OPTIONAL(fn) l.api.fn = reinterpret_cast<decltype(&::fn)>(dlsym(h, SAGE_STR(fn)));
  SAGE_CU_OPTIONAL_FUNCTIONS(SAGE_CU_LOAD_OPTIONAL)
#undef SAGE_CU_LOAD_OPTIONAL
  CUresult r = l.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.api.cuGetErrorName(r, &name);
    l.why = std::string("cuInit failed: ") + (name ? name : "unknown error");
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}
}  // namespace

const Api* try_api(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

const Api& api() {
  std::string why;
  const Api* a = try_api(&why);
  if (!a) throw Error(Errc::no_device, why);
  return *a;
}

bool have_device(std::string* why) {
  const Api* a = try_api(why);
  if (!a) return false;
  int n = 0;
  if (a->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
    if (why) *why = "no CUDA device visible";
    return false;
  }
  return true;
}

std::string error_string(CUresult r) {
  const Api* a = try_api();
  const char* name = nullptr;
  const char* desc = nullptr;
  if (a) {
    a->cuGetErrorName(r, &name);
    a->cuGetErrorString(r, &desc);
  }
  std::string s = name ? name : ("CUresult " + std::to_string(int(r)));
  if (desc) s += std::string(" (") + desc + ")";
  return s;
}

void check(CUresult r, const char* call, const char* file, int line) {
  if (r == CUDA_SUCCESS) return;
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw Error(Errc::cuda_error, std::string(call) + " failed: " + error_string(r),
              std::string(base) + ":" + std::to_string(line));
}
}  // namespace sage::cu
