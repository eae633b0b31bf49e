// Views, strides and copies against hand-derived layouts.
#include <gtest/gtest.h>

#include "compare.h"

using namespace ember;

TEST(Tensor, ViewsShareStorage) {
  Tensor x = tensor<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = x.t();
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.slice(1, 1, 3).to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(x.select(0, -1).to_vector<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(x.slice(1, 0, 3, 2).to_vector<float>(), (std::vector<float>{0, 2, 3, 5}));
  EXPECT_EQ(x.storage().get(), t.storage().get());
}

TEST(Tensor, ExpandAndReshape) {
  Tensor x = tensor<int32_t>({1, 2, 3}, {3, 1});
  Tensor e = x.expand({3, 4});
  EXPECT_EQ(e.strides(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(e.reshape({-1}).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  EXPECT_THROW(x.expand({2, 4}), Error);
  EXPECT_THROW(x.t().contiguous().view({5}), Error);
  EXPECT_THROW(tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3}).t().view({6}), Error);
}

TEST(Tensor, ErrorsNameTheOp) {
  Tensor x = zeros({2, 3});
  try {
    x.transpose(0, 5);
    FAIL() << "expected an ember::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[transpose] dimension out of range: expected one in [-2, 1], got 5");
  }
  EXPECT_THROW(x.data_ptr<double>(), Error);
  EXPECT_THROW(x.item<float>(), Error);
  EXPECT_THROW(x.view(kFloat16), Error);
}

TEST(Tensor, CastCopiesFollowTorch) {
  Tensor x = tensor<float>({-1.5f, 0.0f, 2.7f, 300.0f}, {4});
  EXPECT_EQ(x.to(kInt32).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 2, 300}));
  EXPECT_EQ(x.to(kBool).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(x.to(kUInt8).to_vector<uint8_t>()[3], static_cast<uint8_t>(static_cast<int64_t>(300)));
  EXPECT_EQ(tensor<float>({465.0f}).to(kFloat8_e4m3fn).view(kUInt8).to_vector<uint8_t>()[0], 0x7E);  // torch 2.15 saturates
}
