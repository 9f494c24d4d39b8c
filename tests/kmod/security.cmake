# Security tests of the module, included from tests/kmod/CMakeLists.txt:
#  - shaddr_creds_tests (test_creds.cc): every credential rule across users, groups, capabilities,
#    dumpability, setuid exec, user namespaces, passed and read-only device fds, segment modes and
#    read-only files; with shaddr_setuid_helper, which the test installs setuid root in the guest.
#  - the threaded, multi-process fuzzer: shaddr_ioctl_fuzz (ioctl_fuzz.cc) is built and registered
#    (kmod.<kernel>.fuzz, SHADDR_FUZZ_SECONDS) in CMakeLists.txt; it needs threads.
find_package(Threads REQUIRED)

add_executable(shaddr_setuid_helper setuid_helper.cc)
target_include_directories(shaddr_setuid_helper PRIVATE ${SHADDR_UAPI_DIR})

add_executable(shaddr_creds_tests test_creds.cc)
target_link_libraries(shaddr_creds_tests PRIVATE GTest::gtest Threads::Threads)
target_include_directories(shaddr_creds_tests PRIVATE ${SHADDR_UAPI_DIR})
target_compile_definitions(shaddr_creds_tests PRIVATE
  SHADDR_SETUID_HELPER="$<TARGET_FILE:shaddr_setuid_helper>")
add_dependencies(shaddr_creds_tests shaddr_setuid_helper)

if(TARGET shaddr_ioctl_fuzz)
  target_link_libraries(shaddr_ioctl_fuzz PRIVATE Threads::Threads)
endif()

# On the debug kernel, make test runs the cases whose module paths touch memory or file lifetime
# (passed, inherited and read-only device fds, a setuid or setgid exec that ends the exporter's
# windows, secret memory, read-only files): the rest are rules decided on ids alone, which
# Debian's kernels check in make test and which a detector adds nothing to; they run there in
# make test-full (creds_rules). Five seconds of TCG on 6.1, 45 on the debug kernel.
set(SHADDR_CREDS_DEBUG_FILTER
  "Creds.ADeviceFd*:Creds.AReadOnlyDeviceFd*:Creds.*ExecOfTheExporterEndsItsWindows*:Creds.SecretMemory*:Files/ReadOnlyFile.*")
foreach(series IN LISTS SHADDR_TEST_KERNELS)
  # The guest limit bounds a hung actor (each also has alarm()).
  if(series STREQUAL "debug")
    shaddr_kmod_vm_test(kmod.${series}.creds ${series} kmod 600
      RESULTS ${VM_RESULTS}/kmod-creds-${series}
      COMMAND $<TARGET_FILE:shaddr_creds_tests> --gtest_filter=${SHADDR_CREDS_DEBUG_FILTER})
    shaddr_kmod_vm_test(kmod.${series}.creds_rules ${series} kmod-full 600
      RESULTS ${VM_RESULTS}/kmod-creds-rules-${series}
      COMMAND $<TARGET_FILE:shaddr_creds_tests> --gtest_filter=-${SHADDR_CREDS_DEBUG_FILTER})
  else()
    shaddr_kmod_vm_test(kmod.${series}.creds ${series} kmod 600
      RESULTS ${VM_RESULTS}/kmod-creds-${series} COMMAND $<TARGET_FILE:shaddr_creds_tests>)
  endif()
endforeach()
