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
    # -fvisibility-inlines-hidden: Debian's LibTorch pulls OpenCV and with it Qt 5 into the
    # process; an inline Qt 6 function emitted by an unoptimized build (QByteArray::append)
    # must not be exported, or Qt 5's libraries bind to it and crash at start-up.
    target_compile_options(flotilla_settings INTERFACE
        -Wall -Wextra -Wpedantic -Wno-unused-parameter -fvisibility-inlines-hidden)
elseif(MSVC)
    target_compile_options(flotilla_settings INTERFACE /W4 /permissive- /Zc:__cplusplus)
endif()

# Adds a static library for one module of the tree.
function(flotilla_add_module name)
    add_library(${name} STATIC ${ARGN})
    target_link_libraries(${name} PRIVATE flotilla_settings)
    target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR})
endfunction()
