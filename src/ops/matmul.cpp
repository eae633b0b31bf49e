// Matrix products: matmul (torch.matmul rules), mm, bmm, linear. Everything lowers to one
// batched product [B,M,K] @ [B,K,N] (+ bias) in the backend.
#include <string>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

/// The torch CPU kernel a product lowers to; it decides which dtypes torch accepts (fp8 only
/// through mm/addmm, never through dot, mv or bmm; no bool, no uint16/32/64).
enum class Kernel { Dot, Mv, Mm, Bmm };

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Dot: return "dot";
    case Kernel::Mv: return "addmv_impl_cpu";
    case Kernel::Mm: return "addmm_impl_cpu_";
    case Kernel::Bmm: return "bmm";
  }
  return "";
}

void check_operands(const char* op, const Tensor& a, const Tensor& b, Kernel kernel) {
  EMBER_CHECK(a.dtype() == b.dtype(), op, "operand dtypes: expected m1 and m2 to have the same dtype, got {} != {}",
              name(a.dtype()), name(b.dtype()));
  const DType d = a.dtype();
  const bool supported = d == kUInt8 || d == kInt8 || d == kInt16 || d == kInt32 || d == kInt64 || d == kFloat16 ||
                         d == kBFloat16 || d == kFloat32 || d == kFloat64 || d == kComplex64 || d == kComplex128 ||
                         (is_fp8(d) && kernel == Kernel::Mm);
  EMBER_CHECK(supported, op, "dtype: expected one torch implements for \"{}\" on the CPU, got {}", kernel_name(kernel),
              name(d));
}

std::string matrix_str(const Tensor& x) { return fmt::format("{}x{}", x.size(-2), x.size(-1)); }

/// x as [batch, rows, cols]: a view when the strides allow it, else a contiguous copy.
Tensor as_3d(const Tensor& x, int64_t batch) { return x.reshape({batch, x.size(-2), x.size(-1)}); }

/// out (a new contiguous tensor of `out_shape`, viewed [B,M,N]) = a3 @ b3 (+ bias3).
Tensor product(const Tensor& a3, const Tensor& b3, const Tensor* bias3, std::vector<int64_t> out_shape) {
  Tensor out = empty(std::move(out_shape), a3.dtype(), a3.device());
  const Tensor out3 = out.view({a3.size(0), a3.size(1), b3.size(2)});
  if (out.numel() == 0) return out;
  if (a3.size(2) == 0) {  // empty sum: the bias, or zeros
    if (bias3) ops::copy_into(*bias3, out3);
    else EMBER_DISPATCH(out.device(), fill, out, Scalar(0));
    return out;
  }
  if (bias3) EMBER_DISPATCH(out.device(), baddbmm, *bias3, a3, b3, out3);
  else EMBER_DISPATCH(out.device(), bmm, a3, b3, out3);
  return out;
}

/// The shape two shapes (`what`: batch dims or bias/output) broadcast to; torch's message when they do not.
std::vector<int64_t> broadcast_sizes(const char* op, const char* what, const std::vector<int64_t>& a,
                                     const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t sb = i + b.size() >= n ? b[i + b.size() - n] : 1;
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, op,
                "{}: expected the size of tensor a ({}) to match the size of tensor b ({}) at non-singleton "
                "dimension {}, got shapes {} and {}",
                what, sa, sb, i, shape_str(a), shape_str(b));
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

