// Decode GEMV: y[n] = sum_k x[k] * W(n, k) (+ bias[n]) for one row x, in f32, f16 or bf16 with
// f32 accumulation. Bandwidth-bound: the goal is reading W once at HBM speed (H200 ~4.2 TB/s).
//
// Kernels, by which way the matrix is unit-stride:
//   row_warp_kernel  one input row of a 2-byte type, 16-byte rows, a warp per output row (v10);
//                  row_parts_kernel, 2 warps per row, past 4096 rows (v17).
//   mma_rows_kernel  2..8 rows of 16-bit x against W unit-stride along K on tensor cores
//                  (cuda/mma_rows.cuh, shared with fp8_linear.cu; v15).
//   rows_kernel    W unit-stride along K (nn.Linear weight [N, K], i.e. x @ W^T, or W @ x with
//                  W row-major). A group of threads owns one output row and streams it with
//                  16-byte loads; groups are 32..256 threads wide depending on N, so small-N
//                  shapes still fill the GPU; the group reduces by warp shuffles (+ shared memory).
//   cluster_columns_kernel  W unit-stride along N (x @ B with B [K, N] row-major), sm_90. One
//                  thread-block cluster per tile of columns: each thread owns 16 bytes of
//                  consecutive outputs (8 threads across a tile, 32 slices of K down a block; one
//                  output, 32 threads across and 8 slices where 16-byte loads do not fit), the
//                  cluster's 1..16 blocks split K; slices are summed in shared memory, then the
//                  blocks' tile sums through distributed shared memory, and each block writes its
//                  share of the tile's y: no workspace, no atomics, and a small shape costs
//                  one round trip to HBM plus a cluster barrier. For N >= 100000 (lm_head) a
//                  wider variant: 16 threads x 16 bytes across a tile, each block's range of x
//                  staged in shared memory, K split only as far as that range needs.
//   batch_columns_kernel  the same layout on sm_90 for the small and mid shapes (v9: bf16/f16,
//                  N <= 1024, or N <= 9216 with K <= 3584; 256-thread blocks of 32- or 128-column
//                  tiles where measured faster): whole batches of 4 or 8 16-byte loads per thread,
//                  the first issued before x is staged in shared memory; K split over a cluster
//                  sized so every block is resident, partial sums pushed to their owner block by
//                  st.async onto its mbarrier (launch_columns_batch has the rule and numbers).
//   columns_kernel the same layout below sm_90 (and with EMBER_DISABLE_FAST_PATHS=1), and on
//                  sm_90 for 1024 < N < 100000 with more than ~3.7M elements (measured faster there) and
//                  for long K with few column tiles (one cluster per tile would leave most SMs
//                  idle). 32 threads across a tile, 8 slices per block; when the grid of
//                  tiles is too small to fill the GPU, K is also split over blocks (gridDim.y);
//                  the blocks add their partial sums into a per-stream f32 accumulator and
//                  columns_finalize_kernel, launched after it, writes y (v16).
//
// Versions tried (H200, bf16, 96 decode shapes vs torch.mm; docs/PERF.md has the tables):
//   v1 rows: group width for ">= 2 waves of blocks", unrolled loop only while 4 loads fit, scalar
//      tail; columns: split-K up to 2 waves with >= 4 K-rows per slice, a memset launch for the
//      tickets per call. Large rows shapes 4.4-4.6 TB/s, but mid shapes (K 2048-4096, N 2048-8192)
//      ~1.4 TB/s (groups of 128 threads with 2 loads each), columns 0.6-0.9x torch. Geomean 0.92x.
//   v2 rows: narrowest group that puts ~8 warps per SM, predicated tail so 4 loads are always in
//      flight (rows 1.1-2.8x torch); columns: ~4 blocks per SM, persistent per-stream tickets (no
//      memset launch), unrolled split reduction (columns 0.64-0.96x torch). Geomean 1.04x.
//   v3 (rejected) columns: <= K/64 splits and the last block's 256 threads sharing the partial
//      sums: 0.30-0.64x, fewer blocks in flight cost more than the shorter reduction saved.
//   v4 columns: each block adds its partial sums straight into a per-stream f32 accumulator
//      (fire-and-forget atomics) and the last block of a tile (ticket) reads ONE value per column,
//      writes y and zeroes the accumulator for the next launch; v2's last block read every
//      split's partial (up to 128 dependent L2 round trips per column). rows: 1..8 input rows
//      per launch (small-batch decode) reuse each weight load for every row.
//      Float atomics make the columns kernel's rounding order vary run to run (~1 ulp of f32
//      before the final bf16/f16 rounding).
//   v5 columns on sm_90: K split over the blocks of one thread-block cluster per column tile and
//      reduced through distributed shared memory, replacing v4's atomics, fence, ticket and
//      last-block L2 read (~2-3 us on small shapes) by one cluster barrier; narrower tiles (8
//      threads x 16 bytes, 32 K-slices per block) so small N still spreads over the SMs, and 8
//      loads in flight per thread. Its rounding is the same every run. v4's kernel remains below
//      sm_90 and for long K with few tiles. Measured at 11ca45d: faster than v4 where N <= 1024
//      or K x N <= ~3.7M (up to 1.37x: 2048x512 5.67 -> 4.13 us), slower above (4096x4096 11.6
//      -> 17.3 us), so it takes only those shapes.
//   v5 rows (rejected, measured at 11ca45d): for one input row and W >= 24 MB, rows streamed into
//      shared memory by bulk copies (cp.async.bulk), up to 4 stages of 64 KB, one block per SM:
//      slower on every shape it took (2048x151936 205 vs 140 us, 2304x256000 416 vs 302 us,
//      8192x8192 the same 38 us): one block per SM consuming a stage between refills kept fewer
//      bytes in flight than v4's many warps of register loads.
//   v6 (bench/gemv_probe.cu, H200, 2026-11-30) rows: whole batches of 16-byte loads run without
//      predicates (one pointer plus immediate offsets), then one predicated tail batch; v2..v5
//      predicated every load. Probe "unpred L4" vs v5 at the host's G32: 28672x8192 134.8 ->
//      108.7 us, 8192x8192 38.5 -> 33.5, 3584x14336 29.9 -> 25.4, 4096x14336 32.4 -> 30.4,
//      2304x9216 14.5 -> 13.1, 2304x256000 304 -> 261 (~4.0-4.5 TB/s). v5 at G64 beat G32 on
//      28672x8192 (115) and 8192x8192 (35.5) but lost on 2304x9216 and 2304x256000, and unpred L4
//      at G32 beats both, so the host's group rule stays. columns, N >= 100000: the wide cluster
//      kernel ("cluster C16 T256 L8"): 8192x128256 510 -> 476 us, 4096x128256 258 -> 242,
//      2304x256000 287 -> 270; C8 with x staged won only 2048x2048 (5.64 -> 5.11) and lost
//      2304x2048 (6.12 -> 6.80), so no rule takes it. Did not win: software-pipelined rows (pipe
//      L4, 4 loads in flight, never 8), x in shared memory for rows (smem L4/L8), several rows
//      per warp (multi R2/R4: at best 2304x9216 12.1 us, a shape-specific gain), columns split-K
//      with one batch per block and float4 atomics (+-2%), cluster tiles of 512 threads (slower
//      everywhere: fewer blocks in flight).
//   v7 columns (probe numbers first, bench/gemv_probe.cu "columns2", H200, 2026-11-30, bf16;
//      measured in ember below): batch_columns_kernel for K 512..2304, N 2048..9216, sm_90, 2-byte types.
//      "batch C16 T512 L8 push" where each cluster rank's K range is one batch or whole batches:
//      2048x2048 5.67 -> 5.25 us, 2048x6144 9.48 -> 8.35, 2048x7168 10.60 -> 9.45, 2048x8192
//      11.57 -> 10.90, 768x2048 4.10 -> 3.81, 512x2048 3.66 -> 3.53; "batch C4 T1024 L8" where one
//      wave of single-batch blocks without a cluster fills > half the slots: 2048x4096 7.58 ->
//      7.20. Not taken (lost in the probe): 2304x2048 (6.11 -> 6.53) and 2304x9216 (13.59 ->
//      13.88), whose ranges end in a partial batch. Differs from the probe: a closing relaxed
//      cluster barrier (no block exits before the st.async it issued have landed), bias, f16,
//      any ldb. In ember (5d3257d, torch in the same run, two runs): 2048x2048 6.32 -> 5.37 us,
//      2048x4096 8.14 -> 7.49, 2048x6144 9.79 -> 8.79, 2048x7168 10.85 -> 9.93, 2048x8192 11.68 ->
//      11.03, 1792x2048 5.49 -> 5.12, 768x2048 4.40 -> 4.01, 512x2048 3.97 -> 3.85; all 88 shapes
//      geomean 1.20x -> 1.23x (docs/PERF.md, session 6).
//   v8 small columns (N <= 1024): the batch kernel with 32- or 128-column tiles of 256 threads
//      (probe "columns3"). In ember (2943f31, one run): 2048x32 2.95 -> 2.44 us, 2048x128 2.96 ->
//      2.59, 2048x256 3.79 -> 2.87, 2048x512 4.23 -> 3.15, 2048x768 4.32 -> 3.42, 2880x32 2.99 ->
//      2.46, 2880x512 4.54 -> 3.67, 4096x1024 5.76 -> 5.63, 8192x1024 8.39 -> 7.70; all 88 shapes
//      geomean 1.245x.
//   v9 the 256-thread batch tiles on the mid shapes as well, replacing v7's configurations (probe
//      "columns4": faster than v7 and v5 on all 15 mid shapes it ran; launch_columns_batch has the
//      numbers). In ember (1584362, one run, torch in the same run): 2048x4096 7.49 (v7) -> 6.85
//      us, 2048x1792 6.05 -> 4.70, 2880x5760 11.59 -> 10.61, 3584x2048 7.69 (s5) -> 6.55, 512x2048
//      3.84 -> 3.37; all 88 shapes geomean 1.262x, min 0.971x (docs/PERF.md, session 6).
//   v10 rows, one input row, G32: row_warp_kernel, 32 registers (8 blocks per SM) where the
//      general rows_kernel took 48 (5). bench/gemv_probe.cu "harness" timed the probe's "unpred L4"
//      in a 20-launch graph like the decode bench's at 24.9 us on 3584x14336 while the bench gave
//      ember 26.4-26.8 on the same H200, one graph node per call in both. In ember (session 7,
//      torch in the same run): NxKx1 3584x14336 26.45 -> 25.17 us (4.08 TB/s), 4096x14336 30.64
//      -> 30.02, 8192x8192 33.40 (s6) -> 32.43, 2880x5760 11.97 (s6) -> 10.05. Then 8 loads per
//      lane for <= 4096 rows (probe "rows2": 14336x3584 26.75 -> 26.11 us, 7168x2048 10.21 -> 9.47).
//   v11 columns, 96-136 MB with both sides >= 3584 and K <= 8192: the batch kernel's 512-thread
//      tiles (probe "columns5"; launch_columns_batch has the numbers).
//   v12 (session 10) every kernel waits for the kernel before it at its start and, below 16 MiB of
//      weights, goes out as a programmatic dependent launch that lets the next kernel launch once
//      its main loop is done (gemv() has the rule and numbers). In the decode bench, torch in the
//      same call: 88 shapes geomean 1.274x (session 8) -> 1.343x, min 0.975x; a trigger at the
//      kernels' start (first try) was slower than the late one on most shapes from 16 MB.
//   v13 (session 10) columns_kernel: a slice's last 1..3 rows as one predicated batch, where v4
//      loaded them one dependent round trip at a time. One build, a temporary switch, H200, best of
//      two runs: 14336x4096 30.83 -> 30.35 us, 14336x3584 27.49 -> 27.22, 9216x2304 14.36 -> 14.16,
//      7168x2048 10.91 -> 10.71, 4096x4096 11.69 -> 11.51; the other shapes within 0.6%. Not taken:
//      fence.acq_rel.gpu for the ticket's two __threadfence (MEMBAR.SC.GPU in the SASS), within
//      0.5% either way.
//   v14 (session 12) columns_kernel: one whole wave of blocks at its occupancy where each split
//      keeps >= 192 rows of K (the large shapes); launch_columns has the numbers.
//   v15 (session 25) 2..8 rows of 16-bit x on tensor cores: mma_rows_kernel (cuda/mma_rows.cuh,
//      written for fp8_linear), where rows_kernel's FFMAs per row of x had made 8 rows 2.3x one
//      (8x4096x14336 68.3 us against 29.5), and 16-bit weights past 32 MiB or 6144 outputs to
//      cuBLAS. One build, a host-only switch, two alternating runs, torch's F.linear in the same
//      call (H200, us, mma / rows_kernel / cuBLAS / torch): 8x2048x512 3.43 / 4.54 / 5.78 / 5.83,
//      4x2048x4096 6.85 / 8.04 / 7.10 / 7.20, 8x2048x4096 7.15 / 12.67 / 7.14 / 7.25, 8x4096x2048
//      7.60 / 12.07 / 9.50 / 9.53, 8x2048x6144 8.99 / 16.94 / 9.32 / 9.41, 2x4096x4096 11.28 /
//      11.68 / 13.33 / 13.30, 8x4096x4096 11.75 / 24.56 / 13.12 / 13.26; cuBLAS's: 8x2048x8192
//      11.53 / 22.08 / 10.61 / 10.80, 2x4096x14336 36.26 / 32.79 / 30.45 / 30.49, 8x4096x14336
//      38.46 / 67.86 / 30.28 / 30.34, 8x14336x4096 38.45 / 102.4 / 32.6 / 32.68, 4x8192x28672
//      139.3 / 141.7 / 109.1 / 108.9. The mma kernel streams large weights at ~3.0-3.4 TB/s
//      (a 16-row tile's 64-byte pieces per row and step), cuBLAS at ~3.9.
//   v16 (session 26) columns_kernel's split sums finished by a kernel of its own
//      (columns_finalize_kernel, a programmatic dependent of it on sm_90) instead of each tile's
//      last block by ticket: the fence, ticket and accumulator read had been ~1.4-1.8 us after the
//      last main loop (session 11's and 23's stamps). 1xKxN 14336x3584 26.6 -> 25.9 us (3.86 ->
//      3.97 TB/s), 4096x2048 8.1 -> 7.2; launch_columns has the numbers. Tried in the same session
//      (branch s26-trials): splits of a fixed 64-512 rows, so the large shapes run several waves
//      of short blocks and the block scheduler gives the faster SMs more (session 23's stamps had
//      ~20 SMs idle for the last ~1.5 us). With the same finalize, 14336x3584 ran 25.4 us at 256
//      rows (its one-wave grid), 26.1 at 128 and 27.1 at 64; 14336x4096 33.2 at 256 rows (1.13
//      waves) and 29.4-29.6 at 512; 8192x28672 and 28672x8192 were fastest at their one-wave grid
//      (~1200 rows); the mid shapes best near the rule's own split. One kernel with both endings
//      (split and not) compiled to 44 registers for bf16, 5 blocks per SM, which shrank the one-wave
//      grids and made 2048x65536 1.16 waves (76.1 us); SPLIT as a template parameter gives the
//      split kernel 39 (6 per SM). Final code, torch in the same call (call 7, a machine ~2% slower
//      on every large stream than call 5's): 88 shapes geomean 1.350-1.353x, min 0.969x, 1xKxN
//      14336x3584 3.92 TB/s, 3584x14336 3.90-3.92, 14336x4096 3.95. The SASS of the main loop (old
//      and new, sm_90a) issues 2 of a batch's 4 weight loads, consumes the first, then issues the
//      other 2; raw ld.global.nc loads (load_rows) compiled to one load in flight at 40 registers:
//      not pursued.
//   v17 (session 26) rows, one input row past 4096 rows: row_parts_kernel, 2 warps per row where
//      each warp's part is whole batches of 4 loads (K a multiple of 2048 for 2-byte types), so a
//      grid of 14336 rows is 3.4 waves of warps instead of 1.7. NxKx1 4096x14336 29.3 -> 27.7 us
//      (4.01 -> 4.24 TB/s), 4096x128256 233.1 -> 227.0; launch_rows_group has the numbers. The
//      routing was set after that call (a host switch); the final build's SASS is the measured
//      one's. (this)
//   Not taken (session 11): columns_kernel adding its sums with 16-byte vector atomics
//      (red.global.add.v4.f32, a quarter of the operations). Two calls, one build each, a temporary
//      switch, three alternating runs per shape (H200, us, scalar -> vector): first call 14336x4096
//      30.09-30.14 -> 30.05-30.10, 7168x2048 10.69-10.74 -> 10.61-10.66, 4096x4096 11.61-11.68 ->
//      11.54-11.55; second call 14336x4096 29.80-29.90 -> 29.81-29.86, 4096x4096 11.29-11.40 ->
//      11.28-11.37, 2048x65536 62.76-62.89 -> 62.77-62.86: within the spread. Per-block
//      %globaltimer stamps (a temporary build) on 14336x3584: the main loops end 19.2-23.3 us after
//      the first block starts, and the last tile's y is written 1.8 us after the last loop ends
//      (atomics, fence, ticket, fence, the accumulator's read) with either kind of atomics: the tail
//      is that chain's latency, not the number of atomics.
//   Not taken (session 13): the wide cluster kernel (launch_columns_wide) from N >= 3000 instead of
//      100000, for the large-K mid-N shapes that v14 leaves near 3.9 TB/s. One build, a temporary
//      threshold, two alternating runs (H200, us, v14 -> wide): 1xKxN 14336x3584 26.39-26.41 ->
//      28.87-28.93, 14336x4096 30.29-30.33 -> 37.53-37.61, 3584x14336 26.41-26.51 -> 30.93-30.99,
//      8192x8192 33.32-33.37 -> 40.36-40.41, 28672x8192 107.7-108.1 -> 122.1-122.3, 2048x65536
//      64.07 -> 65.41-65.44, 4096x4096 11.41-11.43 -> 14.47-14.54: slower on every shape.
//   Not taken (session 16; branch gemv-columns-pool): columns_kernel's blocks on the first
//      (100 - p)% of K only, the last p% of each tile's rows a pool that its warps draw 4 rows at a
//      time from a per-tile counter once past their own rows (the next unit requested before the
//      current one is loaded). One build, a temporary switch, two alternating runs (H200, us, p = 0
//      -> 12 / 25): 1xKxN 14336x4096 30.29-30.34 -> 38.63-38.97 / 41.07-41.42, 14336x3584
//      26.93-26.96 -> 35.91-35.98 / 37.56-37.61, 28672x8192 107.5-107.7 -> 122.7-122.9 /
//      137.4-137.7, 8192x28672 108.0-108.1 -> 115.9-116.1 / 123.4-123.5, 2048x65536 64.1-64.4 ->
//      72.6-72.9 / 73.9-75.7; the shapes on other kernels unchanged. A pool unit is a dependent
//      atomic and then 4 rows' loads: the pooled rows stream at a fraction of the static share's
//      rate (not traced further).
//   Not taken (session 17): columns_kernel's blocks taking their ticket first, so only the tile's
//      last arrival waits (for a count of the others' atomics and fences) and adds its own sums as it
//      reads the accumulator: one L2 round trip less after the last loop, on paper. One build, a
//      temporary switch, two alternating runs (H200, us, v14 -> ticket first): 1xKxN 14336x3584
//      26.51-26.52 -> 26.87-26.93, 14336x4096 30.39-30.40 -> 30.45, 4096x4096 11.41-11.43 ->
//      11.58-11.63, 7168x2048 10.81-10.83 -> 11.05-11.09, 9216x2304 14.12 -> 14.21-14.22, 4096x2048
//      8.09-8.11 -> 8.32-8.34; 28672x8192, 8192x28672 and 2048x65536 within 0.2%.
//   Session 23 (per-block %globaltimer stamps, H200; docs/perf-runs/2026-12-01-s23-stamps.txt; the
//      stamps took the kernel to 44 registers, 5 blocks per SM where it runs 6 at its 40): on
//      1xKxN 14336x3584 (658 blocks) every block starts within 0.54 us, the main loops
//      end 19.8-24.2 us after (mean 22.9) and the last tile's y 1.4 us after the last loop. The
//      SMs fall into groups: ~20 (ids 33-43 and 78-87 on that machine) end their 5 blocks at
//      21.7-22.7 us, the others at 23.0-24.2; 14336x4096 the same (24.0-25.3 against 26-27.2). So
//      equal static shares leave the fast SMs idle for the last ~1.5 us.
//   Not taken (session 24; bench/columns_claims_probe.cu, and branch s24-trials in ember): the
//      blocks claiming units of 16 (or 32) rows of K from a per-tile counter, thread 0 keeping 2-3
//      claims ahead in a shared ring, so fast SMs take more. Probe (H200, us, static -> claims 2x2 @5
//      / 2x3 @4 / 1x4 @4): 14336x3584 27.60-27.70 -> 33.08-33.28 / 36.34-36.42 / 47.73-48.25, 14336x4096
//      30.86-31.11 -> 36.85-37.03, 3584x14336 27.39-27.56 -> 32.63-32.91, 8192x8192 34.41-34.60 ->
//      41.78-41.91. In ember (columns_claims_kernel, 2x2 at 4 blocks per SM, one build, two runs):
//      14336x3584 26.00-26.07 -> 32.24-32.27, 14336x4096 29.81-29.91 -> 36.58-36.63, 8192x28672
//      106.2-106.5 -> 131.4-131.5, 28672x8192 105.5-105.8 -> 126.8-127.1. Both hold 4 loads in
//      flight per thread; the claims add a block barrier per unit and a thread-0 atomic per unit
//      whose result must reach shared memory before the unit after next is loaded. Not traced.
//      Same call: 14336x3584 ran 26.44-26.52 us in a 4-shape decode_bench run and 27.12 inside the
//      full 96-shape list on one machine (docs/perf-runs/2026-12-01-s24-ab.txt, call 3; clocks
//      steady at 1980 MHz), so the large columns shapes' 3.8-3.95 TB/s moves ~2% with the run around
//      them as well as with the machine.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "cuda/dependent_launch.cuh"
#include "cuda/gemv.h"
#include "cuda/mma_rows.cuh"
#include "cuda/native_float.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

