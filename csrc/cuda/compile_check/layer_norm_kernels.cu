// Compile check (no torch): every layer_norm kernel instantiation of csrc/cuda/layer_norm.cu.
#include "compile_check/instantiate.cuh"
#include "kernels/layer_norm.cuh"

namespace xkernels::cuda::compile_check {
namespace {
template <typename T>
struct LayerNormKernels {
  template <int V>
  static void add_rows(std::vector<const void*>& out) {
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_forward_rows_kernel<T, V, false>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_forward_rows_kernel<T, V, true>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_backward_input_rows_kernel<T, V, false>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_backward_input_rows_kernel<T, V, true>));
  }
  void operator()(std::vector<const void*>& out) const {
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_forward_kernel<T, false>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_forward_kernel<T, true>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_backward_input_kernel<T, false>));
    out.push_back(reinterpret_cast<const void*>(&k::layer_norm_backward_input_kernel<T, true>));
    // The register-row kernels (layer_norm_launch.h: 1, 2, 4 or 8 vectors per thread, warp or block rows).
    add_rows<1>(out);
    add_rows<2>(out);
    add_rows<4>(out);
    add_rows<8>(out);
    add_column_sum<k::acc_t<T>, false, k::LayerNormGradWeightLoad<T>, k::StoreVector<T>>(out);
    add_column_sum<k::acc_t<T>, false, k::LayerNormGradBiasLoad<T>, k::StoreVector<T>>(out);
  }
};
}  // namespace
std::vector<const void*> layer_norm_kernels() {
  std::vector<const void*> out;
  for_each_type<LayerNormKernels>(out);
  return out;
}
}  // namespace xkernels::cuda::compile_check
