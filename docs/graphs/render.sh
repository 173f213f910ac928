#!/usr/bin/env bash
# Redraw every agent's state machine for docs/operations.md, from the compiled graphs.
# Pure Python (no Graphviz); nothing goes over the network.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/tower graph --all --format svg --out-dir docs/graphs
.venv/bin/tower graph --all --format mermaid --out-dir docs/graphs
