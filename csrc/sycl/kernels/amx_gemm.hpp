// bfloat16 GEMMs on CPUs with AMX, for fused_linear_relu's forward and conv2d's 1x1 convolutions: the matrix unit
// through the SYCL joint_matrix extension (sycl_ext_oneapi_matrix), compiled at run time. A kernel file of its own
// because building a joint_matrix kernel is only safe where the CPU has AMX and the OpenCL CPU compiler targets it
// (CL_CONFIG_CPU_TARGET_ARCH, set by python/xkernels/_env.py): elsewhere the compiler aborts the process
// (../shared/SYCL_RUNTIME.md, "AMX through joint_matrix"). A kernel group is one file, built on first use, so
// this file is built only when a host wrapper chose the AMX path (DeviceTraits::amx_bf16); the descriptors say
// `amx = true` and supported_on() refuses them on every other device.
//
// The one DPC++-only extension of the kernel files. Ahead-of-time builds (AdaptiveCpp, icpx) compile the
// table with empty bodies (no XK_RTC): their devices never report amx_bf16, so the host never launches them.
//
// One GEMM, D[a, b] = sum_k A[a, k] * B[b, k]: A row-major as stored (the matrix unit's A operand: tiles of 16 rows
// x 32 k), B packed by amx_pack_rows into the layout AMX reads its B operand in: blocks of 16 rows,
// [rows16 / 16][K / 2][16][2] ("VNNI": the two k of a pair side by side; each 32-k x 16-row tile is 1 KiB
// contiguous), rows past the end zero. The operand that is read in place is the one a call has most of:
//   * fused_linear_relu (TRANS_OUT): A = the weight W [N, K] as torch stores it (no packing on any call), B = the
//     activations X [M, K], packed per call (small beside the weight in a forward pass); out[m, n] = D[n, m];
//   * conv2d 1x1, stride 1, channels_last: A = the input as [pixels, C] (NHWC memory), B = the weight [O, C],
//     packed per call (small beside the activations); out[pixel, o] = D[pixel, o], NHWC;
//   * conv2d with a 3x3 window, stride 1: A = the input zero-padded into [N, Hp, Wp, C] and read
//     flat, B = the weight as [O, KH * KW * C]; tap (kh, kw) of output pixel (y, x) is padded pixel
//     (y + kh*dh, x + kw*dw), i.e. the flat row of (y, x) in the padded image shifted by kh*dh*Wp + kw*dw, the
//     same for every pixel: each tap is a GEMM on a shifted A, summed in the same accumulators. Rows for the
//     padding's columns and rows are computed and not stored.
// Epilogue, the FMA kernels': + bias[channel] in fp32, + residual (conv2d_relu), ReLU keeping NaN, one rounding.
// Requirements the host checks: K % 32 == 0; A readable up to a multiple of 16*TN rows (so the host runs a
// tail of fewer rows from a zero-padded copy); B's rows past b_rows are packed as zeros; A row-contiguous.
//
// Floating point: the matrix unit multiplies bf16 pairs exactly and accumulates in fp32 (TDPBF16PS: the
// two products of a pair are added, then added to the accumulator, rounding to nearest even; input and output
// denormals are flushed to zero), so the order of the additions differs from the FMA kernels' and results
// differ from them in the last fp32 bits, far inside bfloat16's rounding of the output.
#pragma once
#include "common.hpp"

