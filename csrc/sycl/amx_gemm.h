// Host side of the bf16 AMX GEMM (kernels/amx_gemm.hpp), shared by fused_linear_relu.cpp and conv2d.cpp: the row
// packing of the B operand and the GEMM launch. Only called where DeviceTraits::amx_bf16 (the callers check).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "xkernels/checks.h"
#include "xkernels/shapes.h"

namespace xkernels::sycl_backend {

// GEMM launches so far (xkernels._C.sycl.amx_gemm_launches(): the tests' proof that a call took this path).
inline std::atomic<int64_t>& amx_gemm_launch_count() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Packed B rows per chunk of the GEMM's B blocks: half of a 2 MiB L2, beside the A slice that passes over them.
inline constexpr int64_t kAmxChunkBytes = int64_t{1} << 20;

// Work-group order and grouping of the plain GEMM (kernels/amx_gemm.hpp, amx_gemm_params: b_per_group, a_fastest).
// Measured on the 2-core Intel Xeon (AVX-512 + AMX; docs/performance.md, "The AMX GEMM's work-group order"): four B
// blocks per work-group instead of one made ten linear and 1x1 shapes 1.04-1.18x faster; A blocks fastest gained 5 %
// on a linear with K = 1024 and M = 4096 and moved the other K >= 1024 shapes by -3..+1 %, while it lost up to 30 %
// at short K (1x1 64 -> 256: the A slice of 16 * TN rows, 64 * K bytes, then fits L1 and B fastest reuses it).
// 3x3 windows keep one B block per work-group and B fastest (not measured with more).
struct AmxBlocks {
  static constexpr int64_t kBPerGroup = 4;
  static constexpr int64_t kAFastestFromK = 1024;
  int64_t b_per_group = 1;
  bool a_fastest = false;
};

// XKERNELS_AMX_GEMM_BLOCKS ("b=<n>,order=a|b,linear=rows|weight", each part optional; for measuring and tests; every
// setting computes the same bits): 0 / -1 where the rule decides. Read by the AMX routes before they queue any kernel
// (a bad value raises while nothing runs that could outlive the call's temporaries). "linear=rows|weight" picks
// fused_linear_relu's operand roles (fused_linear_relu.cpp, amx_linear_rows_role).
struct AmxBlocksSetting {
  int64_t b_per_group = 0;
  int order = -1;        // 1: A blocks fastest, 0: B sets fastest
  int linear_rows = -1;  // 1: the activations' rows as A, 0: the weight's rows as A
  static AmxBlocksSetting from_env() {
    constexpr const char* kEnv = "XKERNELS_AMX_GEMM_BLOCKS";
    AmxBlocksSetting r;
    for_each_env_item(kEnv, [&](const std::string& key, const std::string& val) {
      int64_t n = 0;
      const bool ok = key == "b"       ? parse_env_int(val, &n) && n >= 1
                      : key == "order" ? val == "a" || val == "b"
                                       : key == "linear" && (val == "rows" || val == "weight");
      TORCH_CHECK(ok, "xkernels: ", kEnv,
                  " must be 'b=<n >= 1>,order=a|b,linear=rows|weight' (each part optional), got '", std::getenv(kEnv),
                  "'");
      if (key == "b")
        r.b_per_group = n;
      else if (key == "order")
        r.order = val == "a" ? 1 : 0;
      else
        r.linear_rows = val == "rows" ? 1 : 0;
    });
    return r;
  }
};

// The rule above, or the setting where it names a value.
inline AmxBlocks amx_blocks(int64_t K, int64_t b_groups, bool window, const AmxBlocksSetting& setting) {
  AmxBlocks r;
  if (!window) {
    r.b_per_group = std::min(AmxBlocks::kBPerGroup, b_groups);
    r.a_fastest = K >= AmxBlocks::kAFastestFromK;
  }
  if (setting.b_per_group > 0) r.b_per_group = std::min(setting.b_per_group, b_groups);
  if (setting.order >= 0) r.a_fastest = setting.order == 1;
  r.b_per_group = std::max<int64_t>(r.b_per_group, 1);
  return r;
}

// x [rows, K] as amx_pack_rows needs it: unit stride along k, 4-byte aligned rows (the packing kernel moves bf16
// pairs as 32-bit words), else a contiguous copy. The caller keeps the result alive until the packing is done.
inline at::Tensor amx_packable_rows(const at::Tensor& x) {
  const bool aligned = reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 4 == 0 && x.stride(0) % 2 == 0;
  return aligned && x.stride(1) == 1 ? x : x.clone(at::MemoryFormat::Contiguous);
}

// x [rows, K] (from amx_packable_rows, K % 32 == 0) -> [ceil(rows / 16) * 16, K] in the B operand's layout (rows
// past the end zero). Queued on L's queue; the caller keeps x and the result alive until the GEMM that reads it
// is done.
inline at::Tensor amx_pack_rows(Launcher& L, const at::Tensor& x) {
  using T = xk::bf16;
  TORCH_INTERNAL_ASSERT(x.stride(1) == 1 && x.stride(0) % 2 == 0 &&
                        reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 4 == 0);
  const int64_t rows = x.size(0), K = x.size(1);
  const int64_t blocks = ceil_div(rows, int64_t{16});
  at::Tensor xp = empty({blocks * 16, K}, x.options());
  const int64_t pair_chunks = ceil_div(K / 2, xk::kAmxPackPairsPerGroup);
  L.launch<xk::amx_pack_rows, T>(
      sycl::nd_range<1>(sycl::range<1>(blocks * pair_chunks * 16), sycl::range<1>(16)),
      {.X = cptr<T>(x), .ldx = x.stride(0), .Xp = mptr<T>(xp), .rows = rows, .K = K, .pair_chunks = pair_chunks});
  return xp;
}

// A 3x3 convolution window (conv2d, stride 1) over a zero-padded NHWC input: see amx_gemm_params in the kernel file.
struct AmxWindow {
  int64_t row_shift = 0, col_shift = 0;
  int64_t img = 0, wp = 0, oh = 0, ow = 0;
  int64_t max_shift() const { return 2 * row_shift + 2 * col_shift; }  // tap (2, 2)
};

// D[a, b] = sum_k A[a, k] Bp[b, k] with the epilogue (bias[channel], res, ReLU) into out: TRANS_OUT
// out[b * ldo + a] (channel = a), else out[a * ldo + b] (channel = b). A [a_rows, K] with unit stride along k,
// readable up to a multiple of 16 * TN rows; Bp from amx_pack_rows of b_rows rows; res laid out as out, or undefined.
// WINDOW: k runs over the nine taps of `win` (K = 9 * A's columns); A is the padded input's first a_rows flat
// pixels, readable a further win.max_shift() + 16 * TN rows.
template <bool TRANS_OUT, int TN, int TM, bool WINDOW = false>
void amx_gemm(Launcher& L, const AmxBlocksSetting& setting, const at::Tensor& A, const at::Tensor& Bp, int64_t b_rows,
              const at::Tensor& bias, const at::Tensor& res, bool relu, at::Tensor& out, int64_t ldo,
              int64_t out_offset = 0, int64_t res_offset = 0, const AmxWindow& win = {}) {
  using T = xk::bf16;
  const int64_t a_rows = A.size(0), tap_k = A.size(1), K = tap_k * (WINDOW ? 9 : 1);
  TORCH_INTERNAL_ASSERT(A.stride(1) == 1 && tap_k % xk::AmxTile::kTileK == 0 && Bp.size(1) == K);
  const int64_t b_groups = ceil_div(b_rows, int64_t{16} * TM);
  const AmxBlocks blocks = amx_blocks(K, b_groups, WINDOW, setting);
  const int64_t b_sets = ceil_div(b_groups, blocks.b_per_group);
  const int64_t groups = b_sets * ceil_div(a_rows, int64_t{16} * TN);
  // B sets per chunk: their packed rows (b_per_group x 16*TM rows x K bf16) within kAmxChunkBytes.
  const int64_t b_chunk =
      std::clamp<int64_t>(kAmxChunkBytes / (blocks.b_per_group * 16 * TM * K * 2), 1, std::max<int64_t>(b_sets, 1));
  amx_gemm_launch_count().fetch_add(1, std::memory_order_relaxed);
  L.launch<xk::amx_gemm<TRANS_OUT, TN, TM, WINDOW>, T>(
      sycl::nd_range<1>(sycl::range<1>(groups * 16), sycl::range<1>(16)),
      {.A = cptr<T>(A),
       .lda = A.stride(0),
       .Bp = cptr<T>(Bp),
       .bias = cptr_or_null<T>(bias),
       .res = res.defined() ? cptr<T>(res) + res_offset : nullptr,
       .out = mptr<T>(out) + out_offset,
       .ldo = ldo,
       .a_rows = a_rows,
       .b_rows = b_rows,
       .K = K,
       .b_groups = b_groups,
       .b_per_group = blocks.b_per_group,
       .b_chunk = b_chunk,
       .a_fastest = blocks.a_fastest ? 1 : 0,
       .relu = relu ? 1 : 0,
       .tap_k = tap_k,
       .row_shift = win.row_shift,
       .col_shift = win.col_shift,
       .img = win.img,
       .wp = win.wp,
       .oh = win.oh,
       .ow = win.ow});
}

// out [P, N] (row stride ldo) = epilogue(A [P, K] @ W^T), A's rows read in place (unit stride along k), W [N, K] the
// weight rows, packed per call (amx_pack_rows) as the B operand; bias per column, res laid out as out (dense rows
// of ldo) or undefined. The whole blocks of 16 * TN rows straight from A; the last few from a zero-padded copy (the
// kernel reads A up to a whole block). The temporaries go into `t`, which the caller declares outside
// launch_then_finish so that they outlive the kernels.
struct AmxRowsTemps {
  at::Tensor wr, wp, tail;
};
inline void amx_rows_gemm(Launcher& L, const AmxBlocksSetting& setting, const at::Tensor& A, const at::Tensor& W,
                          const at::Tensor& bias, const at::Tensor& res, bool relu, at::Tensor& out, int64_t ldo,
                          AmxRowsTemps& t) {
  constexpr int TN = 2, TM = 2;
  const int64_t P = A.size(0), K = A.size(1), N = W.size(0);
  t.wr = amx_packable_rows(W);
  t.wp = amx_pack_rows(L, t.wr);
  const int64_t main = P / (16 * TN) * (16 * TN);
  if (main > 0) amx_gemm<false, TN, TM>(L, setting, A.narrow(0, 0, main), t.wp, N, bias, res, relu, out, ldo);
  if (P > main) {
    t.tail = empty({16 * TN, K}, A.options()).zero_();
    t.tail.narrow(0, 0, P - main).copy_(A.narrow(0, main, P - main));
    amx_gemm<false, TN, TM>(L, setting, t.tail.narrow(0, 0, P - main), t.wp, N, bias, res, relu, out, ldo, main * ldo,
                            main * ldo);
  }
}

}  // namespace xkernels::sycl_backend
