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

# libFuzzer targets (clang): each runs FUZZ_SECONDS (default 60); new inputs go to
# build-fuzz/, crashes to fuzz/<target>/crash-*. The in-tree corpora replay in ctest.
fuzz: setup
	@mkdir -p build-fuzz
	@for t in tokenizer estimate; do \
	  clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
	    -DSL_DEFAULT_VOCAB_PATH=\"$(CURDIR)/data/claude.json\" -Iinclude -Isrc/tokenizer \
	    src/tokenizer/*.c fuzz/$$t/fuzz_$$t.c \
	    $$(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc) -o build-fuzz/fuzz_$$t \
	    || exit 1; \
	  mkdir -p build-fuzz/corpus-$$t; \
	  build-fuzz/fuzz_$$t -max_total_time=$${FUZZ_SECONDS:-60} -artifact_prefix=fuzz/$$t/ \
	    build-fuzz/corpus-$$t fuzz/$$t/corpus || exit 1; \
	done

# Installs what is missing, builds, and serves the lease API on 127.0.0.1:8750 (Ctrl-C stops).
run: setup build
	@echo "== sluiced on http://127.0.0.1:8750 (memory backend, examples/sluice.yaml); Ctrl-C stops"
	@echo "== first call to try, in another terminal:"
	@echo "   curl -s -X POST http://127.0.0.1:8750/v1/leases -d '{\"agent\":\"me\",\"input_tokens\":1000,\"output_tokens\":500}'"
	@echo "== more in docs/server.md"
	exec $(BUILD)/src/server/sluiced --config examples/sluice.yaml --listen 127.0.0.1:8750

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
