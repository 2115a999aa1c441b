# Writes flotilla(1) or flotilla-headless(1) from the command's own help: `flotilla --help`
# and each command's `--help`. Run with -DFLOTILLA=<binary> -DNAME=<flotilla|flotilla-headless>
# -DOUTPUT=<file.1.gz> -DVERSION=<x.y.z> -DWORK=<dir>.

function(help out)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env QT_QPA_PLATFORM=offscreen ${FLOTILLA} ${ARGN} --help
                    OUTPUT_VARIABLE text RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${NAME} ${ARGN} --help failed: ${rc}")
    endif()
    # roff: backslashes are escapes, and a line may not start with a dot or a quote.
    string(REPLACE "\\" "\\e" text "${text}")
    string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
    set(${out} "${text}" PARENT_SCOPE)
endfunction()

if(NOT NAME)
    set(NAME flotilla)
endif()
string(TOUPPER ${NAME} title)
string(TIMESTAMP month "%Y-%m" UTC)
help(overview)
# The commands are the ones `flotilla --help` lists: "  name   summary" lines.
string(REGEX MATCHALL "\n  [a-z]+ " lines "${overview}")
set(commands)
foreach(line IN LISTS lines)
    string(STRIP "${line}" command)
    list(APPEND commands ${command})
endforeach()
if(NOT commands)
    message(FATAL_ERROR "${NAME} --help lists no commands")
endif()
set(page ".TH ${title} 1 \"${month}\" \"Flotilla ${VERSION}\" \"User Commands\"
.SH NAME
${NAME} \\- train deep-learning models on fleets of unreliable machines
.SH SYNOPSIS
.B ${NAME}
[\\fIcommand\\fR] [\\fIoptions\\fR]
.SH DESCRIPTION
.nf
${overview}
.fi
.SH COMMANDS
")
foreach(command IN LISTS commands)
    help(text ${command})
    string(APPEND page ".SS ${NAME} ${command}\n.nf\n${text}\n.fi\n")
endforeach()
string(APPEND page ".SH FILES
.TP
.I ~/.local/share/Flotilla/flotilla/
run directories, the coordinator's identity and the worker's state, unless given otherwise
.SH SEE ALSO
The documentation in /usr/share/doc/flotilla-headless: README.md and docs/ (architecture, algorithms,
protocol, measured figures).
")
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/${NAME}.1 "${page}")
file(ARCHIVE_CREATE OUTPUT ${OUTPUT} PATHS ${WORK}/${NAME}.1 FORMAT raw COMPRESSION GZip)
