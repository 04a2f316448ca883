// Tensor memory accelerator (TMA) loads and the mbarriers that track them (sm_90). Written from
// the PTX ISA sections "cp.async.bulk.tensor" and "mbarrier". The tensor maps (CUtensorMap, 128
// bytes) are encoded by the launcher and live in the kernel's __grid_constant__ parameters; a
// load names one by its generic address.
#pragma once
#include "sage/device/common.cuh"

namespace sage {
namespace dev {

// An mbarrier in shared memory expecting `count` arrivals per phase.
SAGE_DEV void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async proxy (the TMA unit) before first use;
// the CTA synchronizes after it.
SAGE_DEV void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Arrives (count 1) and adds `bytes` to the transaction count the phase waits for.
SAGE_DEV void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrives (count 1) without transaction bytes: a consumer releasing a ring slot.
SAGE_DEV void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the barrier's phase with parity `phase` has completed.
SAGE_DEV void mbar_wait(u32 bar, u32 phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "SAGE_MBAR_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra SAGE_MBAR_WAIT_%=;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}
// Thread block clusters (PTX ISA "barrier.cluster", "mapa", "st.async"): the split's partial
// results handed to their group's leader through distributed shared memory.
// Every thread of every CTA of the cluster arrives (release: the barriers it initialized)...
SAGE_DEV void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
// ... and waits for the others' arrival before it touches their shared memory (exited threads
// count as arrived).
SAGE_DEV void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
// The shared::cluster address of `addr` (shared::cta) in the CTA of rank `rank`.
SAGE_DEV u32 cluster_map(u32 addr, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Arrives (count 1, release at cluster scope) on an mbarrier of another CTA of the cluster.
SAGE_DEV void mbar_arrive_remote(u32 cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}
// mbar_wait with acquire at cluster scope: for phases that another CTA's arrival completes.
SAGE_DEV void mbar_wait_cluster(u32 bar, u32 phase) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "SAGE_MBAR_WAITC_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra SAGE_MBAR_WAITC_%=;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}
// Loads 16 bytes of this CTA's shared memory.
SAGE_DEV void lds_v4(u32 addr, float (&v)[4]) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(addr) : "memory");
}
// Stores 16 bytes into this CTA's shared memory.
SAGE_DEV void sts_v4(u32 addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// Stores 16 bytes into another CTA's shared memory (shared::cluster address); their arrival
// counts as transaction bytes on that CTA's mbarrier `cluster_bar`.
SAGE_DEV void st_async_v4(u32 cluster_addr, float a, float b, float c, float d, u32 cluster_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   cluster_addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(cluster_bar)
               : "memory");
}
// Loads the box at element coordinates (x, y) of a 2-D tensor map into shared memory at `dst`
// (in the map's swizzle layout); completion is reported to `bar` as transaction bytes.
SAGE_DEV void tma_load_2d(u32 dst, const void* tmap, int x, int y, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(tmap), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// Loads the box at element coordinates (x, y, z, w) of a 4-D tensor map (the user's Q/K/V as
// [B][H][N][D] with any strides); rows past the tensor's extent arrive as zeros.
SAGE_DEV void tma_load_4d(u32 dst, const void* tmap, int x, int y, int z, int w, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
          dst),
      "l"(tmap), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}
// Stores the box at element coordinates (x, y, z, w) of a 4-D tensor map from shared memory
// at `src` (in the map's swizzle layout); rows past the tensor's extent are not written. The
// store joins this thread's current bulk async-group (commit with tma_store_commit). The
// shared-memory writes it reads must be made visible to the async proxy first
// (fence_proxy_async by every writing thread, then a barrier among them).
SAGE_DEV void tma_store_4d(const void* tmap, u32 src, int x, int y, int z, int w) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(tmap),
               "r"(x), "r"(y), "r"(z), "r"(w), "r"(src)
               : "memory");
}
// The same for a 2-D tensor map (element coordinates x, y).
SAGE_DEV void tma_store_2d(const void* tmap, u32 src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(tmap), "r"(x),
               "r"(y), "r"(src)
               : "memory");
}
// Orders this thread's global-memory accesses of the generic proxy with those of the async
// proxy (TMA): a tile one CTA stored by TMA and flagged, read by another CTA's TMA.
SAGE_DEV void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
SAGE_DEV void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk async-groups are pending: READ, until they have
// read their shared memory (it may be overwritten); otherwise until their writes are done.
template <int N, bool READ>
SAGE_DEV void tma_store_wait() {
  if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Named barriers (ids 1..15; 0 is __syncthreads) among `threads` threads, a multiple of 32:
// sync waits for the barrier to complete, arrive counts this warp in and goes on.
SAGE_DEV void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
SAGE_DEV void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Moves registers between warpgroups (sm_90a): every warp of a warpgroup lowers or raises its
// per-thread register count to N (a multiple of 8 in [24, 256]).
template <int N>
SAGE_DEV void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
SAGE_DEV void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
SAGE_DEV void tma_prefetch_map(const void* tmap) { asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory"); }

}  // namespace dev
}  // namespace sage
