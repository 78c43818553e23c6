// fused_linear_relu's bfloat16 forward on CPUs with AMX: the GEMM on the matrix unit through the SYCL
// joint_matrix extension (sycl_ext_oneapi_matrix), compiled at run time. A kernel file of its own because
// building a joint_matrix kernel is only safe where the CPU has AMX and the OpenCL CPU compiler targets it
// (CL_CONFIG_CPU_TARGET_ARCH, set by python/xkernels/_env.py): elsewhere the compiler aborts the process
// (../shared/SYCL_RUNTIME.md, "AMX through joint_matrix"). A kernel group is one file, built on first use, so
// this file is built only when the host chose the AMX path (DeviceTraits::amx_bf16); the descriptors say
// `amx = true` and supported_on() refuses them on every other device.
//
// The one DPC++-only extension of the kernel files. Ahead-of-time builds (AdaptiveCpp, icpx) compile the
// table with empty bodies (no XK_RTC): their devices never report amx_bf16, so the host never launches them.
//
//   out[m, n] = relu( sum_k X[m, k] * W[n, k] + bias[n] )      X [M, K], W [N, K] bf16, out [M, N] bf16
//
// computed as its transpose, out^T = W x X^T, so that torch's weight W [N, K] is the matrix unit's A operand
// exactly as stored (row-major tiles of 16 rows x 32 k, no packing of the weight on any call), and the
// activations, small beside the weight in a forward pass, are the B operand, packed on every call by
// linear_amx_pack_x into the layout AMX reads: blocks of 16 rows of X, [M16 / 16][K / 2][16][2] ("VNNI": the
// two k of a pair side by side; each 32-k x 16-row tile is 1 KiB contiguous), rows past M zero.
// Requirements the host checks: K % 32 == 0 and N % (16 * TN) == 0 (no edge tiles: the checked loads
// joint_matrix_load_checked fail to build on this runtime), W row-contiguous.
//
// Floating point: the matrix unit multiplies bf16 pairs exactly and accumulates in fp32 (TDPBF16PS: the
// two products of a pair are added, then added to the accumulator, rounding to nearest even; input and output
// denormals are flushed to zero), so the order of the additions differs from the FMA kernels' and results
// differ from them in the last fp32 bits, far inside bfloat16's rounding of the output. The epilogue is the
// FMA kernels': bias added in fp32, ReLU with NaN kept, one rounding to bfloat16.
#pragma once
#include "common.hpp"

namespace xk {

// Work decomposition: a work-group is one sub-group of 16 lanes; it owns TN x TM accumulator tiles of 16 x 16
// (rows: output channels n, columns: rows m of X), i.e. 16*TN channels x 16*TM rows. AMX has 8 tile
// registers: TN*TM accumulators + TN A tiles + TM B tiles <= 8 for (2, 2) and (2, 1).
// Order of the work-groups: the row blocks come in chunks of m_chunk blocks, whose packed activations fit in
// the L2 cache (the host sizes it); within a chunk, consecutive work-groups take consecutive row blocks of the
// same channel block, so a weight slice (16*TN rows of W) is read from memory once per chunk and the chunk's
// activations stay in L2 while every channel block passes over them.
struct AmxTile {
  static constexpr int kSubGroup = 16;
  static constexpr int kTileM = 16;  // rows of an A tile / columns of a B tile
  static constexpr int kTileK = 32;  // k of a tile (bf16 pairs: 16)
};
// Rows of X per work-group of the packing kernel: pairs of k per work-item loop.
inline constexpr int64_t kAmxPackPairsPerGroup = 64;

template <typename T>
struct linear_gemm_amx_params {
  const T* W;  // [N, K], row stride ldw
  int64_t ldw;
  const T* Xp;    // packed activations [M16 / 16][K / 2][16][2]
  const T* bias;  // [N] or null
  T* C;           // [M, N], row stride ldc
  int64_t ldc;
  int64_t M, N, K;
  int64_t m_groups;  // ceil(M / (16 * TM)) row blocks
  int64_t m_chunk;   // row blocks per chunk (below)
};
// BIAS: bias added; ReLU always (the forward pass). TN, TM: accumulator tiles per work-group (above).
template <bool BIAS, int TN, int TM>
struct linear_gemm_amx {
  static constexpr int dims = 1;
  static constexpr int sub_group = AmxTile::kSubGroup;
  static constexpr bool amx = true;
  using types = type_list<bf16>;
  template <typename T>
  using params = linear_gemm_amx_params<T>;
  // The accumulators, stored for the epilogue: [16 * TN channels][16 * TM rows].
  template <typename T>
  struct local_t {
    float c[16 * TN][16 * TM];
  };
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p, local_t<T>& scratch);
};

