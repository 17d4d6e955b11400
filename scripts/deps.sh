#!/usr/bin/env bash
# Installs the Debian packages sluice needs to build and test, only when missing.
# Idempotent: a second run installs nothing. Uses sudo only when not root.
set -euo pipefail

# Why each package is here is in README.md ("Dependencies").
PKGS=(
  build-essential cmake pkg-config
  libcmocka-dev          # unit tests
  libevent-dev           # sluiced: event loop; sluice-emu: HTTP server
  libhttp-parser-dev     # sluiced: HTTP/1.1 request parsing
  libjansson-dev         # JSON with exact 64-bit integers
  libyaml-dev            # configuration file
  libcurl4-openssl-dev   # client library and upstream proxy
  libpcre2-dev           # tokenizer pre-tokenisation regex
  libutf8proc-dev        # tokenizer NFKC normalisation
  libssl-dev             # SHA-256 (checkpoints), TLS (emulator, proxy upstream)
  openssl                # test certificates for the TLS tests
  clang                  # fuzz targets (libFuzzer)
  curl                   # process-level tests
  python3                # process-level tests (standard library only)
  prometheus             # promtool check metrics, and a real scrape in a test
  gnuplot-nox            # sluice sim: the 429s-over-time picture
  redis-server           # the redis backend's tests (started by the tests themselves)
  libhiredis-dev         # the redis backend
  wrk                    # make bench: HTTP load generator
  nginx-light            # make bench: the reference server sluiced is compared with
  strace                 # harness tests: every connection a harness tries is traced
  iproute2               # harness tests: a network namespace with only loopback up
  util-linux             # harness tests: unshare, to enter that namespace
)
# chromium (the dashboard's browser test) is large: scripts/setup.d/40-dashboard-browser.sh
# installs it in the setup step, with the test's npm packages.

. "$(dirname "$0")/apt-install.sh"
sl_apt_install deps.sh "${PKGS[@]}"