namespace xk {

// Work decomposition: a work-group is one sub-group of 16 lanes; it owns TN x TM accumulator tiles of 16 x 16
// (rows: A rows a, columns: B rows b), i.e. 16*TN A rows x 16*TM B rows. AMX has 8 tile registers:
// TN*TM accumulators + TN A tiles + TM B tiles <= 8 for (2, 2) and (2, 1).
// A work-group computes b_per_group consecutive B blocks of its A block, one after the other (the A slice is read
// again right after itself, from L1/L2). Order of the work-groups, over (A block, set of b_per_group B blocks):
//  * B sets fastest (a_fastest = 0): the B sets come in chunks of b_chunk sets whose packed rows fit in the L2 cache
//    (the host sizes it); within a chunk, consecutive work-groups take consecutive B sets of the same A block, so an
//    A slice (16*TN rows) is read from memory once per chunk and the chunk's packed B rows stay in L2 while every A
//    block passes over them;
//  * A blocks fastest (a_fastest = 1): consecutive work-groups take consecutive A blocks of the same B set, whose
//    packed rows stay in cache while A streams past (long K, where an A slice outgrows L1).
// Every output element is the same sum in the same order whichever the order and grouping (the K loop is the same).
struct AmxTile {
  static constexpr int kSubGroup = 16;
  static constexpr int kTileK = 32;  // k of a tile (bf16 pairs: 16)
};
// k pairs per work-item loop of the packing kernel.
inline constexpr int64_t kAmxPackPairsPerGroup = 64;

template <typename T>
struct amx_gemm_params {
  const T* A;  // [a_groups * 16 * TN, K] readable, row stride lda
  int64_t lda;
  const T* Bp;    // packed B rows [b16 / 16][K / 2][16][2]
  const T* bias;  // [channels] or null: channel = a (TRANS_OUT) or b
  const T* res;   // laid out as out, or null (added before the ReLU)
  T* out;         // TRANS_OUT: out[b * ldo + a], else out[a * ldo + b]
  int64_t ldo;
  int64_t a_rows, b_rows, K;  // valid rows of A and B; K % 32 == 0
  int64_t b_groups;           // ceil(b_rows / (16 * TM)) B blocks
  int64_t b_per_group;        // B blocks per work-group (>= 1; the last set may be shorter)
  int64_t b_chunk;            // B sets per chunk (above; a_fastest = 0)
  int32_t a_fastest;          // work-group order (above)
  int32_t relu;
  // 3x3 convolution windows (conv2d, stride 1): K = 9 * tap_k, and the k of tap t read A shift(t) rows further on:
  // A is the zero-padded input [N * Hp * Wp (+ slack), C] and a is the flat padded pixel of the window's corner.
  // Read by WINDOW kernels only. (A shift table indexed by t made the compiler keep the accumulators in memory
  // instead of tile registers: 30x slower.)
  int64_t tap_k;                 // K per tap (the input's channels)
  int64_t row_shift, col_shift;  // shift of tap t = (kh, kw) of the 3x3 window: kh * row_shift + kw * col_shift
  // Where row a goes (!TRANS_OUT): img = 0: out row a; else a = n * img + y * wp + x, out row (n * oh + y) * ow + x
  // where y < oh and x < ow (the other a are the padding's columns and rows: computed, not stored).
  int64_t img, wp, oh, ow;
};
// WINDOW: K runs over the 9 taps of a 3x3 convolution window (the params' shifts); else one plain GEMM. (One loop
// for both kept the accumulators in memory instead of tile registers in the plain GEMM: 2-3x slower.)
template <bool TRANS_OUT, int TN, int TM, bool WINDOW = false>
struct amx_gemm {
  static constexpr int dims = 1;
  static constexpr int sub_group = AmxTile::kSubGroup;
  static constexpr bool amx = true;
  using types = type_list<bf16>;
  template <typename T>
  using params = amx_gemm_params<T>;
  // The accumulators, stored for the epilogue: [16 * TN A rows][16 * TM B rows].
  template <typename T>
  struct local_t {
    float c[16 * TN][16 * TM];
  };
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p, local_t<T>& scratch);
};