// 16 bytes of T.
template <class T> struct alignas(16) Vec { T v[16 / sizeof(T)]; };
template <class T> constexpr int kVec = 16 / sizeof(T);

template <class T> __device__ __forceinline__ float dot16(const Vec<T>& a, const Vec<T>& b, float acc) {
#pragma unroll
  for (int i = 0; i < kVec<T>; ++i) acc = fmaf(to_float(a.v[i]), to_float(b.v[i]), acc);
  return acc;
}

// The float values of a 2-byte type's bits: the low and high halves of a 32-bit word, or one
// 16-bit value.
template <class T> __device__ __forceinline__ float low_to_float(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(w << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xFFFFu)));
}
template <class T> __device__ __forceinline__ float high_to_float(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(w & 0xFFFF0000u);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// 8 values of a 2-byte type (16 bytes of raw bits) dotted with 8 more, added to acc.
template <class T> __device__ __forceinline__ float dot8_bits(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(low_to_float<T>(ws[i]), low_to_float<T>(xs[i]), acc);
    acc = fmaf(high_to_float<T>(ws[i]), high_to_float<T>(xs[i]), acc);
  }
  return acc;
}

// rows: GROUP threads per output row; kThreads / GROUP rows per block. VEC: 16-byte loads
// (needs K % kVec == 0 and 16-byte aligned rows); otherwise one element per load. MROWS input
// rows x[m] (row stride ldx) give MROWS outputs y[m * ldy + row]: each weight load serves all.
template <class T, int GROUP, bool VEC, int MROWS>
__global__ void __launch_bounds__(kThreads) rows_kernel(const T* __restrict__ w, int64_t ldw, const T* __restrict__ x,
                                                        int64_t ldx, const T* __restrict__ bias, T* __restrict__ y,
                                                        int64_t ldy, int64_t n_rows, int64_t k) {
  wait_for_previous_kernel();
  constexpr int kRowsPerBlock = kThreads / GROUP;
  constexpr int kLoads = MROWS == 1 ? 4 : 2;  // weight loads in flight (x rows come from L1/L2)
  const int lane = threadIdx.x % GROUP;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  float acc[MROWS];
#pragma unroll
  for (int m = 0; m < MROWS; ++m) acc[m] = 0.f;
  if (row < n_rows) {
    const T* wr = w + row * ldw;
    if constexpr (VEC) {
      // Whole batches (kLoads 16-byte weight loads for every thread of the group) run without
      // predicates: one pointer plus immediate offsets, all kLoads loads issued before the first
      // use. The last, partial batch is predicated per load, so short rows keep their loads in
      // flight too.
      constexpr int kBatch = kLoads * GROUP;
      const int64_t n_vec = k / kVec<T>;
      const auto* wv = reinterpret_cast<const Vec<T>*>(wr) + lane;
      const Vec<T>* xv[MROWS];
#pragma unroll
      for (int m = 0; m < MROWS; ++m) xv[m] = reinterpret_cast<const Vec<T>*>(x + m * ldx) + lane;
      int64_t i0 = 0;
      for (; i0 + kBatch <= n_vec; i0 += kBatch) {
        Vec<T> wq[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) wq[u] = wv[i0 + u * GROUP];
#pragma unroll
        for (int m = 0; m < MROWS; ++m)
#pragma unroll
          for (int u = 0; u < kLoads; ++u) {
            const Vec<T> xq = xv[m][i0 + u * GROUP];  // by value: one 16-byte load, not 2-byte ones
            acc[m] = dot16(wq[u], xq, acc[m]);
          }
      }
      if (i0 < n_vec) {
        const int64_t left = n_vec - i0 - lane;  // this thread's loads u * GROUP < left are in the row
        Vec<T> wq[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) wq[u] = u * GROUP < left ? wv[i0 + u * GROUP] : Vec<T>{};
#pragma unroll
        for (int m = 0; m < MROWS; ++m)
#pragma unroll
          for (int u = 0; u < kLoads; ++u)
            if (u * GROUP < left) {
              const Vec<T> xq = xv[m][i0 + u * GROUP];
              acc[m] = dot16(wq[u], xq, acc[m]);
            }
      }
    } else {
      for (int64_t i = lane; i < k; i += GROUP) {
        const float wi = to_float(wr[i]);
#pragma unroll
        for (int m = 0; m < MROWS; ++m) acc[m] = fmaf(wi, to_float(x[m * ldx + i]), acc[m]);
      }
    }
  }
  dependents_may_launch();  // after the weight stream: see dependent_launch.cuh
  // Reduce within the group: shuffles inside each warp, then shared memory across warps.
#pragma unroll
  for (int m = 0; m < MROWS; ++m) {
#pragma unroll
    for (int off = (GROUP < 32 ? GROUP : 32) / 2; off > 0; off /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
  }
  if constexpr (GROUP > 32) {
    __shared__ float partial[MROWS][kThreads / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int m = 0; m < MROWS; ++m) partial[m][warp] = acc[m];
    }
    __syncthreads();
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < MROWS; ++m) {
        acc[m] = 0.f;
#pragma unroll
        for (int j = 0; j < GROUP / 32; ++j) acc[m] += partial[m][warp + j];
      }
    }
  }
  if (lane == 0 && row < n_rows) {
    const float b = bias ? to_float(bias[row]) : 0.f;
#pragma unroll
    for (int m = 0; m < MROWS; ++m) y[m * ldy + row] = from_float<T>(acc[m] + b);
  }
}

