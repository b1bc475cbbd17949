# Thin wrapper around CMake. `make` builds build/spry and libspry;
# `make test` runs the CTest suite; `make demo` trains a small keypoint model.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure test demo asan avx2-check fuzz format format-check clean bench install
PREFIX ?= /usr/local

all: deps configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@bash scripts/deps.sh

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
# oneDNN is capped below AMX here: oneDNN 2.6's AMX brgemm micro-kernel
# generator reads one element past the end of a vector of its own
# (skipped_bd_mask in jit_brgemm_amx_uker.cpp; the value is never used).
# Behind glibc's malloc the next bytes are always mapped; ASan's allocator ends
# some chunks on the last mapped byte of a region, and then the read is a
# SIGSEGV inside oneDNN (tests/backends/test_cpu_ops, l1_loss, on AMX machines).
# The release `make test` runs the AMX kernels; without AMX the cap does nothing.
# -O1, as the sanitizers' authors advise: at -O0 the suite took 632 s on a slow
# 2-core Xeon (train.predict_photos 399 s of its 600 s limit, mostly the face
# detector), at -O1 261 s, with the same tests and checks.
asan: deps
	@test -f build-asan/CMakeCache.txt || cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DSPRY_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && SPRY_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ctest --output-on-failure -j $(JOBS)

# The backend and training tests as a CPU without AVX-512 runs them (AMD Zen
# 3, Intel before Skylake-SP): built with -march=haswell, so our own kernels
# take their AVX2 code, and oneDNN held to AVX2 (its 8-channel blocks, no
# bf16). On an AVX-512 machine it is the only run of that code; on an AVX2
# one `make test` already was, and it skips (CI's time on the slower machines).
avx2-check: deps
	@if ! grep -qw avx2 /proc/cpuinfo; then echo "avx2-check: this CPU has no AVX2: skipped"; \
	elif ! grep -qw avx512f /proc/cpuinfo; then echo "avx2-check: this CPU has no AVX-512: make test ran this code: skipped"; else \
	  { test -f build-avx2/CMakeCache.txt || \
	    cmake -S . -B build-avx2 -DCMAKE_BUILD_TYPE=Release -DSPRY_MARCH=haswell >/dev/null; } && \
	  cmake --build build-avx2 -j $(JOBS) && \
	  cd build-avx2 && ONEDNN_MAX_CPU_ISA=AVX2 ctest --output-on-failure -j $(JOBS) -R 'backends|train_e2e'; fi

demo: all
	bash scripts/demo.sh

# Installs the CLI, libspry (.a, .so), the headers and a relocatable spry.pc
# under PREFIX (default /usr/local): make install PREFIX=$$HOME/.local
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

# libFuzzer harnesses of every reader (tests/fuzz/README.md), built with clang
# (-fsanitize=fuzzer,address,undefined) into build-fuzz/fuzz, each run for
# FUZZ_SECONDS from its seed corpus; CI runs a 15 s smoke per harness.
FUZZ_SECONDS ?= 60
FUZZ_NAMES ?=
fuzz:
	@bash scripts/deps.sh fuzz
	@command -v clang >/dev/null && command -v clang++ >/dev/null || \
	  { echo "make fuzz: needs clang and clang++ (Debian: apt-get install clang)" >&2; exit 1; }
	@test -f build-fuzz/CMakeCache.txt || CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
	  -DSPRY_FUZZ=ON -DSPRY_WERROR=OFF -DSPRY_MPI=OFF >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	bash tests/fuzz/run.sh build-fuzz/fuzz $(FUZZ_SECONDS) build-fuzz $(FUZZ_NAMES)

# The one code style (.clang-format, clang-format 14 as Debian bookworm ships
# it) over src/ and include/: `make format` applies it, `make format-check`
# (CI) fails on any file it would change.
FORMAT_FILES = $(shell git ls-files --cached --others --exclude-standard 'src/*.c' 'src/*.h' 'src/*.cc' 'include/*.h')
format:
	@bash scripts/deps.sh format
	@clang-format -i $(FORMAT_FILES) && echo "format: $(words $(FORMAT_FILES)) files"

format-check:
	@bash scripts/deps.sh format
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format-check: $(words $(FORMAT_FILES)) files in the code style"

clean:
	rm -rf $(BUILD) build-asan build-avx2 build-fuzz
