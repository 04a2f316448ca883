#include "sage/tuner/accuracy.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <algorithm>

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"

namespace sage::tuner {

std::string Metrics::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "cos %.6f rel-L1 %.5f rmse %.3e max %.3e%s", cos, rel_l1, rmse, max_abs,
                nonfinite ? cat(" nonfinite ", nonfinite).c_str() : "");
  return buf;
}

Metrics compare(const float* out, const float* ref, std::size_t n) {
  Metrics m;
  double dot = 0, no = 0, nr = 0, l1 = 0, l1r = 0, se = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double o = out[i], r = ref[i];
    if (!std::isfinite(o)) {
      ++m.nonfinite;
      continue;
    }
    dot += o * r;
    no += o * o;
    nr += r * r;
    const double d = std::fabs(o - r);
    l1 += d;
    l1r += std::fabs(r);
    se += d * d;
    if (d > m.max_abs) m.max_abs = d;
  }
  m.cos = (no > 0 && nr > 0) ? dot / std::sqrt(no * nr) : (no == 0 && nr == 0 ? 1.0 : 0.0);
  m.rel_l1 = l1r > 0 ? l1 / l1r : (l1 == 0 ? 0.0 : INFINITY);
  m.rmse = n ? std::sqrt(se / double(n)) : 0.0;
  if (m.nonfinite) {  // a NaN anywhere fails every threshold
    m.cos = 0;
    m.rel_l1 = INFINITY;
  }
  return m;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t s = (h >> 15) & 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  float v;
  if (e == 0) v = std::ldexp(float(f), -24);
  else if (e == 31) v = f ? NAN : INFINITY;
  else v = std::ldexp(float(f | 0x400), int(e) - 25);
  return s ? -v : v;
}

float bf16_to_float(std::uint16_t h) {
  std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return std::uint16_t(u >> 16);
}

std::uint16_t float_to_half(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000;
  if (std::isnan(f)) return 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return std::uint16_t(sign | 0x7c00);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: round to a multiple of 2^-24
    const std::uint32_t m = std::uint32_t(std::nearbyint(a * 16777216.0f));
    return std::uint16_t(sign | m);
  }
  std::uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = u & 0x7fffff;
  std::uint32_t h = (e << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return std::uint16_t(sign | h);
}

float e4m3_to_float(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp(float(m), -9);  // subnormal: m 2^-9
  else v = std::ldexp(float(8 + m), e - 10);      // (1 + m / 8) 2^(e - 7)
  return (b & 0x80) ? -v : v;
}

std::uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return std::uint8_t(sign | 0x7e);
  if (a < std::ldexp(1.0f, -6)) {  // subnormal (and 2^-6 itself by rounding up: code 8)
    return std::uint8_t(sign | int(std::nearbyint(a * 512.0f)));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): exponent e - 1, mantissa 2m - 1
  int mant = int(std::nearbyint((2.0f * m - 1.0f) * 8.0f)), ex = e - 1 + 7;
  if (mant == 8) {
    mant = 0;
    ++ex;
  }
  const int code = std::min((ex << 3) | mant, 0x7e);
  return std::uint8_t(sign | code);
}

const char* to_string(InputKind k) { return k == InputKind::gaussian ? "gaussian" : "outliers"; }

AttnBuffers::AttnBuffers(const AttnProblem& p)
    : problem(p),
      q(std::size_t(p.q_elems()) * 2),
      k(std::size_t(p.kv_elems()) * 2),
      v(std::size_t(p.kv_elems()) * 2),
      o(std::size_t(p.q_elems()) * 2),
      lse(sizeof(float) * std::size_t(p.batch) * p.heads_q * p.seq_q) {}