// One input row, 16-byte rows, a warp per output row: rows_kernel<T, 32, true, 1> reduced to what
// that case needs (32-bit offsets inside a row, raw bits instead of Vec<T>, no x-row array, no
// group reduction), as the probe's "unpred L4". It runs in 32 registers where the general kernel
// took 48, and the general kernel spilled under a 32-register cap (v10 above has the numbers).
// L: 16-byte weight loads per lane and batch (the launcher's rule).
// A warp's whole batches of L 16-byte loads per lane along a row, no predicates: the loads at
// wr[i + 32 u] (wr, xr already offset by the lane) for i = 0, 32 L, ... while a batch fits in
// `len`, dotted with x into acc. Returns where the whole batches end.
template <class T, int L>
__device__ __forceinline__ int row_batches(const uint4* __restrict__ wr, const uint4* __restrict__ xr, int len, float& acc) {
  int i = 0;
  for (; i + L * 32 <= len; i += L * 32) {
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) v[u] = __ldg(wr + i + u * 32);
#pragma unroll
    for (int u = 0; u < L; ++u) acc = dot8_bits<T>(v[u], xr[i + u * 32], acc);
  }
  return i;
}

template <class T, int L>
__global__ void __launch_bounds__(kThreads) row_warp_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                            const T* __restrict__ bias, T* __restrict__ y, int n_rows, int n_vec) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x % 32, row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;  // the whole warp
  const uint4* wr = w + static_cast<int64_t>(row) * ldw_vec + lane;
  const uint4* xr = x + lane;
  float acc = 0.f;
  int i = row_batches<T, L>(wr, xr, n_vec, acc);
  if (i < n_vec) {  // one predicated batch
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) v[u] = i + u * 32 + lane < n_vec ? __ldg(wr + i + u * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < L; ++u)
      if (i + u * 32 + lane < n_vec) acc = dot8_bits<T>(v[u], xr[i + u * 32], acc);
  }
  dependents_may_launch();
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = from_float<T>(acc + (bias ? to_float(bias[row]) : 0.f));
}

