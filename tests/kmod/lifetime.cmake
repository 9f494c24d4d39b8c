# The module's lifetime regression tests (test_lifetime.cc) and race stress program
# (race_stress.cc), each its own binary and one guest per kernel. Included from CMakeLists.txt,
# which defines VM and VM_RESULTS.
find_package(Threads REQUIRED)

add_executable(shaddr_kmod_lifetime_tests test_lifetime.cc)
target_link_libraries(shaddr_kmod_lifetime_tests PRIVATE GTest::gtest_main Threads::Threads)
target_include_directories(shaddr_kmod_lifetime_tests PRIVATE ${SHADDR_UAPI_DIR})

add_executable(shaddr_race_stress race_stress.cc)
target_link_libraries(shaddr_race_stress PRIVATE Threads::Threads)
target_include_directories(shaddr_race_stress PRIVATE ${SHADDR_UAPI_DIR})
set(SHADDR_RACE_SECONDS 60 CACHE STRING "seconds the race stress program runs per kernel")

# Label kmod (make test) on the debug kernel, whose detectors turn a lost race into a report;
# kmod-full (make test-full) on the others. Times on TCG: lifetime ~40 s on Debian's kernels,
# ~3 min on the debug kernel; race SHADDR_RACE_SECONDS + ~10 s. The guest's own limit
# (--timeout) ends a hung kernel early.
foreach(series IN LISTS SHADDR_TEST_KERNELS)
  # The debug kernel's races run longer and its time limits stretch by the same factor.
  set(slowdown 1)
  if(series STREQUAL "debug")
    set(slowdown ${SHADDR_DEBUG_KERNEL_SLOWDOWN})
  endif()
  set(label kmod-full)
  if(series STREQUAL SHADDR_STRESS_TEST_KERNEL) # tests/kmod/CMakeLists.txt: debug, if built
    set(label kmod)
  endif()
  shaddr_kmod_vm_test(kmod.${series}.lifetime ${series} ${label} 600
    RESULTS ${VM_RESULTS}/kmod-lifetime-${series} ENV SHADDR_TEST_SLOWDOWN=${slowdown}
    COMMAND $<TARGET_FILE:shaddr_kmod_lifetime_tests>)

  math(EXPR race_guest_timeout "${SHADDR_RACE_SECONDS} + 300")
  shaddr_kmod_vm_test(kmod.${series}.race ${series} ${label} ${race_guest_timeout}
    RESULTS ${VM_RESULTS}/kmod-race-${series}
    COMMAND $<TARGET_FILE:shaddr_race_stress> ${SHADDR_RACE_SECONDS})
endforeach()