void AttnBuffers::fill(const Module& refmod, InputKind kind, std::uint64_t seed, CUstream stream) {
  CUfunction f = refmod.function("sage_fill_normal");
  const int layout = problem.layout == Layout::HND ? 0 : 1;
  const int dtype = problem.dtype == DType::bf16 ? 1 : 0;
  auto one = [&](const DeviceBuffer& buf, std::int64_t count, int heads, int seq, float bias, std::uint64_t s) {
    CUdeviceptr ptr = buf.dptr();
    long long cnt = count;
    int H = heads, N = seq, D = problem.head_dim;
    unsigned long long sd = s;
    void* args[] = {&ptr, &cnt, &H, &N, &D, const_cast<int*>(&layout), const_cast<int*>(&dtype), &bias, &sd};
    const unsigned blocks = unsigned(std::min<std::int64_t>((count + 255) / 256, 65536));
    SAGE_CU(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
  };
  const bool out = kind == InputKind::outliers;
  one(q, problem.q_elems(), problem.heads_q, problem.seq_q, out ? 2.f : 0.f, seed * 3 + 1);
  one(k, problem.kv_elems(), problem.heads_kv, problem.seq_kv, out ? 6.f : 0.f, seed * 3 + 2);
  one(v, problem.kv_elems(), problem.heads_kv, problem.seq_kv, out ? 4.f : 0.f, seed * 3 + 3);
}

AttnArgs AttnBuffers::args() const {
  AttnArgs a;
  a.q = q.get();
  a.k = k.get();
  a.v = v.get();
  a.o = o.get();
  a.lse = problem.return_lse ? lse.as<float>() : nullptr;
  return a;
}

void AttnBuffers::poison_output() {
  o.fill_bytes(0xff);  // fp16/bf16 0xffff is NaN
  lse.fill_bytes(0xff);
}

std::vector<float> AttnBuffers::output_hnd() const {
  const AttnProblem& p = problem;
  std::vector<std::uint16_t> raw = o.to_host<std::uint16_t>(std::size_t(p.q_elems()));
  std::vector<float> out(raw.size());
  std::int64_t sb, sh, sn;
  p.strides(p.heads_q, p.seq_q, &sb, &sh, &sn);
  const bool bf = p.dtype == DType::bf16;
  std::size_t i = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int n = 0; n < p.seq_q; ++n) {
        const std::uint16_t* row = raw.data() + b * sb + h * sh + n * sn;
        for (int d = 0; d < p.head_dim; ++d) out[i++] = bf ? bf16_to_float(row[d]) : half_to_float(row[d]);
      }
  return out;
}

AttnProblem PagedKv::dense_problem(const AttnProblem& paged) {
  AttnProblem d = paged;
  d.paged = false;
  d.kv_fp8 = false;
  d.page_size = 0;
  return d;
}

PagedKv::PagedKv(const AttnProblem& paged, AttnBuffers& dense, std::uint64_t seed, CUstream stream) : problem(paged) {
  const AttnProblem& p = dense.problem;
  if (!paged.paged || paged.page_size < 1 || p.paged || p.batch != paged.batch || p.heads_kv != paged.heads_kv ||
      p.seq_kv != paged.seq_kv || p.head_dim != paged.head_dim)
    throw Error(Errc::internal, cat("PagedKv: buffers of ", p.str(), " for the paged call ", paged.str()));
  SAGE_CU(cuStreamSynchronize(stream));
  const int page = paged.page_size, hkv = p.heads_kv, d = p.head_dim, n = p.seq_kv;
  const int per_seq = (n + page - 1) / page;
  max_pages = std::max(1, per_seq);
  num_pages = p.batch * per_seq + 3;  // spare pages no sequence owns
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> pool(static_cast<std::size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::int32_t> t(std::size_t(p.batch) * max_pages, 0), l(std::size_t(p.batch), n);
  for (std::size_t i = 0; i < std::size_t(p.batch) * per_seq; ++i) t[i] = pool[i];
  std::int64_t sb, sh, sn;
  p.strides(hkv, n, &sb, &sh, &sn);
  const std::size_t elems = std::size_t(num_pages) * page * hkv * d;
  const bool bf = p.dtype == DType::bf16;
  auto to_f = [&](std::uint16_t x) { return bf ? bf16_to_float(x) : half_to_float(x); };
  auto to_16 = [&](float x) { return bf ? float_to_bf16(x) : float_to_half(x); };
  // Slot of key i of sequence b, head h in the pool.
  auto slot = [&](int b, int h, int i) {
    return ((std::size_t(t[std::size_t(b) * max_pages + i / page]) * page + i % page) * hkv + h) * d;
  };
  auto at = [&](int b, int h, int i) { return std::size_t(b * sb + h * sh + i * sn); };
  std::vector<float> scale[2];
  for (int which = 0; which < 2; ++which) {
    DeviceBuffer& src = which == 0 ? dense.k : dense.v;
    std::vector<std::uint16_t> x = src.to_host<std::uint16_t>(std::size_t(p.kv_elems()));
    DeviceBuffer& dst = which == 0 ? k : v;
    if (!paged.kv_fp8) {
      std::vector<std::uint16_t> pages(elems, 0);
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < hkv; ++h)
          for (int i = 0; i < n; ++i) std::copy_n(x.begin() + std::ptrdiff_t(at(b, h, i)), d, pages.begin() + std::ptrdiff_t(slot(b, h, i)));
      dst = DeviceBuffer(elems * 2);
      dst.upload(pages.data(), elems * 2);
      continue;
    }
    std::vector<float>& sc = scale[which];
    sc.assign(std::size_t(hkv), 0.f);
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < n; ++i)
          for (int e = 0; e < d; ++e) sc[std::size_t(h)] = std::max(sc[std::size_t(h)], std::fabs(to_f(x[at(b, h, i) + e])));
    for (float& s1 : sc) s1 = s1 > 0 ? s1 / 448.f : 1.f;
    std::vector<std::uint8_t> pages(elems, 0);
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < n; ++i)
          for (int e = 0; e < d; ++e) {
            std::uint16_t& val = x[at(b, h, i) + e];
            const std::uint8_t byte = float_to_e4m3(to_f(val) / sc[std::size_t(h)]);
            pages[slot(b, h, i) + e] = byte;
            val = to_16(e4m3_to_float(byte) * sc[std::size_t(h)]);
          }
    dst = DeviceBuffer(elems);
    dst.upload(pages.data(), elems);
    src.upload(x.data(), x.size() * 2);  // the values the bytes stand for: the reference's
    DeviceBuffer& ds = which == 0 ? k_scale : v_scale;
    ds = DeviceBuffer(sc.size() * 4);
    ds.upload(sc.data(), sc.size() * 4);
  }
  table = DeviceBuffer(t.size() * 4);
  table.upload(t.data(), t.size() * 4);
  lens = DeviceBuffer(l.size() * 4);
  lens.upload(l.data(), l.size() * 4);
}

