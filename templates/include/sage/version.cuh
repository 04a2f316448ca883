// The kernel ABI version: bumped when the parameter structs shared by host and device code
// change layout, so that cubins built for another layout are never launched.
#pragma once

#define SAGE_KERNEL_ABI_VERSION 1
