# The front door: `make` builds (it never installs anything), `make setup` installs what
# is missing (Debian packages, fetched data, npm packages), `make test` and `make run`
# set up what each needs, build, and run every test or start sluiced, `make bench` runs the benchmarks.
BUILD     ?= build
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX    ?= /usr/local
CMAKE_ARGS ?=

.PHONY: all deps setup setup-run build test bench run demo fuzz install deb clean format

all: build

deps:
	@bash scripts/deps.sh

# Everything a test needs beyond Debian packages (fetched data, npm packages, the
# browser and the harnesses the tests drive).
setup: deps
	@for s in scripts/setup.d/*.sh; do [ -f "$$s" ] && bash "$$s" || exit 1; done; true

# What sluiced itself needs to run: the Debian packages and the tokenizer vocabulary
# (none of the tests' npm packages, browser or harnesses).
setup-run: deps
	@bash scripts/setup.d/10-vocab.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: build
	@for b in $(BUILD)/bench/bench_*; do [ -x "$$b" ] && echo "== $$b" && "$$b" || true; done

# libFuzzer targets, built by CMake with clang and -DSL_FUZZ=ON (fuzz/CMakeLists.txt has
# their sources): each runs FUZZ_SECONDS (default 60); new inputs go to
# $(FUZZ_BUILD)/corpus-<target>, crashes to fuzz/<target>/crash-*. The in-tree corpora
# replay in ctest (label fuzz).
FUZZ_BUILD   ?= build-fuzz
FUZZ_TARGETS  = tokenizer estimate timefmt resync usage http api scenario proxy_path state_file
fuzz: setup
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS=-O1 -DSL_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus-$$t; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$${FUZZ_SECONDS:-60} -artifact_prefix=fuzz/$$t/ \
	    $(FUZZ_BUILD)/corpus-$$t fuzz/$$t/corpus || exit 1; \
	done

# Installs what is missing, builds, and serves the lease API on 127.0.0.1:8750 (Ctrl-C stops).
RUN_LISTEN ?= 127.0.0.1:8750
# Builds sluiced alone (not the tests, benchmarks, fuzz replays, simulator or clients it
# does not run): a first `make run` on a fresh clone is a configure and one target.
run: setup-run $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target sluiced
	@echo "== sluiced on http://$(RUN_LISTEN) (memory backend, examples/sluice.yaml); Ctrl-C stops"
	@echo "== first call to try, in another terminal:"
	@echo "   curl -s -X POST http://$(RUN_LISTEN)/v1/leases -H 'content-type: application/json' -d '{\"agent\":\"me\",\"input_tokens\":1000,\"output_tokens\":500,\"wait\":10}'"
	@echo "   (a cold start: the buckets fill over the first minute, so it may wait a moment)"
	@echo "== more in docs/server.md"
	exec $(BUILD)/src/server/sluiced --config examples/sluice.yaml --listen $(RUN_LISTEN)

# sluice-emu, sluiced proxying a pool to it and a small fleet of curl agents; prints the
# dashboard's URL (DEMO_LISTEN, default 127.0.0.1:8750); Ctrl-C stops everything.
demo: setup-run $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target sluiced sluice-emu
	@bash scripts/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Debian packages (sluice, libsluice0, libsluice-client0, libsluice-dev) built with
# debhelper from debian/ into DEB_OUT; installs the packaging tools and fetches the
# vocabulary first when missing (README "Install").
DEB_OUT ?= build-deb
deb: setup-run
	@bash scripts/setup.d/60-deb-tools.sh
	@nice bash scripts/deb.sh $(DEB_OUT)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan $(FUZZ_BUILD) $(DEB_OUT)
