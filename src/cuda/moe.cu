// Mixture of experts on CUDA, without a single device-to-host read (the whole layer can be
// captured in a CUDA graph and replayed with different routing):
//   route_kernel        one warp per token: softmax/sigmoid scores, top-k by k rounds of warp
//                       arg-max (ties to the lower expert), renormalisation, routed scaling, and
//                       the shared expert's sigmoid gate (x . gate) when there is one.
//   permute_kernel      one block: stable counting sort of the (token, slot) pairs by expert
//                       (histogram, scan, then per chunk of 256 pairs: rank inside each warp by
//                       __match_any_sync, plus the same expert's count in earlier warps).
//   gather / silu_mul / combine   the prefill glue around grouped_mm (src/cuda/grouped_mm.cu);
//                       combine is the weighted un-permute as a gather (deterministic, no atomics).
//   gate_up_decode_kernel / down_decode_kernel   the decode layer: no permutation at all. Block
//                       y of the first kernel is pair y (or the shared expert of a token); one warp
//                       per intermediate channel streams its gate and up rows with 16-byte loads and
//                       writes silu(gate) * up. In the second, block (g, t) owns two consecutive
//                       outputs of token t, one warp per pair streams those two rows of its expert
//                       against the pair's row of h, and the block adds the weighted sums and
//                       writes them directly: the combine costs nothing.
//   gate_up_mma_kernel / down_mma_kernel   the same two steps on tensor cores (mma.sync) for 16-bit
//                       and FP8 weights, where the rows are whole 64-byte steps (the FFMA kernels
//                       above take the rest: f32, odd sizes). At T > 1 their blocks have 1, 2 or 4
//                       warps (batched_warps).
//   router_decode_kernel   the decode router: one warp per expert computes the logits (and one
//                       more the shared expert's gate; its row loaded before the wait for the
//                       kernel before, x staged once per block: at T > 1 every token's row, in a
//                       kernel of its own whose warps each take a row against 1 or 2 tokens;
//                       router_mma_kernel at T = 2..16 with 16-bit x: 16 rows against every
//                       token per block on tensor cores), then one block routes every token
//                       (route_token, as route_kernel): on sm_90 block 0 of a cluster, the logits
//                       in its shared memory; elsewhere the last block to finish, by a ticket.
// A decode layer is 3 kernels: router_decode, gate_up, down, each a programmatic dependent launch
// of the kernel before it (sm_90; cuda/dependent_launch.cuh). At T = 1 gate_up's blocks start on
// a per-pair flag the routing warp sets as it chooses each expert (expert_ready), and let down
// launch before the router has finished (poll_expert_ready).
// Versions, H200, Qwen3-30B-A3B layer at T=1 bf16 (ncu durations, normal clocks):
//   v1: router product 6.6 us, route (32 candidates per lane for any E) 20.5 us, gate_up
//       18.7 us (58% of HBM bandwidth), down 19.2 us (27%, a 64-bit division per load): layer
//       61 us in the graph-replay benchmark.
//   v2: candidates per lane from E (4 for E <= 128), router + route fused, down steps its
//       (pair, chunk) without division: layer 46.5 us (bf16). ncu: router 14 us, gate_up
//       19.3 us (56% of HBM), down 16.6 us (32%). The SASS showed why: the router and down loops
//       had ONE 16-byte load in flight per lane (each load converted before the next was
//       issued, branches between them), and gate_up at 61 registers fit 4 blocks per SM, so its
//       768 blocks ran as 1.45 waves.
//   v3: every loop loads a batch raw (Raw8) before converting any (router 8 loads per lane,
//       gate_up 2 per row, down 8), gate_up capped at 40 registers (6 blocks per SM: one wave),
//       the top-k by warp max/min reductions of an unsigned order key, and gate_up and down
//       launched as programmatic dependents (sm_90) so their launch overlaps the kernel before.
//       Layer T=1: 41.7 us bf16, 35.2 us FP8 (43.1 / 36.0 without the dependent launches);
//       ncu still gives gate_up ~21 us and down ~20 us, far from HBM speed. Likely cause, from
//       the SASS: after each batch of weight loads, every chunk's x (gate_up) or h (down) was a
//       fresh global load consumed at once, a chain of L2 round trips per batch.
//   v3.1: a token's x row and h rows are staged in shared memory once per block (x before the
//       wait for the router, overlapping it). Layer T=1: 38.6 us bf16, 31.9 us FP8; ncu: router
//       8.7 us, gate_up 22 us (2.7 TB/s, achieved occupancy 63%), down 14 us (1.8 TB/s).
//   v3.2: the router loads each token's x chunks as one batch (v3 loaded them one dependent L2
//       round trip at a time): router 6.0 us; layer T=1 37.0 us bf16, 30.3 us FP8.
//   v3.3: at T > 1 gate_up runs its pair blocks in expert order (the router's last block sorts
//       the pair slots by expert), so pairs sharing an expert read its rows back to back, the
//       later ones from L2 (64 pairs over 128 experts hit ~52 distinct experts, 128 pairs ~82).
//       Measured (9c9be22): Qwen3-30B bf16 T=16 386 -> 368 us, LFM2 T=8 232 -> 223 us; T=2..8
//       of Qwen3-30B and FP8 unchanged within the run-to-run spread (~3%).
//       Its SASS (sm_90a) shows what limits gate_up: under the 40-register cap ptxas issues the
//       second pair of row loads only after the first pair is consumed, so a lane has 2 of its 4
//       bf16 loads in flight (FP8: 2, then 6 of 8). Branch moe-gate-up-loads restructures the
//       loop so a batch's loads all issue first; bench/moe_probe.cu measures the same layout with
//       and without the cap.
//   v4 (session 5; bench/moe_probe.cu's chain section measured the structure first): down as
//       one warp per (pair, 2 consecutive outputs), block (outputs, token), its first batch of
//       weight loads issued before waiting for gate_up (gate_up triggers its dependents after its
//       own wait, so the router's ids are final); gate_up's loop in whole unpredicated batches
//       (branch moe-gate-up-loads) and FP8 gate_up at 4 blocks per SM. Qwen3-30B-A3B (H200,
//       torch in the same run): T=1 bf16 37.1 -> 28.5 us, FP8 30.4 -> 22.8; T=8 202 -> 150 /
//       168 -> 117; T=16 368 -> 270 / 323 -> 224. ncu at T=1 FP8: gate_up 13.4 us (DRAM 39%),
//       down 9.8 us (27%): both still far from HBM speed.
//   v6 (session 8; Qwen3-30B-A3B, H200, torch in the same run): gate_up on tensor cores for
//       16-bit and FP8 weights, down on tensor cores for FP8 at top-k >= 8 (gate_up_mma_kernel,
//       down_mma_kernel; kDownMmaMinTopK has the top-4 numbers),
//       and the router launched as a dependent of the kernel before it (it requests its weight rows
//       into L2 before the wait). T=1 bf16 28.6 -> 27.1 us, FP8 22.8 -> 19.4; T=8 bf16 151 -> 146,
//       FP8 117 -> 103 (2.51x torch); all 36 layer cases (T 1..64) faster than torch, geomean
//       2.54x -> 2.64x. One build, each part switched off in turn (same call): the router launch
//       0.5-0.9 us at T = 1; for bf16 weights the FFMA down beat down_mma (T=1 26.7 vs 28.6 us,
//       T=8 146 vs 152) so 16-bit down stays on down_decode_kernel; for FP8 down_mma won (T=1 19.2
//       vs 20.3, T=8 104 vs 108) and gate_up_mma won over gate_up_decode (FP8 T=1 19.2 vs 21.2,
//       T=8 104 vs 112; bf16 with the FFMA down T=1 26.7 vs 27.6, T=8 146 vs 150).
//       ncu (FP8, T=1): gate_up_mma 11.6-12.7 us (DRAM 42-46%), down_mma 9.5-10.2 us (26%): still
//       far from HBM speed.
//   v8 (session 11): the router. Per-block %globaltimer stamps (a temporary build, H200, the last
//       layer of a replayed graph, us after the router's wait) showed its tail on the critical path
//       of every T = 1 layer: Qwen3-30B-A3B bf16 logits written 1.5-1.8, ticket 2.6, routing done
//       4.6, gate_up's blocks past their wait 5.1, gate_up's last block 18.9, down's 26.9. Qwen3.5's
//       routing block took 5.1 us after its ticket: route_token's shared-expert gate, x . gate,
//       loaded one element per lane and step. Now that gate is one more row of the router product
//       (sigmoid applied there, 16-byte loads), and where each warp has at most one row the router
//       is one cluster whose logits meet in block 0's shared memory (router_decode_kernel): gate_up
//       past its wait at 4.6 us. One build, alternating runs (moe_bench 1, us): the cluster against
//       the ticket path, Qwen3-30B-A3B bf16 28.2 -> 27.5-27.7, FP8 19.8 -> 19.3, LFM2-8B-A1B bf16
//       33.1 -> 32.3, FP8 23.2 -> 22.6; the gate row, Qwen3.5-35B-A3B bf16 28.6 (the old router,
//       the session's first call) -> 25.8, FP8 22.7 -> 20.6. The routing itself (softmax 0.5 us,
//       8 rounds of top-k 0.8 us in one warp) is still ~1.5 us of the chain.
//   v9 (session 13): at T = 1 each router warp loads its weight row into registers before the
//       wait, and each block stages x once in shared memory after it, where every warp read both
//       from L2 after the wait (v8 requested the rows into L2 before it). One build, a temporary
//       switch, alternating runs (moe_bench 1, H200, us, v8 -> v9): Qwen3-30B-A3B bf16 26.56-26.61
//       -> 26.10-26.23, FP8 19.19-19.28 -> 18.77-18.79; Qwen3.5-35B-A3B bf16 24.96-24.98 ->
//       24.68-24.69, FP8 20.57-20.65 -> 20.16-20.25; LFM2-8B-A1B bf16 31.19-31.37 -> 31.00-31.02,
//       FP8 22.70-22.77 -> 22.23-22.35.
//   v10 (session 14): at T = 1 the routing warp stores pair j's expert id in a flag as soon as
//       round j has chosen it (expert_ready), and gate_up_mma_kernel's blocks of pair j poll that
//       flag instead of waiting for the whole router grid; they wait for the router only after
//       issuing their first batch of weight loads. And 16-bit down on tensor cores too
//       (down_mma_kernel with 4 steps per batch; kDownOnTensorCores has its numbers). The flags,
//       one build, a temporary switch, two alternating runs (moe_bench 1, H200, us; that call's
//       machine ran ~5% slower than the others): Qwen3-30B-A3B bf16 27.97-27.98 -> 26.42, FP8
//       19.84-19.97 -> 18.27-18.28; Qwen3.5-35B-A3B bf16 26.57-26.73 -> 24.92-25.03, FP8
//       21.33-21.39 -> 19.76-19.84; LFM2-8B-A1B bf16 33.09-33.11 -> 31.90-31.93, FP8 23.24-23.31 ->
//       21.71-21.77. Per-block %globaltimer stamps (session 11's recipe; Qwen3-30B-A3B T = 1, us
//       after the router's wait): bf16 logits 1.5-1.8, routing done 4.6, gate_up's blocks go
//       3.3-6.9 (median 4.1; all at 4.6 before), gate_up's blocks end 14.1-21.5 (90% by 17.7),
//       down's 25.3-27.4; FP8 go 3.6-8.2, gate_up ends 9.0-13.8, down's 16.9-17.9.
//   v11 (session 17): at T = 1 a gate_up_mma block lets down launch as soon as its pair's flag is
//       seen and waits for the router only as it exits (v10 waited after its first batch of loads,
//       so early pairs' blocks sat on one batch until the router's grid was done); down reads each
//       pair's expert from its flag before its own wait, and the router zeroes the flags after its
//       wait (down's block (0, 0) had, which a down block reading a flag late could race). One
//       build, a temporary switch, two alternating runs of moe_bench 1 (H200, us, v10 -> v11; that
//       build routed by logits, see below): Qwen3-30B-A3B bf16 27.42 -> 26.70-26.71, FP8 18.67-18.76
//       -> 18.01-18.09; Qwen3.5-35B-A3B bf16 29.74-29.77 -> 26.67-26.68, FP8 21.65-21.71 ->
//       19.51-19.52; LFM2-8B-A1B bf16 32.60-32.64 -> 31.35-31.39, FP8 22.11-22.21 -> 22.33-22.37
//       (its top-4 down is down_decode_kernel). With this route_token (the last call, v11 both
//       sides): Qwen3-30B-A3B 26.30-26.35 / 18.02-18.03, Qwen3.5-35B-A3B 26.37-26.40 / 19.96-19.97,
//       LFM2-8B-A1B 30.93-30.97 / 22.05-22.07.
//   v12 (session 19): at T = 1 softmax routing without a bias selects by the logits and computes
//       the winners' probabilities after the rounds (route_token), so pair j's flag no longer waits
//       for the softmax; and every decode kernel asks for the least shared memory its resident
//       blocks need (DependentLaunch::prefer_l1; ncu: the driver had given gate_up_mma 100 KB of
//       the SM's array, where its 6 blocks need 32 KB, and all shared memory, 28 KB of L1, made
//       T = 1 bf16 26.4 -> 32.8 us). One build, v11 behind a temporary switch, two alternating runs
//       (H200, us, v11 -> v12): T=1 Qwen3-30B-A3B bf16 26.52-26.59 -> 26.07-26.18, FP8 18.12-18.17
//       -> 17.63-17.74; Qwen3.5-35B-A3B bf16 22.95-22.98 -> 23.23-23.28 (slower), FP8 18.19-18.27 ->
//       17.81-17.87; LFM2-8B-A1B (sigmoid and bias: the carveout only) 30.97-31.08 -> 31.05-31.09,
//       FP8 22.17-22.18 -> 22.08-22.11; T=8 Qwen3-30B-A3B FP8 116.21-116.27 -> 115.08, the other
//       T = 8 cases within 0.5%. Separately (call 3): the carveout alone moved T = 1 by at most
//       0.16 us and T = 2..16 by 0-1% (FP8 most: Qwen3.5-35B-A3B T=16 197.1 -> 196.0), and routing
//       by logits at T = 8 (the rounds wait for nothing there) cost Qwen3.5-35B-A3B ~1 us, so it is
//       T = 1 only. Then (call 6) gate_up_mma's FP8 loop in batches of 2 steps, not 4 (kMmaSteps
//       has the numbers): T=1 FP8 17.54-17.60 -> 17.09-17.12 us.
//   v13 (session 20): 16-bit down_mma rows in batches of 3 steps, not 4 (ptxas had spilled 24
//       bytes in the loop; kDownMmaSteps has the numbers: T=1 Qwen3-30B-A3B bf16 26.1 -> 24.6 us),
//       and at T > 1 the mma kernels' blocks with fewer warps where the grid still makes 1.9 waves
//       of warps (batched_warps: gate_up FP8 down to 1 warp, 16-bit to 2; down FP8 down to 1,
//       16-bit keeps 4), so each warp streams longer for every block's fixed costs. One build,
//       EMBER_MOE_BATCHED_WARPS=4 (the old blocks) against the rule, two alternating runs (H200,
//       us, 4 warps -> rule): Qwen3-30B-A3B FP8 T=4 63.95-64.23 -> 60.39-60.47, T=8 113.79-113.97 ->
//       102.15-102.17, T=16 209.88-210.22 -> 185.26-185.42; Qwen3.5-35B-A3B FP8 T=8 104.91-105.06 ->
//       94.54-94.86, T=16 192.72-192.84 -> 167.86; bf16 -0.1 to -1.2% (Qwen3-30B-A3B T=8
//       156.27-156.45 -> 154.54-155.39); T=2 unchanged (the rule keeps 4 warps there: 1-warp blocks
//       had made Qwen3-30B-A3B T=2 FP8 36.9 -> 42.4); but LFM2-8B-A1B T=4 +1.3% (bf16 96.68 ->
//       97.97-98.06) and +1.4% (FP8 68.44-68.52 -> 69.42-69.47), its gate_up grid at 2.26 waves of
//       2-warp blocks.
//   v14 (session 21): the T > 1 router is a kernel of its own (router_decode_kernel<.., true>; the
//       T = 1 kernel's SASS is unchanged but for its shared memory offsets) that stages every
//       token's row of x in dynamic shared memory (up to 64 KB) and, where each warp has one row,
//       loads that row before its wait as at T = 1. Session 20 had found its products ending 18-21
//       us after the wait at T = 8, x's loads from global memory compiled into a chain of
//       dependent round trips in main's build; staged, x's loads are shared-memory loads, short
//       whatever the schedule. And at T = 1 a gate_up grid of more than 6 blocks per SM takes
//       the kernel built for 7 (one_wave_needs_7_blocks has the numbers). One device call,
//       main's moe.cu (b437f89) and this one in two libraries of one build, two alternating
//       runs of moe_bench (H200, us, main -> v14): T=8 Qwen3-30B-A3B bf16 154.91-154.93 ->
//       144.12-144.14, FP8 102.04-102.18 -> 91.22-91.32; Qwen3.5-35B-A3B bf16 135.55-135.66 ->
//       128.84-128.87, FP8 94.49-94.81 -> 88.25-88.49; LFM2-8B-A1B bf16 167.00-167.23 ->
//       156.07-156.23, FP8 118.46-118.56 -> 107.07-107.08; T=16 Qwen3-30B-A3B FP8 185.25-185.42
//       -> 162.91-162.95; T=2 and T=4 -2 to -8% (Qwen3.5-35B-A3B T=2 unchanged); LFM2-8B-A1B
//       T = 16 (the grouped path) unchanged; T=1 LFM2-8B-A1B bf16 30.80-30.84 -> 27.43-27.44, FP8
//       22.18-22.25 -> 19.64-19.72, Qwen3 models within 0.05 us. The call before (trial build:
//       x staged and rows preloaded at T = 1 too, in one kernel) had T=1 Qwen3.5-35B-A3B bf16
//       22.4 -> 24.5 us, hence the kernel of its own; and its switch back to x from global memory
//       at T > 1 was within 1% of staging (Qwen3-30B-A3B T=16 FP8 165.0 vs 163.0, Qwen3.5-35B-A3B
//       T=8 FP8 86.9 vs 87.8): that build's router_row batched its x loads (at most 7 of its 128-bit
//       generic loads into one register, against 21 in main's; cuobjdump sm_90a), so most of the
//       gain is the codegen, which staging keeps whatever ptxas schedules.
//   v15 (session 21): at T > 1 each router warp takes one row against 2 tokens (RouteArgs::
//       token_groups), not every token: ncu had the T = 8 router at 16 us alone (7.2 at T = 1),
//       ~63% of its warp stall samples in the products, issue-bound on one cluster's 8 SMs; now
//       ceil(T / 2) times the warps share them, on the ticket path once they outnumber a cluster's
//       128. One device call, v14's moe.cu and this one in two libraries of one build, two
//       alternating runs (H200, us, v14 -> v15): T=8 Qwen3-30B-A3B bf16 143.86-144.03 ->
//       140.11-140.14, FP8 91.11-91.20 -> 87.11-87.19; Qwen3.5-35B-A3B bf16 128.74-129.03 ->
//       124.52-124.59, FP8 88.20-88.48 -> 84.49-84.52; LFM2-8B-A1B bf16 156.13-156.19 ->
//       151.42-151.74, FP8 107.05-107.31 -> 102.66-102.71; T=16 Qwen3-30B-A3B FP8 162.81-163.12 ->
//       152.78-152.92, Qwen3.5-35B-A3B FP8 152.39-152.71 -> 141.00-141.35; T=4 within 0.6 but
//       LFM2-8B-A1B bf16 92.5 -> 91.2. T = 2 lost: one group of 2 tokens, v14's split, yet
//       Qwen3.5-35B-A3B bf16 46.07-46.10 -> 47.17-47.44, FP8 37.09-37.14 -> 38.34-38.47, the other
//       models +0.3-0.5 (every token per warp in the same build ran T = 2 at the same times, so it
//       is this build's code for that kernel, not the split). Then 1 token per warp where the
//       (row, token) tasks fit one wave of 512-thread blocks (call 9, one build, 2 -> 1 token per
//       warp, us): T=2 -0.1 to -1.0 (Qwen3.5-35B-A3B bf16 47.43-47.56 -> 46.53-46.57, FP8 38.39 ->
//       37.36), T=4 -0.5 to -1.0, T=8 -0.1 to -0.7, Qwen3-30B-A3B T=16 -0.7 to -1.2; Qwen3.5-35B-A3B
//       T=16 (two waves at 1) +4.7 to +5.3, so it keeps 2 there.
//   v16 (session 22): the down kernels' grid has the tokens as x (down_grid), so the blocks of one
//       output group run together and tokens whose pairs share an expert read its rows about at
//       once, the later ones from L2; before, a token's blocks all ran before the next token's
//       (ncu, session 21: T = 8 down at 73% of peak DRAM throughput for 55 us, ~190 MB, about every
//       pair's rows, where gate_up, in the router's expert order, read each distinct expert once;
//       session 22's ncu: down 163.7 MB at T = 8, the distinct experts' rows). One device call, main's moe.cu
//       (eb522ee) and this one in two libraries of one build, two alternating runs of moe_bench
//       (H200, us, best of two, main -> v16): Qwen3-30B-A3B T=16 bf16 249.05 -> 234.57, FP8 151.95
//       -> 147.13, T=8 140.73 -> 139.56, FP8 86.55 -> 85.10, T=4 FP8 54.27 -> 53.62; LFM2-8B-A1B
//       bf16 T=4 91.48 -> 89.70, T=8 152.33 -> 149.92; Qwen3.5-35B-A3B FP8 T=16 141.27 -> 139.29,
//       T=8 84.25 -> 83.68; but Qwen3.5-35B-A3B bf16 T=8 125.26 -> 126.55 and T=16 222.15 ->
//       223.25 (E = 256: few shared experts), LFM2-8B-A1B FP8 T=8 102.17 -> 102.72; T=2 within
//       0.6%; geomean over the 24 cases of T 2..16 0.993.
//   v17 (session 22): the T > 1 router on tensor cores (router_mma_kernel) for 16-bit x, T <= 16:
//       a block per 16 router rows, its warps splitting H, every token's x staged as one batch of
//       loads per thread; a cluster where the blocks fit one. ncu (session 22, v16) had the T > 1
//       router alone at 9.0-9.5 us (T=2), 11.4-12.1 (T=8) and 15.0-16.4 (T=16) against 7.2-7.6 at
//       T = 1; router_mma_kernel 7.5-8.2, 8.8-9.6, 11.2-11.9. Layer numbers at the launch rule in
//       moe_layer: every T = 2..16 decode case faster, Qwen3.5-35B-A3B FP8 T=8 83.6 -> 78.8 us. The
//       scalar T > 1 kernel (f32 x, H % 32 != 0, T > 16) stages x the same way since the review
//       after (stage_token_rows; not measured: its cases are outside the benchmark).
//   v18 (session 24): FP8 down_mma loads its block scales with its weights, before the wait, so
//       all its h loads go before the first mma (down_mma_steps has the SASS and the numbers: T=1
//       Qwen3.5-35B-A3B 18.0 -> 17.5 us, T=8 -0.7 us, T=1 Qwen3-30B-A3B unchanged, 17.14 ->
//       17.20). Only the FP8 down_mma kernels' SASS changed. (this)
//   Session 23's timer stamps (branch s23-trials; docs/perf-runs/2026-12-01-s23-stamps.txt;
//   Qwen3-30B-A3B T = 1 FP8, us after the router's wait, a machine at 17.7 us per layer): the
//   router's x staged 0.6-1.0, its products stored 1.7-2.3, the cluster barrier passed 2.6-2.8,
//   the flags 3.0-4.7 (0.19 us a round); gate_up's blocks go 0.3-1.3 us after their flag and end
//   8.3-12.5; down's blocks start only as gate_up's leave (6.8-12.3: 4 down_mma blocks of 128
//   registers fill an SM, as 7 gate_up_mma blocks of 72 do), pass their wait 13.3-13.6 (0.6-1.0 us
//   after gate_up's last block) and sum their pairs at 15.2-16.6. What those 1.9-3.3 us are was not
//   separated: rows requested late (as the blocks started), or the two L2 round trips the FP8
//   down_mma SASS has after its wait (sm_90a: 5 of the 6 h loads, then the first mma, then the 6th
//   h load and the block scales' loads; v18 loads the scales before the wait, and only
//   Qwen3.5-35B-A3B's T = 1 layer gained by it, 0.5 us). The router (512 threads of
//   110 registers a block) cannot start beside down's blocks either, so in the benchmark its
//   "preloaded" rows are requested as the previous layer's down ends.
//   Rejected in session 23 (branch s23-trials; one build, a host-only switch, two alternating runs
//   of moe_bench 1, H200, us, v17 -> trial; docs/perf-runs/2026-12-01-s23-ab.txt):
//   - T = 1 routing by ranks, every flag at once: the routing block's 512 threads, 64-bit keys
//     (order key, then the lower expert) in shared memory, thread (run, expert) counting the keys
//     above its expert's in one run of them (broadcast loads), flags stored by the k winners.
//     Qwen3-30B-A3B FP8 17.94-17.95 -> 19.06-19.12, bf16 25.31-25.39 -> 26.59-26.71,
//     Qwen3.5-35B-A3B FP8 19.11-19.16 -> 19.52-19.57, bf16 25.74-25.75 -> 26.50-26.52; but
//     LFM2-8B-A1B (E = 32) FP8 20.38 -> 19.54-19.59, bf16 29.49-29.50 -> 28.77-28.81. The stamps:
//     ranking 128 experts took 1.1 us, so all 8 flags came at 3.68 against the rounds' 2.88-4.26;
//     gate_up's last block ended 1 us sooner (11.74 against 12.77) but its blocks ended together
//     (median 11.0 against 10.2), so down's blocks started, and requested their rows, later: down
//     ended at 18.1 against 16.9. So the early pairs' head start seems to let down's rows stream
//     under gate_up. (A first form, an expert's comparisons split over 4 lanes of a warp with 4-way bank
//     conflicts: Qwen3-30B-A3B FP8 19.48-19.53.) Then ranks in one warp where E <= 32 (lane e holds
//     expert e, 32 shuffles; E > 32 kept the rounds): LFM2-8B-A1B slower, FP8 19.83 -> 20.55-20.56,
//     bf16 27.66-27.86 -> 28.43-28.45, where the block's form had won; not traced.
//   Rejected in session 22 (branch s22-trials; one build, main's moe.cu and the trial in two
//   libraries, two alternating runs of moe_bench, H200, us, v17 -> trial):
//   - x staged by cp.async in the gate_up kernels (stage_row, stage_x_f16 converting in place), so a
//     T > 1 pair block waits one L2 round trip, not a chain of 4 (hidden 2048, 2-warp blocks),
//     before its first weight loads (batches of register loads had made ptxas spill 28-56 bytes in
//     every gate_up_mma loop; cp.async left the registers as they were). Slower at every T: T=1
//     Qwen3-30B-A3B bf16 24.81-24.87 -> 26.70-26.78, FP8 17.18-17.26 -> 18.75-18.86; T=8 bf16
//     138.08-138.11 -> 140.99-141.02, FP8 84.48-84.54 -> 92.08-92.12, LFM2-8B-A1B FP8 100.8 ->
//     110.2; T=16 FP8 144.3 -> 153.2-153.4. Not traced.
//   Rejected in session 20 (branch s20-trials; one build, a temporary switch, two alternating runs
//   of moe_bench, H200, us, v12 -> trial):
//   - T = 1 gate_up_mma at 64 registers (launch bounds of 8 blocks per SM), so a down block fits
//     beside ~6 gate_up blocks from the start: LFM2-8B-A1B (top-4: down_decode_kernel, 8K
//     registers a block) bf16 31.06-31.09 -> 28.48-28.49, FP8 22.27-22.41 -> 20.04-20.05, but
//     Qwen3-30B-A3B bf16 26.08-26.15 -> 26.67-26.74, FP8 17.04-17.09 -> 17.53, Qwen3.5-35B-A3B FP8
//     17.83-17.89 -> 18.40-18.46 (FP8 spills 36 bytes at 64 registers). v14 takes 7 blocks per SM
//     where the grid needs more than 6 for one wave (LFM2-8B-A1B only of the three).
//   - T > 1 router with every token's row of x staged in (dynamic) shared memory and its rows
//     preloaded before the wait, as at T = 1: T=8 Qwen3-30B-A3B bf16 145.50-145.53 -> 146.07-146.31,
//     Qwen3.5-35B-A3B 129.78-130.01 -> 131.83-131.90, T=2 within 0.1 except Qwen3.5-35B-A3B +0.7.
//     Yet per-block stamps put the router's products at 18-21 us after its wait at T = 8 (5.6 at
//     T = 2; 1.7 at T = 1) with the HBM idle, ncu gives the kernel 24-25.5 us at T = 8 (7.2 at
//     T = 1), and its SASS (ncu source counters) shows router_row's x loads as generic LD.E.128
//     issued one at a time, each consumed before the next: 64 dependent round trips per warp at
//     T = 8. Why staging x did not shorten the layer: that build's router_row happened to batch most
//     of its x loads (its longest chain 8 loads into one register, against 17 here and in 3b13c05;
//     session 18's 2d4ad93 has none, cuobjdump, sm_90a), so its baseline was fast already (T=8 FP8
//     103.4 us against 113.8 in the other calls' builds). The T >= 2 "machine" spread seen since
//     session 15 may be this codegen; v14 stages x at every T > 1.
//   - The router letting gate_up launch only as it ends (T > 1): T=8 within 0.3 us.
//   Rejected in session 15 (each one build with a temporary switch, alternating runs of moe_bench
//   1, H200, us, v10 -> trial):
//   - Routing in the decode kernels' blocks (branch moe-route-in-blocks). At T = 1 the router wrote
//     only the logits and exited; every gate_up block waited for it and routed the token itself, as
//     far as its own pair (block (0, 0) all k pairs and the weights). Down's blocks routed again (v1:
//     route_token's softmax and rounds; Qwen3-30B-A3B bf16 26.02-26.07 -> 29.34-29.47, FP8
//     18.71-18.80 -> 22.73, LFM2-8B-A1B bf16 31.98-31.99 -> 34.51-34.56), or with the logits as keys
//     (v2, no exponentials before the rounds: 26.35-26.41 -> 27.92-27.94, FP8 18.88-18.91 ->
//     21.38-21.48), or read the experts gate_up's blocks published in flags (v3, each lane's
//     candidates also sorted once so a round is two reductions and a shift: 26.43-26.46 ->
//     27.69-27.78, FP8 18.72 -> 20.08-20.17, LFM2-8B-A1B bf16 32.69-32.83 -> 37.41-37.50;
//     Qwen3.5-35B-A3B within +0.1..+1.0). Per-block timestamps: the blocks went at 3.3-7.7 us (median
//     4.6-5.1) against the flags' 3.6-5.9 (median 4.1-4.6): from the last logit (1.5-2.0 us) the
//     router grid's completion, each block's L2 read of the logits and its rounds took longer than
//     one routing warp setting flags; v2's down blocks spent 2.3 us routing (L2 reads behind
//     gate_up's traffic).
//   - The clustered router's block 0 marking its logit slots pending (a NaN payload) before the
//     cluster's first arrival and its routing warps polling them, in place of the cluster barrier
//     after the products (branch moe-router-dsmem-poll; one build, alternating, moe_bench 1 twice
//     and 8 once, us, barrier -> poll): Qwen3-30B-A3B bf16 26.04 -> 26.10-26.14, FP8 17.90-17.98
//     -> 17.86-17.89, LFM2-8B-A1B bf16 31.37-31.46 -> 31.22-31.38, FP8 21.48-21.55 -> 21.28-21.36,
//     T = 8 within 0.5%: the barrier was not what the routing waits for. (racecheck flagged the
//     polled slots and the writes of blocks that exit without a barrier.)
//   Session 16 probe (branch s16-router-clock; clock64 of the routing SM, us after the router's
//   wait, Qwen3-30B-A3B T = 1 bf16, H200): x staged 0.57, own products 1.67, cluster barrier 2.22,
//   logits in registers 2.38, softmax done 2.87, round 1 3.07, each round +0.143, round 8 4.07,
//   ids/weights 4.18. The softmax is on every flag's path though, without a selection bias, the
//   rounds need only the logits' order (tried in session 17, below).
//   Rejected in session 17 (one build each, a temporary switch, alternating runs of moe_bench 1,
//   H200, us):
//   - Routing by the logits (softmax without a bias: the exact softmax's order; the softmax after
//     the rounds, the winners' probabilities gathered by shuffles after them; order keys computed
//     once; up to 4 candidates per lane sorted once, so a round is two reductions and a shift).
//     Against this route_token, both in the v11 build (last call): Qwen3-30B-A3B bf16 26.30-26.35
//     -> 26.47-26.56, FP8 18.02-18.03 -> 18.06-18.11; Qwen3.5-35B-A3B bf16 26.37-26.40 ->
//     28.07-28.14, FP8 19.96-19.97 -> 20.31-20.37; LFM2-8B-A1B (sigmoid and bias: the sorted rounds
//     only) bf16 30.93-30.97 -> 31.16, FP8 22.05-22.07 -> 22.44-22.50. Earlier calls had compared
//     it only with the same code selecting by scores (by logits 0.2-0.4 us faster there), and with
//     8 candidates sorted per lane (E = 256) Qwen3.5-35B-A3B lost another ~1 us. So the rewrite's
//     other changes (keys computed once, the gather after the rounds) cost more than selecting
//     before the softmax saved; which one was not traced.
//   - gate_up's T = 1 blocks in SM-major order: block b took item (b mod SMs) * blocks per SM +
//     b / SMs, so that, were blocks b, b + SMs, ... dispatched to one SM, each SM's blocks would
//     share a pair and poll one flag without its other blocks' weight loads queued ahead.
//     bench/stream_probe.cu "dispatch" showed the H200 does not dispatch so (SM 0 ran blocks 8,
//     140, 272, 412, 536, 668): 2.21 pairs per SM instead of 5.76. Qwen3-30B-A3B bf16 27.14-27.23
//     -> 27.27-27.34, FP8 19.64-19.68 -> 19.80; Qwen3.5-35B-A3B bf16 29.91-30.05 -> 29.68-29.71, FP8
//     22.53-22.62 -> 22.64-22.69; LFM2-8B-A1B bf16 32.81-32.85 -> 33.04-33.15, FP8 23.22-23.28 ->
//     23.90-23.91.
//   Rejected in session 19 (branch s19-groups; one build, a temporary switch, two alternating runs of
//   moe_bench, H200, us, v11 -> trial):
//   - T > 1 gate_up with the pairs of one expert as the mma's columns (gate_up_columns_kernel): the
//     routing block cut the expert-sorted pairs into groups of up to 8 of one expert, block row y
//     took group y, each column of B one pair's row of x (staged per column, 8 rows of x in shared
//     memory), so an expert's rows were read and decoded once per group instead of once per pair.
//     Correct (the MoE tests, memcheck and racecheck passed), but slower everywhere: T=8
//     Qwen3-30B-A3B bf16 159.1-159.3 -> 207.2-207.3, FP8 116.3-116.8 -> 139.6-139.8; T=16 286 ->
//     335, 212 -> 226; even T = 2, which has few repeats to share, 52.8-52.9 -> 54.9-55.0. The 33 KB
//     of staged x per block leave ~46 KB of the SM's array as L1 (v7's and session 13's lesson); with
//     the router's and down's carveout at their least (its own not set) its T = 8 bf16 was 186.5 us,
//     still far behind.
//   Rejected in session 18 (branch s18-trials; one build each, a temporary switch, two alternating
//   runs of moe_bench, H200, us, this -> trial; only the FP8 rows change in the first):
//   - FP8 weights decoded by integer operations in gate_up_mma and down_mma: each code's sign and 7
//     exponent-mantissa bits moved into f16's or bf16's fields without rebiasing, then one 16-bit
//     multiply by 2^8 or 2^120 (exact, subnormals included), codes (0, 2) and (1, 3) of each word
//     paired so x and h were reordered to match; in place of F2FP, which sm_90 issues at a fraction
//     of the integer rate (bf16 h also took two more conversions per pair). No conversions are left
//     in the SASS, and no gain: T=1 Qwen3-30B-A3B 17.88-17.89 -> 18.10-18.15, Qwen3.5-35B-A3B
//     17.71-17.77 -> 17.79-17.92, LFM2-8B-A1B 21.75-21.84 -> 23.14-23.18; T=8 103.4-103.7 ->
//     103.2-103.3, 95.2-95.3 -> 94.2-94.4, 109.1-109.2 -> 111.4-111.5. So the conversions do not
//     limit these kernels. (FP8 mma.sync would need none, but sm_90 has none: ptxas emits F2FP and
//     HMMA for it.)
//   - gate_up_mma's T > 1 blocks issuing their first batch of weight loads before staging x (x then
//     staged and synchronised between that batch's loads and their use): more spills (FP8 76 B
//     stores, 164 loads; bf16 64 / 112) and slower: T=8 FP8 103.4 -> 104.2-104.4, 95.0-95.4 ->
//     95.5-95.7, LFM2-8B-A1B 109.0-109.2 -> 111.7-111.8, bf16 within 0.3%; T=16 FP8 185.7-186.1 ->
//     190.5-190.7, Qwen3.5-35B-A3B 172.6-172.9 -> 174.9-175.0; even T=1, whose path did not change
//     (another instantiation): Qwen3-30B-A3B bf16 26.45-26.48 -> 26.76-26.78, FP8 17.86-17.87 ->
//     18.27-18.28, LFM2-8B-A1B bf16 31.43-31.50 -> 33.15-33.25.
//   - Not run: launch bounds of 5 blocks per SM for gate_up_mma at T > 1 (against the FP8 kernel's
//     spills): at 96 registers ptxas still spills inside the loop (48 B stores, 60 loads).
//   Rejected in session 16 (branch s16-moe-flags; one build, a temporary switch, alternating runs of
//   moe_bench 1 and 8 twice each, H200, us, v10 -> trial):
//   - Down without the grid wait at T = 1: each gate_up_mma block publishes a flag (the layer's
//     epoch, advanced by the routing warp) once its 8 channels of h are written, and each down_mma
//     lane polls the flags of exactly the h chunks it loads before loading them. The flags polled
//     one acquire load at a time: Qwen3-30B-A3B bf16 26.14-26.22 -> 34.75-34.84, FP8 18.13-18.16 ->
//     28.92-29.02, Qwen3.5-35B-A3B bf16 24.15 -> 35.16-35.59, FP8 18.82-18.87 -> 26.66-26.97; a
//     batch's flags as relaxed loads at once, then one fence (second call, 25.26-25.31 ->
//     36.29-36.33, FP8 18.17-18.18 -> 30.72-30.88), and even without the fence (34.95-34.98, FP8
//     30.52-30.71). So not the polls' serial round trips; most likely 64K lanes polling the same
//     few dozen lines in L2 beside the weight stream (not traced). The expected gain was small
//     anyway: a down warp's batch needs h from 128 (bf16) or 192 (FP8) gate_up blocks, so it waits
//     for nearly the last of them, as the grid wait does.
//   - down_mma staging its second batch of steps in shared memory by cp.async, issued with the
//     first (all of Qwen3-30B's bf16 down rows in flight before the wait; 32 KB per block):
//     Qwen3-30B-A3B bf16 26.14-26.22 -> 27.04-27.10, FP8 (one batch, the staging unused, only the
//     shared memory) 18.13-18.16 -> 19.47-19.54, Qwen3.5-35B-A3B bf16 24.15 -> 25.48-25.51; T = 8
//     Qwen3-30B-A3B bf16 157.0-157.6 -> 158.3-158.6, FP8 117.1-117.2 -> 116.6-116.9.
//   Rejected in session 14 (one build, temporary switches, alternating runs, H200, us):
//   - the first form of the flags: the routing warp wrote ids[j] and then a flag by st.release
//     each round (the last flag after every id and weight, behind a fence), gate_up polled with
//     ld.acquire: Qwen3-30B-A3B bf16 26.61-26.64 -> 27.12, FP8 19.42-19.43 -> 20.02-20.28 (a
//     GPU-scope release per round on the routing warp's path), though LFM2-8B-A1B bf16 improved
//     31.81-31.89 -> 29.69-29.71.
//   - 8 copies of each flag, 128 bytes apart, each block polling copy x % 8 (some blocks go late,
//     which looked like polling contention): Qwen3-30B-A3B FP8 18.39-18.40 -> 18.55-18.61, the
//     rest within 0.1 us. More likely a poll waits behind its SM's weight loads in flight (not
//     traced).
//   - gate_up_mma_kernel's warps taking interleaved batches of steps (a block's warps read one
//     contiguous stretch of each row per round, not four): Qwen3-30B-A3B bf16 26.61-26.64 ->
//     26.77-26.80, FP8 19.42-19.43 -> 19.71-19.72; the other models within -0.1 / +0.3 us (LFM2-8B-A1B bf16
//     31.81-31.89 -> 31.72-31.74).
//   - 16-bit down_mma with 6 steps per batch (all of Qwen3-30B-A3B's down rows in flight before
//     the wait, spill-free there) and h loaded one step ahead instead of with the batch: T=1
//     Qwen3-30B-A3B bf16 28.89-29.02 -> 28.59-28.61 (a slow machine), but Qwen3.5-35B-A3B
//     25.96-26.07 -> 26.29-26.39 and T=8 Qwen3-30B-A3B 158.4 -> 159.9, Qwen3.5-35B-A3B 135.0 ->
//     149.7 (branch moe-down-steps6).
//   Rejected in session 13 (one build each, a temporary switch, alternating runs of moe_bench,
//   H200, us, chain -> trial; the code is described here, not kept):
//   - gate_up and down in one persistent kernel: 256-thread blocks, 3 per SM (80 registers), as
//     many as are resident; each block takes items from a counter, first gate_up items (8 channels
//     of a slot, gate_up_mma_kernel's work over 8 warps), then down items (2 outputs of a token,
//     down_decode_kernel's), the next item requested while one runs. A down item issues its first
//     weight loads, then waits for a count of finished gate_up items (one thread polls it, the
//     others a shared flag) and reads h through the L2. Correct (the 130 MoE tests pass), but T=1
//     Qwen3-30B-A3B bf16 26.68-26.71 -> 32.51-32.52, FP8 18.99 -> 25.93-26.02, Qwen3.5-35B-A3B bf16
//     24.92-24.95 -> 33.32, LFM2-8B-A1B bf16 31.36-31.49 -> 39.08-39.20; T=8 Qwen3-30B-A3B bf16
//     142.2 -> 173.2, FP8 98.1 -> 146.6. Each block runs its ~2 gate_up and ~2.6 down items one
//     after another, its loads draining between items, where the chain runs every item as a block
//     of its own; only a block's first down item is loaded before the wait.
//   - FP8 gate_up_mma_kernel with its block's 16 weight rows (32 KB) requested at once right after
//     the wait by bulk copies (cp.async.bulk, one mbarrier) into shared memory (rows 64 bytes apart
//     in banks, 37.4 KB per block, 6 blocks per SM confirmed, the most shared memory the carveout
//     allows), its block scales staged beside them: T=1 Qwen3-30B-A3B FP8 19.15-19.16 -> 22.99,
//     Qwen3.5-35B-A3B 20.45-20.58 -> 23.28-23.29, LFM2-8B-A1B 22.43-22.44 -> 24.11-24.15; T=8
//     101.5 -> 119.6, 96.6 -> 110.7, 108.0 -> 118.8. Not traced; bulk copies into shared memory
//     have now lost in all three places tried (gemv v5, MoE v5, this).
//   Rejected in session 12 (one build each with both forms behind a temporary switch, alternating
//   runs of moe_bench, H200, us, v8 -> trial):
//   - The routing block counting ranks with all 512 threads (each (token, expert) counts, with S
//     threads, the experts that precede it in selection order) instead of k rounds in one warp:
//     T=1 Qwen3-30B-A3B bf16 27.08-27.11 -> 27.99-28.29, FP8 19.48-19.56 -> 20.53-20.62,
//     Qwen3.5-35B-A3B bf16 27.75-27.78 -> 30.04-30.18, LFM2-8B-A1B bf16 32.32-32.38 -> 32.21-32.24;
//     T=8 Qwen3.5 bf16 138.0 -> 159.9. E x E comparisons per token (16384 at E = 128) cost more
//     issue slots than k rounds of warp reductions.
//   - route_token's rounds as one reduction and a ballot (a second reduction only on a tie), the
//     keys computed once, the slots written at the end instead of a shuffle per round, the
//     softmax's maximum by a reduction of order keys: T=1 Qwen3-30B-A3B bf16 26.77-26.79 ->
//     27.32-27.34, FP8 19.41-19.48 -> 19.96-19.98, Qwen3.5-35B-A3B bf16 25.93-25.95 -> 31.22-31.26,
//     FP8 21.48-21.75 -> 24.01-24.06, LFM2-8B-A1B bf16 31.82-31.97 -> 32.21-32.40; T=8 Qwen3.5 bf16
//     136.4 -> 141.8. Its SASS is a tight REDUX/VOTE loop; where Qwen3.5's 5 us went (the ticket
//     path, 8 candidates per lane) was not traced. The parity cases with a zero router (exact ties)
//     came from this work and stay.
//   Rejected in session 10 (probes only: bench/moe_probe.cu "prefetch" and "prefetch coresident",
//   its chain kernels, Qwen3-30B-A3B T = 1, one graph per variant, H200):
//   - gate_up's blocks requesting their slice of down's rows into the L2 with
//     cp.async.bulk.prefetch.L2 (4 KB pieces): FP8 22.56 us -> 24.31 (right after the wait) /
//     23.04 (after the block's items), bf16 25.55 -> 29.97 / 27.86. Session 8's per-line prefetch
//     lost in ember too: requests into the L2 do not pay on this GPU (bench/stream_probe.cu "pdl"
//     shows the same for a plain stream).
//   - down as one block per SM beside gate_up's blocks, requesting its whole share of the 8
//     experts' down rows into shared memory (cp.async.bulk) before its wait for gate_up: FP8 16
//     outputs per block (128 blocks, 96 KB) 31.0 us, the same kernel requesting after the wait
//     32.3, 8 outputs (256 blocks) 24.5, against the chain's 22.7; bf16 8 outputs 25.9 / 27.2
//     after the wait, chain 25.7. The early requests gain 1.3 us, the one-block-per-SM down loses
//     more; whether its blocks were resident beside gate_up's was not checked (no ncu run).
//   Rejected in session 9 (branch moe-fused-cluster, a2cb739; every number from one build per
//   call, Qwen3-30B-A3B, the two-kernel layer in the same call; docs/perf-runs/2026-11-30-s9-*):
//   - v7, gate_up and down in one kernel: a thread-block cluster of 8 blocks owns 64 channels of
//     a pair, each block requests its share of those channels' down columns at its start, computes
//     its 8 channels' h as gate_up_mma_kernel, swaps h with the cluster through distributed shared
//     memory, then multiplies its down rows; a second kernel adds the partial sums. The down share
//     in shared memory (cp.async, 16 KB FP8 / 32 KB bf16 per block): T=1 bf16 46 us, FP8 39 (two
//     kernels 26.8 / 19.3), slower at every T 1..8 for all three models (T=8 bf16 205 vs 145).
//     The down share prefetched into L2 instead (cp.async.bulk.prefetch.L2, 4 KB of shared
//     memory): 49.6 / 40.3 us (26.6 / 19.1). Cluster sizes 2-16 within 10%; without the down part
//     39.7 / 24.7 us, without gate_up 28.6 / 27.8 (bf16 and FP8 alike): the time does not follow
//     the bytes, so the structure costs it; which part (cluster scheduling: ncu gave 92 clusters
//     resident of the 96 of the T=1 grid; the cluster barriers, compiled with MEMBAR.ALL.GPU; the
//     partial-sum pass, 5 us in ncu) was not isolated. ncu (bf16, T=1): 38-39 us at DRAM 42%.
//     Session 7's single-kernel layer on clusters (bench/moe_cluster_probe.cu, router included)
//     lost to the kernel chain as well (32.9-79 us).
//   - The two-kernel gate_up_mma with 33 KB more shared memory per block (the v7 footprint): T=1
//     bf16 26.8 -> 30.0 us, FP8 19.3 -> 22.4: with 6 blocks of 37 KB only ~28 KB of the SM's
//     256 KB L1/shared array is L1, which stages the global loads in flight.
//   - gate_up's weight loads as ld.global.nc.L1::no_allocate: T=1 within 1%, T=8 +3%.
//   Rejected in session 8 (measured in the same builds, code not kept):
//   - gate_up's blocks requesting the down rows into L2 (prefetch.global.L2::evict_last, their
//     share of the pair's rows) so down would read from L2: T=1 bf16 +4.7 us, FP8 +2.4 us.
//   - down's grid token-major (blocks of one output group for all tokens together): T=8 bf16
//     146 -> 159 us, FP8 unchanged; T=16 within 2%.
//   - down_mma with one mma set per block (2 outputs: 1024 blocks at 8 per SM, 64 registers):
//     T=1 bf16 26.7 -> 31.7 us (against the FFMA down), FP8 19.2 -> 21.0.
//   Rejected, measured at 11ca45d (code on branch moe-dedup-decode and in that commit):
//   - v4, T > 1 reading each distinct expert once (the router's last block grouped the pairs by
//     expert; gate_up kept 4 or 8 pairs' sums per channel in registers, down walked the distinct
//     experts per output): slower than the per-pair kernels everywhere from T = 4 (Qwen3-30B
//     bf16 T=4 143 vs 112 us, T=8 276 vs 208, T=16 494 vs 397): per-lane sums for many pairs and
//     the walks over the table cost more than the ~20% of expert bytes they saved.
//   - v5, T = 1 weight rows streamed into shared memory with cp.async.bulk (the TMA's 1D
//     copies), 3-4 stages of 48-64 KB per SM, one block per SM: gate_up 19.3 us (DRAM 56%, the
//     same share as v3.1's register loads), down 22 us (v3.1: 14); layer 42.1 us bf16, 46.0
//     FP8. One block per SM consuming a stage between refills did not keep more bytes in flight
//     than 6 blocks of register loads.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "backend.h"
#include "cuda/blas.h"
#include "cuda/dependent_launch.cuh"
#include "cuda/grouped_mm.h"
#include "cuda/loops.cuh"
#include "cuda/mma.cuh"
#include "cuda/moe_elements.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace {

