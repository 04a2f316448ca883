#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace sage {
// Incremental SHA-256 (FIPS 180-4). hex() finalizes.
class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, std::size_t n);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  // Hashes the length and then the bytes, so that concatenations cannot collide.
  Sha256& field(std::string_view s);
  std::string hex();

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buflen_ = 0;
  std::uint64_t total_ = 0;
  bool done_ = false;
  std::string digest_;
};
inline std::string sha256_hex(std::string_view s) { return Sha256().update(s).hex(); }
}  // namespace sage
