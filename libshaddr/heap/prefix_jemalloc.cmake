# Builds a private copy of Debian's jemalloc (libjemalloc_pic.a) for libshaddr-heap:
#  - jemalloc's public names (malloc, free, mallocx, mallctl, malloc_conf, ...) are renamed to
#    shaddr_je_* (jemalloc.syms), so they cannot clash with the malloc family that
#    libshaddr-heap defines itself, nor with a jemalloc the program may load;
#  - jemalloc_cpp.pic.o (operator new/delete) is left out: C++ allocation reaches malloc;
#  - jemalloc's load-time constructor is removed, so jemalloc initialises on its first call,
#    after libshaddr-heap has registered its fork handlers (they must run before jemalloc's).
# Usage: cmake -DIN=libjemalloc_pic.a -DOUT=libshaddr_jemalloc.a -DSYMS=jemalloc.syms
#              -DAR=ar -DOBJCOPY=objcopy -DWORK=dir -P prefix_jemalloc.cmake
foreach(v IN ITEMS IN OUT SYMS AR OBJCOPY WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "prefix_jemalloc.cmake: -D${v}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${AR} x ${IN} WORKING_DIRECTORY ${WORK} COMMAND_ERROR_IS_FATAL ANY)
file(REMOVE ${WORK}/jemalloc_cpp.pic.o)
file(GLOB objs ${WORK}/*.o)
foreach(o IN LISTS objs)
  execute_process(COMMAND ${OBJCOPY} --redefine-syms=${SYMS} ${o} COMMAND_ERROR_IS_FATAL ANY)
endforeach()
execute_process(COMMAND ${OBJCOPY} --remove-section=.init_array --remove-section=.rela.init_array
                        ${WORK}/jemalloc.pic.o COMMAND_ERROR_IS_FATAL ANY)
file(REMOVE ${OUT})
execute_process(COMMAND ${AR} rcs ${OUT} ${objs} COMMAND_ERROR_IS_FATAL ANY)