using gmm::block_scale;
using gmm::column_scale;
using gmm::E4m3;
using gmm::from_f;
using gmm::load8;
using gmm::to_f;
using gmm::WeightScale;

__device__ __forceinline__ float silu_f(float g) { return g / (1.f + expf(-g)); }
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Warp `warp` of `warps`' share [begin, end) of a row's `steps` steps (64 bytes in the decode
// kernels, 32 elements in the tensor-core router): equal contiguous ranges, the last ones shorter
// or empty.
struct StepRange {
  int begin, end;
};
__device__ __forceinline__ StepRange warp_steps(int steps, int warps, int warp) {
  const int per = (steps + warps - 1) / warps, begin = min(steps, warp * per);
  return {begin, min(steps, begin + per)};
}

// ---- routing ------------------------------------------------------------------------------------
constexpr int kRouteWarps = 4;
constexpr int kMaxPerLane = 32;  // E <= 1024

struct RouteArgs {
  const void* logits = nullptr;
  int64_t l_ts = 0, l_es = 1;
  const float* bias = nullptr;  // [E] contiguous f32 or nullptr
  int64_t tokens = 0, experts = 0;
  int k = 1;
  bool softmax = true, norm = true;
  float eps = 0, scaling = 1;
  float* weights = nullptr;  // [T, k]
  int32_t* ids = nullptr;
  // The shared expert's gate: sg[t] = sigmoid(x[t] . gate), when sg is not null.
  const void* x = nullptr;
  int64_t x_ts = 0, hidden = 0;
  const void* gate = nullptr;
  float* sg = nullptr;
  // Decode at T = 1: pair j's expert id + 1, stored (relaxed) in expert_ready[j * kReadyStride]
  // as soon as routing round j has chosen it, so gate_up's blocks of pair j start before the
  // router has finished (see poll_expert_ready); zeroed by the next T = 1 router.
  unsigned* expert_ready = nullptr;
  // The T > 1 decode router: each (row, group of tokens) is one warp's task (router_decode_kernel).
  int64_t token_groups = 1;
};

// The flags of expert_ready lie 128 bytes apart: each pair's gate_up blocks poll their own line.
constexpr int kReadyStride = 32;
__device__ __forceinline__ void store_relaxed_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned load_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Selection order as an unsigned key: larger keys first, NaN after every number, 0 for none
// (ties go to the lower expert). -0 counts as +0, as in a float comparison.
__device__ __forceinline__ uint32_t order_key(float k) {
  if (isnan(k)) return 1u;
  const uint32_t u = __float_as_uint(k + 0.f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // -inf gives 0x007FFFFF > 1
}

// One warp routes token t: scores, top-k, weights, and the shared expert's gate. EPL: experts
// per lane (E <= 32 * EPL), so E = 128 keeps 4 candidates per lane in registers instead of 32.
// Logits are read with __ldcg: in the fused decode kernel other blocks have just written them.
// SHARED_LOGITS: the logits are in this block's shared memory (the clustered decode router), not
// in global memory.
template <int EPL, class L, class X, bool SHARED_LOGITS = false> __device__ void route_token(const RouteArgs& a, int64_t t, int lane) {
  const int E = static_cast<int>(a.experts);
  const L* row = static_cast<const L*>(a.logits) + t * a.l_ts;
  float score[EPL], key[EPL];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane + 32 * i;
    score[i] = e < E ? to_f(SHARED_LOGITS ? row[e * a.l_es] : __ldcg(row + e * a.l_es)) : -INFINITY;
    mx = fmaxf(mx, score[i]);
  }
  // At T = 1 (expert_ready) softmax scoring without a bias selects by the logits, whose order the
  // softmax keeps, so each pair's flag goes out without waiting for the softmax; the winners'
  // probabilities follow the rounds (v12).
  const bool by_logits = a.softmax && !a.bias && a.expert_ready;
  if (a.softmax && !by_logits) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      score[i] = lane + 32 * i < E ? expf(score[i] - mx) : 0.f;
      sum += score[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] /= sum;
  } else if (!a.softmax) {
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] = 1.f / (1.f + expf(-score[i]));
  }
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane + 32 * i;
    key[i] = score[i] + (a.bias && e < E ? a.bias[e] : 0.f);
  }
  // k rounds: each lane's best remaining candidate (lowest expert first on equal keys), then the
  // warp's best by two hardware reductions, max of the order key then min of the expert id,
  // and the winner's score from its lane (v2 compared (key, expert) pairs over 5 shuffle steps
  // of 4 shuffles each, ~20 warp ops per round instead of 3).
  uint32_t taken = 0;
  float chosen_score = 0.f, total = 0.f;
  int chosen_id = 0;
  for (int j = 0; j < a.k; ++j) {
    uint32_t best_key = 0;  // 0: no candidate left on this lane
    int best_e = INT_MAX;
    float best_score = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = lane + 32 * i;
      const uint32_t ok = order_key(key[i]);
      if (e < E && !((taken >> i) & 1u) && ok > best_key) {
        best_key = ok;
        best_e = e;
        best_score = score[i];
      }
    }
    const uint32_t top = __reduce_max_sync(0xffffffffu, best_key);
    const int winner = static_cast<int>(__reduce_min_sync(0xffffffffu, best_key == top ? static_cast<uint32_t>(best_e) : UINT_MAX));
    const float s = __shfl_sync(0xffffffffu, best_score, winner % 32);
    if (winner % 32 == lane) taken |= 1u << (winner / 32);
    if (lane == j) {
      chosen_score = s;
      chosen_id = winner;
    }
    if (by_logits && j == 0) mx = s;  // the largest logit (NaN ones sort last): the softmax's maximum
    total += s;
    if (a.expert_ready && lane == 0) store_relaxed_gpu(a.expert_ready + (t * a.k + j) * kReadyStride, static_cast<unsigned>(winner) + 1);
  }
  if (by_logits) {  // the winners' probabilities, as the softmax before the rounds gives them
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) sum += lane + 32 * i < E ? expf(score[i] - mx) : 0.f;
    sum = warp_sum(sum);
    chosen_score = expf(chosen_score - mx) / sum;
    total = 0.f;
    for (int j = 0; j < a.k; ++j) total += __shfl_sync(0xffffffffu, chosen_score, j);
  }
  const float norm = a.norm ? 1.f / (total + a.eps) : 1.f;
  if (lane < a.k) {
    a.weights[t * a.k + lane] = chosen_score * norm * a.scaling;
    a.ids[t * a.k + lane] = chosen_id;
  }
  if (a.sg) {
    const X* xr = static_cast<const X*>(a.x) + t * a.x_ts;
    const X* g = static_cast<const X*>(a.gate);
    float d = 0.f;
    for (int64_t h = lane; h < a.hidden; h += 32) d = fmaf(to_f(xr[h]), to_f(g[h]), d);
    d = warp_sum(d);
    if (lane == 0) a.sg[t] = 1.f / (1.f + expf(-d));
  }
}

template <int EPL, class L, class X>
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(RouteArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
  if (t < a.tokens) route_token<EPL, L, X>(a, t, threadIdx.x % 32);
}

/// Calls f(std::integral_constant<int, EPL>) with the experts-per-lane bucket for E <= 1024.
template <class F> void with_experts_per_lane(int64_t experts, F&& f) {
  if (experts <= 128) f(std::integral_constant<int, 4>{});
  else if (experts <= 256) f(std::integral_constant<int, 8>{});
  else f(std::integral_constant<int, kMaxPerLane>{});
}

// The decode router: logits [T, E] f32 = x @ router^T (one warp per expert row, each lane issuing
// all of its row's loads, up to kRouterLoads 16-byte loads, before converting any: the router
// weight is small, 512 KB for E = 128, H = 2048, so one memory round trip, not bandwidth,
// decides), plus the shared expert's gate sg[t] = sigmoid(x[t] . gate) as one more row; then one
// block routes every token. On sm_90, where each warp has at most one row, the grid is one
// thread-block cluster of kRouterCluster blocks: the warps write their logits into block 0's
// shared memory (distributed shared memory) and a cluster barrier tells block 0 they are all
// there (v8). Otherwise the grid has a warp per row and the last block to finish, by a ticket in
// the stream's zeroed scratch after a GPU-scope fence, reads the logits back from L2 (v6).
constexpr int kRouterWarps = 16, kRouterRows = 4, kRouterLoads = 8, kRouterCluster = 8;
// The clustered router's logits live in block 0's shared memory: at most this many (T x E).
constexpr int64_t kRouterSharedLogits = 8192;
// Bytes of x's row the router stages in (static) shared memory at T = 1 (hidden 4096 in bf16),
// and of every token's row at T > 1 in dynamic shared memory (T = 16 rows of hidden 2048 in
// bf16); beyond them every warp reads x from global memory.
constexpr int64_t kRouterStagedX = 8192, kRouterStagedRows = 64 * 1024;
// A warp's router row is loaded into registers before the router's wait when its weights are 16-bit
// and the lane's share fits one batch of loads (and x is staged); the host's T > 1 token groups
// need it.
__host__ __device__ constexpr bool router_row_preloadable(int64_t hidden, size_t x_size) {
  return x_size == 2 && hidden / 8 <= 32 * kRouterLoads;
}
// Bytes of x the router stages at T > 1 (0: not staged), the kernel's dynamic shared memory.
__host__ __device__ constexpr int64_t router_staged_rows_bytes(int64_t tokens, int64_t row_bytes) {
  return row_bytes % 16 == 0 && tokens * row_bytes <= kRouterStagedRows ? tokens * row_bytes : 0;
}

// order[r] = the r-th pair slot (t * k + j) by (expert, slot): a stable sort of the pairs by
// expert, one thread per pair (pairs <= the block's threads), ranks counted over the ids in
// shared memory. The block's threads wrote the ids; the barrier makes them visible.
// The decode path's (token, expert) pairs at most: the router's routing block orders them by
// expert with one thread per pair.
constexpr int kMaxDecodePairs = 128;
static_assert(kMaxDecodePairs <= kRouterWarps * 32);
__device__ void order_pairs_by_expert(const int32_t* ids, int pairs, int32_t* order) {
  __shared__ int32_t pair_expert[kMaxDecodePairs];
  __syncthreads();
  const int p = threadIdx.x;
  if (p < pairs) pair_expert[p] = ids[p];
  __syncthreads();
  if (p >= pairs) return;
  const int32_t e = pair_expert[p];
  int rank = 0;
  for (int q = 0; q < pairs; ++q) rank += pair_expert[q] < e || (pair_expert[q] == e && q < p);
  order[rank] = p;
}

// Token t's product v with router row r: its logit (r < E), or the shared expert's gate
// sigmoid(v) (r == E).
__device__ __forceinline__ void store_router_product(const RouteArgs& a, int64_t t, int64_t r, float v, float* logits) {
  if (r < a.experts) logits[t * a.experts + r] = v;
  else a.sg[t] = 1.f / (1.f + expf(-v));
}

