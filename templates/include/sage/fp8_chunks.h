// FP8 pages: which 16-byte chunk of a K or V tile's FP8 rows each converting thread takes, shared
// by the kernels (attn_native_fp8.cuh: convert_tile8; attn_mma.cuh: Fp8Pages) and the host tests
// (tests/kernels/test_fp8_chunks.cpp), which check the bank groups below for every head dim.
//
// A tile's FP8 rows are D bytes (CPR = D / 16 chunks); its chunk (r, k) becomes FP16 chunks 2k and
// 2k + 1 of row r, 64-column blocks of 128-byte rows whose 16-byte chunks are XORed by r % 8. The
// shared-memory pipe serves 16-byte accesses a quarter-warp at a time: 8 threads, all 32 banks
// when their chunks sit on 8 different 16-byte positions of a 128-byte line ("bank groups").
//   - CPR < 8 (head dim 64): index i is row i / CPR, chunk i % CPR. A quarter-warp holds rows r
//     and r + 1 (r even), whose swizzles differ in bit 0.
//   - CPR >= 8: a quarter-warp takes row r's 4 chunks of one 64-byte half and row r + 1's 4 of
//     the other half (index bits, low to high: the chunk % 4, the row's parity, the half, the
//     chunk / 8, the row pair). Its reads are the two halves of a line; both of its stores (the
//     even FP16 chunks, then the odd) go to blocks of one parity for row r and of the other for
//     row r + 1, whose swizzles differ in bit 0. One row's 8 chunks a quarter-warp put the
//     FP16 chunks 2k of k = 0..3 and 4..7 on the same 4 groups.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define SAGE_FP8_CHUNKS_FN __host__ __device__ __forceinline__ constexpr
#else
#define SAGE_FP8_CHUNKS_FN inline constexpr
#endif

namespace sage {
namespace fp8_chunks {

// Index i's row r within its group of rows, and its chunk k of that row (CPR chunks a row):
// place (convert_tile8), and row_of / chunk_of one at a time (Fp8Pages). The same map, written as
// each kernel's machine code was measured and tested with (NVRTC schedules the two spellings
// differently); the host tests check that they agree.
template <int CPR>
SAGE_FP8_CHUNKS_FN void place(int i, int& r, int& k) {
  if constexpr (CPR >= 8) {
    const int ro = (i >> 2) & 1, rest = i >> 4;
    r = 2 * (rest / (CPR / 8)) + ro;
    k = (i & 3) + 4 * (ro ^ ((i >> 3) & 1)) + 8 * (rest % (CPR / 8));
  } else {
    r = i / CPR;
    k = i % CPR;
  }
}
template <int CPR>
SAGE_FP8_CHUNKS_FN int row_of(int i) {
  if constexpr (CPR >= 8) return 2 * ((i >> 4) / (CPR / 8)) + ((i >> 2) & 1);
  else return i / CPR;
}
template <int CPR>
SAGE_FP8_CHUNKS_FN int chunk_of(int i) {
  if constexpr (CPR >= 8) return (i & 3) + 4 * (((i >> 2) & 1) ^ ((i >> 3) & 1)) + 8 * ((i >> 4) % (CPR / 8));
  else return i % CPR;
}

}  // namespace fp8_chunks
}  // namespace sage
