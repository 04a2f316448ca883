// FP8 e4m3 on the host (tuner/accuracy.h): what the FP8 pages' tests and the bench write into a
// paged cache, and the values their references read back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "sage/tuner/accuracy.h"

using namespace sage;

TEST(E4m3, EveryCodeDecodesToItsValueAndBack) {
  // The format: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 subnormal (m 2^-9);
  // 0x7f and 0xff NaN, no infinities.
  EXPECT_EQ(tuner::e4m3_to_float(0x00), 0.f);
  EXPECT_EQ(tuner::e4m3_to_float(0x01), std::ldexp(1.f, -9));  // the smallest subnormal
  EXPECT_EQ(tuner::e4m3_to_float(0x07), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(tuner::e4m3_to_float(0x08), std::ldexp(1.f, -6));  // the smallest normal
  EXPECT_EQ(tuner::e4m3_to_float(0x38), 1.f);
  EXPECT_EQ(tuner::e4m3_to_float(0x39), 1.125f);
  EXPECT_EQ(tuner::e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(tuner::e4m3_to_float(0xb8), -1.f);
  EXPECT_TRUE(std::isnan(tuner::e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(tuner::e4m3_to_float(0xff)));
  float prev = -1.f;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = tuner::e4m3_to_float(std::uint8_t(b));
    // Every finite code round-trips (but -0, which comes back as -0's code too).
    EXPECT_EQ(tuner::float_to_e4m3(v), std::uint8_t(b)) << b << " " << v;
    if (b < 0x7f) {
      EXPECT_GT(v, prev) << b;  // the positive codes ascend
      prev = v;
    }
  }
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  // Between 1 (0x38) and 1.125 (0x39): below the midpoint down, above it up, at it to the even code.
  EXPECT_EQ(tuner::float_to_e4m3(1.06f), 0x38);
  EXPECT_EQ(tuner::float_to_e4m3(1.07f), 0x39);
  EXPECT_EQ(tuner::float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(tuner::float_to_e4m3(1.1875f), 0x3a);  // 1.125 (0x39) / 1.25 (0x3a): to the even one
  // Subnormals: multiples of 2^-9, half of the smallest to even (0), up to the smallest normal.
  EXPECT_EQ(tuner::float_to_e4m3(std::ldexp(1.f, -10)), 0x00);
  EXPECT_EQ(tuner::float_to_e4m3(std::ldexp(3.f, -10)), 0x02);
  EXPECT_EQ(tuner::float_to_e4m3(std::ldexp(15.f, -10)), 0x08);  // 7.5 2^-9 rounds to 8 2^-9 = 2^-6
  // A mantissa that rounds up into the next binade.
  EXPECT_EQ(tuner::float_to_e4m3(1.99f), 0x40);  // 2.0
  // Past 448: saturated, both signs; NaN stays NaN.
  EXPECT_EQ(tuner::float_to_e4m3(460.f), 0x7e);
  EXPECT_EQ(tuner::float_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(tuner::float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(tuner::float_to_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(tuner::float_to_e4m3(-0.f), 0x80);
}