template <typename T>
struct linear_amx_pack_x_params {
  const T* X;  // [M, K], row stride ldx
  int64_t ldx;
  T* Xp;  // [M16 / 16][K / 2][16][2]
  int64_t M, K, pair_chunks;
};
struct linear_amx_pack_x {
  static constexpr int dims = 1;
  static constexpr int sub_group = AmxTile::kSubGroup;
  static constexpr bool amx = true;
  using types = type_list<bf16>;
  template <typename T>
  using params = linear_amx_pack_x_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// ------------------------------------------------------------------ bodies
// Launch: nd_range<1>, local 16, global 16 * m_groups * (N / (16 * TN)).
template <bool BIAS, int TN, int TM>
template <typename T>
void linear_gemm_amx<BIAS, TN, TM>::run(item_arg<1> ia, const params<T>& p, local_t<T>& scratch) {
#ifdef XK_RTC
  namespace jm = sycl::ext::oneapi::experimental::matrix;
  using bfx = sycl::ext::oneapi::bfloat16;
  using sycl::access::address_space;
  using sycl::access::decorated;
  const auto it = item(ia);
  const auto sg = it.get_sub_group();
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t n_groups = p.N / (16 * TN);
  const int64_t chunk = g / (p.m_chunk * n_groups), rem = g % (p.m_chunk * n_groups);
  const int64_t first = chunk * p.m_chunk;
  const int64_t in_chunk = p.m_groups - first < p.m_chunk ? p.m_groups - first : p.m_chunk;  // the last is shorter
  const int64_t m0 = (first + rem % in_chunk) * (16 * TM), n0 = (rem / in_chunk) * (16 * TN);
  const int64_t K = p.K;
  const bfx* w = reinterpret_cast<const bfx*>(p.W);
  const bfx* xp = reinterpret_cast<const bfx*>(p.Xp);
  auto global = [](const bfx* q) { return sycl::address_space_cast<address_space::global_space, decorated::no>(q); };

  jm::joint_matrix<sycl::sub_group, float, jm::use::accumulator, 16, 16> c[TN][TM];
  XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j)
      jm::joint_matrix_fill(sg, c[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += AmxTile::kTileK) {
    jm::joint_matrix<sycl::sub_group, bfx, jm::use::a, 16, 32, jm::layout::row_major> a[TN];
    jm::joint_matrix<sycl::sub_group, bfx, jm::use::b, 32, 16, jm::layout::ext_intel_packed> b[TM];
    XK_UNROLL for (int i = 0; i < TN; ++i)
        jm::joint_matrix_load(sg, a[i], global(w + (n0 + 16 * i) * p.ldw + k0), p.ldw);
    // B tile j: rows block m0/16 + j, k pairs k0/2 .. k0/2 + 15: 16 x 32 contiguous elements.
    XK_UNROLL for (int j = 0; j < TM; ++j)
        jm::joint_matrix_load(sg, b[j], global(xp + ((m0 / 16 + j) * (K / 2) + k0 / 2) * 32), 32);
    XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j)
        jm::joint_matrix_mad(sg, c[i][j], a[i], b[j], c[i][j]);
  }
  // Epilogue: the tiles go to local memory row-major (a column-major store, which would put rows of out
  // contiguous, measured 3-4x slower for the whole kernel at K = 768), then lane l writes channel n0 + 16 i + l
  // of each row: a contiguous row segment of out across the lanes.
  float* cl = &scratch.c[0][0];
  XK_UNROLL for (int i = 0; i < TN; ++i) XK_UNROLL for (int j = 0; j < TM; ++j) jm::joint_matrix_store(
      sg, c[i][j],
      sycl::address_space_cast<address_space::local_space, decorated::no>(cl + (16 * i) * (16 * TM) + 16 * j), 16 * TM,
      jm::layout::row_major);
  sycl::group_barrier(sg);
  const int64_t l = static_cast<int64_t>(sg.get_local_linear_id());
  const int64_t rows = p.M - m0 < 16 * TM ? p.M - m0 : 16 * TM;
  XK_UNROLL for (int i = 0; i < TN; ++i) {
    const int64_t n = n0 + 16 * i + l;
    const float b = BIAS ? load(p.bias, n) : 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      float v = scratch.c[16 * i + l][r];
      if constexpr (BIAS) v = v + b;
      v = v < 0.0f ? 0.0f : v;  // NaN propagates, as torch.relu
      store(p.C, (m0 + r) * p.ldc + n, v);
    }
  }
#else
  (void)ia, (void)p, (void)scratch;
#endif
}

// Launch: nd_range<1>, local 16, global 16 * (M16 / 16) * pair_chunks. Work-group (row block rb, chunk c):
// lane l copies row rb*16 + l's k pairs c*kAmxPackPairsPerGroup .. (+ kAmxPackPairsPerGroup), zeros past M.
// A pair of bf16 moves as one 32-bit word (X 4-byte aligned, ldx even: the host checks): per pair step the
// lanes gather one word each from their rows and store 16 words contiguously (the 16-bit gathers and
// scatters of an element-wise copy measured 3.7 ms for a 512 x 3072 X).
template <typename T>
void linear_amx_pack_x::run(item_arg<1> ia, const params<T>& p) {
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
  const bool in = m < p.M;
  const uint32_t* x = reinterpret_cast<const uint32_t*>(p.X) + (in ? m : 0) * (p.ldx / 2);
  uint32_t* out = reinterpret_cast<uint32_t*>(p.Xp) + rb * pairs * 16 + l;
  for (int64_t q = q0; q < q1; ++q) out[q * 16] = in ? x[q] : 0u;
#else
  (void)ia, (void)p;
#endif
}

// ------------------------------------------------------------------ the table
using fused_linear_relu_amx_kernels =
    kernel_list<linear_gemm_amx<true, 2, 2>, linear_gemm_amx<false, 2, 2>, linear_gemm_amx<true, 2, 1>,
                linear_gemm_amx<false, 2, 1>, linear_amx_pack_x>;

}  // namespace xk
