// Test entry point: the verifier runs after every pass in tests.
#include <gtest/gtest.h>

#include "ir/verify.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ws::ir::set_verify_enabled(true);
  return RUN_ALL_TESTS();
}
