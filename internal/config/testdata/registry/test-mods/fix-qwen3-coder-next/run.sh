#!/bin/sh
# Test stand-in for the mod fix-qwen3-coder-next: the registry does not carry it
# (official-mods/ is empty at this commit; sparkrun falls back to the eugr
# registry). sparklane copies this directory to /workspace/mods/fix-qwen3-coder-next.
echo "mod fix-qwen3-coder-next applied"