// Row r of the router product (r < E: an expert's router row, r == E: the shared expert's gate)
// against every token's x: logits[t, r], or sg[t] = sigmoid(x[t] . gate). One warp.
// x_rows: x (global memory), or at T = 1 its row staged in this block's shared memory.
template <class X> __device__ void router_row(const RouteArgs& a, const X* w, int64_t r, float* logits, int lane, const X* x_rows) {
  const X* x = x_rows;
  const int64_t chunks = a.hidden / 8;
  float acc[kRouterRows];
  for (int64_t t0 = 0; t0 < a.tokens; t0 += kRouterRows) {
    const int nr = static_cast<int>(min(int64_t{kRouterRows}, a.tokens - t0));
#pragma unroll
    for (int j = 0; j < kRouterRows; ++j) acc[j] = 0.f;
    for (int64_t c0 = lane; c0 < chunks; c0 += kRouterLoads * 32) {
      gmm::Raw8<X> wr[kRouterLoads];
#pragma unroll
      for (int u = 0; u < kRouterLoads; ++u) {
        const int64_t c = c0 + u * 32;
        wr[u] = c < chunks ? gmm::load_raw8(w + c * 8) : gmm::Raw8<X>{};
      }
      // Each token row's chunks are loaded as a batch too (raw, before any is used): v3 loaded
      // them one at a time inside the product, one dependent L2 round trip per chunk.
#pragma unroll
      for (int j = 0; j < kRouterRows; ++j) {
        if (j >= nr) break;
        gmm::Raw8<X> xr[kRouterLoads];
#pragma unroll
        for (int u = 0; u < kRouterLoads; ++u) {
          const int64_t c = c0 + u * 32;
          xr[u] = c < chunks ? gmm::load_raw8(x + (t0 + j) * a.x_ts + c * 8) : gmm::Raw8<X>{};
        }
#pragma unroll
        for (int u = 0; u < kRouterLoads; ++u) {
          float wf[8], xf[8];
          gmm::unpack8(wr[u], wf);
          gmm::unpack8(xr[u], xf);
          acc[j] = gmm::dot8(xf, wf, acc[j]);  // chunks past the row are zeros
        }
      }
    }
    for (int64_t h = chunks * 8 + lane; h < a.hidden; h += 32) {
      const float wv = to_f(w[h]);
#pragma unroll
      for (int j = 0; j < kRouterRows; ++j)
        if (j < nr) acc[j] = fmaf(to_f(x[(t0 + j) * a.x_ts + h]), wv, acc[j]);
    }
#pragma unroll
    for (int j = 0; j < kRouterRows; ++j) {
      const float v = warp_sum(acc[j]);
      if (lane == 0 && j < nr) store_router_product(a, t0 + j, r, v, logits);
    }
  }
}

// Row r at T = 1 when the lane's whole share of it (chunks lane + 32 u) was loaded before the
// router's wait into w, and x's row is staged in shared memory.
template <class X>
__device__ __forceinline__ void router_row_preloaded(const RouteArgs& a, const gmm::Raw8<X> (&w)[kRouterLoads], int64_t r, const X* x,
                                                     float* logits, int lane) {
  const int64_t chunks = a.hidden / 8;
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < kRouterLoads; ++u) {
    const int64_t c = lane + u * 32;
    float wf[8], xf[8];
    gmm::unpack8(w[u], wf);
    gmm::load8(x + (c < chunks ? c : 0) * 8, xf);
    if (c < chunks) acc = gmm::dot8(xf, wf, acc);
  }
  const float v = warp_sum(acc);
  if (lane == 0) store_router_product(a, 0, r, v, logits);
}

// Row r against tokens [t_begin, t_end) at T > 1 when the lane's whole share of it was loaded
// before the router's wait into w and every token's row of x is staged in shared memory (x, row
// stride hidden). Tokens go two at a time, so their warp sums overlap.
constexpr int kPreloadedRowTokens = 2;
template <class X>
__device__ __forceinline__ void router_rows_preloaded(const RouteArgs& a, const gmm::Raw8<X> (&w)[kRouterLoads], int64_t r, const X* x,
                                                      float* logits, int lane, int64_t t_begin, int64_t t_end) {
  const int64_t chunks = a.hidden / 8;
  for (int64_t t0 = t_begin; t0 < t_end; t0 += kPreloadedRowTokens) {
    const int nr = static_cast<int>(min(int64_t{kPreloadedRowTokens}, t_end - t0));
    float acc[kPreloadedRowTokens];
#pragma unroll
    for (int j = 0; j < kPreloadedRowTokens; ++j) {
      acc[j] = 0.f;
      if (j >= nr) continue;
      gmm::Raw8<X> xr[kRouterLoads];  // loaded as a batch before any is used
#pragma unroll
      for (int u = 0; u < kRouterLoads; ++u) xr[u] = gmm::load_raw8(x + (t0 + j) * a.hidden + min(int64_t{lane} + u * 32, chunks - 1) * 8);
#pragma unroll
      for (int u = 0; u < kRouterLoads; ++u) {
        float wf[8], xf[8];
        gmm::unpack8(w[u], wf);
        gmm::unpack8(xr[u], xf);
        if (lane + u * 32 < chunks) acc[j] = gmm::dot8(xf, wf, acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kPreloadedRowTokens; ++j) {
      const float v = warp_sum(acc[j]);
      if (lane == 0 && j < nr) store_router_product(a, t0 + j, r, v, logits);
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The clustered router's warps write their products straight into block 0's shared_logits
// (distributed shared memory), where the routing reads them without a round trip to L2, once
// block 0 runs: this wait, with the arrival at the kernel's start, says it does.
__device__ __forceinline__ float* block0_logits(float* shared_logits) {
  cooperative_groups::this_cluster().barrier_wait();
  return cooperative_groups::this_cluster().map_shared_rank(shared_logits, 0);
}
#endif

// The decode router's end, once each block has stored its products (clustered: into block 0's
// shared_logits): block 0 of the cluster, or the last block to finish by the ticket (after a
// GPU-scope fence), routes every token, a warp each, and at T > 1 orders the pairs by expert for
// gate_up. The shared gate is one of the products, so route_token does not compute it again.
template <int EPL, class X>
__device__ __forceinline__ void route_decode_tokens(const RouteArgs& a, float* shared_logits, unsigned* ticket, int32_t* order,
                                                    bool clustered) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  RouteArgs route = a;
  route.sg = nullptr;
  if (clustered) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();  // barrier.cluster arrive (release) + wait (acquire): every logit is written
    if (blockIdx.x != 0) return;
    route.logits = shared_logits;
    for (int64_t t = warp; t < a.tokens; t += kRouterWarps) route_token<EPL, float, X, true>(route, t, lane);
#else
    __trap();  // never launched so: the host checks kernel_ptx_version
#endif
  } else {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int64_t t = warp; t < a.tokens; t += kRouterWarps) route_token<EPL, float, X>(route, t, lane);
  }
  __syncthreads();
  if (order) order_pairs_by_expert(a.ids, static_cast<int>(a.tokens * a.k), order);
  if (!clustered && threadIdx.x == 0) *ticket = 0;  // zero again for the next launch on this stream
}

// Every token's row of x into dst (row stride hidden) at T > 1, router_staged_rows_bytes of it
// (<= kRouterStagedRows), by a block of kRouterWarps warps: each thread's share as one batch of 8
// loads. A loop of load-then-store pairs was a chain of L2 round trips, 8 at T = 16 and hidden
// 2048 (session 22, call 3: router_mma_kernel staging so lost to the scalar kernel at Qwen3-30B-A3B
// T=16 bf16, 234.4 -> 235.7 us; staged in one batch it gained). The caller's barrier follows.
template <class X> __device__ __forceinline__ void stage_token_rows(const RouteArgs& a, uint4* dst) {
  constexpr int kLoads = kRouterStagedRows / 16 / (kRouterWarps * 32);
  const int row_vectors = static_cast<int>(a.hidden * static_cast<int64_t>(sizeof(X)) / 16), vectors = static_cast<int>(a.tokens) * row_vectors;
  const int64_t x_ts_vectors = a.x_ts * static_cast<int64_t>(sizeof(X)) / 16;
  const auto* src = static_cast<const uint4*>(a.x);
  uint4 v[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int i = threadIdx.x + u * kRouterWarps * 32;
    if (i < vectors) v[u] = src[i / row_vectors * x_ts_vectors + i % row_vectors];
  }
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int i = threadIdx.x + u * kRouterWarps * 32;
    if (i < vectors) dst[i] = v[u];
  }
}

// CLUSTERED: the grid is one cluster (sm_90 only; the code is compiled out below). Otherwise
// `ticket` picks the block that routes. kStagedRows: the T > 1 kernel, whose dynamic shared memory
// holds every token's row of x (router_staged_rows_bytes of it).
template <int EPL, class X, bool kStagedRows>
__global__ void __launch_bounds__(kRouterWarps * 32) router_decode_kernel(RouteArgs a, const X* __restrict__ router, int64_t r_es,
                                                                         float* __restrict__ logits, unsigned* __restrict__ ticket,
                                                                         int32_t* __restrict__ order, bool clustered) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t rows = a.experts + (a.sg ? 1 : 0), first = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp,
                step = static_cast<int64_t>(gridDim.x) * kRouterWarps;
  const auto row_weights = [&](int64_t r) { return r < a.experts ? router + r * r_es : static_cast<const X*>(a.gate); };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Block 0's shared memory may be written only once block 0 runs: this arrival, and the wait
  // before the first write below, say so (the cluster's blocks start together, so the wait costs
  // nothing; compute-sanitizer's racecheck flagged the writes without it).
  if (clustered) __cluster_barrier_arrive_relaxed();
#endif
  // Launched as a programmatic dependent of the kernel before (which may write x, and may still
  // read buffers this launch writes). A warp with a single row of 16-bit weights that fits one
  // batch loads it into registers before the wait (the weights are no kernel's output; v9 at
  // T = 1, v14 at T > 1), and after the wait the block reads x's rows from L2 once into shared
  // memory, not once per warp: at T = 1 16 warps' weight and x reads had been ~128 KB through each
  // of the cluster's 8 SMs; at T > 1 the warps' x loads from global memory had compiled, in some
  // builds, to a chain of dependent L2 round trips (v14's notes). Otherwise a warp only requests
  // its rows into L2 before the wait, so their HBM round trip overlaps that kernel's tail.
  const int64_t x_bytes = a.hidden * static_cast<int64_t>(sizeof(X));
  const bool stage_x = kStagedRows ? router_staged_rows_bytes(a.tokens, x_bytes) > 0
                                   : a.tokens == 1 && x_bytes <= kRouterStagedX && x_bytes % 16 == 0;
  // At T > 1 warp `first`'s task is row first % rows against token group first / rows.
  const int64_t tasks = rows * (kStagedRows ? a.token_groups : 1);
  const bool preload = stage_x && first < tasks && first + step >= tasks && router_row_preloadable(a.hidden, sizeof(X));
  gmm::Raw8<X> row[kRouterLoads];
  if (preload) {
    const X* w = row_weights(kStagedRows ? first % rows : first);
    const int64_t chunks = a.hidden / 8;
#pragma unroll
    for (int u = 0; u < kRouterLoads; ++u) {
      const int64_t c = lane + u * 32;
      row[u] = c < chunks ? gmm::load_raw8(w + c * 8) : gmm::Raw8<X>{};
    }
  } else {
    for (int64_t r = first; r < rows; r += step)
      for (int64_t line = lane * 128; line < x_bytes; line += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(row_weights(r)) + line));
  }
  wait_for_previous_kernel();
  // T = 1: the layer before's flags go back to zero before this launch lets gate_up's blocks go
  // (they poll them); that layer's down kernel, the last reader, has finished.
  if (a.expert_ready && blockIdx.x == 0) {
    for (int i = threadIdx.x; i < a.k; i += blockDim.x) store_relaxed_gpu(a.expert_ready + i * kReadyStride, 0);
    __threadfence();
    __syncthreads();
  }
  // gate_up's blocks may start (and wait) while this runs: x is final now (gate_up stages it
  // before its own wait at T = 1).
  dependents_may_launch();
  const X* x_rows = static_cast<const X*>(a.x);
  RouteArgs product = a;  // x_ts: x's row stride where the products read it
  if constexpr (kStagedRows) {
    extern __shared__ uint4 staged_rows[];  // [T, hidden] of X
    if (stage_x) {
      stage_token_rows<X>(a, staged_rows);
      __syncthreads();
      x_rows = reinterpret_cast<const X*>(staged_rows);
      product.x_ts = a.hidden;
    }
  } else {
    __shared__ uint4 x_staged[kRouterStagedX / 16];
    if (stage_x) {
      const auto* src = static_cast<const uint4*>(a.x);
      for (int i = threadIdx.x; i < x_bytes / 16; i += blockDim.x) x_staged[i] = src[i];
      __syncthreads();
      x_rows = reinterpret_cast<const X*>(x_staged);
    }
  }
  float* logits_out = logits;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float shared_logits[kRouterSharedLogits];
  if (clustered) logits_out = block0_logits(shared_logits);
#endif
  if (preload) {
    if constexpr (kStagedRows) {
      const int64_t per_group = (a.tokens + a.token_groups - 1) / a.token_groups, t_begin = first / rows * per_group;
      router_rows_preloaded(a, row, first % rows, x_rows, logits_out, lane, t_begin, min(a.tokens, t_begin + per_group));
    } else {
      router_row_preloaded(a, row, first, x_rows, logits_out, lane);
    }
  } else
    for (int64_t r = first; r < rows; r += step) router_row(product, row_weights(r), r, logits_out, lane, x_rows);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  route_decode_tokens<EPL, X>(a, shared_logits, ticket, order, clustered);
#else
  route_decode_tokens<EPL, X>(a, nullptr, ticket, order, clustered);
#endif
}

// The T > 1 decode router on tensor cores, for 16-bit x and router rows of whole 32-element steps,
// every token's row of x staged (T <= 16): block b takes rows 16b .. 16b + 15 (the experts' rows,
// then the shared gate's; rows past the last repeat it, unstored) against every token, as
// mma.sync m16n8k16 (A: the 16 rows, B: 8 tokens' x, one or two tiles of 8 tokens), its 16 warps
// splitting the hidden dimension into equal runs of steps. Thread (g, q) loads chunk q (16 bytes)
// of each step of rows g and g + 8 and the same chunk of token g's x: the k order inside an mma is
// the thread's own in A and B. A warp's first batch of steps is loaded before the wait, as the
// scalar router's preloaded rows are. The warps' sums meet in shared memory, added in a fixed
// order; then block 0 of the cluster, or the last block by the ticket, routes every token as
// router_decode_kernel's end does. Where the scalar kernel had a warp per (row, token), this one
// reads x and the rows' chunks once per 16 rows x 8 tokens.
constexpr int kRouterMmaRows = 16, kRouterMmaSteps = 4, kRouterMmaTokens = 16;
__host__ __device__ constexpr int64_t router_mma_partials_bytes() { return int64_t{kRouterWarps} * kRouterMmaRows * kRouterMmaTokens * 4; }

template <int EPL, class X>
__global__ void __launch_bounds__(kRouterWarps * 32) router_mma_kernel(RouteArgs a, const X* __restrict__ router, int64_t r_es,
                                                                      float* __restrict__ logits, unsigned* __restrict__ ticket,
                                                                      int32_t* __restrict__ order, bool clustered) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int64_t rows = a.experts + (a.sg ? 1 : 0), r0 = static_cast<int64_t>(blockIdx.x) * kRouterMmaRows;
  const auto row_weights = [&](int64_t r) { return r < a.experts ? router + r * r_es : static_cast<const X*>(a.gate); };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clustered) __cluster_barrier_arrive_relaxed();  // as in router_decode_kernel
#endif
  // Chunk q of step s of rows g and g + 8 (of this block's 16) at ra[s], rb[s].
  const uint4* ra = reinterpret_cast<const uint4*>(row_weights(min(r0 + g, rows - 1))) + q;
  const uint4* rb = reinterpret_cast<const uint4*>(row_weights(min(r0 + g + 8, rows - 1))) + q;
  const auto [s_begin, s_end] = warp_steps(static_cast<int>(a.hidden / 32), kRouterWarps, warp);
  uint4 wa[kRouterMmaSteps], wb[kRouterMmaSteps];
  const auto load_batch = [&](int s, int n) {
#pragma unroll
    for (int l = 0; l < kRouterMmaSteps; ++l) {
      wa[l] = l < n ? ra[4 * (s + l)] : make_uint4(0, 0, 0, 0);
      wb[l] = l < n ? rb[4 * (s + l)] : make_uint4(0, 0, 0, 0);
    }
  };
  int s = s_begin, n = min(kRouterMmaSteps, s_end - s);
  load_batch(s, n);  // the router's rows are no kernel's output
  wait_for_previous_kernel();
  dependents_may_launch();  // as in router_decode_kernel: x is final
  // Every token's row of x in dynamic shared memory (row stride hidden), then the warps' partial sums.
  extern __shared__ uint4 staged_rows[];
  const int64_t x_bytes = a.hidden * static_cast<int64_t>(sizeof(X));
  stage_token_rows<X>(a, staged_rows);
  const X* xs = reinterpret_cast<const X*>(staged_rows);
  auto* partial = reinterpret_cast<float(*)[kRouterMmaRows][kRouterMmaTokens]>(reinterpret_cast<char*>(staged_rows) + a.tokens * x_bytes);
  __syncthreads();
  const int tiles = a.tokens > 8 ? 2 : 1;
  float acc[2][4] = {};
  while (n > 0) {
#pragma unroll
    for (int l = 0; l < kRouterMmaSteps; ++l) {
      if (l >= n) break;
      const uint32_t a0[4] = {wa[l].x, wb[l].x, wa[l].y, wb[l].y}, a1[4] = {wa[l].z, wb[l].z, wa[l].w, wb[l].w};
#pragma unroll
      for (int tile = 0; tile < 2; ++tile) {
        if (tile >= tiles) break;
        const int64_t token = tile * 8 + g;
        const uint4 xv = token < a.tokens ? *reinterpret_cast<const uint4*>(xs + token * a.hidden + (s + l) * 32 + q * 8) : make_uint4(0, 0, 0, 0);
        mma16816<X>(acc[tile], a0, xv.x, xv.y);
        mma16816<X>(acc[tile], a1, xv.z, xv.w);
      }
    }
    s += n;
    n = min(kRouterMmaSteps, s_end - s);
    if (n > 0) load_batch(s, n);
  }
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {  // D[g][2q..2q+1] and D[g + 8][2q..2q+1] of each tile
    partial[warp][g][tile * 8 + 2 * q] = acc[tile][0];
    partial[warp][g][tile * 8 + 2 * q + 1] = acc[tile][1];
    partial[warp][g + 8][tile * 8 + 2 * q] = acc[tile][2];
    partial[warp][g + 8][tile * 8 + 2 * q + 1] = acc[tile][3];
  }
  float* logits_out = logits;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float shared_logits[kRouterSharedLogits];
  if (clustered) logits_out = block0_logits(shared_logits);
#endif
  __syncthreads();
  for (int i = threadIdx.x; i < kRouterMmaRows * kRouterMmaTokens; i += blockDim.x) {
    const int row = i / kRouterMmaTokens, token = i % kRouterMmaTokens;
    if (token >= a.tokens || r0 + row >= rows) continue;
    float v = 0.f;
    for (int w = 0; w < kRouterWarps; ++w) v += partial[w][row][token];
    store_router_product(a, token, r0 + row, v, logits_out);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  route_decode_tokens<EPL, X>(a, shared_logits, ticket, order, clustered);
#else
  route_decode_tokens<EPL, X>(a, nullptr, ticket, order, clustered);
#endif
}

// ---- permutation ----------------------------------------------------------------------------------
constexpr int kPermuteThreads = 256, kPermuteWarps = kPermuteThreads / 32, kMaxBuckets = 1025;

