#!/bin/sh
# Test stand-in for the mod nemotron-nano: the registry does not carry it
# (official-mods/ is empty at this commit; sparkrun falls back to the eugr
# registry). sparklane copies this directory to /workspace/mods/nemotron-nano.
echo "mod nemotron-nano applied"
