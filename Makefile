# shaddr: `make run` is the main job, `make test` runs every test. `make help` lists targets.
SHELL := /bin/bash
TOP := $(CURDIR)
BUILD := $(TOP)/build

# Kernels to build shaddr.ko for: KDIR=<kernel build dir>, else every installed kernel's headers
# and the debug kernel's tree (tools/shaddr-debug-kernel) when it is built.
DEBUG_KDIR = $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/shaddr/kernel/debug/build
KDIRS = $(if $(KDIR),$(KDIR),$(wildcard /lib/modules/*/build) $(wildcard $(DEBUG_KDIR)))
# ... and, without KDIR, every kernel of the Debian 13 root (tools/shaddr-trixie-root: trixie's
# and trixie-backports' newest), built in that root with the compiler those kernels were built with.
TRIXIE_ROOT := $(TOP)/tools/shaddr-trixie-root
TRIXIE_KERNELS = $(if $(KDIR),,$(shell $(TRIXIE_ROOT) --kernels))
# Compiles go through ccache (tools/shaddr-deps installs it) with paths taken relative to the
# worktree, so a fresh worktree or clone of the same sources builds from the cache in seconds
# instead of minutes (three trees: build, build/asan, build/tsan). Only a fresh build directory
# picks this up; `rm -rf build` to have it in an old one.
CCACHE := $(shell command -v ccache 2>/dev/null)
CCACHE_LAUNCHER := $(if $(CCACHE),"env;CCACHE_BASEDIR=$(TOP);CCACHE_NOHASHDIR=1;$(CCACHE)")
CMAKE_GEN := -G Ninja $(if $(CCACHE),-DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE_LAUNCHER) \
	-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE_LAUNCHER))

.PHONY: all deps pkgs debug-kernel trixie-root kmod userspace userspace-asan userspace-tsan run test test-full test-unit test-kmod test-mpi test-mpi-full \
	bench bench-kmod calibrate checkpatch dkms-install dkms-uninstall clean help mpich test-mpich

all: kmod userspace

help:
	@echo "make            build shaddr.ko for every installed kernel and the userspace in build/"
	@echo "make run        set up, build, compare shaddr with stock MPI and the copy limit (short),"
	@echo "                the module in a VM (or on the host where it can): build/report/;"
	@echo "                first measures this machine's calibration if missing or stale (about"
	@echo "                3 minutes; SHADDR_CALIBRATE=0 skips it)"
	@echo "make calibrate  this machine's calibration (the cost model measured here, read by"
	@echo "                libshaddr), if missing or stale; tools/shaddr-model calibrate --force redoes it"
	@echo "make test       unit tests, kernel tests in the VM (6.1, 6.12, the newest 7.x, debug kernel), MPI tests;"
	@echo "                prints what each part cost, ends with \"N passed, N failed\"; what runs"
	@echo "                where: docs/testing.md"
	@echo "make check      the quick loop (minutes): unit tests, the sanitizers' fast subset, one"
	@echo "                kernel smoke test in the VM"
	@echo "make test-unit | test-kmod | test-mpi    one part"
	@echo "make test-full  everything: make test, the other kernel tests on every kernel (the VM"
	@echo "                runner's self-tests, DKMS, ...), the whole MPI matrix, the applications"
	@echo "make test-mpi-full  the interposer's whole MPI test matrix (hours)"
	@echo "make deps       install every dependency from Debian's registry, build the debug kernel and"
	@echo "                the Debian 13 root with the newest kernel (idempotent; the debug kernel's"
	@echo "                cold build takes tens of minutes, the root's 5 alongside it, then cached)"
	@echo "make debug-kernel  only the debug kernel (KASAN, lockdep, ...; tools/shaddr-debug-kernel)"
	@echo "make trixie-root   only the Debian 13 root with the newest kernel (tools/shaddr-trixie-root)"
	@echo "make bench      MPI comparison (every contender vs the copy limit): build/report/"
	@echo "make bench-multihost  stock MPI vs shaddr's hierarchy across test hosts (part of bench)"
	@echo "make bench-kmod window micro-benchmark in the VM (6.1 and 6.12)"
	@echo "make mpich      patched MPICH 4.0.2 (mpich_patch/) into build/mpich (cached)"
	@echo "make test-mpich MPICH test suite etc. on the patched MPICH, host and VM (ctest -L mpich; ~3.5 h)"
	@echo "make microbench | microbench-vm   libshaddr core costs, host | VM (JSON in build/)"
	@echo "make seed001-table  the Bcast segmentation table -> docs/seed001-segmentation.md"
	@echo "make checkpatch | dkms-install | dkms-uninstall | clean"

# deps: the packages, the debug kernel and the Debian 13 root with the newest kernel (tests run
# on both). Building needs the packages only; the test targets also need the kernels, so
# shaddr.ko is built for them as well. The root (network and dpkg bound, about 5 minutes cold)
# is made while the debug kernel compiles; its log goes to build/trixie-root.log.
deps: pkgs
	@set -e; mkdir -p $(BUILD); log=$(BUILD)/trixie-root.log; \
		$(TRIXIE_ROOT) >$$log 2>&1 & root=$$!; \
		s=0; $(TOP)/tools/shaddr-debug-kernel || s=$$?; \
		if wait $$root; then tail -n 1 $$log; else cat $$log; s=1; fi; exit $$s

pkgs:
	@$(TOP)/tools/shaddr-deps

debug-kernel: pkgs
	@$(TOP)/tools/shaddr-debug-kernel

trixie-root: pkgs
	@$(TRIXIE_ROOT)

ifneq ($(filter deps test test-kmod test-full,$(MAKECMDGOALS)),)
KMOD_NEEDS_KERNELS := deps
endif

kmod: pkgs $(KMOD_NEEDS_KERNELS)
	@set -e; for kdir in $(KDIRS); do \
		ver=$$(sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' $$kdir/include/generated/utsrelease.h); \
		out=$(BUILD)/kmod/$$ver; mkdir -p $$out; \
		cp -rpu $(TOP)/kmod/. $$out/; \
		echo "kmod: building shaddr.ko for $$ver"; \
		$(MAKE) -s -C $$kdir M=$$out KCFLAGS=-Werror modules 2>&1 | { grep -v 'Skipping BTF' || true; }; \
		test $${PIPESTATUS[0]} -eq 0; \
	done
	@set -e; for ver in $(TRIXIE_KERNELS); do \
		out=$(BUILD)/kmod/$$ver; mkdir -p $$out; \
		cp -rpu $(TOP)/kmod/. $$out/; \
		echo "kmod: building shaddr.ko for $$ver (in the Debian 13 root)"; \
		$(TRIXIE_ROOT) exec --bind $$out:/shaddr/kmod -- make -s -C /usr/src/linux-headers-$$ver \
			M=/shaddr/kmod KCFLAGS=-Werror modules 2>&1 | { grep -v 'Skipping BTF' || true; }; \
		test $${PIPESTATUS[0]} -eq 0; \
	done

$(BUILD)/build.ninja: | pkgs
	cmake $(CMAKE_GEN) -S $(TOP) -B $(BUILD) >/dev/null

$(BUILD)/asan/build.ninja: | pkgs
	cmake $(CMAKE_GEN) -S $(TOP) -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug \
		-DSHADDR_SANITIZE=address,undefined >/dev/null

userspace: pkgs $(BUILD)/build.ninja
	cmake --build $(BUILD)

userspace-asan: pkgs $(BUILD)/asan/build.ninja
	cmake --build $(BUILD)/asan

$(BUILD)/tsan/build.ninja: | pkgs
	cmake $(CMAKE_GEN) -S $(TOP) -B $(BUILD)/tsan -DCMAKE_BUILD_TYPE=Debug \
		-DSHADDR_SANITIZE=thread >/dev/null

userspace-tsan: pkgs $(BUILD)/tsan/build.ninja
	cmake --build $(BUILD)/tsan

# The main job: the short comparison (every contender here, 2 ranks, 8 B to 4 MiB, the module's
# backends in a guest or, where this kernel loads modules, on the host) into build/report/.
# It measures this machine's calibration first when there is none or it is stale
# (SHADDR_CALIBRATE=0 skips that) and reports which one the contenders read.
run: all mpich
	@$(TOP)/tools/shaddr-compare --short

test: deps all userspace-asan userspace-tsan
	@$(TOP)/tools/shaddr-test unit kmod mpi

# The edit-compile loop: the unit label, the sanitizers' fast subset, the module's suite in one
# guest of 6.1 (no debug kernel needed).
check: all userspace-asan userspace-tsan
	@$(TOP)/tools/shaddr-test check

test-unit: userspace userspace-asan userspace-tsan
	@$(TOP)/tools/shaddr-test unit

test-kmod: deps all
	@$(TOP)/tools/shaddr-test kmod

test-mpi: all
	@$(TOP)/tools/shaddr-test mpi

# Everything: make test plus label kmod-full (each kernel test on every kernel, the VM runner's
# self-tests, DKMS; docs/testing.md has the table), the interposer's whole MPI matrix and the
# applications (hours on 2 cores).
test-full: deps all userspace-asan userspace-tsan
	@$(TOP)/tools/shaddr-deps --apps
	@SHADDR_TEST_FULL=1 $(TOP)/tools/shaddr-test unit kmod mpi

# Every MPI test of the interposer: both MPIs, 1-8 ranks, SHADDR_NODES=1 and 2 (hours on 2 cores).
test-mpi-full: all
	@SHADDR_TEST_MPI=full $(TOP)/tools/shaddr-test mpi

# MPI comparison: every contender present here vs the memory-copy limit, into build/report/.
# (tools/shaddr-compare --short is the few-minute version.)
bench: all
	@$(TOP)/tools/shaddr-compare
	@$(TOP)/tools/shaddr-bench-multihost

# Across test hosts (tools/shaddr-hosts: network namespaces with their own hostnames, links
# shaped with tc): stock MPI vs shaddr's hierarchy per collective and size, against the cost
# model; build/report/multihost.md, and its section in build/report/report.md. Part of bench.
.PHONY: bench-multihost
bench-multihost: all
	@$(TOP)/tools/shaddr-bench-multihost

# This machine's calibration: the cost model's curves measured here (tools/shaddr-model
# calibrate), at the path `build/tools/shaddr-info --calibration-path` prints; nothing to do
# while it still names this machine and these MPI builds.
calibrate: all mpich
	@$(TOP)/tools/shaddr-model calibrate

# Patched MPICH (mpich_patch/) in build/mpich; cached in ~/.cache/shaddr/mpich, seconds when warm.
mpich: pkgs $(BUILD)/build.ninja
	@cmake --build $(BUILD) --target shaddr xpmem
	@$(TOP)/tools/shaddr-mpich

# MPICH's test suite and the shaddr checks on it, on the host and (mpich.vm.*) in the guest with
# the module: about 3.5 hours on 2 cores, the whole suite at 8 ranks in the guest being most of it.
test-mpich: all mpich
	@ctest --test-dir $(BUILD) -L mpich --output-on-failure

# Window micro-benchmark (MAP cost per block size, window copy vs memcpy) in the VM.
bench-kmod: all
	@for k in 6.1 6.12; do \
		$(TOP)/tools/shaddr-vm -q --kernel $$k --results $(BUILD)/vm/bench-kmod-$$k \
			-- $(BUILD)/tools/shaddr-window-bench 5 || exit 1; \
	done

# libshaddr core micro-benchmark (registration cache, copy bandwidth vs memcpy per backend, Bcast
# FIFO): cma and shm on the host; segment and window in the VM on both kernels. Results as JSON.
.PHONY: microbench microbench-vm seed001-table
microbench: userspace
	@mkdir -p $(BUILD)/microbench
	$(BUILD)/tools/shaddr-microbench --json $(BUILD)/microbench/host.json

microbench-vm: all
	@for k in 6.1 6.12; do \
		$(TOP)/tools/shaddr-vm -q --kernel $$k --results $(BUILD)/vm/microbench-$$k -- sh -c \
			'$(BUILD)/tools/shaddr-microbench --json "$$SHADDR_VM_RESULTS/microbench.json"' || exit 1; \
	done

# The Bcast segmentation table (message size against SHADDR_CHUNK) measured here, into
# docs/seed001-segmentation.md.
seed001-table: userspace
	@$(TOP)/tools/microbench/seed001-table --build $(BUILD)

checkpatch: pkgs
	@$(TOP)/tools/shaddr-checkpatch

dkms-install: pkgs
	$(TOP)/tools/shaddr-dkms install

dkms-uninstall:
	$(TOP)/tools/shaddr-dkms uninstall

clean:
	rm -rf $(BUILD)