template <typename T>
struct amx_pack_rows_params {
  const T* X;  // [rows, K], row stride ldx (even), 4-byte aligned
  int64_t ldx;
  T* Xp;  // [rows16 / 16][K / 2][16][2]
  int64_t rows, K, pair_chunks;
};
struct amx_pack_rows {
  static constexpr int dims = 1;
  static constexpr int sub_group = AmxTile::kSubGroup;
  static constexpr bool amx = true;
  using types = type_list<bf16>;
  template <typename T>
  using params = amx_pack_rows_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// ------------------------------------------------------------------ bodies
// Launch: nd_range<1>, local 16, global 16 * b_groups * ceil(a_rows / (16 * TN)).
template <bool TRANS_OUT, int TN, int TM, bool WINDOW>
template <typename T>
void amx_gemm<TRANS_OUT, TN, TM, WINDOW>::run(item_arg<1> ia, const params<T>& p, local_t<T>& scratch) {
#ifdef XK_RTC
  namespace jm = sycl::ext::oneapi::experimental::matrix;
  using bfx = sycl::ext::oneapi::bfloat16;
  using sycl::access::address_space;
  using sycl::access::decorated;
  const auto it = item(ia);
  const auto sg = it.get_sub_group();
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t a_groups = (p.a_rows + 16 * TN - 1) / (16 * TN);
  const int64_t b_sets = (p.b_groups + p.b_per_group - 1) / p.b_per_group;
  int64_t set, a0;
  if (p.a_fastest) {
    set = g / a_groups;
    a0 = (g % a_groups) * (16 * TN);
  } else {
    const int64_t chunk = g / (p.b_chunk * a_groups), rem = g % (p.b_chunk * a_groups);
    const int64_t first = chunk * p.b_chunk;
    const int64_t in_chunk = b_sets - first < p.b_chunk ? b_sets - first : p.b_chunk;  // the last is shorter
    set = first + rem % in_chunk;
    a0 = (rem / in_chunk) * (16 * TN);
  }
  const int64_t K = p.K;
  const bfx* a_ptr = reinterpret_cast<const bfx*>(p.A);
  const bfx* b_ptr = reinterpret_cast<const bfx*>(p.Bp);
  auto global = [](const bfx* q) { return sycl::address_space_cast<address_space::global_space, decorated::no>(q); };

  const int64_t b_end = (set + 1) * p.b_per_group < p.b_groups ? (set + 1) * p.b_per_group : p.b_groups;
  for (int64_t bg = set * p.b_per_group; bg < b_end; ++bg) {
    const int64_t b0 = bg * (16 * TM);
    jm::joint_matrix<sycl::sub_group, float, jm::use::accumulator, 16, 16> c[TN][TM];
    XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j)
        jm::joint_matrix_fill(sg, c[i][j], 0.0f);
    auto step = [&](const bfx* a_at, int64_t k0) {  // one 32-k step: A tiles at a_at (row a0, this step's k)
      jm::joint_matrix<sycl::sub_group, bfx, jm::use::a, 16, 32, jm::layout::row_major> a[TN];
      jm::joint_matrix<sycl::sub_group, bfx, jm::use::b, 32, 16, jm::layout::ext_intel_packed> b[TM];
      XK_UNROLL for (int i = 0; i < TN; ++i) jm::joint_matrix_load(sg, a[i], global(a_at + 16 * i * p.lda), p.lda);
      // B tile j: row block b0/16 + j, k pairs k0/2 .. k0/2 + 15: 16 x 32 contiguous elements.
      XK_UNROLL for (int j = 0; j < TM; ++j)
          jm::joint_matrix_load(sg, b[j], global(b_ptr + ((b0 / 16 + j) * (K / 2) + k0 / 2) * 32), 32);
      XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j)
          jm::joint_matrix_mad(sg, c[i][j], a[i], b[j], c[i][j]);
    };
    if constexpr (WINDOW) {
      // The 3x3 taps unrolled: nine plain k loops one after the other (a tap loop with a run-time count kept the
      // accumulators in memory: tileloadd / tdpbf16ps / tilestored per step).
      XK_UNROLL for (int t = 0; t < 9; ++t) {
        const bfx* a_tap = a_ptr + (a0 + (t / 3) * p.row_shift + (t % 3) * p.col_shift) * p.lda;
        for (int64_t c0 = 0; c0 < p.tap_k; c0 += AmxTile::kTileK) step(a_tap + c0, t * p.tap_k + c0);
      }
    } else {
      for (int64_t k0 = 0; k0 < K; k0 += AmxTile::kTileK) step(a_ptr + a0 * p.lda + k0, k0);
    }
    // Epilogue: the tiles go to local memory row-major (a column-major store measured 3-4x slower for the whole
    // kernel at K = 768), then each lane writes one channel of a contiguous output row segment.
    float* cl = &scratch.c[0][0];
    XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j) jm::joint_matrix_store(
        sg, c[i][j],
        sycl::address_space_cast<address_space::local_space, decorated::no>(cl + (16 * i) * (16 * TM) + 16 * j),
        16 * TM, jm::layout::row_major);
    sycl::group_barrier(sg);
    const int64_t l = static_cast<int64_t>(sg.get_local_linear_id());
    const int64_t a_valid = p.a_rows - a0 < 16 * TN ? p.a_rows - a0 : 16 * TN;
    const int64_t b_valid = p.b_rows - b0 < 16 * TM ? p.b_rows - b0 : 16 * TM;
    auto finish = [&](float v, int64_t channel, int64_t at) {
      if (p.bias) v = v + load(p.bias, channel);
      if (p.res) v = v + load(p.res, at);
      if (p.relu) v = v < 0.0f ? 0.0f : v;  // NaN propagates, as torch.relu
      store(p.out, at, v);
    };
    if constexpr (TRANS_OUT) {  // out[b][a]: lane l takes A row 16 i + l (a channel) of every valid B row
      XK_UNROLL for (int i = 0; i < TN; ++i) {
        const int64_t a = a0 + 16 * i + l;
        if (16 * i + l >= a_valid) continue;
        for (int64_t r = 0; r < b_valid; ++r) finish(scratch.c[16 * i + l][r], a, (b0 + r) * p.ldo + a);
      }
    } else {  // out[a][b]: lane l takes B row 16 j + l (a channel) of every valid A row
      for (int64_t r = 0; r < a_valid; ++r) {
        int64_t row = a0 + r;
        if (p.img) {  // a padded pixel: stored where it is an output pixel
          const int64_t n = row / p.img, y = (row % p.img) / p.wp, x = row % p.wp;
          if (y >= p.oh || x >= p.ow) continue;
          row = (n * p.oh + y) * p.ow + x;
        }
        XK_UNROLL for (int j = 0; j < TM; ++j) {
          const int64_t b = b0 + 16 * j + l;
          if (16 * j + l < b_valid) finish(scratch.c[r][16 * j + l], b, row * p.ldo + b);
        }
      }
    }
    sycl::group_barrier(sg);  // every lane done with the scratch before the next block stores to it
  }
