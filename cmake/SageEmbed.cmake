# sage_embed_files(TARGET <lib> NAMESPACE <ns> BASE_DIR <dir> FILES <files...>)
# Builds a static library holding the files' bytes, looked up by their path relative to
# BASE_DIR through the generated function <ns>::find(name) (see common/include/sage/common/embedded.h).
function(sage_embed_files)
  cmake_parse_arguments(E "" "TARGET;NAMESPACE;BASE_DIR" "FILES" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${E_TARGET}_embedded.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAMESPACE=${E_NAMESPACE} -DBASE_DIR=${E_BASE_DIR}
            "-DFILES=${E_FILES}" -P ${PROJECT_SOURCE_DIR}/cmake/SageEmbedGen.cmake
    DEPENDS ${E_FILES} ${PROJECT_SOURCE_DIR}/cmake/SageEmbedGen.cmake
    COMMENT "Embedding ${E_TARGET} (${E_NAMESPACE})"
    VERBATIM)
  add_library(${E_TARGET} STATIC ${out})
  target_link_libraries(${E_TARGET} PUBLIC sage_common)
endfunction()
