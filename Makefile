# Thin wrapper around CMake. `make` builds build/spry and libspry;
# `make test` runs the CTest suite; `make demo` trains a small keypoint model.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure test demo asan clean bench install
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
asan: deps
	@test -f build-asan/CMakeCache.txt || cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSPRY_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && SPRY_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

demo: all
	bash scripts/demo.sh

# Installs the CLI, libspry (.a, .so), the headers and a relocatable spry.pc
# under PREFIX (default /usr/local): make install PREFIX=$$HOME/.local
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan
