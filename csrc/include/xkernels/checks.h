// Error text and argument checks shared by every backend.
// Every message names the op, the argument and the actual value:
//   "xkernels.conv2d: argument 'stride' must be positive, got [0, 1]"
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <optional>
#include <sstream>
#include <string>

namespace xkernels {

// RuntimeError / ValueError carrying "xkernels.<op>: <message...>".
#define XK_CHECK(cond, op, ...) TORCH_CHECK((cond), "xkernels.", (op), ": ", __VA_ARGS__)
#define XK_CHECK_VALUE(cond, op, ...) TORCH_CHECK_VALUE((cond), "xkernels.", (op), ": ", __VA_ARGS__)

inline std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << "Tensor(shape=" << t.sizes() << ", dtype=" << t.scalar_type() << ", device=" << t.device() << ")";
  return s.str();
}

inline bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

inline void check_defined(const char* op, const char* arg, const at::Tensor& t) {
  XK_CHECK_VALUE(t.defined(), op, "argument '", arg, "' must be a tensor, got an undefined tensor");
}

inline void check_dtype_supported(const char* op, const char* arg, const at::Tensor& t) {
  XK_CHECK(is_supported_dtype(t.scalar_type()), op, "argument '", arg,
           "' must be float32, float64, float16 or bfloat16, got ", t.scalar_type());
}

// `t` must share dtype and device with `ref` (named `ref_arg`).
inline void check_same_dtype_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                                    const at::Tensor& ref) {
  XK_CHECK(t.scalar_type() == ref.scalar_type(), op, "argument '", arg, "' has dtype ", t.scalar_type(), " but '",
           ref_arg, "' has dtype ", ref.scalar_type(), "; they must match");
  XK_CHECK(t.device() == ref.device(), op, "argument '", arg, "' is on device ", t.device(), " but '", ref_arg,
           "' is on device ", ref.device(), "; they must be on the same device");
}

inline void check_optional_same(const char* op, const char* arg, const std::optional<at::Tensor>& t,
                                const char* ref_arg, const at::Tensor& ref) {
  if (t.has_value() && t->defined()) check_same_dtype_device(op, arg, *t, ref_arg, ref);
}

inline void check_dim(const char* op, const char* arg, const at::Tensor& t, int64_t dim) {
  XK_CHECK_VALUE(t.dim() == dim, op, "argument '", arg, "' must be ", dim, "-D, got ", t.dim(), "-D tensor of shape ",
                 t.sizes());
}

// output_mask of a backward op: which of (grad_input, grad_weight, grad_bias) to compute.
// Grads that are not requested are returned as empty tensors (numel 0).
inline at::Tensor empty_grad_like(const at::Tensor& like) { return like.new_empty({0}); }

}  // namespace xkernels