// row_warp_kernel with PARTS warps of a block sharing a row, each a contiguous part of it in whole
// batches (n_vec a multiple of PARTS * L * 32), their sums meeting in shared memory: 14336 rows
// make 3.4 waves of warps instead of 1.7, a shorter last partial wave (v17).
template <class T, int L, int PARTS>
__global__ void __launch_bounds__(kThreads, 8) row_parts_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                                const T* __restrict__ bias, T* __restrict__ y, int n_rows, int n_vec) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = (blockIdx.x * (kThreads / 32) + warp) / PARTS, part_len = n_vec / PARTS;
  float acc = 0.f;
  if (row < n_rows) {
    const int begin = (warp % PARTS) * part_len;
    const uint4* wr = w + static_cast<int64_t>(row) * ldw_vec + begin + lane;
    const uint4* xr = x + begin + lane;
    row_batches<T, L>(wr, xr, part_len, acc);
  }
  dependents_may_launch();
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  __shared__ float parts[kThreads / 32];
  if (lane == 0) parts[warp] = acc;
  __syncthreads();
  if (lane != 0 || warp % PARTS != 0 || row >= n_rows) return;
#pragma unroll
  for (int p = 1; p < PARTS; ++p) acc += parts[warp + p];
  y[row] = from_float<T>(acc + (bias ? to_float(bias[row]) : 0.f));
}

constexpr int kSlices = 8;  // K slices per block in the columns kernel
constexpr int64_t kWaveSplitRows = 192;  // launch_columns: the fewest rows of K per split of a one-wave grid

// columns: each thread owns VW consecutive outputs (VW = kVec or 1), 32 threads across a tile,
// kSlices slices of K down the block; gridDim.y splits K further. With splits (SPLIT), every
// block adds its sums into `accum` (f32, zero before the launch) and exits;
// columns_finalize_kernel, the next kernel on the stream, writes y and zeroes `accum` again for
// the next launch (v16). SPLIT is a template parameter: one kernel with both endings took 44
// registers for bf16 (5 blocks per SM), the split ending alone 39 (6).
template <class T, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(kThreads) columns_kernel(const T* __restrict__ b, int64_t ldb, const T* __restrict__ x,
                                                           const T* __restrict__ bias, T* __restrict__ y, int64_t n,
                                                           int64_t k, int64_t k_per_split, float* __restrict__ accum) {
  wait_for_previous_kernel();
  constexpr int VW = VEC ? kVec<T> : 1;
  constexpr int kTile = 32 * VW;
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile + col_thread * VW;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_per_split;
  const int64_t k_end = min(k, k_begin + k_per_split);
  float acc[VW];
#pragma unroll
  for (int j = 0; j < VW; ++j) acc[j] = 0.f;
  if (col0 < n) {
    int64_t kk = k_begin + slice;
    if constexpr (VEC) {
      for (; kk + 3 * kSlices < k_end; kk += 4 * kSlices) {
        Vec<T> r[4];
        float xs[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          r[u] = *reinterpret_cast<const Vec<T>*>(b + (kk + u * kSlices) * ldb + col0);
          xs[u] = to_float(x[kk + u * kSlices]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int j = 0; j < VW; ++j) acc[j] = fmaf(xs[u], to_float(r[u].v[j]), acc[j]);
      }
      if (kk < k_end) {  // the last 1..3 rows as one predicated batch: their loads in flight together
        Vec<T> r[3];
        float xs[3];
#pragma unroll
        for (int u = 0; u < 3; ++u) {
          const int64_t kr = kk + u * kSlices;
          r[u] = kr < k_end ? *reinterpret_cast<const Vec<T>*>(b + kr * ldb + col0) : Vec<T>{};
          xs[u] = kr < k_end ? to_float(x[kr]) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 3; ++u)
#pragma unroll
          for (int j = 0; j < VW; ++j) acc[j] = fmaf(xs[u], to_float(r[u].v[j]), acc[j]);
      }
    } else {
      for (; kk < k_end; kk += kSlices) acc[0] = fmaf(to_float(x[kk]), to_float(b[kk * ldb + col0]), acc[0]);
    }
  }
  dependents_may_launch();
  // Sum the kSlices slices of this block.
  __shared__ float sums[kSlices][kTile];
#pragma unroll
  for (int j = 0; j < VW; ++j) sums[slice][col_thread * VW + j] = acc[j];
  __syncthreads();
  for (int t = threadIdx.x; t < kTile; t += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) s += sums[sl][t];
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + t;
    if (col >= n) continue;
    if constexpr (SPLIT) {
      atomicAdd(&accum[col], s);
    } else {
      if (bias) s += to_float(bias[col]);
      y[col] = from_float<T>(s);
    }
  }
}

// The split columns kernel's last step: y = accum (+ bias), and accum zero again. Its wait returns
// once every block of the kernel before has completed and its atomics are visible.
template <class T>
__global__ void __launch_bounds__(kThreads) columns_finalize_kernel(const T* __restrict__ bias, T* __restrict__ y, int64_t n,
                                                                    float* __restrict__ accum) {
  wait_for_previous_kernel();
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (col < n) {
    float s = __ldcg(&accum[col]);
    accum[col] = 0.f;
    if (bias) s += to_float(bias[col]);
    y[col] = from_float<T>(s);
  }
  dependents_may_launch();
}

// The cluster columns kernel's tile: each thread owns kWidth consecutive outputs (16 bytes, or
// one output on the scalar path), kColThreads threads span a tile of kCols outputs and kSlices
// slices of K go down the block. Narrow vector tiles (8 threads x 16 bytes) make more tiles, so
// small N still spreads over many SMs; the large-N kernel's are 16 threads wide.
template <class T, bool VEC, int COL_THREADS> struct ClusterTile {
  static constexpr int kWidth = VEC ? kVec<T> : 1;
  static constexpr int kColThreads = VEC ? COL_THREADS : 32;
  static constexpr int kSlices = kThreads / kColThreads;
  static constexpr int kCols = kColThreads * kWidth;
};
constexpr int kClusterLoads = 8;  // 16-byte weight loads in flight per thread before the first use
constexpr int kMaxClusterSize = 16;
constexpr int64_t kClusterMaxElements = 3700000;  // above this (and N > 1024) v4's kernel is faster
constexpr int kSmallColThreads = 8;   // tile width (threads) of the small-shape cluster kernel (v5)
constexpr int kWideColThreads = 16;   // tile width (threads) of the large-N cluster kernel (v6)
constexpr int kMaxXRange = 4096;      // rows of x a block of the large-N kernel stages in shared memory
constexpr int64_t kWideMinColumns = 100000;  // N from which the large-N kernel runs (lm_head shapes)

// A block's column sums over its slices of K, for the cluster and batch kernels: thread (slice,
// col_thread) stores its VW partial sums in row `slice` of `sums` (float4 stores where rows of
// STRIDE floats stay 16-byte aligned), then the PARTS neighbouring threads of column
// threadIdx.x / PARTS add every PARTS-th slice and combine by shuffles. Every one of them returns
// the column's sum.
template <int PARTS, int SLICES, int STRIDE, int VW>
__device__ __forceinline__ float sum_column_slices(float (&sums)[SLICES][STRIDE], const float (&acc)[VW], int slice, int col_thread) {
  if constexpr (STRIDE % 4 == 0 && VW % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VW; j += 4)
      *reinterpret_cast<float4*>(&sums[slice][col_thread * VW + j]) = make_float4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < VW; ++j) sums[slice][col_thread * VW + j] = acc[j];
  }
  __syncthreads();
  const int col = threadIdx.x / PARTS, part = threadIdx.x % PARTS;
  float s = 0.f;
#pragma unroll
  for (int sl = part; sl < SLICES; sl += PARTS) s += sums[sl][col];