/// a @ b for a with any number of dims >= 2 and b [K, N]: a's batch dims fold into M (a view
/// when the strides allow it), like torch.
Tensor product_with_matrix(const Tensor& a_mat, const Tensor& b_mat, const Tensor* bias, std::vector<int64_t> out_shape) {
  const int64_t k = a_mat.size(-1), n = b_mat.size(-1);
  const int64_t rows = shape_numel(std::vector<int64_t>(a_mat.sizes().begin(), a_mat.sizes().end() - 1));
  const Tensor a3 = a_mat.reshape({1, rows, k});
  const Tensor b3 = b_mat.unsqueeze(0);
  if (!bias) return product(a3, b3, nullptr, std::move(out_shape));
  const Tensor bias3 = bias->expand(out_shape).reshape({1, rows, n});
  return product(a3, b3, &bias3, std::move(out_shape));
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  ops::check_defined("mm", a, "mat1");
  ops::check_defined("mm", b, "mat2");
  ops::check_same_device("mm", {&a, &b});
  EMBER_CHECK(a.dim() == 2, "mm", "mat1: expected a matrix, got a {}-D tensor", a.dim());
  EMBER_CHECK(b.dim() == 2, "mm", "mat2: expected a matrix, got a {}-D tensor", b.dim());
  check_operands("mm", a, b, Kernel::Mm);
  EMBER_CHECK(a.size(1) == b.size(0), "mm", "mat1 and mat2 shapes cannot be multiplied ({} and {}): expected {} == {}, got {} != {}",
              matrix_str(a), matrix_str(b), "mat1.size(1)", "mat2.size(0)", a.size(1), b.size(0));
  return product(a.unsqueeze(0), b.unsqueeze(0), nullptr, {a.size(0), b.size(1)});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  ops::check_defined("bmm", a, "batch1");
  ops::check_defined("bmm", b, "batch2");
  ops::check_same_device("bmm", {&a, &b});
  EMBER_CHECK(a.dim() == 3, "bmm", "batch1: expected a 3-D tensor, got a {}-D tensor", a.dim());
  EMBER_CHECK(b.dim() == 3, "bmm", "batch2: expected a 3-D tensor, got a {}-D tensor", b.dim());
  check_operands("bmm", a, b, Kernel::Bmm);
  EMBER_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), "bmm",
              "size of the first two dimensions of batch2: expected [{}, {}], got [{}, {}]", a.size(0), a.size(2),
              b.size(0), b.size(1));
  return product(a, b, nullptr, {a.size(0), a.size(1), b.size(2)});
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_defined("matmul", a);
  ops::check_defined("matmul", b, "other");
  ops::check_same_device("matmul", {&a, &b});
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul",
              "both arguments to matmul need to be at least 1D: expected dims >= 1, got {}D and {}D", a.dim(), b.dim());
  const Kernel kernel = a.dim() == 1 && b.dim() == 1 ? Kernel::Dot
                        : b.dim() == 1               ? Kernel::Mv
                        : b.dim() == 2               ? Kernel::Mm
                                                     : Kernel::Bmm;
  check_operands("matmul", a, b, kernel);
  // 1-D operands become a row (a) or a column (b) matrix, and that dim is dropped from the result.
  const Tensor a_mat = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b_mat = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t m = a_mat.size(-2), k = a_mat.size(-1), n = b_mat.size(-1);
  EMBER_CHECK(k == b_mat.size(-2), "matmul",
              "mat1 and mat2 shapes cannot be multiplied ({} and {}): expected {} == {}, got {} != {}",
              matrix_str(a_mat), matrix_str(b_mat), "mat1.size(-1)", "mat2.size(-2)", k, b_mat.size(-2));
  const std::vector<int64_t> a_batch(a_mat.sizes().begin(), a_mat.sizes().end() - 2);
  const std::vector<int64_t> b_batch(b_mat.sizes().begin(), b_mat.sizes().end() - 2);
  const std::vector<int64_t> batch = broadcast_sizes("matmul", "batch dims", a_batch, b_batch);
  std::vector<int64_t> out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  if (b_batch.empty()) return product_with_matrix(a_mat, b_mat, nullptr, std::move(out_shape));

  const int64_t nbatch = shape_numel(batch);
  std::vector<int64_t> a_sizes = batch, b_sizes = batch;
  a_sizes.insert(a_sizes.end(), {m, k});
  b_sizes.insert(b_sizes.end(), {k, n});
  return product(as_3d(a_mat.expand(a_sizes), nbatch), as_3d(b_mat.expand(b_sizes), nbatch), nullptr, std::move(out_shape));
}

Tensor linear(const Tensor& x, const Tensor& weight, std::optional<Tensor> bias) {
  ops::check_defined("linear", x);
  ops::check_defined("linear", weight, "weight");
  if (bias) ops::check_defined("linear", *bias, "bias");
  ops::check_same_device("linear", {&x, &weight, bias ? &*bias : &x});
  EMBER_CHECK(x.dim() >= 1 && weight.dim() >= 1, "linear",
              "both arguments to linear need to be at least 1D: expected dims >= 1, got {}D and {}D", x.dim(), weight.dim());
  EMBER_CHECK(weight.dim() <= 2, "linear", "weight: expected a tensor with <= 2 dims ([N, K] or [K]), got {}-D", weight.dim());
  check_operands("linear", x, weight, weight.dim() == 2 ? Kernel::Mm : x.dim() == 1 ? Kernel::Dot : Kernel::Mv);
  const Tensor w_mat = weight.dim() == 2 ? weight.t() : weight.unsqueeze(1);  // [K, N]
  const Tensor x_mat = x.dim() == 1 ? x.unsqueeze(0) : x;
  const int64_t k = x_mat.size(-1);
  EMBER_CHECK(k == w_mat.size(0), "linear",
              "mat1 and mat2 shapes cannot be multiplied ({} and {}): expected input.size(-1) == weight.size(-1), got {} != {}",
              matrix_str(x_mat), matrix_str(w_mat), k, w_mat.size(0));
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end() - 1);
  if (weight.dim() == 2) out_shape.push_back(weight.size(0));
  if (!bias) return product_with_matrix(x_mat, w_mat, nullptr, std::move(out_shape));
  EMBER_CHECK(bias->dtype() == x.dtype(), "linear", "bias dtype: expected {} like the input, got {}", name(x.dtype()),
              name(bias->dtype()));
  const std::vector<int64_t> bias_to = broadcast_sizes("linear", "bias and output", bias->sizes(), out_shape);
  EMBER_CHECK(bias_to == out_shape, "linear", "bias: expected a shape that broadcasts to the output {}, got {}",
              shape_str(out_shape), shape_str(bias->sizes()));
  return product_with_matrix(x_mat, w_mat, &*bias, std::move(out_shape));
}

}  // namespace ember