template <class I>
__global__ void __launch_bounds__(kPermuteThreads) permute_kernel(const I* __restrict__ ids, int64_t pairs, int k, int experts,
                                                                  int32_t* __restrict__ order, int32_t* __restrict__ inverse,
                                                                  int32_t* __restrict__ tokens, int32_t* __restrict__ counts,
                                                                  int32_t* __restrict__ offsets) {
  __shared__ int count[kMaxBuckets], next[kMaxBuckets], warp_count[kPermuteWarps][kMaxBuckets], partial[kPermuteThreads];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int buckets = experts + 1;  // the last bucket takes ids outside [0, E), after every group
  const auto bucket = [&](int64_t p) {
    const int64_t v = ids[p];
    return v >= 0 && v < experts ? static_cast<int>(v) : experts;
  };
  for (int b = tid; b < buckets; b += kPermuteThreads) {
    count[b] = 0;
    for (int w = 0; w < kPermuteWarps; ++w) warp_count[w][b] = 0;
  }
  __syncthreads();
  for (int64_t p = tid; p < pairs; p += kPermuteThreads) atomicAdd(&count[bucket(p)], 1);
  __syncthreads();
  // Exclusive scan of the bucket counts: each thread sums a run of buckets, then the runs scan.
  const int per = (buckets + kPermuteThreads - 1) / kPermuteThreads;
  const int b0 = min(tid * per, buckets), b1 = min(b0 + per, buckets);
  int run = 0;
  for (int b = b0; b < b1; ++b) run += count[b];
  partial[tid] = run;
  __syncthreads();
  for (int d = 1; d < kPermuteThreads; d *= 2) {
    const int other = tid >= d ? partial[tid - d] : 0;
    __syncthreads();
    partial[tid] += other;
    __syncthreads();
  }
  int start = partial[tid] - run;
  for (int b = b0; b < b1; ++b) {
    next[b] = start;
    start += count[b];
    if (b < experts) {
      counts[b] = count[b];
      offsets[b] = start;
    }
  }
  __syncthreads();
  // Each chunk's ids are loaded one chunk ahead, so their global-memory latency overlaps the
  // chunk before's barriers instead of adding to each of the pairs / 256 rounds (session 27's ncu:
  // 22.8 us for 4096 pairs, Qwen3-30B-A3B T=512).
  int b_next = tid < pairs ? bucket(tid) : -1;
  for (int64_t chunk = 0; chunk < pairs; chunk += kPermuteThreads) {
    const int64_t p = chunk + tid;
    const bool valid = p < pairs;
    const int b = b_next;
    b_next = p + kPermuteThreads < pairs ? bucket(p + kPermuteThreads) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const bool leader = __ffs(peers) - 1 == lane;
    if (valid && leader) warp_count[warp][b] = __popc(peers);
    __syncthreads();
    if (valid) {
      int pos = next[b] + rank;
      for (int w = 0; w < warp; ++w) pos += warp_count[w][b];
      order[pos] = static_cast<int32_t>(p);
      inverse[p] = pos;
      tokens[pos] = static_cast<int32_t>(p / k);
    }
    __syncthreads();
    if (valid && leader) {
      atomicAdd(&next[b], __popc(peers));
      warp_count[warp][b] = 0;
    }
    __syncthreads();
  }
}

// ---- prefill glue ---------------------------------------------------------------------------------
// Each kernel takes V elements per thread (loops.cuh's Vec): 16-byte vectors (V = 16 / sizeof(T))
// where every row start and length is whole vectors (with_glue_vector), else V = 1. Session 27's
// ncu (H200, Qwen3-30B-A3B T=512 bf16, one element per thread and a 64-bit division each): gather
// 13.5 us, silu_mul 18.2, combine 22.0, for 17-25 MB of traffic each.
template <class T, int V> __device__ __forceinline__ Vec<T, V> load_vec(const T* p) { return *reinterpret_cast<const Vec<T, V>*>(p); }
template <class T, int V> __device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& v) { *reinterpret_cast<Vec<T, V>*>(p) = v; }

template <class T, int V>
__global__ void gather_rows_kernel(const T* __restrict__ x, int64_t x_rs, const int32_t* __restrict__ rows, int64_t n_rows, int64_t h,
                                   T* __restrict__ out, int64_t o_rs) {
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const T* src = x + static_cast<int64_t>(rows[r]) * x_rs;
    T* dst = out + r * o_rs;
    for (int64_t c = threadIdx.x * int64_t{V}; c < h; c += blockDim.x * int64_t{V}) store_vec<T, V>(dst + c, load_vec<T, V>(src + c));
  }
}

// out[r, c] = silu(g[r, c]) * u[r, c] for V consecutive c per thread.
template <class T, int V>
__global__ void silu_mul_kernel(const T* __restrict__ g, const T* __restrict__ u, int64_t in_rs, int64_t rows, int64_t cols,
                                T* __restrict__ out, int64_t o_rs) {
  const int64_t vectors = cols / V, total = rows * vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / vectors, c = i % vectors * V;
    const Vec<T, V> gv = load_vec<T, V>(g + r * in_rs + c), uv = load_vec<T, V>(u + r * in_rs + c);
    Vec<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f<T>(silu_f(to_f(gv.v[e])) * to_f(uv.v[e]));
    store_vec<T, V>(out + r * o_rs + c, o);
  }
}

// out[t, c] = sum_j w[t, j] * y[inverse[t*k + j], c] (+ sg[t] * ys[t, c]), V consecutive c per
// thread (the same sums in the same order at any V); an inverse entry out of range is reported
// through the device error word and skipped.
template <class T, class W, int V>
__global__ void combine_kernel(const T* __restrict__ y, int64_t y_rs, int64_t y_rows, const int32_t* __restrict__ inverse,
                               const W* __restrict__ w, int64_t w_ts, int64_t w_ks, int64_t tokens, int k, int64_t h,
                               const T* __restrict__ ys, int64_t ys_rs, const float* __restrict__ sg, T* __restrict__ out,
                               int64_t o_rs, DeviceError* err) {
  const int64_t vectors = h / V, total = tokens * vectors;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / vectors, c = i % vectors * V;
    float acc[V] = {};
    for (int j = 0; j < k; ++j) {
      const int64_t pos = inverse[t * k + j];
      if (pos < 0 || pos >= y_rows) {
        if (atomicCAS(&err->code, kNoDeviceError, kIndexOutOfRange) == kNoDeviceError) {
          err->value = pos;
          err->bound = y_rows;
        }
        continue;
      }
      const float wj = to_f(w[t * w_ts + j * w_ks]);
      const Vec<T, V> yv = load_vec<T, V>(y + pos * y_rs + c);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = fmaf(wj, to_f(yv.v[e]), acc[e]);
    }
    if (ys) {
      const float s = sg ? sg[t] : 1.f;
      const Vec<T, V> sv = load_vec<T, V>(ys + t * ys_rs + c);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = fmaf(s, to_f(sv.v[e]), acc[e]);
    }
    Vec<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f<T>(acc[e]);
    store_vec<T, V>(out + t * o_rs + c, o);
  }
}

// ---- fused decode ---------------------------------------------------------------------------------
struct DecodeArgs {
  const void* x = nullptr;
  int64_t x_ts = 0, tokens = 0, hidden = 0, inter = 0;
  int k = 1;
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  const int32_t* order = nullptr;  // T > 1: gate_up's pair blocks in expert order (else identity)
  unsigned* expert_ready = nullptr;  // RouteArgs::expert_ready (T = 1), or nullptr
  const void *gate = nullptr, *up = nullptr;  // [E, I, H], unit stride along H
  int64_t gu_es = 0, gate_rs = 0, up_rs = 0;
  WeightScale gate_scale, up_scale;
  const void* down = nullptr;  // [E, H, I], unit stride along I
  int64_t d_es = 0, d_rs = 0;
  WeightScale down_scale;
  bool shared = false;
  const void *s_gate = nullptr, *s_up = nullptr;  // [Is, H] each, x's dtype
  int64_t s_rs = 0, s_inter = 0;
  const void* s_down = nullptr;  // [H, Is]
  int64_t sd_rs = 0;
  const float* sg = nullptr;  // [T] shared gate, or nullptr (weight 1)
  void* h = nullptr;          // [pairs (+ tokens), h_rs]
  int64_t h_rs = 0;
  void* out = nullptr;
  int64_t o_ts = 0;
};

constexpr int kDecodeThreads = 256, kDecodeWarps = kDecodeThreads / 32;
// 16-byte loads in flight per lane and weight row: 2 for 16-bit weights, 4 for FP8 (8-byte
// loads), 1 for f32 (32-byte loads).
template <class WT> constexpr int kRowLoads = sizeof(WT) == 1 ? 4 : (sizeof(WT) == 2 ? 2 : 1);
// Dynamic shared memory of the gate_up kernel (a row of x), below the 48 KB a launch gets
// without opting in.
constexpr size_t kDecodeSmemMax = 46 * 1024;

// The block copies n elements from global to shared memory (16-byte aligned rows), 8 at a time:
// the compute loops then read activations with shared loads instead of a chain of dependent
// L2 round trips (v3 read x and h straight from global memory inside each batch).
template <class T> __device__ void stage_row(const T* src, T* dst, int64_t n) {
  // One load per iteration: unrolling four (loads before stores) pushed v3's down kernel, which
  // staged h with it, to 128 registers with spills (2: 161 registers), 1 left it at 111.
  const int64_t chunks = n / 8;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) *reinterpret_cast<gmm::Raw8<T>*>(dst + c * 8) = gmm::load_raw8(src + c * 8);
  for (int64_t i = chunks * 8 + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// One warp: h = silu(x . gate_row) * (x . up_row) for one intermediate channel i of expert e.
// Each lane issues L chunks of both rows before converting any.
template <class T, class WT>
__device__ __forceinline__ void gate_up_channel(const T* x, const WT* g_row, const WT* u_row, int64_t hidden, const WeightScale& gs,
                                                const WeightScale& us, int64_t e, int64_t i, T* h_out) {
  constexpr int L = kRowLoads<WT>;
  const int lane = threadIdx.x % 32;
  // Under the 40-register cap, v3.3's SASS issues the second pair of row loads only after the
  // first pair is consumed (bf16: 2 of its 4 loads in flight; FP8: 2, then 6 of 8). Here: 32-bit
  // chunk indices, block scales only for FP8 weights (the only ones that have them) as a row
  // pointer and a stride, and whole batches without predicates: the SASS now issues all 2 * L
  // loads of a batch before the first use (bf16 no spill in the loop; FP8 at 4 blocks per SM
  // none either).
  const int chunks = static_cast<int>(hidden / 8);
  const bool blocks = sizeof(WT) == 1 && gs.kind == WeightScale::Block128;
  // This row's block scales (one per 128 columns) as two pointers and two strides: the whole
  // WeightScale pair kept live through the loop spilled to local memory (SASS, FP8 weights).
  const float* g_scales = blocks ? gs.ptr + gmm::block_scale_offset(e, i, 0, gs.s0, gs.s1, gs.s2) : nullptr;
  const float* u_scales = blocks ? us.ptr + gmm::block_scale_offset(e, i, 0, us.s0, us.s1, us.s2) : nullptr;
  const int64_t g_step = gs.s2, u_step = us.s2;
  float g = 0.f, u = 0.f;
  // Adds chunk c of both rows (loaded raw) times x's chunk c (in shared memory).
  const auto add_chunk = [&](const gmm::Raw8<WT>& g_raw, const gmm::Raw8<WT>& u_raw, int c) {
    float gf[8], uf[8], xf[8];
    load8(x + c * 8, xf);
    gmm::unpack8(g_raw, gf);
    gmm::unpack8(u_raw, uf);
    float dg = gmm::dot8(xf, gf, 0.f), du = gmm::dot8(xf, uf, 0.f);
    if (blocks) {
      dg *= g_scales[c / (gmm::kScaleBlock / 8) * g_step];
      du *= u_scales[c / (gmm::kScaleBlock / 8) * u_step];
    }
    g += dg;
    u += du;
  };
  // Whole batches of L chunks per lane first (no predicates, so every load of a batch is issued
  // before the first is used), then one predicated batch for the rest.
  const int batched = chunks / (L * 32) * (L * 32);
  for (int c0 = lane; c0 < batched; c0 += L * 32) {
    gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      gr[l] = gmm::load_raw8(g_row + (c0 + l * 32) * 8);
      ur[l] = gmm::load_raw8(u_row + (c0 + l * 32) * 8);
    }
#pragma unroll
    for (int l = 0; l < L; ++l) add_chunk(gr[l], ur[l], c0 + l * 32);
  }
  for (int c0 = batched + lane; c0 < chunks; c0 += L * 32) {
    gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      const bool in = c < chunks;
      gr[l] = in ? gmm::load_raw8(g_row + c * 8) : gmm::Raw8<WT>{};
      ur[l] = in ? gmm::load_raw8(u_row + c * 8) : gmm::Raw8<WT>{};
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      if (c >= chunks) break;
      add_chunk(gr[l], ur[l], c);
    }
  }
  for (int64_t kk = int64_t{chunks} * 8 + lane; kk < hidden; kk += 32) {
    const float xv = to_f(x[kk]);
    g = fmaf(xv, to_f(g_row[kk]) * block_scale(gs, e, i, kk), g);
    u = fmaf(xv, to_f(u_row[kk]) * block_scale(us, e, i, kk), u);
  }
  g = warp_sum(g) * column_scale(gs, e, i);
  u = warp_sum(u) * column_scale(us, e, i);
  if (lane == 0) *h_out = from_f<T>(silu_f(g) * u);
}

// At T = 1 with expert_ready, gate_up_mma_kernel's blocks start before the router has finished:
// thread 0 polls its pair's flag (in L2) for the expert id, the one thing gate_up needs from the
// router (x is the router's input, final before any router block let this launch go; the shared
// expert's blocks need no flag). The flag carries its datum, so relaxed accesses suffice. A block
// lets the down kernel launch once its flag is seen (the launch goes when every block has, so
// every pair's flag is set: down reads its experts from the flags, pair_expert) and waits for the
// router only as it exits (RouterWaitAtExit: gate_up's completion then implies the router's, so
// down's wait covers the weights and the shared gate). Until session 17 every thread waited for
// the router after its first batch of loads and only then let down launch (down read ids before
// its wait): early pairs' blocks sat on one batch until the router's grid was done.
// gate_up_decode_kernel (f32 and odd sizes) waits for the router and reads ids.
__device__ __forceinline__ int32_t poll_expert_ready(const unsigned* flag) {
  unsigned v;
  while ((v = load_relaxed_gpu(flag)) == 0) __nanosleep(32);
  return static_cast<int32_t>(v - 1);
}
struct RouterWaitAtExit {
  bool on;
  __device__ ~RouterWaitAtExit() {
    if (on) wait_for_previous_kernel();
  }
};
// The expert of `pair`, which the down kernels read before their wait for gate_up: at T = 1 from
// its flag (every pair's flag was set before gate_up's blocks let down launch, and only the next
// layer's router zeroes them, after this kernel), else from ids (final before then).
__device__ __forceinline__ int64_t pair_expert(const unsigned* expert_ready, const int32_t* ids, int64_t pair) {
  return expert_ready ? static_cast<int64_t>(load_relaxed_gpu(expert_ready + pair * kReadyStride)) - 1 : __ldcg(ids + pair);
}

// Six blocks per SM (<= 40 registers): Qwen3-30B-A3B's T = 1 grid (8 pairs x 96 blocks) then
// runs as one wave; at 4 blocks per SM (61 registers) it took 1.45 waves. FP8 weights: under 40
// registers ptxas spilled the loop's state to local memory and issued 4 of a batch's 8 loads
// before the first use; at 4 blocks per SM (64 registers, no spills, all 8 first) Qwen3-30B's
// T = 1 layer went from 27.4 to 22.8 us and T = 8 from 149 to 117 us (H200, 5187fbe).
template <class WT> constexpr int kGateUpBlocksPerSm = sizeof(WT) == 1 ? 4 : 6;
template <class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads, kGateUpBlocksPerSm<WT>) gate_up_decode_kernel(DecodeArgs a) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  T* x = reinterpret_cast<T*>(decode_smem);  // [hidden]: the slot's token row of x
  const int64_t pairs = a.tokens * a.k;
  int64_t slot = blockIdx.y;
  const auto stage_x = [&] { stage_row(static_cast<const T*>(a.x) + (slot < pairs ? slot / a.k : slot - pairs) * a.x_ts, x, a.hidden); };
  // x is the router's input, complete before the router started, so at T = 1 it is staged while
  // the router may still run; ids, weights and the order are the router's output, read after the
  // wait. At T > 1 the pair blocks go in expert order: pairs of one expert run back to back and
  // the later ones read its rows from L2 (v3.2 read a shared expert's rows once per pair).
  if (!a.order) stage_x();
  wait_for_previous_kernel();
  // The down kernel's blocks may start now: they read the experts before their own wait.
  dependents_may_launch();
  if (a.order) {
    if (slot < pairs) slot = a.order[slot];
    stage_x();
  }
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDecodeWarps + threadIdx.x / 32;
  T* h = static_cast<T*>(a.h) + slot * a.h_rs + i;
  if (slot < pairs) {
    if (i >= a.inter) return;
    const int64_t e = a.ids[slot];
    const WT* g = static_cast<const WT*>(a.gate) + e * a.gu_es + i * a.gate_rs;
    const WT* u = static_cast<const WT*>(a.up) + e * a.gu_es + i * a.up_rs;
    gate_up_channel<T, WT>(x, g, u, a.hidden, a.gate_scale, a.up_scale, e, i, h);
  } else {  // the shared expert of token slot - pairs
    if (i >= a.s_inter) return;
    const T* g = static_cast<const T*>(a.s_gate) + i * a.s_rs;
    const T* u = static_cast<const T*>(a.s_up) + i * a.s_rs;
    gate_up_channel<T, T>(x, g, u, a.hidden, WeightScale{}, WeightScale{}, 0, i, h);
  }
}

// gate_up on tensor cores (v6), for 16-bit and FP8 weights whose rows are whole 64-byte steps.
// mma.sync m16n8k16 with f32 accumulation: A = 16 weight rows, the gate rows of 8 consecutive
// channels (rows 0-7) and their up rows (8-15); B = the token's x in all 8 columns, so every
// column of D holds the same 16 dot products and thread (g = lane / 4, q = lane % 4) ends with the
// gate (c[0]) and up (c[2]) sums of channel g. Thread (g, q) loads 16-byte chunk q of each 64-byte
// step of channel g's two rows and supplies the x elements of the same k as B: the k order inside
// one mma is then the thread's own byte order, the same in A and B, and no shuffles are needed.
// The block's kMmaWarps warps split the steps; their sums meet in shared memory.
// Why: the FFMA kernel above spends ~3 instructions per FP8 weight (convert to f16, widen to f32,
// FMA) and ~2.5 per bf16 weight; here 16 conversions + 4 HMMA per 32 FP8 weights, and 16-bit
// weights enter the mma as loaded. FP8: the 768 blocks of Qwen3-30B's T = 1 grid (128 threads,
// 80 registers, 6 blocks per SM) are one wave, where the FFMA kernel (4 blocks of 256) took 1.45.
// Numerics: FP8 weights convert exactly to f16 (cvt e4m3x2 -> f16x2). x is staged as f16, each
// 128 elements divided by the power of two that brings their largest |x| into [1, 2) (kept as an
// f32 scale), so no bf16 x overflows f16 and the products keep x's leading bits exactly; each
// step's f32 sums are multiplied by x's scale and the weights' 128x128 block scale. 16-bit
// weights: x as staged in its own type, products exact in the f32 accumulators.
constexpr int kMmaWarps = 4;       // warps per block, each a range of the row's 64-byte steps
// Steps per row per batch of loads in gate_up_mma_kernel (2 x kMmaSteps 16-byte loads in flight per
// lane): 4 for 16-bit weights, 2 for FP8, whose steps hold twice the elements, and then also for an
// FP8 layer's shared expert (16-bit rows, the same kernel). At 4 the FP8 loop spilled 52 bytes
// (ptxas, sm_90a), at 2 12. One build, a temporary switch, two alternating runs (session 19, H200,
// us, 4 -> 2 steps): FP8 T=1 Qwen3-30B-A3B 17.54-17.60 -> 17.09-17.12, Qwen3.5-35B-A3B 17.64-17.70
// -> 17.47-17.54, LFM2-8B-A1B 21.83-21.93 -> 22.14-22.17; T=8 115.24-115.32 -> 114.14-114.29,
// 105.83-105.87 -> 104.35-104.52, 121.35-121.39 -> 119.09-119.36. bf16 lost with 2: T=1
// Qwen3-30B-A3B 26.04-26.05 -> 26.45-26.46, LFM2-8B-A1B 31.09 -> 31.99, T=8 +0.7-1.6%.
template <class WT> constexpr int kMmaSteps = sizeof(WT) == 1 ? 2 : 4;
constexpr int kGateUpMmaWarpsPerSm = 6 * kMmaWarps;  // resident warps per SM at any block size (launch bounds)
constexpr int kMmaChannels = 8;    // channels per block (gate and up rows: the 16 rows of A)
constexpr int kMmaStepBytes = 64;  // a row's bytes per step: 16 per thread q

/// The mma kernel takes weights of a 16-bit type equal to x's, or FP8, whose rows are whole steps
/// (the shared expert, in x's type, then too: its rows hold twice the bytes).
template <class T, class WT> constexpr bool kGateUpOnTensorCores = (sizeof(T) == 2) && (std::is_same_v<WT, T> || std::is_same_v<WT, E4m3>);