#pragma unroll
  for (int off = PARTS / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// columns, one cluster per column tile (sm_90): the cluster's blocks (blockIdx.y, one per rank)
// split K into contiguous ranges, each block sums its slices in shared memory, then every block
// sends its tile sums to the ranks that own them (rank r owns columns [r, r + 1) * kCols / ranks
// of the tile) through distributed shared memory, and each owner adds its ranks' sums in a fixed
// order and writes y. No global atomics or workspace, and the rounding is the same every run.
// X_SHARED: the block first stages its range of x (<= kMaxXRange rows) in shared memory as
// floats, so the loop's x reads are shared-memory loads, which ptxas does not interleave between
// the weight loads as it does global ones.
template <class T, bool VEC, int COL_THREADS, bool X_SHARED>
__global__ void __launch_bounds__(kThreads) cluster_columns_kernel(const T* __restrict__ b, int64_t ldb, const T* __restrict__ x,
                                                                   const T* __restrict__ bias, T* __restrict__ y, int64_t n,
                                                                   int64_t k, int64_t k_per_rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  wait_for_previous_kernel();
  using Tile = ClusterTile<T, VEC, COL_THREADS>;
  constexpr int VW = Tile::kWidth;
  constexpr int kParts = kThreads / Tile::kCols;  // threads summing one column's slices
  // Row stride of the slice sums: kCols + 32 / kParts floats puts the kParts threads of a
  // column (neighbouring lanes) on different banks.
  constexpr int kStride = Tile::kCols + 32 / kParts;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  // Remote shared memory may be written only once its block runs: arrive now, wait before the
  // exchange (long done by then).
  __cluster_barrier_arrive_relaxed();
  const unsigned rank = cluster.block_rank(), ranks = cluster.num_blocks();
  const unsigned share = Tile::kCols / ranks;  // columns each rank finishes (ranks: a power of 2 <= 16)
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * Tile::kCols;

  // The owner's bias, loaded while the weights stream in.
  const unsigned source = threadIdx.x % ranks, owned = threadIdx.x / ranks;
  const int64_t out_col = tile0 + rank * share + owned;
  const bool writes = threadIdx.x < Tile::kCols && source == 0 && out_col < n;
  const float bias_value = writes && bias ? to_float(bias[out_col]) : 0.f;

  const int col_thread = threadIdx.x % Tile::kColThreads, slice = threadIdx.x / Tile::kColThreads;
  const int64_t col0 = tile0 + col_thread * VW;
  const int64_t k_begin = rank * k_per_rank, k_end = min(k, k_begin + k_per_rank);
  __shared__ float x_range[X_SHARED ? kMaxXRange : 1];
  if constexpr (X_SHARED) {
    for (int64_t i = k_begin + threadIdx.x; i < k_end; i += kThreads) x_range[i - k_begin] = to_float(x[i]);
    __syncthreads();
  }
  float acc[VW];
#pragma unroll
  for (int j = 0; j < VW; ++j) acc[j] = 0.f;
  if (col0 < n) {
    // kClusterLoads rows per thread per step, all loads issued before any is used; the tail is
    // predicated so short ranges keep them in flight too.
    for (int64_t k0 = k_begin + slice; k0 < k_end; k0 += kClusterLoads * Tile::kSlices) {
      Vec<T> r[kClusterLoads];
      float xs[kClusterLoads];
#pragma unroll
      for (int u = 0; u < kClusterLoads; ++u) {
        const int64_t kk = k0 + u * Tile::kSlices;
        r[u] = Vec<T>{};
        xs[u] = 0.f;
        if (kk < k_end) {
          if constexpr (VEC) r[u] = *reinterpret_cast<const Vec<T>*>(b + kk * ldb + col0);
          else r[u].v[0] = b[kk * ldb + col0];
          xs[u] = X_SHARED ? x_range[kk - k_begin] : to_float(x[kk]);
        }
      }
#pragma unroll
      for (int u = 0; u < kClusterLoads; ++u)
#pragma unroll
        for (int j = 0; j < VW; ++j) acc[j] = fmaf(xs[u], to_float(r[u].v[j]), acc[j]);
    }
  }
  dependents_may_launch();

  __shared__ alignas(16) float sums[Tile::kSlices][kStride];
  __shared__ float inbox[Tile::kCols];  // [source rank][owned column]: the ranks' sums of this block's columns
  const float s = sum_column_slices<kParts>(sums, acc, slice, col_thread);
  const int col = threadIdx.x / kParts, part = threadIdx.x % kParts;

  // Exchange: send each column's block sum to its owner's inbox, then the owner adds them.
  cluster.barrier_wait();
  if (part == 0) cluster.map_shared_rank(inbox, static_cast<int>(col / share))[rank * share + col % share] = s;
  cluster.sync();
  if (threadIdx.x < Tile::kCols) {  // whole warps: kCols is a multiple of 32
    float v = inbox[source * share + owned];
    for (unsigned off = 1; off < ranks; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (writes) y[out_col] = from_float<T>(v + bias_value);
  }
#endif
}

// The batch columns kernel (v7, v9; sm_90, 2-byte types): a tile of COLS threads x 16 bytes
// across (COLS * 8 columns) and THREADS / COLS slices of K down the block, each thread taking
// L rows per batch. The FIRST batch of weight loads is issued before anything else:
// x is staged in shared memory only after it, so x's L2 round trip overlaps the weights', and the
// __syncthreads between the loads and their first use keeps ptxas from interleaving them with
// the FMAs (it does not sink loads below a barrier, and the FMAs need x from shared memory after
// it). Whole batches load without predicates, a rank's last partial batch with them (a
// block-uniform choice). K is split over a cluster of blocks per tile (rank r takes rows
// [r, r + 1) * k_per_rank); the host sizes the cluster so every block is resident at once. The
// block's slices are summed in shared memory, then each rank pushes the partial sums of the
// columns rank q owns (share = kCols / ranks of them) into q's inbox with st.async, each store
// completing its 4 bytes on q's mbarrier (which expects the tile's kCols * 4 bytes); owners wait
// on their own mbarrier only, add the ranks' partials in rank order and write y (+ bias). A
// cluster of one block writes y straight from its slice sums.
//
// Lifetime of the st.async stores (a block's shared memory is gone once it exits):
//   - into a block: its waiting threads (threadIdx.x < kCols) leave the mbarrier wait only once
//     all kCols * 4 bytes have landed, i.e. every rank's stores into it are complete, so it cannot
//     exit with one of them in flight;
//   - from a block: st.async has no completion the issuer can wait on (only the target's
//     mbarrier sees it), so every thread of the cluster ends with a relaxed cluster barrier
//     (arrive after the owner's wait and y write, then wait). It completes only once every
//     owner has seen its inbox full, i.e. once every store issued in the cluster has landed, so
//     no block exits before its own stores complete either. The arrive is relaxed (it orders no
//     memory: y is already written, nothing is read after it), so ptxas emits no MEMBAR.ALL.GPU
//     for it as it does for cluster.sync()'s release; it costs one cluster-barrier round trip
//     after the last inbox fills.
//   - before any store: every block's mbarrier is initialised (and its expected bytes posted) by
//     its thread 0 before the opening cluster arrive, fenced by fence.mbarrier_init.release.cluster;
//     stores are issued only after the cluster wait.
// 16 bytes of weights, read once (not allocated in L1), as raw bits. A template, like its only
// caller, so the sm_80 pass (where the batch kernel is empty) does not warn it is unused.
template <class E> __device__ __forceinline__ uint4 load_streaming(const E* p) {
  uint4 q;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
  return q;
}

// L rows of 16 bytes, `step` elements apart; PRED: only the first `valid` (the rest zero).
template <class T, int L, bool PRED> __device__ __forceinline__ void load_rows(uint4 (&r)[L], const T* p, size_t step, int valid) {
#pragma unroll
  for (int u = 0; u < L; ++u) r[u] = !PRED || u < valid ? load_streaming(p + u * step) : make_uint4(0, 0, 0, 0);
}

// acc[j] += x[row] * B[row][col0 + j] over a batch's L rows, S slices apart; xr: the first row's
// x (raw bits) in shared memory. Rows past the range have zero weights and zero x.
template <class T, int L, int S> __device__ __forceinline__ void fma_rows(float (&acc)[8], const uint4 (&r)[L], const uint16_t* xr) {
#pragma unroll
  for (int u = 0; u < L; ++u) {
    const float xk = low_to_float<T>(xr[u * S]);
    const uint32_t q[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[2 * j] = fmaf(xk, low_to_float<T>(q[j]), acc[2 * j]);
      acc[2 * j + 1] = fmaf(xk, high_to_float<T>(q[j]), acc[2 * j + 1]);
    }
  }
}

// SASS (sm_90a, cuobjdump, all four instantiations): 64 registers (the cap; 58 without it), no
// spills or stack; the first batch's 8 LDG.E.NA.128 are issued on both paths (whole and
// predicated) before the bias and x loads (LDG.E.U16) and the BAR.SYNC of the x staging, later
// batches issue their 8 LDGs before the LDS of x and the FFMAs; the exchange is STAS + SYNCS
// (mbarrier try-wait) between UCGABAR_ARV/WAIT pairs, no MEMBAR. Shared memory 27 KB (C16 T512)
// and 43 KB (C4 T1024).
// __launch_bounds__: 1024 threads per SM resident (2 blocks of 512, 1 of 1024), i.e. <= 64
// registers, the occupancy the probe measured (58-62 registers).
template <class T, int COLS, int THREADS, int L>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS) batch_columns_kernel(const T* __restrict__ b, int64_t ldb, const T* __restrict__ x,
                                                                const T* __restrict__ bias, T* __restrict__ y, int n, int k, int k_per_rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  wait_for_previous_kernel();
  static_assert(sizeof(T) == 2, "tiles sized for 8 columns per 16-byte load");
  constexpr int VW = kVec<T>;
  constexpr int kSlicesDown = THREADS / COLS, kCols = COLS * VW, kBatchRows = L * kSlicesDown;
  constexpr int kParts = THREADS / kCols;  // threads summing one column's slices
  static_assert(kParts >= 1 && kParts <= 32 && THREADS == kParts * kCols && kCols % 32 == 0);
  constexpr int kStride = kCols + 32 / kParts;  // padding: the column sums read conflict-free
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned ranks = cluster.num_blocks(), rank = cluster.block_rank();
  __shared__ alignas(8) uint64_t received;  // the owner's mbarrier (clusters of 2 or more)
  const auto received_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&received));
  if (ranks > 1 && threadIdx.x == 0) {
    // One arrival (this one) plus kCols * 4 bytes of transactions complete phase 0.
    asm volatile(
        "mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
        "fence.mbarrier_init.release.cluster;\n\t"
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(received_addr),
        "r"(kCols * 4)
        : "memory");
  }
  if (ranks > 1) __cluster_barrier_arrive_relaxed();

  const int col_thread = threadIdx.x % COLS, slice = threadIdx.x / COLS;
  const int tile0 = static_cast<int>(blockIdx.x) * kCols;
  const int col0 = tile0 + col_thread * VW;
  const bool active = col0 < n;  // n % 8 == 0: a chunk is all in or all out
  const int k_begin = static_cast<int>(rank) * k_per_rank, k_end = min(k, k_begin + k_per_rank);
  const int range = max(0, k_end - k_begin), padded = (range + kBatchRows - 1) / kBatchRows * kBatchRows;
  const int valid = (range - slice + kSlicesDown - 1) / kSlicesDown;  // this thread's rows in the range (<= 0: none)
  const size_t step = static_cast<size_t>(kSlicesDown) * static_cast<size_t>(ldb);
  const T* bp = b + static_cast<size_t>(k_begin + slice) * static_cast<size_t>(ldb) + col0;

  uint4 r[L];
  if (active) {
    if (range >= kBatchRows) load_rows<T, L, false>(r, bp, step, L);
    else load_rows<T, L, true>(r, bp, step, valid);
  }
  // The output this thread writes, if any, and its bias (loaded while the weights stream in).
  const unsigned share = kCols / ranks;  // ranks: a power of 2 <= 16
  const int out_col = ranks == 1 ? tile0 + static_cast<int>(threadIdx.x) / kParts
                                 : tile0 + static_cast<int>(rank * share + threadIdx.x / ranks);
  const bool writes = (ranks == 1 ? threadIdx.x % kParts == 0 : threadIdx.x < kCols && threadIdx.x % ranks == 0) && out_col < n;
  const float bias_value = writes && bias ? to_float(bias[out_col]) : 0.f;

  __shared__ uint16_t x_range[kMaxXRange];  // the rank's x as raw bits, zero-padded to whole batches
  const auto* xg = reinterpret_cast<const uint16_t*>(x) + k_begin;
  for (int i = threadIdx.x; i < padded; i += THREADS) x_range[i] = i < range ? xg[i] : uint16_t{0};
  __syncthreads();
  float acc[VW] = {};
  if (active) {
    fma_rows<T, L, kSlicesDown>(acc, r, x_range + slice);
    for (int kb = kBatchRows, done = L; kb < padded; kb += kBatchRows, done += L) {
      bp += L * step;
      if (kb + kBatchRows <= range) load_rows<T, L, false>(r, bp, step, L);
      else load_rows<T, L, true>(r, bp, step, valid - done);
      fma_rows<T, L, kSlicesDown>(acc, r, x_range + kb + slice);
    }
  }
  dependents_may_launch();

  __shared__ alignas(16) float sums[kSlicesDown][kStride];
  __shared__ float inbox[kCols];  // [source rank][owned column]
  const float s = sum_column_slices<kParts>(sums, acc, slice, col_thread);
  const int col = threadIdx.x / kParts, part = threadIdx.x % kParts;
  if (ranks == 1) {
    if (writes) y[out_col] = from_float<T>(s + bias_value);
    return;
  }
  cluster.barrier_wait();  // every rank's mbarrier is initialised
  if (part == 0) {
    const uint32_t owner = col / share;
    const auto slot = static_cast<uint32_t>(__cvta_generic_to_shared(&inbox[rank * share + col % share]));
    uint32_t remote_slot, remote_barrier;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(slot), "r"(owner));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_barrier) : "r"(received_addr), "r"(owner));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote_slot),
                 "r"(__float_as_uint(s)), "r"(remote_barrier)
                 : "memory");
  }
  if (threadIdx.x < kCols) {  // whole warps: kCols is a multiple of 32
    uint32_t full = 0;
    while (!full)
      asm volatile(
          "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(full)
          : "r"(received_addr)
          : "memory");
    const unsigned source = threadIdx.x % ranks, owned = threadIdx.x / ranks;
    float v = inbox[source * share + owned];
    for (unsigned off = 1; off < ranks; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (writes) y[out_col] = from_float<T>(v + bias_value);
  }
  // No block exits before every store into or from it has landed (see above).
  __cluster_barrier_arrive_relaxed();
  __cluster_barrier_wait();
#endif
}

