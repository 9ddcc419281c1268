#!/bin/sh
# Test stand-in for the mod fix-qwen3.5-autoround: the registry does not carry it
# (official-mods/ is empty at this commit; sparkrun falls back to the eugr
# registry). sparklane copies this directory to /workspace/mods/fix-qwen3.5-autoround.
echo "mod fix-qwen3.5-autoround applied"
