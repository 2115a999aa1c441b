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
    if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
        # Qt's qCInfo(category) leaves its macro's `...` empty, which -Wpedantic names.
        target_compile_options(flotilla_settings INTERFACE -Wno-gnu-zero-variadic-macro-arguments)
    endif()
elseif(MSVC)
    target_compile_options(flotilla_settings INTERFACE /W4 /permissive- /Zc:__cplusplus)
endif()

# Adds a static library for one module of the tree (one folder, or one room of a folder:
# engine/data). Its users include its headers with their path ("engine/data/Store.h") through
# an include root that holds that folder alone (a link in the build tree), so a file sees only
# the modules its target links and a layering mistake fails to compile. Where links cannot be
# made (Windows without developer mode) the root is the source tree: everything builds,
# nothing is enforced.
function(flotilla_add_module name)
    add_library(${name} STATIC ${ARGN})
    target_link_libraries(${name} PRIVATE flotilla_settings)
    file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
    string(REPLACE "/" "_" root_name ${folder})
    set(include_root ${PROJECT_BINARY_DIR}/include/${root_name})
    if(NOT EXISTS ${include_root}/${folder})
        get_filename_component(parent ${include_root}/${folder} DIRECTORY)
        file(MAKE_DIRECTORY ${parent})
        file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${include_root}/${folder} RESULT linked SYMBOLIC)
        if(NOT linked EQUAL 0)
            set(include_root ${PROJECT_SOURCE_DIR})
        endif()
    endif()
    target_include_directories(${name} PUBLIC ${include_root})
endfunction()