/// One GEMV problem: y[m * ldy + r] = sum_k x[m * ldx + k] * W(r, k) (+ bias[r]) for m < m_rows.
template <class T> struct GemvArgs {
  const T* w;
  int64_t ldw;  // W(r, k) = w[r * ldw + k] (rows) or w[k * ldw + r] (columns)
  const T* x;
  int64_t ldx;
  const T* bias;
  T* y;
  int64_t ldy, n, k, m_rows;
  bool pdl;  // launch as a programmatic dependent (dependent_launch.cuh)
};

template <class T, int GROUP, int MROWS>
void launch_rows_group(const GemvArgs<T>& g, bool vec, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((g.n + kThreads / GROUP - 1) / (kThreads / GROUP));
  const DependentLaunch launch(blocks, kThreads, 0, stream, g.pdl);
  if constexpr (GROUP == 32 && MROWS == 1 && sizeof(T) == 2) {
    if (vec && g.n <= INT_MAX && g.ldw / kVec<T> <= INT_MAX && g.k / kVec<T> <= INT_MAX) {
      const auto* w = reinterpret_cast<const uint4*>(g.w);
      const auto* x = reinterpret_cast<const uint4*>(g.x);
      const int ldw_vec = static_cast<int>(g.ldw / kVec<T>), n = static_cast<int>(g.n), n_vec = static_cast<int>(g.k / kVec<T>);
      // 8 loads per lane where at most 4096 rows (<= 31 warps per SM on the H200) each hold at
      // least one whole batch of them: a warp's loads in flight, not the number of warps, bound
      // those. bench/gemv_probe.cu "rows2" (H200), L4 -> L8: 14336x3584 26.75 -> 26.11 us, 7168x2048
      // 10.21 -> 9.47, 9216x2304 13.43 -> 12.68, 4096x4096 10.79 -> 10.36, 8192x2048 11.86 ->
      // 11.16, 3584x4096 the same; with 14336 rows L8 lost (3584x14336 25.36 -> 26.95, "rows").
      // Past 4096 rows, rows of whole pairs of batches run 2 warps per row (v17). One build, a
      // host switch, two alternating runs (H200, session 26, us, a warp per row -> 2): NxKx1
      // 4096x14336 29.28-29.33 -> 27.69-27.71 (4.01 -> 4.24 TB/s), 4096x128256 233.0-233.2 ->
      // 226.9-227.0, 8192x8192 32.72-33.06 -> 32.41-32.42, 2048x65536 60.46-60.48 -> 60.06-60.12,
      // 2048x151936 136.1 -> 135.6-135.7, 2048x6144 7.90-7.96 -> 7.85-7.87, 2048x8192 9.68-9.70 ->
      // 9.56-9.60; 8192x28672 104.9-105.0 -> 105.4 (+0.4%).
      if (g.n <= 4096 && n_vec >= 8 * 32)
        launch(row_warp_kernel<T, 8>, w, ldw_vec, x, g.bias, g.y, n, n_vec);
      else if (n_vec % (2 * 4 * 32) == 0)
        DependentLaunch(static_cast<unsigned>((2 * g.n + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, stream, g.pdl)(
            row_parts_kernel<T, 4, 2>, w, ldw_vec, x, g.bias, g.y, n, n_vec);
      else
        launch(row_warp_kernel<T, 4>, w, ldw_vec, x, g.bias, g.y, n, n_vec);
      return;
    }
  }
  if (vec) launch(rows_kernel<T, GROUP, true, MROWS>, g.w, g.ldw, g.x, g.ldx, g.bias, g.y, g.ldy, g.n, g.k);
  else launch(rows_kernel<T, GROUP, false, MROWS>, g.w, g.ldw, g.x, g.ldx, g.bias, g.y, g.ldy, g.n, g.k);
}

template <class T, int MROWS> void launch_rows_m(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  const bool vec = g.k % kVec<T> == 0 && g.ldw % kVec<T> == 0 && (MROWS == 1 || g.ldx % kVec<T> == 0) && aligned16(g.w) &&
                   aligned16(g.x);
  // The narrowest group that still puts ~8 warps on every SM (enough 16-byte loads in flight to
  // cover HBM latency), but no wider than leaves each thread 4 loads per row.
  const int64_t want_warps = 8 * device_properties(device).multiProcessorCount;
  const int64_t per_row = vec ? g.k / kVec<T> : g.k;
  int group = 32;
  while (group < 256 && g.n * group / 32 < want_warps && per_row / (2 * group) >= 4) group *= 2;
  switch (group) {
    case 32: return launch_rows_group<T, 32, MROWS>(g, vec, stream);
    case 64: return launch_rows_group<T, 64, MROWS>(g, vec, stream);
    case 128: return launch_rows_group<T, 128, MROWS>(g, vec, stream);
    default: return launch_rows_group<T, 256, MROWS>(g, vec, stream);
  }
}

template <class T> void launch_rows(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  switch (g.m_rows) {
    case 1: return launch_rows_m<T, 1>(g, device, stream);
    case 2: return launch_rows_m<T, 2>(g, device, stream);
    case 3: return launch_rows_m<T, 3>(g, device, stream);
    case 4: return launch_rows_m<T, 4>(g, device, stream);
    case 5: return launch_rows_m<T, 5>(g, device, stream);
    case 6: return launch_rows_m<T, 6>(g, device, stream);
    case 7: return launch_rows_m<T, 7>(g, device, stream);
    default: return launch_rows_m<T, 8>(g, device, stream);
  }
}

// The split columns kernel's f32 accumulator, one per output, in the stream's zeroed scratch
// (columns_finalize_kernel leaves it zero).
float* split_accumulator(int device, cudaStream_t stream, int64_t n) {
  return static_cast<float*>(zeroed_stream_scratch(device, stream, ScratchPurpose::GemvSplitK, n * 4));
}

// The launch configuration of the cluster columns kernels: tiles x cluster blocks of `threads`,
// the cluster along y.
struct ClusterLaunch : DependentLaunch {
  ClusterLaunch(unsigned tiles, unsigned cluster, cudaStream_t stream, bool pdl, int threads = kThreads)
      : DependentLaunch(dim3(tiles, cluster), dim3(static_cast<unsigned>(threads)), 0, stream, pdl) {
    cluster_y(cluster);
  }
};

// The largest cluster the cluster columns kernel `kernel` (blocks of `threads`) may use on
// `device` (compute capability 9.0 or newer), 0 where it cannot run: a binary that carries the
// kernel only for an older architecture (its body is compiled out there). 16 where the GPU can
// schedule clusters of 16 of its blocks (a non-portable size), else the portable 8. Cached per
// kernel and device.
int cluster_size_limit(const void* kernel, int device, int threads = kThreads) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> limits;
  std::lock_guard lock(mutex);
  const auto [it, inserted] = limits.try_emplace({kernel, device}, 0);
  if (!inserted) return it->second;
  if (kernel_ptx_version(kernel, device) < 90) return it->second;
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const ClusterLaunch launch(1, kMaxClusterSize, nullptr, false, threads);
  int largest = 0, clusters = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, kernel, &launch.config));
  if (largest >= kMaxClusterSize) EMBER_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config));
  it->second = clusters > 0 ? kMaxClusterSize : 8;
  return it->second;
}

// Clusters of `cluster` blocks (of `threads`) of `kernel` resident at once on `device`, after
// cluster_size_limit allowed its sizes (cached per kernel, device and size).
int resident_clusters(const void* kernel, int device, int threads, int cluster) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, std::pair<int, int>>, int> counts;
  std::lock_guard lock(mutex);
  const auto [it, inserted] = counts.try_emplace({kernel, {device, cluster}}, 0);
  if (inserted) {
    const ClusterLaunch launch(1, static_cast<unsigned>(cluster), nullptr, false, threads);
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&it->second, kernel, &launch.config));
  }
  return it->second;
}

