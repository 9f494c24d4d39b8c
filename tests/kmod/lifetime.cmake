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

# Label kmod (make test). Times on TCG per kernel, boot included: lifetime ~1.5 min, race
# SHADDR_RACE_SECONDS + ~40 s. The guest's own limit (--timeout) ends a hung kernel early.
foreach(series IN LISTS SHADDR_TEST_KERNELS)
  # The debug kernel's races run longer and its time limits stretch by the same factor.
  set(slowdown 1)
  if(series STREQUAL "debug")
    set(slowdown ${SHADDR_DEBUG_KERNEL_SLOWDOWN})
  endif()
  shaddr_kmod_vm_test(kmod.${series}.lifetime ${series} kmod 600
    RESULTS ${VM_RESULTS}/kmod-lifetime-${series} ENV SHADDR_TEST_SLOWDOWN=${slowdown}
    COMMAND $<TARGET_FILE:shaddr_kmod_lifetime_tests>)

  math(EXPR race_guest_timeout "${SHADDR_RACE_SECONDS} + 300")
  shaddr_kmod_vm_test(kmod.${series}.race ${series} kmod ${race_guest_timeout}
    RESULTS ${VM_RESULTS}/kmod-race-${series}
    COMMAND $<TARGET_FILE:shaddr_race_stress> ${SHADDR_RACE_SECONDS})
endforeach()