AttnArgs with_pages(AttnArgs a, const AttnProblem& p, const void* k, const void* v, const std::int32_t* table,
                    const std::int32_t* lens, int max_pages, int num_pages, const float* k_scale, const float* v_scale) {
  a.k = k;
  a.v = v;
  std::int64_t b, h, n;
  p.strides(p.heads_q, p.seq_q, &b, &h, &n);
  a.strided = true;
  a.sq = a.so = TensorStrides{b, h, n};
  a.sk = a.sv = TensorStrides{std::int64_t(p.page_size) * p.heads_kv * p.head_dim, p.head_dim,
                              std::int64_t(p.heads_kv) * p.head_dim};
  a.block_table = table;
  a.seqlens_kv = lens;
  a.bt_stride = max_pages;
  a.num_pages = num_pages;
  if (p.kv_fp8) {
    a.kv_k_scale = k_scale;
    a.kv_v_scale = v_scale;
    a.kv_scale_stride = 1;
  }
  return a;
}

AttnArgs PagedKv::args(const AttnBuffers& dense) const {
  AttnArgs a = dense.args();
  a.lse = problem.return_lse ? dense.lse.as<float>() : nullptr;
  return with_pages(a, problem, k.get(), v.get(), table.as<std::int32_t>(), lens.as<std::int32_t>(), max_pages,
                    num_pages, k_scale.as<float>(), v_scale.as<float>());
}

AttnProblem VarlenBatch::packed_problem(const AttnProblem& vl) {
  AttnProblem d = vl;
  d.varlen = false;
  d.batch = 1;
  d.seq_q = std::max(1, vl.total_q);
  d.seq_kv = std::max(1, vl.total_kv);
  d.total_q = d.total_kv = 0;
  d.window = 0;
  d.causal = false;
  d.layout = Layout::NHD;
  return d;
}

VarlenBatch::VarlenBatch(const AttnProblem& vl, SeqLens l)
    : problem(vl), lens(std::move(l)), buffers(packed_problem(vl)) {
  if (!vl.varlen || lens.q.size() != std::size_t(vl.batch) || lens.kv.size() != lens.q.size())
    throw Error(Errc::internal, cat("VarlenBatch: ", lens.q.size(), " sequences for the call ", vl.str()));
  offsets_q.push_back(0);
  offsets_kv.push_back(0);
  for (std::size_t i = 0; i < lens.q.size(); ++i) {
    offsets_q.push_back(offsets_q.back() + lens.q[i]);
    offsets_kv.push_back(offsets_kv.back() + lens.kv[i]);
  }
  if (offsets_q.back() != vl.total_q || offsets_kv.back() != vl.total_kv)
    throw Error(Errc::internal, cat("VarlenBatch: the sequences' totals differ from the call's ", vl.str()));
  cu_q = DeviceBuffer(offsets_q.size() * 4);
  cu_q.upload(offsets_q.data(), offsets_q.size() * 4);
  cu_kv = DeviceBuffer(offsets_kv.size() * 4);
  cu_kv.upload(offsets_kv.data(), offsets_kv.size() * 4);
}

AttnArgs VarlenBatch::args() const {
  AttnArgs a = buffers.args();
  a.lse = problem.return_lse ? buffers.lse.as<float>() : nullptr;
  a.cu_seqlens_q = cu_q.as<std::int32_t>();
  a.cu_seqlens_kv = cu_kv.as<std::int32_t>();
  return a;
}

