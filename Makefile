# The front door: `make` builds, `make test` installs what is missing, builds and runs
# every test, `make bench` runs the benchmarks, `make run` starts sluiced.
BUILD     ?= build
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX    ?= /usr/local
CMAKE_ARGS ?=

.PHONY: all deps setup build test bench run fuzz install clean format

all: build

deps:
	@bash scripts/deps.sh

# Everything a test or `make run` needs beyond Debian packages (fetched data, npm packages).
setup: deps
	@for s in scripts/setup.d/*.sh; do [ -f "$$s" ] && bash "$$s" || exit 1; done; true

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: build
	@for b in $(BUILD)/bench/bench_*; do [ -x "$$b" ] && echo "== $$b" && "$$b" || true; done

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan
