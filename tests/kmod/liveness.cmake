# Liveness and memory-bound tests of the module (test_liveness.cc): importer progress and
# SIGKILL latency under exporter mmap-lock storms, exporter death in QUERY, futexes on windows,
# the per-user bound and population memory. One guest per kernel, label kmod (make test):
# about a minute of TCG plus the boot; the debug kernel's time limits stretch by its factor.
# Included from CMakeLists.txt.
find_package(Threads REQUIRED)

add_executable(shaddr_kmod_liveness_tests test_liveness.cc)
target_link_libraries(shaddr_kmod_liveness_tests PRIVATE GTest::gtest_main Threads::Threads)
target_include_directories(shaddr_kmod_liveness_tests PRIVATE ${SHADDR_UAPI_DIR})

foreach(series IN LISTS SHADDR_TEST_KERNELS)
  set(slowdown 1)
  if(series STREQUAL "debug")
    set(slowdown ${SHADDR_DEBUG_KERNEL_SLOWDOWN})
  endif()
  shaddr_kmod_timeout(limit ${series} 400)
  shaddr_kmod_vm_test(kmod.${series}.liveness ${series} kmod ${limit}
    RESULTS ${VM_RESULTS}/kmod-liveness-${series} ENV SHADDR_TEST_SLOWDOWN=${slowdown}
    COMMAND $<TARGET_FILE:shaddr_kmod_liveness_tests>)
endforeach()
