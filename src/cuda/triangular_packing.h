// The packed lower triangle that the batched CUDA triangular solve (linalg_triangular.cu) keeps
// in shared memory; plain host code too, so the unit tests check the kernel's own arithmetic.
// Column c holds rows from c rounded down to a multiple of `align` (the elements of one 16-byte
// vector) to the padded order np (a multiple of align): every column starts on a 16-byte
// boundary, so any aligned run of `align` rows is one vector load, while the triangle takes
// about half the square's space.
#pragma once
#include "ember/scalar_types.h"  // EMBER_HD

namespace ember::cuda::linalg_detail {

/// The first stored row of column c.
EMBER_HD constexpr int packed_first_row(int c, int align) { return c / align * align; }

/// Where column c starts: the summed lengths np - packed_first_row(c') of the columns before it.
EMBER_HD constexpr int packed_column_offset(int c, int np, int align) {
  const int q = c / align, s = c % align;
  return c * np - align * (align * q * (q - 1) / 2 + s * q);
}

/// Element (i, c) for packed_first_row(c) <= i < np.
EMBER_HD constexpr int packed_index(int i, int c, int np, int align) {
  return packed_column_offset(c, np, align) + i - packed_first_row(c, align);
}

/// Elements in the packed triangle of order np.
EMBER_HD constexpr int packed_size(int np, int align) { return packed_column_offset(np, np, align); }

}  // namespace ember::cuda::linalg_detail
