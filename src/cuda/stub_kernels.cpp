// The CUDA kernels of a build without CUDA: every backend function exists and throws.
#include "backend.h"

namespace ember::cuda {
namespace {
[[noreturn]] void no_cuda(const char* op) {
  fail(op, "CUDA is not available: expected a build with CUDA, got {}", "built without CUDA (EMBER_CUDA=OFF or no CUDA toolkit at configure time)");
}
}  // namespace

void copy(const Tensor&, const Tensor&) { no_cuda("copy"); }
void fill(const Tensor&, const Scalar&) { no_cuda("fill"); }
void unary(UnaryOp, const Tensor&, const Tensor&) { no_cuda("unary"); }
void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { no_cuda("binary"); }
void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("where"); }
void saturate_copy(const Tensor&, const Tensor&) { no_cuda("saturate_cast"); }
void frexp(const Tensor&, const Tensor&, const Tensor&) { no_cuda("frexp"); }
void reduce(ReduceOp, const Tensor&, const std::vector<int64_t>&, const Tensor&) { no_cuda("reduce"); }
void arg_reduce(ArgReduceOp, const Tensor&, int64_t, const Tensor&) { no_cuda("arg_reduce"); }
void sort(const Tensor&, int64_t, bool, const Tensor&, const Tensor&) { no_cuda("sort"); }
void topk(const Tensor&, int64_t, int64_t, bool, const Tensor&, const Tensor&) { no_cuda("topk"); }
void cumsum(const Tensor&, int64_t, const Tensor&) { no_cuda("cumsum"); }
void histc(const Tensor&, int64_t, double, double, const Tensor&) { no_cuda("histc"); }
void index_select(const Tensor&, int64_t, const Tensor&, const Tensor&) { no_cuda("index_select"); }
void gather(const Tensor&, int64_t, const Tensor&, const Tensor&) { no_cuda("gather"); }
void index_add(const Tensor&, int64_t, const Tensor&, const Tensor&, const Scalar&) { no_cuda("index_add"); }
void take(const Tensor&, const Tensor&, const Tensor&) { no_cuda("take"); }
void softmax(const Tensor&, int64_t, bool, const Tensor&) { no_cuda("softmax"); }
void rms_norm(const Tensor&, const Tensor&, double, const Tensor&) { no_cuda("rms_norm"); }
void rotary_emb(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("rotary_emb"); }
void bmm(const Tensor&, const Tensor&, const Tensor&) { no_cuda("bmm"); }
void baddbmm(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("baddbmm"); }
void lu_factor(const Tensor&, const Tensor&, const Tensor&) { no_cuda("lu_factor"); }
void lu_solve(const Tensor&, const Tensor&, const Tensor&, bool, bool) { no_cuda("lu_solve"); }
void inv(const Tensor&, const Tensor&, const Tensor&) { no_cuda("inv"); }
void lu_det(const Tensor&, const Tensor&, const Tensor&) { no_cuda("det"); }
void lu_slogdet(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("slogdet"); }
void triangular_solve(const Tensor&, const Tensor&, bool, bool, bool) { no_cuda("solve_triangular"); }
void qr(const Tensor&, const Tensor&, const Tensor&) { no_cuda("qr"); }
void svd(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("svd"); }
void arange(double, double, const Tensor&) { no_cuda("arange"); }
void linspace(double, double, bool, double, const Tensor&) { no_cuda("linspace"); }
void random(RandomKind, uint64_t, const Tensor&) { no_cuda("random"); }
void randint(int64_t, int64_t, uint64_t, const Tensor&) { no_cuda("randint"); }
void scaled_mm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool) { no_cuda("scaled_mm"); }
void fp8_linear(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("fp8_linear"); }
void grouped_mm(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("grouped_mm"); }
void scaled_grouped_mm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("scaled_grouped_mm");
}
void moe_route(const Tensor&, const Tensor&, const MoeRouteOptions&, const Tensor&, const Tensor&) { no_cuda("moe_route"); }
void moe_permute(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("moe_permute"); }
void moe_unpermute(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("moe_unpermute"); }
void scaled_dot_product_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, const Tensor&) {
  no_cuda("scaled_dot_product_attention");
}
void moe_layer(const Tensor&, const Tensor&, const MoeExperts&, const MoeLayerOptions&, const Tensor&) { no_cuda("moe_layer"); }

}  // namespace ember::cuda