// x (n elements of T) -> f16 in xs, each 128 elements divided by a power of two 2^e with their
// largest |x| in [1, 2) (e clamped to [-126, 126]: normal f32 scales), scale[b] = 2^e. n % 64 == 0.
// Eight threads per 128 elements, 16 each; every thread of the block takes part in the shuffles.
template <class T> __device__ void stage_x_f16(const T* x, __half* xs, float* scale, int n) {
  const int rounds = (n + blockDim.x * 16 - 1) / (blockDim.x * 16);
  for (int r = 0; r < rounds; ++r) {
    const int i0 = (r * blockDim.x + threadIdx.x) * 16;
    const bool in = i0 < n;
    float lo[8], hi[8];
    gmm::unpack8(in ? gmm::load_raw8(x + i0) : gmm::Raw8<T>{}, lo);
    gmm::unpack8(in ? gmm::load_raw8(x + i0 + 8) : gmm::Raw8<T>{}, hi);
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fmaxf(fabsf(lo[j]), fabsf(hi[j])));
#pragma unroll
    for (int off = 1; off < 8; off *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    const int e = m > 0.f ? min(126, max(-126, static_cast<int>((__float_as_uint(m) >> 23) & 0xff) - 127)) : 0;
    const float down = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
    if (!in) continue;
    uint32_t packed[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 l = __floats2half2_rn(lo[2 * j] * down, lo[2 * j + 1] * down), h = __floats2half2_rn(hi[2 * j] * down, hi[2 * j + 1] * down);
      memcpy(&packed[j], &l, 4);
      memcpy(&packed[4 + j], &h, 4);
    }
    reinterpret_cast<uint4*>(xs + i0)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    reinterpret_cast<uint4*>(xs + i0)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    if (threadIdx.x % 8 == 0) scale[i0 / 128] = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
  }
}

// This warp's part of channel g's gate and up dot products (thread (g, q) of the mma layout):
// steps [s_begin, s_end) of the rows g_row and u_row (16-byte aligned, whole 64-byte steps),
// against x staged in shared memory (xs: f16 for FP8 weights with x_scale per 128 elements, else
// x's own type). g_scales / u_scales: the rows' 128x128 block scales (FP8, else null), one per
// 128 elements, g_step / u_step apart. kSteps steps of both rows per batch of loads (kMmaSteps).
template <int kSteps, class WT, class AB>
__device__ __forceinline__ void gate_up_mma_steps(const AB* xs, const float* x_scale, const WT* g_row, const WT* u_row, int s_begin,
                                                  int s_end, const float* g_scales, int g_step, const float* u_scales,
                                                  int u_step, float& gate, float& up) {
  constexpr bool kFp8 = std::is_same_v<WT, E4m3>;
  const int q = threadIdx.x % 4;
  const uint4* gp = reinterpret_cast<const uint4*>(g_row) + q;  // chunk q of step 0; step s 4 chunks on
  const uint4* up_p = reinterpret_cast<const uint4*>(u_row) + q;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};  // 16-bit weights: the whole range; FP8: one step
  const auto add_step = [&](const uint4& wg, const uint4& wu, int s) {
    const uint32_t gw[4] = {wg.x, wg.y, wg.z, wg.w}, uw[4] = {wu.x, wu.y, wu.z, wu.w};
    if constexpr (kFp8) {
      // 16 FP8 weights per row and thread: k = 64 s + 16 q + 4 j + (0..3) for word j.
      const uint4* xv = reinterpret_cast<const uint4*>(xs + s * 64 + q * 16);
      const uint4 x0 = xv[0], x1 = xv[1];
      const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t a[4] = {decode_fp8x2<__half>(gw[j]), decode_fp8x2<__half>(uw[j]), decode_fp8x2<__half>(gw[j] >> 16),
                               decode_fp8x2<__half>(uw[j] >> 16)};
        mma16816<__half>(acc, a, xw[2 * j], xw[2 * j + 1]);
      }
      const int block = s / 2;  // 128 elements = 2 steps
      const float xsc = x_scale[block];
      gate = fmaf(acc[0], g_scales ? xsc * g_scales[block * g_step] : xsc, gate);
      up = fmaf(acc[2], u_scales ? xsc * u_scales[block * u_step] : xsc, up);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = 0.f;
    } else {
      // 8 weights per row and thread: k = 32 s + 8 q + 2 j + (0..1) for word j; two mmas.
      const uint4 xv = *reinterpret_cast<const uint4*>(xs + s * 32 + q * 8);
      const uint32_t a0[4] = {gw[0], uw[0], gw[1], uw[1]}, a1[4] = {gw[2], uw[2], gw[3], uw[3]};
      mma16816<AB>(acc, a0, xv.x, xv.y);
      mma16816<AB>(acc, a1, xv.z, xv.w);
    }
  };
  int s = s_begin;
  // Whole batches: every load of a batch issued before the first is used.
  for (; s + kSteps <= s_end; s += kSteps) {
    uint4 wg[kSteps], wu[kSteps];
#pragma unroll
    for (int l = 0; l < kSteps; ++l) {
      wg[l] = gp[4 * (s + l)];
      wu[l] = up_p[4 * (s + l)];
    }
#pragma unroll
    for (int l = 0; l < kSteps; ++l) add_step(wg[l], wu[l], s + l);
  }
  for (; s < s_end; ++s) add_step(gp[4 * s], up_p[4 * s], s);
  if constexpr (!kFp8) {
    gate = acc[0];
    up = acc[2];
  }
}

// Block (c, slot): channels 8c .. 8c + 7 of pair slot (or of the shared expert of token slot -
// pairs), as gate_up_decode_kernel's blocks, on tensor cores (kGateUpOnTensorCores<T, WT>).
// kBlocksPerSm: the launch bounds' resident blocks (one_wave_blocks_per_sm picks 7 at T = 1).
template <class T, class WT, int kWarps = kMmaWarps, int kBlocksPerSm = kGateUpMmaWarpsPerSm / kWarps>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm) gate_up_mma_kernel(DecodeArgs a) {
  constexpr bool kFp8 = std::is_same_v<WT, E4m3>;
  extern __shared__ __align__(16) unsigned char decode_smem[];
  __shared__ float partial[kWarps][kMmaChannels][2];
  const int hidden = static_cast<int>(a.hidden);
  // x as the mma's B operand: f16 scaled per 128 elements (x_scale) for FP8 weights, else as is.
  T* x_raw = reinterpret_cast<T*>(decode_smem);
  __half* x_f16 = reinterpret_cast<__half*>(decode_smem);
  float* x_scale = reinterpret_cast<float*>(decode_smem + static_cast<size_t>(hidden) * 2);
  const int64_t pairs = a.tokens * a.k;
  int64_t slot = blockIdx.y;
  const bool shared_slot = slot >= pairs;  // the shared expert: weights of x's type
  const auto stage_x = [&] {
    const T* row = static_cast<const T*>(a.x) + (shared_slot ? slot - pairs : slot / a.k) * a.x_ts;
    if (kFp8 && !shared_slot) stage_x_f16(row, x_f16, x_scale, hidden);
    else stage_row(row, x_raw, a.hidden);
  };
  // As gate_up_decode_kernel: x is staged before the wait at T = 1 (it is the router's input),
  // after it when the pair blocks run in the router's expert order.
  if (!a.order) stage_x();
  const bool early = a.expert_ready != nullptr;  // T = 1
  __shared__ int32_t ready_expert;
  if (early) {
    if (threadIdx.x == 0 && !shared_slot) ready_expert = poll_expert_ready(a.expert_ready + slot * kReadyStride);
  } else {
    wait_for_previous_kernel();
    dependents_may_launch();
  }
  const RouterWaitAtExit exit_wait{early};
  if (a.order) {
    if (!shared_slot) slot = a.order[slot];
    stage_x();
  }
  __syncthreads();
  if (early) dependents_may_launch();  // after this pair's flag: see poll_expert_ready
  const int64_t channels = shared_slot ? a.s_inter : a.inter, c0 = static_cast<int64_t>(blockIdx.x) * kMmaChannels;
  if (c0 >= channels) return;  // the whole block: grid x covers the larger of inter and s_inter
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
  const int64_t i = min(c0 + g, channels - 1);  // rows past the last channel repeat it, unwritten
  float gate = 0.f, up = 0.f;
  if (!shared_slot) {
    const int64_t e = early ? ready_expert : a.ids[slot];
    const WT* g_row = static_cast<const WT*>(a.gate) + e * a.gu_es + i * a.gate_rs;
    const WT* u_row = static_cast<const WT*>(a.up) + e * a.gu_es + i * a.up_rs;
    const auto [s_begin, s_end] = warp_steps(hidden * static_cast<int>(sizeof(WT)) / kMmaStepBytes, kWarps, warp);
    const WeightScale &gs = a.gate_scale, &us = a.up_scale;
    const bool blocks = kFp8 && gs.kind == WeightScale::Block128;
    const float* g_scales = blocks ? gs.ptr + gmm::block_scale_offset(e, i, 0, gs.s0, gs.s1, gs.s2) : nullptr;
    const float* u_scales = blocks ? us.ptr + gmm::block_scale_offset(e, i, 0, us.s0, us.s1, us.s2) : nullptr;
    if constexpr (kFp8)  // scale steps: a row's 128-element blocks, fewer than 2^31 apart
      gate_up_mma_steps<kMmaSteps<WT>, WT, __half>(x_f16, x_scale, g_row, u_row, s_begin, s_end, g_scales, static_cast<int>(gs.s2), u_scales,
                                    static_cast<int>(us.s2), gate, up);
    else gate_up_mma_steps<kMmaSteps<WT>, WT, T>(x_raw, nullptr, g_row, u_row, s_begin, s_end, nullptr, 0, nullptr, 0, gate, up);
    if (lane % 4 == 0) {
      partial[warp][g][0] = gate * column_scale(gs, e, i);
      partial[warp][g][1] = up * column_scale(us, e, i);
    }
  } else {
    const T* g_row = static_cast<const T*>(a.s_gate) + i * a.s_rs;
    const T* u_row = static_cast<const T*>(a.s_up) + i * a.s_rs;
    const auto [s_begin, s_end] = warp_steps(hidden * static_cast<int>(sizeof(T)) / kMmaStepBytes, kWarps, warp);
    gate_up_mma_steps<kMmaSteps<WT>, T, T>(x_raw, nullptr, g_row, u_row, s_begin, s_end, nullptr, 0, nullptr, 0, gate, up);
    if (lane % 4 == 0) {
      partial[warp][g][0] = gate;
      partial[warp][g][1] = up;
    }
  }
  __syncthreads();
  if (threadIdx.x < kMmaChannels && c0 + threadIdx.x < channels) {
    float gs = 0.f, us = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      gs += partial[w][threadIdx.x][0];
      us += partial[w][threadIdx.x][1];
    }
    static_cast<T*>(a.h)[slot * a.h_rs + c0 + threadIdx.x] = from_f<T>(silu_f(gs) * us);
  }
}

// Down: block (g, t) computes outputs n0 = g * O .. n0 + O - 1 of token t. Warp w takes the
// token's pairs w, w + warps, ... (the shared expert is pair k); for each it streams the O down
// rows (consecutive in memory) and dots them with the pair's row of h. A lane issues all O * L
// weight loads of a batch, then the batch's L loads of h (shared by the O rows; from L2), before
// using any. Each pair's expert is known before gate_up's blocks let this launch go (pair_expert),
// so a warp issues its first batch of weight loads before waiting for gate_up: the first reads
// overlap gate_up's tail, and only h (and the routing weights, read after the wait) wait. The
// block adds the warps' sums in shared memory.
// (v3.3 had one warp per output walk all of its pairs, experts looked up in shared memory: ptxas
// gave it 32 registers and a few loads in flight per lane, 13 us for 25 MB in bench/moe_probe.cu
// against 8 us for one warp per row.)
constexpr int kDownMaxWarps = 16;
template <class WT> constexpr int kDownLoads = sizeof(WT) == 4 ? 2 : 3;    // chunks per row and batch
constexpr int kDownOutputs = 2;  // consecutive output rows per warp (O)

// dots[i] = sum over row i (i < valid_rows <= O, `rows_rs` apart from w) of w . h, `len`
// elements, times the row's 128-element block scales when `block_scales` is given (one per 128
// elements, `scale_step` apart; the O rows share them: O divides 128). When `wait`, waits for the
// previous kernel (h's writer) after issuing the first batch of weight loads.
template <int O, class T, class WT>
__device__ __forceinline__ void down_rows(const WT* w, int64_t rows_rs, int valid_rows, const T* h, int64_t len, const float* block_scales,
                                          int64_t scale_step, bool wait, float (&dots)[O]) {
  constexpr int L = kDownLoads<WT>;
  const int lane = threadIdx.x % 32;
  const int chunks = static_cast<int>(len / 8);
#pragma unroll
  for (int i = 0; i < O; ++i) dots[i] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += L * 32) {
    gmm::Raw8<WT> wr[O][L];
    gmm::Raw8<T> hr[L];
#pragma unroll
    for (int i = 0; i < O; ++i)
#pragma unroll
      for (int l = 0; l < L; ++l)
        wr[i][l] = i < valid_rows && c0 + l * 32 < chunks ? gmm::load_raw8(w + i * rows_rs + (c0 + l * 32) * 8) : gmm::Raw8<WT>{};
    if (wait && c0 == lane) wait_for_previous_kernel();
#pragma unroll
    for (int l = 0; l < L; ++l) hr[l] = c0 + l * 32 < chunks ? gmm::load_raw8(h + (c0 + l * 32) * 8) : gmm::Raw8<T>{};
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      if (c >= chunks) break;
      float hf[8];
      gmm::unpack8(hr[l], hf);
      const float scale = block_scales ? block_scales[c / (gmm::kScaleBlock / 8) * scale_step] : 1.f;
#pragma unroll
      for (int i = 0; i < O; ++i) {
        float wf[8];
        gmm::unpack8(wr[i][l], wf);
        dots[i] = fmaf(gmm::dot8(wf, hf, 0.f), scale, dots[i]);
      }
    }
  }
  if (wait && chunks <= lane) wait_for_previous_kernel();  // the loop above did not run for this lane
#pragma unroll 1  // the len % 8 tail (none for the models' sizes): unrolled, it took ~60 registers
  for (int64_t kk = int64_t{chunks} * 8 + lane; kk < len; kk += 32) {
    const float hv = to_f(h[kk]), scale = block_scales ? block_scales[kk / gmm::kScaleBlock * scale_step] : 1.f;
#pragma unroll
    for (int i = 0; i < O; ++i)
      if (i < valid_rows) dots[i] = fmaf(to_f(w[i * rows_rs + kk]) * scale, hv, dots[i]);
  }
}

template <class T, class WT>
__global__ void __launch_bounds__(kDownMaxWarps * 32, 2) down_decode_kernel(DecodeArgs a) {
  dependents_may_launch();  // the next layer's router may start: it waits before touching memory
  constexpr int O = kDownOutputs;
  __shared__ float partial[kDownMaxWarps][O];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * O, t = blockIdx.x, pairs = a.tokens * a.k;  // see down_grid
  const int valid = static_cast<int>(min(int64_t{O}, a.hidden - n0));
  float acc[O] = {}, dots[O];
  for (int j = warp; j < a.k + (a.shared ? 1 : 0); j += warps) {
    const bool first = j == warp;
    if (j < a.k) {
      // The expert before the wait (pair_expert: L2 loads, so no earlier layer's value comes
      // from this SM's L1), the routing weight after it.
      const int64_t pair = t * a.k + j, e = pair_expert(a.expert_ready, a.ids, pair);
      const WeightScale& ds = a.down_scale;
      const bool blocks = ds.kind == WeightScale::Block128;
      const float* scales = blocks ? ds.ptr + gmm::block_scale_offset(e, n0, 0, ds.s0, ds.s1, ds.s2) : nullptr;
      down_rows<O>(static_cast<const WT*>(a.down) + e * a.d_es + n0 * a.d_rs, a.d_rs, valid, static_cast<const T*>(a.h) + pair * a.h_rs,
                   a.inter, scales, ds.s2, first, dots);
      const float weight = __ldcg(a.weights + pair);
#pragma unroll
      for (int i = 0; i < O; ++i) acc[i] = fmaf(dots[i], weight * column_scale(ds, e, n0 + i), acc[i]);
    } else {  // the shared expert
      down_rows<O>(static_cast<const T*>(a.s_down) + n0 * a.sd_rs, a.sd_rs, valid, static_cast<const T*>(a.h) + (pairs + t) * a.h_rs,
                   a.s_inter, static_cast<const float*>(nullptr), 0, first, dots);
      const float gate = a.sg ? __ldcg(a.sg + t) : 1.f;
#pragma unroll
      for (int i = 0; i < O; ++i) acc[i] = fmaf(dots[i], gate, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) {
    const float v = warp_sum(acc[i]);
    if (lane == 0) partial[warp][i] = v;
  }
  __syncthreads();
  if (threadIdx.x < valid) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += partial[w][threadIdx.x];
    static_cast<T*>(a.out)[t * a.o_ts + n0 + threadIdx.x] = from_f<T>(sum);
  }
}

// Down on tensor cores (v6; 16-bit weights since v10), for FP8 or x-typed weights whose rows
// (inter, and the shared expert's s_inter, in x's 16-bit type) are whole 64-byte steps. Block
// (o, t): outputs n0 = 4o .. 4o + 3 of token t; its kDownMmaWarps warps split the rows' steps.
// The token's pairs are an mma's columns, 8 at a time: A's row g is down row n0 (second mma:
// n0 + 2) of pair g's expert and row g + 8 its row n0 + 1 (n0 + 3); B's column g is pair g's row
// of h, shared by both mmas. The wanted products
// are D's diagonal, D[g][g] and D[g + 8][g], which thread (g, q = g / 2) holds as c[g % 2] and
// c[2 + g % 2]; the other 56 of each row are discarded (the tensor cores have time to spare).
// Thread (g, q) loads chunk q of each step of pair g's four rows and the h elements of the same
// k: the k order inside an mma is the thread's own in A and B. The shared expert is a group of its
// own (rows of s_inter elements of x's type, column 0). Lanes of pairs past k repeat pair 0's
// addresses (merged into the same loads) with weight 0.
// Why: down_decode_kernel holds 6 rows of 8 FFMA operands per lane under 64 registers, 1024
// blocks for Qwen3-30B at T = 1 (1.94 waves at 4 blocks per SM); here 512 blocks of 128 threads at
// 4 per SM are one wave with 12 (FP8) or 16 (16-bit) 16-byte weight loads in flight per lane (~95
// KB per SM: all of the FP8 layer's down bytes, 2/3 of the bf16 layer's), issued before the wait
// for gate_up as in down_decode_kernel. Per-block timestamps (session 14, Qwen3-30B-A3B T = 1
// bf16) showed why down_decode_kernel lost there: its second wave of blocks starts only as the
// first ends, ~4 us after gate_up's blocks.
// FP8 weights convert exactly to h's type (e4m3x2 -> f16x2, then to bf16 for bf16 h), so h enters
// the mma as gate_up wrote it: no scaling and no range limit.
constexpr int kDownMmaWarps = 4;
constexpr int kDownMmaWarpsPerSm = 4 * kDownMmaWarps;  // resident warps per SM at any block size (launch bounds)
constexpr int kDownMmaOutputs = 4;  // outputs per block: rows n0 .. n0 + 3, two per mma
// 64-byte steps per row per batch of loads: 3 (FP8: 12 weight and 6 h loads of 16 bytes per lane;
// 16-bit: 12 and 3); beside FP8 weights the shared expert's 16-bit rows 2 (at 4, the FP8 kernel
// would spill). 16-bit rows had 4 until session 20, where CUDA 13.0's ptxas spilled 24 bytes in
// the loop; at 3 none (one build, a temporary switch, two alternating runs, H200, us, 4 -> 3): T=1
// Qwen3-30B-A3B bf16 26.08-26.16 -> 24.62-24.65, Qwen3.5-35B-A3B 23.58-23.77 -> 22.21-22.28; T=8
// 158.0-158.3 -> 156.4-156.8, 134.6-134.7 -> 134.2-134.3 (LFM2-8B-A1B's top-4 down is
// down_decode_kernel).
constexpr int kDownMmaSteps = 3;

/// The mma down takes FP8 weights or weights of x's 16-bit type. FP8: down_decode_kernel was
/// slower (Qwen3-30B, H200, same call: T = 1 20.3 vs 19.2 us, T = 8 108 vs 104 us). 16-bit: with
/// batches of 2 steps down_decode_kernel won (session 8: T = 1 26.7 vs 28.6 us, T = 8 146 vs 152);
/// with batches of 4 (2/3 of Qwen3-30B's rows in flight before the wait, session 14, one build,
/// alternating, H200, us) down_mma wins: Qwen3-30B-A3B bf16 T = 1 26.63-26.64 -> 26.06-26.10,
/// T = 8 161.2 -> 159.0; Qwen3.5-35B-A3B T = 1 25.20-25.25 -> 23.60-23.62, T = 8 141.6 -> 133.7.
template <class T, class WT> constexpr bool kDownOnTensorCores = sizeof(T) == 2 && (std::is_same_v<WT, E4m3> || std::is_same_v<WT, T>);
/// ... and only when each token has at least kDownMmaMinTopK pairs: at top-4 (LFM2-8B-A1B, FP8,
/// same call) down_decode_kernel won (T = 1 22.7 vs 24.5 us, T = 8 109 vs 123 us), at top-8
/// (Qwen3-30B, Qwen3.5-35B) down_mma (Qwen3-30B T = 1 19.2 vs 20.2, T = 8 104 vs 108).
constexpr int kDownMmaMinTopK = 8;

// This warp's steps [s_begin, s_end) of rows n0 .. n0 + 3 (`first` is row n0, rows `rs` apart,
// 16-byte aligned; rows past `last` repeat it) against h_row, as the mma layout above, into
// run[0] (rows 0, 1) and run[1] (rows 2, 3). FP8 weights are converted
// to AB, h's type; each step's sums are multiplied by the rows' 128x128 block scale when
// `block_scales` is given (one per 128 elements, scale_step apart). When `wait`, the previous
// kernel (h's writer) is waited for after the first batch of weight loads (and FP8 block scales)
// is issued. The scales go with the weights, not after the mmas, because there ptxas issued the
// 6th h load after the first mma and the 3 scale loads after that (sm_90a, FP8, 4 warps): two L2
// round trips after the wait, where loaded early all 6 h loads go before the first mma, spill-free
// (a false dependency forcing that order, tried first, spilled 92 bytes). Session 24, one build,
// two alternating runs of moe_bench FP8 (H200, us, late -> early): T=1 Qwen3-30B-A3B 17.14 ->
// 17.19-17.21, Qwen3.5-35B-A3B 17.95-18.06 -> 17.52-17.54; T=8 83.56-83.85 -> 82.84-83.15,
// 78.66-78.94 -> 77.88-78.10.
template <class WT, class AB, int L>
__device__ __forceinline__ void down_mma_steps(const WT* first, int64_t rs, int last, const AB* h_row, int s_begin, int s_end,
                                               const float* block_scales, int64_t scale_step, bool wait, float (&run)[2][4]) {
  constexpr bool kFp8 = std::is_same_v<WT, E4m3>;
  constexpr int kHChunks = kFp8 ? 2 : 1;  // 16-byte chunks of h per step and thread
  const int q = threadIdx.x % 4;
  const uint4* rp[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) rp[r] = reinterpret_cast<const uint4*>(first + min(r, last) * rs) + q;
  const uint4* hp = reinterpret_cast<const uint4*>(h_row) + q * kHChunks;
  const auto add_step = [&](const uint4 (&w)[4], const uint4 (&hv)[kHChunks], float scale) {
    uint32_t hw[4 * kHChunks];
#pragma unroll
    for (int c = 0; c < kHChunks; ++c) {
      hw[4 * c] = hv[c].x, hw[4 * c + 1] = hv[c].y, hw[4 * c + 2] = hv[c].z, hw[4 * c + 3] = hv[c].w;
    }
    if constexpr (kFp8) {
      // 16 weights per row and thread: k = 64 s + 16 q + 4 j + (0..3) for word j.
      float c[2][4] = {};
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint32_t top[4] = {w[2 * m].x, w[2 * m].y, w[2 * m].z, w[2 * m].w};  // rows g (n0 + 2m) and g + 8 (n0 + 2m + 1)
        const uint32_t bottom[4] = {w[2 * m + 1].x, w[2 * m + 1].y, w[2 * m + 1].z, w[2 * m + 1].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t a[4] = {decode_fp8x2<AB>(top[j]), decode_fp8x2<AB>(bottom[j]), decode_fp8x2<AB>(top[j] >> 16),
                                 decode_fp8x2<AB>(bottom[j] >> 16)};
          mma16816<AB>(c[m], a, hw[2 * j], hw[2 * j + 1]);
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) run[m][i] = fmaf(c[m][i], scale, run[m][i]);
    } else {
      // 8 weights per row and thread: k = 32 s + 8 q + 2 j + (0..1) for word j; two mmas per row pair.
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint32_t top[4] = {w[2 * m].x, w[2 * m].y, w[2 * m].z, w[2 * m].w};
        const uint32_t bottom[4] = {w[2 * m + 1].x, w[2 * m + 1].y, w[2 * m + 1].z, w[2 * m + 1].w};
        const uint32_t a0[4] = {top[0], bottom[0], top[1], bottom[1]}, a1[4] = {top[2], bottom[2], top[3], bottom[3]};
        mma16816<AB>(run[m], a0, hw[0], hw[1]);
        mma16816<AB>(run[m], a1, hw[2], hw[3]);
      }
    }
  };
  // A batch of n <= L steps from step s: every weight load issued first, then (first batch only)
  // the wait for h's writer, then the h loads. Called with n = L the predicates fold away.
  const auto batch = [&](int s, int n) {
    uint4 w[L][4], hv[L][kHChunks];
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
      for (int r = 0; r < 4; ++r) w[l][r] = l < n ? rp[r][4 * (s + l)] : make_uint4(0, 0, 0, 0);
    float scale[L];  // 128 elements = 2 steps; 16-bit weights have no block scales
#pragma unroll
    for (int l = 0; l < L; ++l) scale[l] = kFp8 && block_scales && l < n ? block_scales[((s + l) / 2) * scale_step] : 1.f;
    if (wait) {
      wait_for_previous_kernel();
      wait = false;
    }
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
      for (int c = 0; c < kHChunks; ++c) hv[l][c] = l < n ? __ldcg(hp + 4 * kHChunks * (s + l) + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int l = 0; l < L; ++l)
      if (l < n) add_step(w[l], hv[l], scale[l]);
  };
  int s = s_begin;
  for (; s + L <= s_end; s += L) batch(s, L);
  if (s < s_end) batch(s, s_end - s);  // the last steps as one predicated batch (one round trip, not n)
  if (wait) wait_for_previous_kernel();
}

