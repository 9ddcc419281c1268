#!/bin/sh
# Test stand-in for the eugr mod fix-qwen3-coder-next (the real mod is not in
# spark-arena/recipe-registry; sparkrun falls back to the eugr registry).
# sparklane copies this directory to /workspace/mods/fix-qwen3-coder-next and runs it.
echo "mod fix-qwen3-coder-next applied"
