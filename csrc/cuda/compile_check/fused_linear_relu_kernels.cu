// Compile check (no torch): every fused_linear_relu kernel instantiation of csrc/cuda/fused_linear_relu.cu.
#include "compile_check/instantiate.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/fused_linear_relu.cuh"

namespace xkernels::cuda::compile_check {
namespace {
template <typename T>
struct LinearKernels {
  void operator()(std::vector<const void*>& out) const {
    add_gemm<T, k::RowMajorA<T>, k::TransposedB<T>, k::LinearReluEpilogue<T, true>>(out);
    add_gemm<T, k::RowMajorA<T>, k::TransposedB<T>, k::LinearReluEpilogue<T, false>>(out);
    add_gemm<T, k::MaskedGradA<T>, k::RowMajorB<T>, k::StoreMatrix<T>>(out);
    add_gemm<T, k::MaskedGradTA<T>, k::RowMajorB<T>, k::StoreMatrix<T>>(out);
    add_column_sum<k::acc_t<T>, false, k::MaskedGradColumns<T>, k::StoreVector<T>>(out);
    // The masked gradient written out for the cuBLASLt backward (fused_linear_relu.cu, run_materialize).
    out.push_back(reinterpret_cast<const void*>(&k::materialize_kernel<T, k::MaskedGrad<T>>));
  }
};
}  // namespace
std::vector<const void*> fused_linear_relu_kernels() {
  std::vector<const void*> out;
  for_each_type<LinearKernels>(out);
  return out;
}
}  // namespace xkernels::cuda::compile_check