namespace {
// Sequence i of a variable-length call as a dense call of its own.
AttnProblem sequence_problem(const AttnProblem& vl, int q, int kv) {
  AttnProblem s = vl;
  s.varlen = false;
  s.total_q = s.total_kv = 0;
  s.batch = 1;
  s.seq_q = q;
  s.seq_kv = kv;
  s.return_lse = false;
  return s;
}
}  // namespace

ReferenceResult VarlenBatch::reference(const ReferenceKernel& ref, CUstream stream) const {
  const AttnProblem& p = problem;
  const int hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim;
  ReferenceResult r;
  r.o.assign(std::size_t(p.total_q) * hq * d, 0.f);  // [Hq, total_q, D]
  for (std::size_t i = 0; i < lens.q.size(); ++i) {
    const int nq = lens.q[i], nkv = lens.kv[i];
    if (nq == 0 || nkv == 0) continue;  // no keys: O stays 0
    const AttnProblem s = sequence_problem(p, nq, nkv);
    AttnArgs a;
    a.q = static_cast<const char*>(buffers.q.get()) + std::size_t(offsets_q[i]) * hq * d * 2;
    a.k = static_cast<const char*>(buffers.k.get()) + std::size_t(offsets_kv[i]) * hkv * d * 2;
    a.v = static_cast<const char*>(buffers.v.get()) + std::size_t(offsets_kv[i]) * hkv * d * 2;
    DeviceBuffer o(sizeof(float) * std::size_t(nq) * hq * d), lse(sizeof(float) * std::size_t(nq) * hq);
    ref.run(s, a, o.as<float>(), lse.as<float>(), stream);
    SAGE_CU(cuStreamSynchronize(stream));
    const std::vector<float> h = o.to_host<float>(std::size_t(nq) * hq * d);  // [Hq, nq, D]
    for (int head = 0; head < hq; ++head)
      std::copy_n(h.begin() + std::ptrdiff_t(std::size_t(head) * nq * d), std::size_t(nq) * d,
                  r.o.begin() + std::ptrdiff_t((std::size_t(head) * p.total_q + offsets_q[i]) * d));
  }
  return r;
}

double VarlenBatch::flops() const {
  double f = 0;
  for (std::size_t i = 0; i < lens.q.size(); ++i)
    if (lens.q[i] > 0 && lens.kv[i] > 0) f += sequence_problem(problem, lens.q[i], lens.kv[i]).flops();
  return f;
}

TimingInputs::TimingInputs(const AttnProblem& p, const Module& refmod, int sets, std::uint64_t seed, CUstream stream,
                           const SeqLens& lens)
    : problem_(p) {
  if (p.varlen) {
    if (lens.empty()) throw Error(Errc::internal, "TimingInputs: a variable-length call without its sequences");
    for (int s = 0; s < sets; ++s) {
      varlen_.emplace_back(p, lens);
      varlen_.back().buffers.fill(refmod, InputKind::gaussian, seed + std::uint64_t(s), stream);
    }
    return;
  }
  for (int s = 0; s < sets; ++s) {
    dense_.emplace_back(p.paged ? PagedKv::dense_problem(p) : p);
    dense_.back().fill(refmod, InputKind::gaussian, seed + std::uint64_t(s), stream);
  }
  for (int s = 0; s < sets && p.paged; ++s) pages_.emplace_back(p, dense_[std::size_t(s)], seed + 7919 + std::uint64_t(s), stream);
}

AttnArgs TimingInputs::args(std::size_t i) const {
  if (problem_.varlen) return varlen_[i % varlen_.size()].args();
  i %= dense_.size();
  return problem_.paged ? pages_[i].args(dense_[i]) : dense_[i].args();
}

double TimingInputs::flops() const { return problem_.varlen ? varlen_.front().flops() : problem_.flops(); }

ReferenceResult run_reference(const ReferenceKernel& ref, const AttnBuffers& b, CUstream stream) {
  const AttnProblem& p = b.problem;
  DeviceBuffer o(sizeof(float) * std::size_t(p.q_elems()));
  DeviceBuffer lse(sizeof(float) * std::size_t(p.batch) * p.heads_q * p.seq_q);
  ref.run(p, b.args(), o.as<float>(), lse.as<float>(), stream);
  SAGE_CU(cuStreamSynchronize(stream));
  ReferenceResult r;
  r.o = o.to_host<float>(std::size_t(p.q_elems()));
  r.lse = lse.to_host<float>(std::size_t(p.batch) * p.heads_q * p.seq_q);
  return r;
}

}  // namespace sage::tuner
