// A number passed to an op (x + 2, full(..., 0.5)), remembering whether it was written as a
// bool, an integer, a float or a complex, since torch's type promotion depends on that.
#pragma once
#include <complex>
#include <cstdint>
#include <type_traits>

namespace ember {

class Scalar {
 public:
  enum class Kind { Bool, Int, Float, Complex };

  Scalar() : Scalar(int64_t{0}) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T v) {  // NOLINT: implicit on purpose, like torch's Scalar
    if constexpr (std::is_same_v<T, bool>) { kind_ = Kind::Bool; i_ = v; d_ = v; }
    else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::Int; i_ = static_cast<int64_t>(v); d_ = static_cast<double>(v);
      u64_ = std::is_unsigned_v<T> && sizeof(T) == 8;
      u_ = static_cast<uint64_t>(v);
    } else { kind_ = Kind::Float; d_ = static_cast<double>(v); i_ = 0; }
  }
  template <class T>
  Scalar(std::complex<T> v) : kind_(Kind::Complex), d_(v.real()), i_(0), c_(v) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_floating_point() const { return kind_ == Kind::Float; }
  bool is_complex() const { return kind_ == Kind::Complex; }

  double to_double() const { return d_; }
  int64_t to_int64() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  uint64_t to_uint64() const { return u64_ ? u_ : static_cast<uint64_t>(to_int64()); }
  std::complex<double> to_complex() const { return kind_ == Kind::Complex ? c_ : std::complex<double>(d_, 0); }

  /// The value converted to element type T (integers stay exact, no trip through double).
  template <class T> T to() const;

 private:
  Kind kind_;
  double d_ = 0;
  int64_t i_ = 0;
  uint64_t u_ = 0;
  bool u64_ = false;
  std::complex<double> c_{};
};

}  // namespace ember