// Output r's product for pair g, held by thread (g, g / 2): D[g][g] of mma r / 2 for even r,
// D[g + 8][g] for odd r. Selected, not indexed by g: a run-time index put run in local memory.
__device__ __forceinline__ float diagonal(const float (&run)[2][4], int r, int g) {
  const int i = (r % 2) * 2;
  return g % 2 ? run[r / 2][i + 1] : run[r / 2][i];
}

template <class T, class WT, int kWarps = kDownMmaWarps>
__global__ void __launch_bounds__(kWarps * 32, kDownMmaWarpsPerSm / kWarps) down_mma_kernel(DecodeArgs a) {
  dependents_may_launch();  // the next layer's router may start: it waits before touching memory
  __shared__ float partial[kWarps][kDownMmaOutputs];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kDownMmaOutputs, t = blockIdx.x, pairs = a.tokens * a.k;  // see down_grid
  const bool holder = q == g / 2;  // this lane holds pair g's diagonal elements
  const int last = static_cast<int>(min(int64_t{kDownMmaOutputs}, a.hidden - n0)) - 1;  // rows past the matrix repeat its last
  const int routed_groups = (a.k + 7) / 8, groups = routed_groups + (a.shared ? 1 : 0);
  float acc[kDownMmaOutputs] = {};  // this lane's weighted share of the 4 outputs
  bool wait = true;
  for (int grp = 0; grp < groups; ++grp) {
    float run[2][4] = {};
    if (grp < routed_groups) {
      const int j = grp * 8 + g;
      const bool valid = j < a.k;
      // The expert before the wait, the routing weight after it (see down_decode_kernel).
      const int64_t pair = t * a.k + (valid ? j : grp * 8), e = pair_expert(a.expert_ready, a.ids, pair);
      const auto [s_begin, s_end] = warp_steps(static_cast<int>(a.inter * static_cast<int64_t>(sizeof(WT)) / kMmaStepBytes), kWarps, warp);
      const WeightScale& ds = a.down_scale;
      const float* scales = std::is_same_v<WT, E4m3> && ds.kind == WeightScale::Block128
                                ? ds.ptr + gmm::block_scale_offset(e, n0, 0, ds.s0, ds.s1, ds.s2) : nullptr;
      down_mma_steps<WT, T, kDownMmaSteps>(static_cast<const WT*>(a.down) + e * a.d_es + n0 * a.d_rs, a.d_rs, last, static_cast<const T*>(a.h) + pair * a.h_rs,
                            s_begin, s_end, scales, ds.s2, wait, run);
      const float weight = valid ? __ldcg(a.weights + pair) : 0.f;
#pragma unroll
      for (int r = 0; r < kDownMmaOutputs; ++r)
        if (holder) acc[r] = fmaf(diagonal(run, r, g), weight * column_scale(ds, e, min(n0 + r, a.hidden - 1)), acc[r]);
    } else {  // the shared expert: column 0
      const auto [s_begin, s_end] = warp_steps(static_cast<int>(a.s_inter * static_cast<int64_t>(sizeof(T)) / kMmaStepBytes), kWarps, warp);
      constexpr int kSharedSteps = std::is_same_v<WT, E4m3> ? 2 : kDownMmaSteps;  // see kDownMmaSteps
      down_mma_steps<T, T, kSharedSteps>(static_cast<const T*>(a.s_down) + n0 * a.sd_rs, a.sd_rs, last, static_cast<const T*>(a.h) + (pairs + t) * a.h_rs,
                           s_begin, s_end, nullptr, 0, wait, run);
      const float gate = g == 0 ? (a.sg ? __ldcg(a.sg + t) : 1.f) : 0.f;
#pragma unroll
      for (int r = 0; r < kDownMmaOutputs; ++r)
        if (holder) acc[r] = fmaf(diagonal(run, r, g), gate, acc[r]);
    }
    wait = false;  // the first group's call waited
  }
#pragma unroll
  for (int r = 0; r < kDownMmaOutputs; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) partial[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < kDownMmaOutputs && n0 + threadIdx.x < a.hidden) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][threadIdx.x];
    static_cast<T*>(a.out)[t * a.o_ts + n0 + threadIdx.x] = from_f<T>(sum);
  }
}

// ---- host -----------------------------------------------------------------------------------------
bool rows_aligned(const Tensor& t, int64_t row_stride) {
  return aligned16(t.raw_data()) && (row_stride * static_cast<int64_t>(t.itemsize())) % 16 == 0;
}
int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 65535)); }

// Calls f with the prefill glue kernels' V as an integral constant: 16 / sizeof(T) where rows of n
// elements are whole 16-byte vectors for every (pointer, row stride) given, else 1.
template <class T, class F> void with_glue_vector(int64_t n, std::initializer_list<std::pair<const void*, int64_t>> rows, F&& f) {
  constexpr int kV = 16 / static_cast<int>(sizeof(T));
  bool whole = n % kV == 0;
  for (const auto& [ptr, rs] : rows) whole = whole && aligned16(ptr) && rs % kV == 0;
  if (whole) f(std::integral_constant<int, kV>{});
  else f(std::integral_constant<int, 1>{});
}

// Warps per block of gate_up_mma_kernel and down_mma_kernel at T > 1 (T = 1 keeps 4: one wave of
// blocks whose pairs start as the router picks them). A block's warps split its rows' steps, so
// with fewer warps each warp streams longer for every block's fixed costs (the wait, the pair
// order and x read through L2, the staging barrier, the partial sums' barrier); but a grid of
// fewer warps than the SMs hold leaves bandwidth unused. So: the fewest warps, from `fewest` and
// doubling up to 4, that still give the grid 1.9 waves of warps (warps_per_sm resident per SM).
// EMBER_MOE_BATCHED_WARPS=1|2|4 sets the count (the tests run every variant with it).
int batched_warps(int64_t blocks, int fewest, int warps_per_sm, int device) {
  if (const char* value = std::getenv("EMBER_MOE_BATCHED_WARPS"); value != nullptr && *value != '\0') {
    const std::string v = value;
    if (v == "1" || v == "2" || v == "4") return std::stoi(v);
    fail("moe_layer", "EMBER_MOE_BATCHED_WARPS: expected 1, 2 or 4, got {}", v);
  }
  const int64_t wave = int64_t{device_properties(device).multiProcessorCount} * warps_per_sm;
  int warps = fewest;
  while (warps < 4 && blocks * warps * 10 < 19 * wave) warps *= 2;
  return warps;
}

// At T = 1 gate_up_mma_kernel's blocks (4 warps) are one wave, polling for their pairs' experts as
// the router picks them, at 6 blocks per SM (80 registers). A grid of more than 6 per SM
// (LFM2-8B-A1B: 224 channel blocks x 4 pairs = 896 on the H200's 132 SMs) takes the kernel built
// for 7 (72 registers; 4 bytes of spills for 16-bit weights, 32 for FP8). Measured (session 21,
// H200, one build, two alternating runs of moe_bench 1, us, 6 -> 7 -> 8 blocks): LFM2-8B-A1B bf16
// 31.66-31.69 -> 28.50-28.61 -> 28.96-28.97, FP8 22.81-22.88 -> 20.08-20.15 -> 20.22-20.37; the
// one-wave grids lose with more (Qwen3-30B-A3B, 768 blocks, FP8 17.78 -> 18.07 at 7).
bool one_wave_needs_7_blocks(int64_t blocks, int device) {
  return blocks > int64_t{kGateUpMmaWarpsPerSm / kMmaWarps} * device_properties(device).multiProcessorCount;
}

// The down kernels' grid: block (t, o) takes outputs o * outputs .. of token t. Tokens are x, so
// the blocks of one output group run together and the tokens whose pairs share an expert read its
// rows at about the same time, the later ones from L2 (gate_up gets the same from the router's
// expert order). y <= 65535 holds: decode_fits keeps hidden within kDecodeSmemMax / 2 elements.
dim3 down_grid(int64_t hidden, int outputs, int64_t tokens) {
  return dim3(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + outputs - 1) / outputs));
}

