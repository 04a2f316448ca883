// The kernel table of a static build made without -DSAGE_TUNED_KERNELS: no kernels, so every
// call answers SAGE_ERR_NOT_IN_BUILD with a message saying how to export some.
#include "sage/internal/static_table.h"

namespace sage::rt {

const StaticTable& static_table() {
  static const StaticTable t{nullptr, 0, nullptr, 0, nullptr, 0, "(none)", "", nullptr, 0, nullptr, 0};
  return t;
}

}  // namespace sage::rt
