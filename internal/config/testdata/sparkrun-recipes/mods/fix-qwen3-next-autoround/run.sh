#!/bin/sh
# Test stand-in for the eugr mod fix-qwen3-next-autoround (the real mod is not in
# spark-arena/recipe-registry; sparkrun falls back to the eugr registry).
# sparklane copies this directory to /workspace/mods/fix-qwen3-next-autoround and runs it.
echo "mod fix-qwen3-next-autoround applied"