#else
  (void)ia, (void)p, (void)scratch;
#endif
}

// Launch: nd_range<1>, local 16, global 16 * (rows16 / 16) * pair_chunks. Work-group (row block rb, chunk c):
// lane l copies row rb*16 + l's k pairs c*kAmxPackPairsPerGroup .. (+ kAmxPackPairsPerGroup), zeros past rows.
// A pair of bf16 moves as one 32-bit word (X 4-byte aligned, ldx even: the host checks): per pair step the
// lanes gather one word each from their rows and store 16 words contiguously (the 16-bit gathers and
// scatters of an element-wise copy measured 3.7 ms for a 512 x 3072 X).
template <typename T>
void amx_pack_rows::run(item_arg<1> ia, const params<T>& p) {
#ifdef XK_RTC
  static_assert(sizeof(T) == 2, "pairs of 2-byte elements");
  const auto it = item(ia);
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t rb = g / p.pair_chunks, chunk = g % p.pair_chunks;
  const int64_t l = static_cast<int64_t>(it.get_local_id(0));
  const int64_t m = rb * 16 + l;
  const int64_t pairs = p.K / 2;
  const int64_t q0 = chunk * kAmxPackPairsPerGroup;
  const int64_t q1 = q0 + kAmxPackPairsPerGroup < pairs ? q0 + kAmxPackPairsPerGroup : pairs;
  const bool in = m < p.rows;
  const uint32_t* x = reinterpret_cast<const uint32_t*>(p.X) + (in ? m : 0) * (p.ldx / 2);
  uint32_t* out = reinterpret_cast<uint32_t*>(p.Xp) + rb * pairs * 16 + l;
  for (int64_t q = q0; q < q1; ++q) out[q * 16] = in ? x[q] : 0u;
#else
  (void)ia, (void)p;
#endif
}

// ------------------------------------------------------------------ the table
using amx_gemm_kernels = kernel_list<amx_gemm<true, 2, 2>, amx_gemm<true, 2, 1>, amx_gemm<false, 2, 2>,
                                     amx_gemm<false, 2, 2, true>, amx_pack_rows>;

}  // namespace xk
