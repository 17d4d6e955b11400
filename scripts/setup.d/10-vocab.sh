#!/usr/bin/env bash
# Setup step: the tokenizer vocabulary (data/claude.json), fetched once.
exec bash "$(dirname "$0")/../fetch-vocab.sh"
