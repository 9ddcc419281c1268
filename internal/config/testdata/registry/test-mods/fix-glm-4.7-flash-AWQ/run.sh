#!/bin/sh
# Test stand-in for the mod fix-glm-4.7-flash-AWQ: the registry does not carry it
# (official-mods/ is empty at this commit; sparkrun falls back to the eugr
# registry). sparklane copies this directory to /workspace/mods/fix-glm-4.7-flash-AWQ.
echo "mod fix-glm-4.7-flash-AWQ applied"
