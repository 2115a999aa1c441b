# One interface target carries the compile settings every Flotilla target shares.
add_library(flotilla_settings INTERFACE)
target_compile_definitions(flotilla_settings INTERFACE
    QT_NO_KEYWORDS                # LibTorch headers use the identifier `slots`
    QT_NO_CAST_FROM_ASCII
    QT_NO_CAST_TO_ASCII
    QT_USE_QSTRINGBUILDER
    QT_NO_FOREACH
    FLOTILLA_VERSION="${PROJECT_VERSION}")
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(flotilla_settings INTERFACE
        -Wall -Wextra -Wpedantic -Wno-unused-parameter)
elseif(MSVC)
    target_compile_options(flotilla_settings INTERFACE /W4 /permissive- /Zc:__cplusplus)
endif()

# Adds a static library for one module of the tree.
function(flotilla_add_module name)
    add_library(${name} STATIC ${ARGN})
    target_link_libraries(${name} PRIVATE flotilla_settings)
    target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR})
endfunction()