// v9 (session 6): the batch kernel with 256-thread blocks on the small and mid columns shapes,
// measured first in bench/gemv_probe.cu (H200, 2026-11-30, bf16, weights from HBM, us):
//   C4 T256 L4 (32-column tiles, 64 slices, 4 loads per thread: a batch is 256 rows of K) for
//   N < 256, and for N <= 1024 at K > 2304 ("columns3", v5's cluster kernel -> this): 2048x32
//   3.10 -> 2.25 (cluster 16), 2048x128 3.28 -> 2.48, 2880x32 3.46 -> 2.34, 2880x512 4.14 ->
//   3.43, 4096x1024 5.28 -> 4.94, 8192x1024 7.99 -> 7.56 (C4 T256 L8 7.16 there).
//   C16 T256 L8 (128-column tiles, 16 slices) elsewhere up to K 3584, N 9216 ("columns3" and
//   "columns4"; the kernel the host ran before -> this, v7 = C16 T512 L8 or C4 T1024 L8):
//   2048x256 3.34 -> 2.67, 2048x512 3.76 -> 2.97, 2048x768 3.98 -> 3.17, 512x2048 v7 3.59 -> 3.24,
//   768x2048 v7 3.91 -> 3.59, 1792x2048 v7 4.90 -> 4.65, 2048x2048 v7 5.19 -> 4.92, 2048x4096 v7
//   7.19 -> 6.48, 2048x6144 v7 8.54 -> 8.43, 2048x7168 v7 9.41 -> 9.39, 2048x8192 v7 10.82 ->
//   10.41, 2304x2048 v5 6.14 -> 5.89, 2304x9216 v5 13.55 -> 12.84, 2880x2880 v5 7.70 -> 7.25,
//   2880x4096 v5 9.45 -> 8.29, 2880x5760 v5 11.36 -> 10.37, 3584x2048 v5 7.39 -> 6.26. (At
//   2880x512 C16 lost to C4: 3.86 vs 3.43. Other tiles won single shapes by a few percent: C8
//   T256 L8, C16 T256 L4, C32 T256 L8.) This replaces v7's two configurations and their rules.
// K is split over the largest power-of-2 cluster with every cluster resident and at least one
// slice of rows per rank (the probe's rule). Returns false (launching nothing) for f32 (not
// measured), no 16-byte loads, below sm_90 or with fast paths disabled, outside the measured box,
// or when a rank's x range would not fit shared memory.
template <class T, int COLS, int THREADS, int L>
bool launch_batch_config(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  const auto kernel = reinterpret_cast<const void*>(batch_columns_kernel<T, COLS, THREADS, L>);
  const int max_cluster = cluster_size_limit(kernel, device, THREADS);
  if (max_cluster == 0) return false;  // no sm_90 code in this binary
  const int64_t tiles = (g.n + COLS * kVec<T> - 1) / (COLS * kVec<T>);
  constexpr int64_t kSlicesDown = THREADS / COLS, kRows = L * kSlicesDown;
  int cluster = 1;
  while (2 * cluster <= max_cluster && g.k / (2 * cluster) >= kSlicesDown && tiles <= resident_clusters(kernel, device, THREADS, 2 * cluster))
    cluster *= 2;
  const int64_t range = (g.k + cluster - 1) / cluster;
  if ((range + kRows - 1) / kRows * kRows > kMaxXRange) return false;
  const int n = static_cast<int>(g.n), k = static_cast<int>(g.k), k_per_rank = static_cast<int>(range);
  if (cluster == 1) {  // a plain launch, as measured (a one-block cluster needs no mbarrier)
    DependentLaunch(static_cast<unsigned>(tiles), THREADS, 0, stream, g.pdl)(batch_columns_kernel<T, COLS, THREADS, L>, g.w, g.ldw, g.x,
                                                                             g.bias, g.y, n, k, k_per_rank);
    return true;
  }
  ClusterLaunch(static_cast<unsigned>(tiles), static_cast<unsigned>(cluster), stream, g.pdl, THREADS)(
      batch_columns_kernel<T, COLS, THREADS, L>, g.w, g.ldw, g.x, g.bias, g.y, n, k, k_per_rank);
  return true;
}

template <class T> bool launch_columns_batch(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    if (!fast_paths_enabled(device, 90)) return false;
    if (g.n < 256 || (g.n <= 1024 && g.k > 2304)) return launch_batch_config<T, 4, 256, 4>(g, device, stream);
    if (g.n <= 9216 && g.k <= 3584) return launch_batch_config<T, 16, 256, 8>(g, device, stream);
    // 96-136 MB, both sides >= 3584, K <= 8192: 512-thread tiles of 128 columns. The probe
    // (bench/gemv_probe.cu "columns5", H200, session 7), us against the split-K/cluster kernels:
    // 4096x14336 30.93 -> 29.82, 3584x14336 27.24 -> 26.76, 8192x8192 34.95 -> 34.14, and at K
    // 14336: 14336x4096 31.26 -> 30.65, 14336x3584 27.81 -> 27.19. In ember (ccd9206, decode
    // bench, torch in the same run): 4096x14336 30.50 -> 29.35 (4.00 TB/s), 3584x14336 27.06 ->
    // 26.42, 8192x8192 34.00 -> 33.22, but 14336x4096 30.71 -> 31.90 and 14336x3584 27.36 ->
    // 27.06, so K 14336 keeps the older kernels.
    const int64_t elements = g.n * g.k;
    if (g.n >= 3584 && g.k >= 3584 && g.k <= 8192 && elements >= (48ll << 20) && elements <= (68ll << 20))
      return launch_batch_config<T, 16, 512, 8>(g, device, stream);
    return false;
  }
}

// One cluster per column tile, when that gives the GPU enough to do. Returns false (launching
// nothing) where the cluster kernel cannot run (below sm_90, or fast paths disabled:
// EMBER_DISABLE_FAST_PATHS=1 runs v4's kernel) or the split-K kernel is the better plan.
template <class T, bool VEC> bool launch_columns_cluster(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  using Tile = ClusterTile<T, VEC, kSmallColThreads>;
  if (!fast_paths_enabled(device, 90)) return false;
  // Measured on the H200 against v4 (11ca45d): the cluster path wins where N <= 1024 (2048x512
  // 5.67 -> 4.13 us, 8192x1024 8.84 -> 8.36) or the matrix has at most ~3.7M elements (768x2048
  // 4.97 -> 4.40, 2048x1792 6.60 -> 6.03), and loses from 2048x2048 up (6.32 -> 8.08, 4096x4096
  // 11.6 -> 17.3): its 8-thread tiles read 128 bytes per row per warp load where v4 reads 512.
  if (g.n > 1024 && g.n * g.k > kClusterMaxElements) return false;
  const auto kernel = cluster_columns_kernel<T, VEC, kSmallColThreads, false>;
  const int max_cluster = cluster_size_limit(reinterpret_cast<const void*>(kernel), device);
  if (max_cluster == 0) return false;
  const int64_t sms = device_properties(device).multiProcessorCount;
  const int64_t tiles = (g.n + Tile::kCols - 1) / Tile::kCols;
  // Double the cluster (the split of K) until ~4 blocks per SM, while each thread keeps >= 4
  // rows of K (rows_kernel's measured best keeps 4 loads per thread on small shapes).
  int64_t cluster = 1;
  while (cluster < max_cluster && tiles * cluster < 4 * sms && g.k / (2 * Tile::kSlices * cluster) >= 4) cluster *= 2;
  // Long K and few tiles: a thread that walks > 2 steps of loads on fewer than 2 blocks per SM
  // waits out more round trips than the split-K kernel's atomics and ticket cost.
  const int64_t rows_per_thread = ((g.k + cluster - 1) / cluster + Tile::kSlices - 1) / Tile::kSlices;
  if (tiles * cluster < 2 * sms && rows_per_thread > 2 * kClusterLoads) return false;
  const int64_t k_per_rank = (g.k + cluster - 1) / cluster;
  ClusterLaunch(static_cast<unsigned>(tiles), static_cast<unsigned>(cluster), stream, g.pdl)(kernel, g.w, g.ldw, g.x, g.bias, g.y, g.n, g.k,
                                                                                             k_per_rank);
  return true;
}

// Large N (lm_head shapes, 16-byte loads): tiles of 16 threads x 16 bytes with x staged in shared
// memory, one cluster per tile, K split over the cluster only as far as each block's x range
// needs (N >= 100000 gives >= 782 tiles, already ~6 blocks per SM). Measured on the H200 with
// bench/gemv_probe.cu (2026-11-30, "cluster C16 T256 L8"), against v4's split-K kernel that ran
// these shapes: 8192x128256 510 -> 476 us, 4096x128256 258 -> 242, 2304x256000 287 -> 270
// (~4.35 TB/s). Below ~100k columns it lost wherever measured (2048x8192 11.4 -> 15.6 us,
// 2048x4096 7.6 -> 9.9), so smaller N keeps the v4/v5 rules. Returns false (launching nothing)
// where it does not apply.
template <class T> bool launch_columns_wide(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  using Tile = ClusterTile<T, true, kWideColThreads>;
  if (g.n < kWideMinColumns || !fast_paths_enabled(device, 90)) return false;
  const auto kernel = cluster_columns_kernel<T, true, kWideColThreads, true>;
  const int max_cluster = cluster_size_limit(reinterpret_cast<const void*>(kernel), device);
  if (max_cluster == 0) return false;
  const int64_t sms = device_properties(device).multiProcessorCount;
  const int64_t tiles = (g.n + Tile::kCols - 1) / Tile::kCols;
  // Double the cluster until ~4 blocks per SM while each thread keeps a full batch of loads, then
  // until each block's x range fits in shared memory (K > 16 * 4096 cannot: v4 runs it).
  int64_t cluster = 1;
  while (cluster < max_cluster && tiles * cluster < 4 * sms && g.k / (2 * Tile::kSlices * cluster) >= kClusterLoads) cluster *= 2;
  while (cluster < max_cluster && (g.k + cluster - 1) / cluster > kMaxXRange) cluster *= 2;
  const int64_t k_per_rank = (g.k + cluster - 1) / cluster;
  if (k_per_rank > kMaxXRange) return false;
  // A last wave of blocks less than half full costs more than the wide tiles save: 2048x151936
  // (1187 tiles, 1.12 waves) took 159 us against v4's 140 (H200, 5187fbe), while 1002 tiles (0.95
  // waves) and 1940-2004 (1.84-1.9 waves) won.
  const double waves = static_cast<double>(tiles * cluster) / static_cast<double>(sms * resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, device));
  if (waves > 1 && waves - std::floor(waves) < 0.5) return false;
  ClusterLaunch(static_cast<unsigned>(tiles), static_cast<unsigned>(cluster), stream, g.pdl)(kernel, g.w, g.ldw, g.x, g.bias, g.y, g.n, g.k,
                                                                                             k_per_rank);
  return true;
}

