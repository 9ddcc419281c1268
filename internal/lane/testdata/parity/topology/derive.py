#!/usr/bin/env python3
"""Writes the ring/mesh parity fixtures (testdata/parity/topology/*.json).

Unlike ../derive.py this runs sparkrun's own code: the per-host comm env
comes from sparkrun.orchestration.infiniband.generate_nccl_env (with
topology="ring", sparkrun's name for a switchless 3+ node fabric, which it
also calls a mesh), merged per host through
sparkrun.orchestration.comm_env.ClusterCommEnv, exactly as sparkrun's
detect_ib_for_hosts does with its detection results. The detection
results are what sparkrun's scripts/ib_detect.sh prints for each node of
the test fleet: its RDMA devices (sparklane's hca), their netdevs
(sparklane's ifname), UCX devices as HCA:1, GID index 3, and no separate
default-route interface or management IP (sparklane's ifname is the whole
socket interface list; NODE_IP, the management IP for Ray scripts, is not
rendered by sparklane and is left out of the comparison).

sparkrun is Apache-2.0 (Copyright its authors; spark-arena/sparkrun,
LICENSE); nothing of its code is copied here: this script imports it from
a checkout, and the fixtures hold its output.

Run from internal/lane/testdata/parity/topology with a checkout of
sparkrun at SPARKRUN_COMMIT:
  SPARKRUN_SRC=/path/to/sparkrun/src python3 derive.py
"""
import json
import os
import sys

sys.path.insert(0, os.environ["SPARKRUN_SRC"])
from sparkrun.orchestration.comm_env import ClusterCommEnv  # noqa: E402
from sparkrun.orchestration.infiniband import generate_nccl_env  # noqa: E402

SPARKRUN_COMMIT = "0041b8f8fc1320ffa2e85d2d0ac760ee6be19de7"
ALL4 = ("rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1", "enp1s0f0np0,enp1s0f1np1,enP2p1s0f0np0,enP2p1s0f1np1")
TWO = ("rocep1s0f1,roceP2p1s0f1", "enp1s0f1np1,enP2p1s0f1np1")

CASES = {
    # sparkrun's 3-node mesh recipe (pp 3), on three Sparks in a ring; the
    # third names only its two cabled ports.
    "ring3": ("experimental-recipes/qwen3.5/vllm-mesh/qwen3.5-397b-a17b-int4-autoround-3x-vllm.yaml", [ALL4, ALL4, TWO]),
    # a 4-node recipe (tp 4) on four Sparks in a ring.
    "ring4": ("experimental-recipes/eugr-vllm/minimax-m2.5-4x-vllm.yaml", [ALL4, ALL4, ALL4, TWO]),
}


def ib_info(hca, ifname):
    return {
        "IB_DETECTED": "1",
        "DETECTED_HCA_LIST": hca,
        "DETECTED_NET_LIST": ifname,
        "DETECTED_UCX_LIST": ",".join(h + ":1" for h in hca.split(",")),
        "DETECTED_GID_INDEX": "3",
    }


def main():
    for name, (recipe, nodes) in CASES.items():
        hosts = ["192.168.100.1%d" % (i + 1) for i in range(len(nodes))]
        per_host = {h: generate_nccl_env(ib_info(*n), topology="ring") for h, n in zip(hosts, nodes)}
        comm = ClusterCommEnv.from_per_host(per_host)
        fx = {
            "sparkrun_commit": SPARKRUN_COMMIT,
            "recipe": recipe,
            "topology": "ring",
            "nodes": [{"name": "dgx%d" % (i + 1), "address": h, "hca": n[0], "ifname": n[1]} for i, (h, n) in enumerate(zip(hosts, nodes))],
            "ranks": [{"host": h, "comm_env": comm.get_env(h)} for h in hosts],
        }
        with open(name + ".json", "w") as f:
            json.dump(fx, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
