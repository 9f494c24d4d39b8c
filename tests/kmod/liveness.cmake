# Liveness and memory-bound tests of the module (test_liveness.cc): importer progress and
# SIGKILL latency under exporter mmap-lock storms, exporter death in QUERY, futexes on windows,
# the per-user bound and population memory. Label kmod (make test) on Debian's kernels, about
# 40 s of TCG each; kmod-full on the debug kernel (2 minutes there: its time limits stretch by
# its factor, so it adds little to what it proves). Included from CMakeLists.txt.
find_package(Threads REQUIRED)

add_executable(shaddr_kmod_liveness_tests test_liveness.cc)
target_link_libraries(shaddr_kmod_liveness_tests PRIVATE GTest::gtest_main Threads::Threads)
target_include_directories(shaddr_kmod_liveness_tests PRIVATE ${SHADDR_UAPI_DIR})

foreach(series IN LISTS SHADDR_TEST_KERNELS)
  set(slowdown 1)
  set(label kmod)
  if(series STREQUAL "debug")
    set(slowdown ${SHADDR_DEBUG_KERNEL_SLOWDOWN})
    set(label kmod-full)
  endif()
  shaddr_kmod_timeout(limit ${series} 400)
  shaddr_kmod_vm_test(kmod.${series}.liveness ${series} ${label} ${limit}
    RESULTS ${VM_RESULTS}/kmod-liveness-${series} ENV SHADDR_TEST_SLOWDOWN=${slowdown}
    COMMAND $<TARGET_FILE:shaddr_kmod_liveness_tests>)
endforeach()
