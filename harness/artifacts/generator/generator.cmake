# Adds harness-generate (harness_generate.cpp beside this file) to a llama.cpp tree, without
# editing the tree: the harness passes this file as CMAKE_PROJECT_llama.cpp_INCLUDE, which cmake
# includes right after llama.cpp's top-level project() call. The target is declared once the
# top-level CMakeLists.txt is done (cmake_language DEFER, cmake >= 3.19), when `llama` exists.
include_guard(GLOBAL)
set(HARNESS_GENERATOR_SOURCE "${CMAKE_CURRENT_LIST_DIR}/harness_generate.cpp")

function(harness_add_generator)
    if(NOT TARGET llama)
        message(WARNING "harness-generate: this tree has no llama target; not added")
        return()
    endif()
    add_executable(harness-generate "${HARNESS_GENERATOR_SOURCE}")
    target_link_libraries(harness-generate PRIVATE llama ggml ${CMAKE_THREAD_LIBS_INIT})
    target_compile_features(harness-generate PRIVATE cxx_std_17)
    set_target_properties(harness-generate PROPERTIES
        RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL harness_add_generator)