// Calls f(std::integral_constant<int, w>) for w = warps (1, 2 or 4).
template <class F> void with_warps(int warps, F&& f) {
  switch (warps) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

// EMBER_MOE_PATH=decode|grouped forces the decode kernels or the grouped path (permutation +
// grouped products) so benchmarks can compare them on one shape; unset, the layer picks by size.
enum class MoePath { Auto, Decode, Grouped };
MoePath forced_moe_path() {
  const char* value = std::getenv("EMBER_MOE_PATH");
  if (value == nullptr || *value == '\0') return MoePath::Auto;
  const std::string v = value;
  if (v == "decode") return MoePath::Decode;
  if (v == "grouped") return MoePath::Grouped;
  fail("moe_layer", "EMBER_MOE_PATH: expected decode or grouped, got {}", v);
}

// Calls f(T*) with the kernel element type of a float dtype.
template <class F> void with_float(DType d, F&& f) {
  switch (d) {
    case kFloat32: f(static_cast<float*>(nullptr)); break;
    case kFloat16: f(static_cast<__half*>(nullptr)); break;
    case kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case kFloat64: f(static_cast<double*>(nullptr)); break;
    default: fail("moe", "CUDA element type: expected float32, float16, bfloat16 or float64, got {}", name(d));
  }
}

Tensor f32_contiguous(const Tensor& t) {
  if (!t.defined()) return t;
  const Tensor f = t.dtype() == kFloat32 ? t : t.to(kFloat32);
  return f.contiguous();
}

void launch_route(const RouteArgs& args, DType logits_type, DType x_type, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((args.tokens + kRouteWarps - 1) / kRouteWarps);
  with_experts_per_lane(args.experts, [&](auto epl) {
    with_float(logits_type, [&](auto* l_tag) {
      using L = std::remove_pointer_t<decltype(l_tag)>;
      with_float(x_type, [&](auto* x_tag) {
        using X = std::remove_pointer_t<decltype(x_tag)>;
        if constexpr (!std::is_same_v<X, double>) route_kernel<decltype(epl)::value, L, X><<<blocks, kRouteWarps * 32, 0, stream>>>(args);
      });
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void launch_permute(const Tensor& ids, const Tensor& order, const Tensor& inverse, const Tensor& tokens, const Tensor& counts,
                    const Tensor& offsets, cudaStream_t stream) {
  const Tensor c = ids.contiguous();
  const int64_t pairs = c.numel();
  const int k = static_cast<int>(ids.size(1)), experts = static_cast<int>(counts.size(0));
  if (c.dtype() == kInt32) {
    permute_kernel<int32_t><<<1, kPermuteThreads, 0, stream>>>(c.data_ptr<int32_t>(), pairs, k, experts, order.data_ptr<int32_t>(),
                                                              inverse.data_ptr<int32_t>(), tokens.data_ptr<int32_t>(),
                                                              counts.data_ptr<int32_t>(), offsets.data_ptr<int32_t>());
  } else {
    permute_kernel<int64_t><<<1, kPermuteThreads, 0, stream>>>(c.data_ptr<int64_t>(), pairs, k, experts, order.data_ptr<int32_t>(),
                                                              inverse.data_ptr<int32_t>(), tokens.data_ptr<int32_t>(),
                                                              counts.data_ptr<int32_t>(), offsets.data_ptr<int32_t>());
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

// out [rows, n] = a [rows, k] @ w^T for w [G, n, k] (unit stride along k), grouped by offs (or one group).
void rows_product(const Tensor& a, const Tensor& w, const Tensor& w_scale, const int32_t* offs, const Tensor& out, int device) {
  gmm::RowsProblem p;
  p.a = a.raw_data(); p.a_rs = a.stride(0); p.a_ks = a.stride(1); p.a_type = a.dtype();
  p.b = w.raw_data(); p.b_gs = w.stride(0); p.b_ks = w.stride(2); p.b_ns = w.stride(1); p.b_type = w.dtype();
  p.scale_b = gmm::weight_scale(w_scale, w.size(1));
  p.offs = offs; p.groups = w.size(0); p.rows = a.size(0); p.n = w.size(1); p.k = w.size(2);
  p.out = out.raw_data(); p.o_rs = out.stride(0); p.o_ns = out.stride(1); p.out_type = out.dtype();
  gmm::run_rows(p, device);
}

template <class T>
void launch_silu_mul(const Tensor& gu, int64_t inter, const Tensor& h, cudaStream_t stream) {
  const int64_t rows = gu.size(0);
  const T* g = static_cast<const T*>(gu.raw_data());
  with_glue_vector<T>(inter, {{g, gu.stride(0)}, {g + inter, gu.stride(0)}, {h.raw_data(), h.stride(0)}}, [&](auto v) {
    silu_mul_kernel<T, v><<<blocks_for(rows * inter / v, 256), 256, 0, stream>>>(g, g + inter, gu.stride(0), rows, inter,
                                                                                 static_cast<T*>(h.raw_data()), h.stride(0));
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_route(const Tensor& logits, const Tensor& expert_bias, const MoeRouteOptions& options, const Tensor& weights,
               const Tensor& ids) {
  const int device = logits.device().index;
  const Tensor bias = f32_contiguous(expert_bias);
  RouteArgs a;
  a.logits = logits.raw_data(); a.l_ts = logits.stride(0); a.l_es = logits.stride(1);
  a.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  a.tokens = logits.size(0); a.experts = logits.size(1); a.k = static_cast<int>(options.top_k);
  a.softmax = options.scoring == MoeScoring::Softmax; a.norm = options.norm_topk;
  a.eps = static_cast<float>(options.norm_eps); a.scaling = static_cast<float>(options.routed_scaling);
  a.weights = weights.data_ptr<float>(); a.ids = ids.data_ptr<int32_t>();
  launch_route(a, logits.dtype(), kFloat32, current_raw_stream(device));
}

void moe_permute(const Tensor& expert_ids, const Tensor& order, const Tensor& inverse, const Tensor& tokens, const Tensor& counts,
                 const Tensor& offsets) {
  if (expert_ids.numel() == 0) {  // no pairs: every group empty
    fill(counts, Scalar(0));
    fill(offsets, Scalar(0));
    return;
  }
  launch_permute(expert_ids, order, inverse, tokens, counts, offsets, current_raw_stream(expert_ids.device().index));
}

void moe_unpermute(const Tensor& y, const Tensor& inverse, const Tensor& weights, const Tensor& out) {
  const int device = y.device().index;
  cudaStream_t stream = current_raw_stream(device);
  const Tensor inv = inverse.contiguous();
  const int64_t t = weights.size(0), h = y.size(1);
  const int k = static_cast<int>(weights.size(1));
  with_float(y.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_float(weights.dtype(), [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      if constexpr (!std::is_same_v<T, double>) {
        with_glue_vector<T>(h, {{y.raw_data(), y.stride(0)}, {out.raw_data(), out.stride(0)}}, [&](auto v) {
          combine_kernel<T, W, v><<<blocks_for(t * h / v, 256), 256, 0, stream>>>(
              static_cast<const T*>(y.raw_data()), y.stride(0), y.size(0), inv.data_ptr<int32_t>(), static_cast<const W*>(weights.raw_data()),
              weights.stride(0), weights.stride(1), t, k, h, nullptr, 0, nullptr, static_cast<T*>(out.raw_data()), out.stride(0),
              device_error_word(device));
        });
      }
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void moe_layer(const Tensor& x, const Tensor& router_weight, const MoeExperts& experts, const MoeLayerOptions& options,
               const Tensor& out) {
  const int device = x.device().index;
  cudaStream_t stream = current_raw_stream(device);
  const Device dev = x.device();
  const int64_t t = x.size(0), hidden = x.size(1), e = router_weight.size(0), inter = experts.down.size(2);
  const int k = static_cast<int>(options.route.top_k);
  const int64_t pairs = t * k;
  const bool shared = options.shared.has_value();
  const int64_t s_inter = shared ? options.shared->down.size(1) : 0;
  const bool shared_gate = shared && options.shared->gate.defined();

  const Tensor s_gate = shared ? options.shared->gate_up.narrow(0, 0, s_inter) : Tensor();
  const Tensor s_up = shared ? options.shared->gate_up.narrow(0, s_inter, s_inter) : Tensor();
  const bool fp8 = experts.gate.dtype() == kFloat8_e4m3fn;
  // The gate_up kernel stages a token's row of x in shared memory; h's rows are 16-byte aligned.
  const int64_t h_rs = round8(std::max(inter, s_inter));
  const auto x_row_bytes = static_cast<size_t>(hidden) * x.itemsize();
  const bool decode_fits = pairs <= kMaxDecodePairs && x_row_bytes <= kDecodeSmemMax &&
                      rows_aligned(x, x.stride(0)) && rows_aligned(router_weight, router_weight.stride(0)) &&
                      rows_aligned(experts.gate, experts.gate.stride(1)) &&
                      rows_aligned(experts.up, experts.up.stride(1)) && rows_aligned(experts.down, experts.down.stride(1)) &&
                      (experts.gate.stride(0) * static_cast<int64_t>(experts.gate.itemsize())) % 16 == 0 &&
                      (experts.down.stride(0) * static_cast<int64_t>(experts.down.itemsize())) % 16 == 0 &&
                      experts.gate.stride(0) == experts.up.stride(0) &&
                      (!shared || (rows_aligned(s_gate, s_gate.stride(0)) && rows_aligned(options.shared->down, options.shared->down.stride(0)))) &&
                      (!shared_gate || aligned16(options.shared->gate.raw_data()));

  const MoePath forced = forced_moe_path();
  EMBER_CHECK(forced != MoePath::Decode || decode_fits, "moe_layer",
              "EMBER_MOE_PATH=decode: expected at most {} (token, expert) pairs, 16-byte aligned rows and a row of x "
              "of at most {} bytes, got {} pairs and {} bytes",
              kMaxDecodePairs, kDecodeSmemMax, pairs, x_row_bytes);
  // The decode kernels read one expert matrix per (token, expert) pair, the grouped path one
  // per distinct expert: once pairs outnumber the experts, reuse wins. Measured on the H200
  // (docs/PERF.md, both paths forced): LFM2-8B (E = 32, top-4) at T = 16 grouped 230 us vs
  // decode 580 us; Qwen3-30B (E = 128, top-8) at T = 8 decode 261 us vs grouped 281 us.
  const bool decode = forced == MoePath::Auto ? decode_fits && pairs <= e : forced == MoePath::Decode;

  // Router: logits [T, E] f32 = x @ router^T (f32 accumulate and output), then routing.
  const Tensor logits = empty({t, e}, kFloat32, dev);
  const Tensor weights = empty({t, k}, kFloat32, dev), ids = empty({t, k}, kInt32, dev);
  const Tensor pair_order = decode && t > 1 ? empty({pairs}, kInt32, dev) : Tensor();  // gate_up's pair blocks by expert
  const Tensor sg = shared_gate ? empty({t}, kFloat32, dev) : Tensor();
  const Tensor bias = f32_contiguous(options.route.expert_bias.value_or(Tensor()));
  RouteArgs ra;
  ra.logits = logits.raw_data(); ra.l_ts = e; ra.l_es = 1;
  ra.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  ra.tokens = t; ra.experts = e; ra.k = k;
  ra.softmax = options.route.scoring == MoeScoring::Softmax; ra.norm = options.route.norm_topk;
  ra.eps = static_cast<float>(options.route.norm_eps); ra.scaling = static_cast<float>(options.route.routed_scaling);
  ra.weights = weights.data_ptr<float>(); ra.ids = ids.data_ptr<int32_t>();
  ra.x = x.raw_data(); ra.x_ts = x.stride(0); ra.hidden = hidden;
  if (decode && t == 1)  // k <= 32 flags
    ra.expert_ready = static_cast<unsigned*>(
        zeroed_stream_scratch(device, stream, ScratchPurpose::MoeExpertReady, 32 * kReadyStride * sizeof(unsigned)));
  if (shared_gate) {
    ra.gate = options.shared->gate.raw_data();
    ra.sg = sg.data_ptr<float>();
  }
  // The decode kernels go out as programmatic dependent launches (sm_90): each overlaps the tail
  // of the kernel before it.
  const bool pdl = decode && dependent_launches_enabled(device);
  if (decode) {
    const int64_t rows = e + (shared_gate ? 1 : 0);
    with_experts_per_lane(e, [&](auto epl) {
      with_float(x.dtype(), [&](auto* tag) {
        using X = std::remove_pointer_t<decltype(tag)>;
        if constexpr (!std::is_same_v<X, double>) {
          auto kernel = t == 1 ? router_decode_kernel<decltype(epl)::value, X, false> : router_decode_kernel<decltype(epl)::value, X, true>;
          const auto staged_rows = static_cast<size_t>(t == 1 ? 0 : router_staged_rows_bytes(t, hidden * static_cast<int64_t>(sizeof(X))));
          size_t smem = staged_rows;
          // T > 1 with 16-bit x where every token's row of x is staged: the tensor-core router, a
          // block per 16 rows, one cluster where those blocks fit one (E <= 128 without a shared
          // gate), else the ticket. Measured against the scalar kernel below (session 22, H200, one
          // build, a temporary switch, two alternating runs of moe_bench, us): T=2 Qwen3-30B-A3B
          // bf16 48.59-48.61 -> 46.77-47.05, Qwen3.5-35B-A3B bf16 46.40-46.47 -> 43.26-43.28, FP8
          // 37.34-37.39 -> 33.99-34.09; T=8 Qwen3-30B-A3B bf16 139.05-139.34 -> 136.98-137.33, FP8
          // 85.03-85.45 -> 83.01-83.26, Qwen3.5-35B-A3B bf16 125.45-125.79 -> 121.15-121.56, FP8
          // 83.57-83.71 -> 78.77-78.89, LFM2-8B-A1B FP8 102.72-103.17 -> 100.66-101.10; T=16
          // Qwen3-30B-A3B FP8 146.72-147.19 -> 143.04-143.58, Qwen3.5-35B-A3B FP8 139.45-139.64 ->
          // 132.99-133.42; every T = 2..16 decode case faster (LFM2-8B-A1B T=16 takes the grouped
          // path). ncu, Qwen3-30B-A3B bf16, the router alone: T=2 9.0-9.5 -> 7.5-8.2 us, T=8
          // 11.4-12.1 -> 8.8-9.6, T=16 15.0-16.4 -> 11.2-11.9.
          bool mma = false;
          if constexpr (sizeof(X) == 2) {
            mma = t > 1 && t <= kRouterMmaTokens && hidden % 32 == 0 && staged_rows > 0;
            if (mma) kernel = router_mma_kernel<decltype(epl)::value, X>;
          }
          int64_t blocks = 0;
          bool fits_cluster = false;
          if (mma) {
            blocks = (rows + kRouterMmaRows - 1) / kRouterMmaRows;  // the cluster, when there is one
            fits_cluster = blocks <= kRouterCluster;
            smem += static_cast<size_t>(router_mma_partials_bytes());
          } else {
            // T > 1 where the rows are preloaded: each warp takes one row against 1 token while those
            // tasks fit one wave of blocks (one block of 512 threads per SM at 128 registers), else
            // against 2 (v15), so the products spread over T or ceil(T / 2) times the warps, past one
            // cluster's 128 onto the ticket path. Measured (session 21, H200, one build each, two
            // alternating runs, us): every token per warp -> 4 -> 2: Qwen3-30B-A3B T=8 bf16
            // 144.26-144.47 -> 142.13-142.58 -> 140.11-140.14, FP8 91.49-91.59 -> 88.79-88.99 ->
            // 87.11-87.19; T=16 FP8 163.08-163.58 -> 154.26-154.36 -> 152.78-152.92; then 2 -> 1:
            // T=2 Qwen3.5-35B-A3B bf16 47.43-47.56 -> 46.53-46.57, T=4 Qwen3-30B-A3B FP8 55.83-55.92 ->
            // 54.87-55.05, T=8 FP8 88.76-88.89 -> 88.02-88.06, T=16 bf16 250.64-250.89 -> 249.73; but
            // Qwen3.5-35B-A3B T=16 (257 rows x 16 tokens: 257 blocks, two waves) FP8 142.76-143.18 ->
            // 148.02-148.26.
            const int64_t sms = device_properties(device).multiProcessorCount;
            const int64_t tokens_per_warp = rows * t <= sms * kRouterWarps ? 1 : kPreloadedRowTokens;
            ra.token_groups = staged_rows > 0 && router_row_preloadable(hidden, sizeof(X)) ? (t + tokens_per_warp - 1) / tokens_per_warp : 1;
            const int64_t tasks = rows * ra.token_groups;
            // One cluster where the GPU and this binary's code for it allow, every warp has at most one
            // row and the logits fit block 0's shared memory; else a warp per row and a ticket.
            // Measured (H200, session 11, one build, both paths alternating twice, T = 1): Qwen3-30B-A3B
            // bf16 28.19-28.22 -> 27.48-27.65 us, FP8 19.77-19.87 -> 19.28-19.32, LFM2-8B-A1B bf16
            // 33.06-33.09 -> 32.26-32.27, FP8 23.19-23.27 -> 22.57-22.66; but Qwen3.5-35B-A3B (256
            // experts + the shared gate: 3 rows on some warps) 25.82 -> 27.69-27.80.
            fits_cluster = tasks <= int64_t{kRouterCluster} * kRouterWarps;
            blocks = (tasks + kRouterWarps - 1) / kRouterWarps;  // a warp per task (the ticket path)
          }
          const bool clustered = fast_paths_enabled(device, 90) && kernel_ptx_version(reinterpret_cast<const void*>(kernel), device) >= 90 &&
                                 fits_cluster && t * e <= kRouterSharedLogits;
          if (clustered && !mma) blocks = kRouterCluster;
          auto* ticket = clustered ? nullptr
                                   : static_cast<unsigned*>(zeroed_stream_scratch(device, stream, ScratchPurpose::MoeRouter, sizeof(unsigned)));
          allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
          DependentLaunch launch(static_cast<unsigned>(blocks), kRouterWarps * 32, smem, stream, pdl);
          launch.prefer_l1();
          if (clustered) launch.cluster_x(static_cast<unsigned>(blocks));
          launch(kernel, ra, static_cast<const X*>(router_weight.raw_data()), router_weight.stride(0), logits.data_ptr<float>(), ticket,
                 t > 1 ? pair_order.data_ptr<int32_t>() : nullptr, clustered);
        }
      });
    });
  } else {
    // cuBLAS where it takes the operands as they are: session 27's ncu had the tile kernel at
    // 16 us for Qwen3-30B-A3B's T=512 router (32 blocks of 16 rows, each the whole K).
    if (!linear_f32_out(x, router_weight, logits)) rows_product(x, router_weight.unsqueeze(0), Tensor(), nullptr, logits, device);
    launch_route(ra, kFloat32, x.dtype(), stream);
  }

  if (decode) {
    const int64_t slots = pairs + (shared ? t : 0);
    const Tensor h = empty({slots, h_rs}, x.dtype(), dev);
    DecodeArgs a;
    a.x = x.raw_data(); a.x_ts = x.stride(0); a.tokens = t; a.hidden = hidden; a.inter = inter; a.k = k;
    a.ids = ids.data_ptr<int32_t>(); a.weights = weights.data_ptr<float>();
    a.order = pair_order.defined() ? pair_order.data_ptr<int32_t>() : nullptr;
    a.expert_ready = ra.expert_ready;
    a.gate = experts.gate.raw_data(); a.up = experts.up.raw_data(); a.gu_es = experts.gate.stride(0);
    a.gate_rs = experts.gate.stride(1); a.up_rs = experts.up.stride(1);
    a.gate_scale = gmm::weight_scale(experts.gate_scale, inter);
    a.up_scale = gmm::weight_scale(experts.up_scale, inter);
    a.down = experts.down.raw_data(); a.d_es = experts.down.stride(0); a.d_rs = experts.down.stride(1);
    a.down_scale = gmm::weight_scale(experts.down_scale, hidden);
    if (shared) {
      a.shared = true;
      a.s_gate = s_gate.raw_data(); a.s_up = s_up.raw_data(); a.s_rs = s_gate.stride(0); a.s_inter = s_inter;
      a.s_down = options.shared->down.raw_data(); a.sd_rs = options.shared->down.stride(0);
      a.sg = shared_gate ? sg.data_ptr<float>() : nullptr;
    }
    a.h = h.raw_data(); a.h_rs = h.stride(0);
    a.out = out.raw_data(); a.o_ts = out.stride(0);
    const dim3 gu_grid(static_cast<unsigned>((std::max(inter, s_inter) + kDecodeWarps - 1) / kDecodeWarps), static_cast<unsigned>(slots));
    const auto down_threads = static_cast<unsigned>(32 * std::min<int64_t>(k + (shared ? 1 : 0), kDownMaxWarps));
    with_float(x.dtype(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_same_v<T, double>) {
        const auto launch_layer = [&](auto* weight_tag) {
          using WT = std::remove_pointer_t<decltype(weight_tag)>;
          // The tensor-core gate_up where the weights allow: x staged as 2-byte operands (+ FP8's
          // scales per 128 elements) within the 48 KB a launch gets without opting in.
          const size_t mma_smem = static_cast<size_t>(hidden) * 2 + (fp8 ? static_cast<size_t>((hidden + 127) / 128) * 4 : 0);
          bool mma = false;
          if constexpr (kGateUpOnTensorCores<T, WT>) {
            mma = hidden * static_cast<int64_t>(sizeof(WT)) % kMmaStepBytes == 0 && mma_smem <= 48 * 1024;
            const dim3 mma_grid(static_cast<unsigned>((std::max(inter, s_inter) + kMmaChannels - 1) / kMmaChannels), static_cast<unsigned>(slots));
            // T > 1: FP8 rows down to 1 warp per block, 16-bit rows to 2 (1 lost to 2 in session 20: LFM2-8B-A1B
            // T=8 bf16 169.8-169.9 vs 166.7 us, Qwen3.5-35B-A3B 134.4-135.1 vs 132.8-133.4).
            const int warps = t == 1 ? kMmaWarps : batched_warps(int64_t{mma_grid.x} * mma_grid.y, fp8 ? 1 : 2, kGateUpMmaWarpsPerSm, device);
            if (mma && t == 1 && one_wave_needs_7_blocks(int64_t{mma_grid.x} * mma_grid.y, device))
              DependentLaunch(mma_grid, kMmaWarps * 32, mma_smem, stream, pdl).prefer_l1()(gate_up_mma_kernel<T, WT, kMmaWarps, 7>, a);
            else if (mma)
              with_warps(warps, [&](auto w) {
                DependentLaunch(mma_grid, w * 32, mma_smem, stream, pdl).prefer_l1()(gate_up_mma_kernel<T, WT, decltype(w)::value>, a);
              });
          }
          if (!mma) DependentLaunch(gu_grid, kDecodeThreads, x_row_bytes, stream, pdl).prefer_l1()(gate_up_decode_kernel<T, WT>, a);
          bool down_mma = false;
          if constexpr (kDownOnTensorCores<T, WT>) {
            down_mma = k >= kDownMmaMinTopK && inter * static_cast<int64_t>(sizeof(WT)) % kMmaStepBytes == 0 &&
                       (!shared || s_inter * static_cast<int64_t>(sizeof(T)) % kMmaStepBytes == 0);
            const dim3 grid = down_grid(hidden, kDownMmaOutputs, t);
            // T > 1: FP8 rows down to 1 warp per block; 16-bit rows keep 4 (session 20, 1 warp at T=8 bf16:
            // Qwen3-30B-A3B +0.3 us alone, +2.3 with 2-warp gate_up; Qwen3.5-35B-A3B -4.7; so not a rule yet).
            const int warps = t == 1 ? kDownMmaWarps : batched_warps(int64_t{grid.x} * grid.y, fp8 ? 1 : 4, kDownMmaWarpsPerSm, device);
            if (down_mma)
              with_warps(warps, [&](auto w) {
                DependentLaunch(grid, w * 32, 0, stream, pdl).prefer_l1()(down_mma_kernel<T, WT, decltype(w)::value>, a);
              });
          }
          if (!down_mma) {
            const dim3 grid = down_grid(hidden, kDownOutputs, t);
            DependentLaunch(grid, down_threads, 0, stream, pdl).prefer_l1()(down_decode_kernel<T, WT>, a);
          }
        };
        if (fp8) launch_layer(static_cast<E4m3*>(nullptr));
        else launch_layer(static_cast<T*>(nullptr));
      }
    });
    return;
  }

  // Prefill: permute, gather, grouped products, combine.
  const Tensor order = empty({pairs}, kInt32, dev), inverse = empty({pairs}, kInt32, dev), tokens = empty({pairs}, kInt32, dev);
  const Tensor counts = empty({e}, kInt32, dev), offsets = empty({e}, kInt32, dev);
  launch_permute(ids, order, inverse, tokens, counts, offsets, stream);
  const Tensor xs = empty({pairs, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
  const Tensor gu = empty({pairs, round8(2 * inter)}, x.dtype(), dev).narrow(1, 0, 2 * inter);
  const Tensor h = empty({pairs, round8(inter)}, x.dtype(), dev).narrow(1, 0, inter);
  const Tensor y = empty({pairs, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
  const int32_t* offs = offsets.data_ptr<int32_t>();
  Tensor ys;
  with_float(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_same_v<T, double>) {
      with_glue_vector<T>(hidden, {{x.raw_data(), x.stride(0)}, {xs.raw_data(), xs.stride(0)}}, [&](auto v) {
        gather_rows_kernel<T, v><<<blocks_for(pairs, 1), 256, 0, stream>>>(static_cast<const T*>(x.raw_data()), x.stride(0),
                                                                            tokens.data_ptr<int32_t>(), pairs, hidden,
                                                                            static_cast<T*>(xs.raw_data()), xs.stride(0));
      });
      EMBER_CUDA_CHECK_LAUNCH();
      // gate and up as one product where the caller gave them as one gate_up tensor: one launch
      // of twice the tiles, x's rows read once per column tile of both.
      if (experts.gate_up.defined()) {
        rows_product(xs, experts.gate_up, experts.gate_up_scale, offs, gu, device);
      } else {
        rows_product(xs, experts.gate, experts.gate_scale, offs, gu.narrow(1, 0, inter), device);
        rows_product(xs, experts.up, experts.up_scale, offs, gu.narrow(1, inter, inter), device);
      }
      launch_silu_mul<T>(gu, inter, h, stream);
      rows_product(h, experts.down, experts.down_scale, offs, y, device);
      if (shared) {
        const Tensor gs = empty({t, round8(2 * s_inter)}, x.dtype(), dev).narrow(1, 0, 2 * s_inter);
        const Tensor hs = empty({t, round8(s_inter)}, x.dtype(), dev).narrow(1, 0, s_inter);
        ys = empty({t, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
        rows_product(x, options.shared->gate_up.unsqueeze(0), Tensor(), nullptr, gs, device);
        launch_silu_mul<T>(gs, s_inter, hs, stream);
        rows_product(hs, options.shared->down.unsqueeze(0), Tensor(), nullptr, ys, device);
      }
      const T* ys_rows = ys.defined() ? static_cast<const T*>(ys.raw_data()) : nullptr;
      const int64_t ys_rs = ys.defined() ? ys.stride(0) : 0;
      with_glue_vector<T>(hidden, {{y.raw_data(), y.stride(0)}, {ys_rows, ys_rs}, {out.raw_data(), out.stride(0)}}, [&](auto v) {
        combine_kernel<T, float, v><<<blocks_for(t * hidden / v, 256), 256, 0, stream>>>(
            static_cast<const T*>(y.raw_data()), y.stride(0), pairs, inverse.data_ptr<int32_t>(), weights.data_ptr<float>(), k, 1, t, k,
            hidden, ys_rows, ys_rs, shared_gate ? sg.data_ptr<float>() : nullptr, static_cast<T*>(out.raw_data()), out.stride(0),
            device_error_word(device));
      });
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
