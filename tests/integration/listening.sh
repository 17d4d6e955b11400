#!/usr/bin/env bash
# Sourced by the shell tests: sl_wait_listening LOG PID prints the port of the
# "listening on http://127.0.0.1:PORT" line sluiced writes to LOG, waiting up to 10 s while
# PID runs; prints nothing when sluiced exited or never said it.
sl_wait_listening() {
  local log=$1 pid=$2 _
  for _ in $(seq 1 100); do
    grep -q "listening on" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true
}
