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
FUZZ_CC    = clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined
FUZZ_TOK   = -DSL_DEFAULT_VOCAB_PATH=\"$(CURDIR)/data/claude.json\" -Iinclude -Isrc/tokenizer \
             src/tokenizer/*.c $$(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc)
FUZZ_ENG   = -Iinclude src/engine/*.c -lm
FUZZ_API   = $(addprefix src/server/,http.c leases.c report_bounds.c state.c events.c json_in.c \
             jsonfmt.c config.c metrics.c idmap.c) src/backend/backend.c src/backend/memory.c \
             -Isrc/server -Isrc/backend $(FUZZ_ENG) $$(pkg-config --cflags --libs jansson libevent yaml-0.1)
fuzz: setup
	@mkdir -p build-fuzz
	$(FUZZ_CC) fuzz/tokenizer/fuzz_tokenizer.c $(FUZZ_TOK) -o build-fuzz/fuzz_tokenizer
	$(FUZZ_CC) fuzz/estimate/fuzz_estimate.c $(FUZZ_TOK) -o build-fuzz/fuzz_estimate
	$(FUZZ_CC) fuzz/timefmt/fuzz_timefmt.c $(FUZZ_ENG) -o build-fuzz/fuzz_timefmt
	$(FUZZ_CC) fuzz/resync/fuzz_resync.c $(FUZZ_ENG) -o build-fuzz/fuzz_resync
	$(FUZZ_CC) fuzz/usage/fuzz_usage.c src/server/proxy_usage.c -Isrc/server -Isrc/backend \
	  $(FUZZ_ENG) $$(pkg-config --cflags --libs jansson libevent) -o build-fuzz/fuzz_usage
	$(FUZZ_CC) fuzz/http/fuzz_http.c src/server/http_parse.c -Isrc/server -lhttp_parser \
	  -o build-fuzz/fuzz_http
	$(FUZZ_CC) fuzz/api/fuzz_api.c $(FUZZ_API) -o build-fuzz/fuzz_api
	@for t in tokenizer estimate timefmt resync usage http api; do \
	  mkdir -p build-fuzz/corpus-$$t; \
	  build-fuzz/fuzz_$$t -max_total_time=$${FUZZ_SECONDS:-60} -artifact_prefix=fuzz/$$t/ \
	    build-fuzz/corpus-$$t fuzz/$$t/corpus || exit 1; \
	done

# Installs what is missing, builds, and serves the lease API on 127.0.0.1:8750 (Ctrl-C stops).
RUN_LISTEN ?= 127.0.0.1:8750
run: setup build
	@echo "== sluiced on http://$(RUN_LISTEN) (memory backend, examples/sluice.yaml); Ctrl-C stops"
	@echo "== first call to try, in another terminal:"
	@echo "   curl -s -X POST http://$(RUN_LISTEN)/v1/leases -d '{\"agent\":\"me\",\"input_tokens\":1000,\"output_tokens\":500}'"
	@echo "== more in docs/server.md"
	exec $(BUILD)/src/server/sluiced --config examples/sluice.yaml --listen $(RUN_LISTEN)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