template <class T> void launch_columns(const GemvArgs<T>& g, int device, cudaStream_t stream) {
  const bool vec = g.n % kVec<T> == 0 && g.ldw % kVec<T> == 0 && aligned16(g.w) && aligned16(g.y);
  if (vec && launch_columns_wide<T>(g, device, stream)) return;
  if (vec && launch_columns_batch<T>(g, device, stream)) return;
  if (vec ? launch_columns_cluster<T, true>(g, device, stream) : launch_columns_cluster<T, false>(g, device, stream)) return;
  const int64_t tile = vec ? 32 * kVec<T> : 32;
  const int64_t tiles = (g.n + tile - 1) / tile;
  // Split K over blocks until ~4 blocks per SM, each thread keeping >= 2 rows of K. Where the
  // splits of one whole wave at the kernel's occupancy (6 blocks of 256 threads per SM on the
  // H200) keep >= kWaveSplitRows rows of K each, that wave instead (v14): the large shapes then
  // leave no SM with a fifth block while most have four, and the shorter slices end closer
  // together. Measured (H200, session 12, one build, two runs each, us, ~4 per SM -> one wave):
  // 1xKxN 14336x3584 26.23-26.24 -> 26.08, 8192x28672 107.48-107.50 -> 106.30-106.33, 28672x8192
  // 106.29-106.38 -> 105.83-106.08, 14336x4096 the same 29.79-29.86; but 7168x2048 (72 rows per
  // split) 10.65-10.69 -> 11.20-11.21, 9216x2304 (105) 13.88-13.90 -> 14.06-14.07 and 4096x4096
  // (83) 11.28-11.48 -> 11.50-11.52, which keep ~4 per SM. (At ~6-12 per SM rounded up, part of a
  // second wave: 14336x3584 26.70 -> 29.2-32.3 us.)
  const int64_t sms = device_properties(device).multiProcessorCount;
  int64_t splits = std::max<int64_t>(1, (4 * sms + tiles - 1) / tiles);
  const auto kernel = vec ? reinterpret_cast<const void*>(columns_kernel<T, true, true>) : reinterpret_cast<const void*>(columns_kernel<T, false, true>);
  const int64_t wave_blocks = sms * resident_blocks_per_sm(kernel, kThreads, device), wave_splits = wave_blocks / tiles;
  if (wave_splits > 0 && g.k / wave_splits >= kWaveSplitRows) splits = std::max(splits, wave_splits);
  // Never part of a second wave where one wave holds every tile: v16's first build ran the kernel
  // at 44 registers (5 blocks per SM), where ~4 per SM rounded up to whole splits made
  // 2048x65536's 256 tiles x 3 splits 1.16 waves, 63.2 -> 76.1 us (H200, session 26).
  if (wave_splits > 0 && splits * tiles > wave_blocks) splits = wave_splits;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, g.k / (2 * kSlices)));
  splits = std::min<int64_t>(splits, 65535);
  const int64_t k_per_split = (g.k + splits - 1) / splits;
  splits = (g.k + k_per_split - 1) / k_per_split;
  float* accum = splits > 1 ? split_accumulator(device, stream, g.n) : nullptr;
  const DependentLaunch launch(dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), kThreads, 0, stream, g.pdl);
  const auto run = [&](auto kernel) { launch(kernel, g.w, g.ldw, g.x, g.bias, g.y, g.n, g.k, k_per_split, accum); };
  if (splits == 1) return vec ? run(columns_kernel<T, true, false>) : run(columns_kernel<T, false, false>);
  vec ? run(columns_kernel<T, true, true>) : run(columns_kernel<T, false, true>);
  // v16: a kernel of its own finishes the split sums, where the last block of each tile had (by an
  // atomic ticket after a fence). One build, a temporary switch, two alternating runs over the 48
  // 1xKxN shapes (H200, session 26, us, ticket -> finalize): 4096x2048 8.04-8.18 -> 7.13-7.20,
  // 4096x4096 11.36-11.37 -> 10.42, 7168x2048 10.69-10.78 -> 9.94-10.00, 9216x2304 13.94-13.96 ->
  // 13.36-13.39, 14336x3584 26.59-26.62 -> 25.86-25.94, 14336x4096 29.63-29.75 -> 29.16-29.17,
  // 28672x8192 105.56-105.58 -> 105.00-105.03, 8192x28672 106.32-106.53 -> 106.05-106.09; the
  // shapes on other kernels within 1.2%. Without dependent launches (EMBER_DISABLE_PDL=1) the two
  // were within 1% of each other but 8192x28672 (+0.8%) and 4096x2048 (-3%).
  DependentLaunch(static_cast<unsigned>((g.n + kThreads - 1) / kThreads), kThreads, 0, stream, dependent_launches_enabled(device))(
      columns_finalize_kernel<T>, g.bias, g.y, g.n, accum);
}

// The element type the kernels use for each ember dtype.
template <class F> void dispatch_gemv_type(DType d, F&& f) {
  if (d == kFloat32) f(static_cast<float*>(nullptr));
  else if (d == kFloat16) f(static_cast<__half*>(nullptr));
  else f(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace

bool gemv_applies(const Tensor& a, const Tensor& b, const Tensor& out) {
  const DType d = out.dtype();
  if (d != kFloat32 && d != kFloat16 && d != kBFloat16) return false;
  if (a.dtype() != d || b.dtype() != d || a.size(0) != 1) return false;
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  if (k == 0) return false;
  if (m == 1) {  // x @ B: x = a row, out a row
    return (a.stride(2) == 1 || k == 1) && (out.stride(2) == 1 || n == 1) && (b.stride(1) == 1 || b.stride(2) == 1);
  }
  if (n == 1) {  // A @ y: y = b column, out a column
    return (b.stride(1) == 1 || k == 1) && (out.stride(1) == 1) && (a.stride(2) == 1 || a.stride(1) == 1);
  }
  // 2..8 rows of x against a weight unit-stride along K (x @ W^T with W [N, K]). 16-bit weights
  // beyond 32 MiB or 6144 outputs go to cuBLAS, which streams them faster than this file's kernels
  // (v15's numbers).
  if (d != kFloat32 && (k * n * 2 > (int64_t{32} << 20) || n > 6144)) return false;
  return m <= kGemvMaxRows && a.stride(2) == 1 && b.stride(1) == 1 && out.stride(2) == 1;
}

bool gemv_bias_applies(const Tensor& bias, const Tensor& out) {
  if (bias.dtype() != out.dtype() || bias.size(0) != 1) return false;
  // The bias varies along the output dim only: [1, 1, N] for rows of outputs, [1, M, 1] for a column.
  if (out.size(1) == 1 || out.size(2) != 1) return (bias.stride(1) == 0 || bias.size(1) == 1) && (bias.stride(2) == 1 || bias.size(2) == 1);
  return bias.stride(1) == 1;
}

void gemv(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const int device = out.device().index;
  cudaStream_t stream = current_raw_stream(device);
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  // Programmatic dependent launches (dependent_launch.cuh) below 16 MiB of weights only. Measured
  // on the H200 (session 10, decode bench, 88 shapes, each against EMBER_DISABLE_PDL=1 in the same
  // call, the kernels triggering after their main loop): below 16 MiB every shape but one
  // (2048x1792 columns, equal) was faster, 1.04-1.36x (2048x32 rows 1.72 -> 1.26 us, 2048x2048
  // rows 4.27 -> 3.60, columns 5.35 -> 4.89); from 16 MiB up the columns kernels were slower, down
  // to 0.81x (14336x4096 30.7 -> 37.7 us, 8192x28672 109 -> 134), rows with K = 14336 0.90x, the
  // lm_head shapes unchanged. Likely the uneven start of early-resident blocks that
  // bench/stream_probe.cu "pdlgrid" shows; not pinned down for these kernels.
  const int64_t weight_bytes = (m == 1 || n != 1 ? k * n : m * k) * static_cast<int64_t>(out.itemsize());
  const bool pdl = decode_gemv_dependent(weight_bytes, device);
  dispatch_gemv_type(out.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* bias_ptr = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
    T* y = static_cast<T*>(out.raw_data());
    const T* a_ptr = static_cast<const T*>(a.raw_data());
    const T* b_ptr = static_cast<const T*>(b.raw_data());
    if (m == 1 || n != 1) {  // y[i, n] = sum_k x[i, k] B[k, n] for the m rows i of a
      GemvArgs<T> g{b_ptr, 0, a_ptr, a.stride(1), bias_ptr, y, out.stride(1), n, k, m, pdl};
      if (b.stride(1) == 1 && (n == 1 || b.stride(2) != 1 || k == 1)) {
        g.ldw = b.stride(2);
        if constexpr (sizeof(T) == 2) {
          if (mma_rows_applies(m, n, k, sizeof(T), b_ptr, g.ldw, a_ptr, g.ldx, sizeof(T), device)) {
            launch_mma_rows<T, false>({b_ptr, g.ldw, a_ptr, g.ldx, bias_ptr, y, g.ldy, m, n, k, {}, pdl}, device, stream);
            return;
          }
        }
        launch_rows<T>(g, device, stream);
      } else {
        g.ldw = b.stride(1);
        launch_columns<T>(g, device, stream);
      }
    } else {  // y[m] = sum_k A[m, k] v[k]
      GemvArgs<T> g{a_ptr, 0, b_ptr, 0, bias_ptr, y, 0, m, k, 1, pdl};
      if (a.stride(2) == 1) {
        g.ldw = a.stride(1);
        launch_rows<T>(g, device, stream);
      } else {
        g.ldw = a.stride(2);
        launch_columns<T>(g, device, stream);
      }
    }
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
