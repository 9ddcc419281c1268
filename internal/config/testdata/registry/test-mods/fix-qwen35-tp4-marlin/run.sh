#!/bin/sh
# Test stand-in for the mod fix-qwen35-tp4-marlin: the registry does not carry it
# (official-mods/ is empty at this commit; sparkrun falls back to the eugr
# registry). sparklane copies this directory to /workspace/mods/fix-qwen35-tp4-marlin.
echo "mod fix-qwen35-tp4-marlin applied"
