# sage_library(<target> <dir>): a static library from <dir>/*.cpp with <dir>/../include as
# its public include path. While a component has no sources yet it is an interface library,
# so that the tree configures at every step of its growth.
function(sage_library target srcdir)
  file(GLOB srcs CONFIGURE_DEPENDS ${srcdir}/*.cpp)
  if(srcs)
    add_library(${target} STATIC ${srcs})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  set_property(GLOBAL APPEND PROPERTY SAGE_LIB_SCOPE_${target} ${scope})
  set(${target}_SCOPE ${scope} PARENT_SCOPE)
endfunction()
