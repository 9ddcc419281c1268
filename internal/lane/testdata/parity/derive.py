#!/usr/bin/env python3
"""Writes the sparkrun parity fixtures (testdata/parity/*.json).

Not sparkrun's code: an independent restatement of what sparkrun does at
commit SPARKRUN_COMMIT, read from its source, for the recipes below:

- core/recipe.py render_command: {placeholder} text substitution from
  the recipe's defaults (str() of the YAML value), repeated until stable,
  on the stripped command; bash -c then splits it (here: shlex.split).
- runtimes/vllm_distributed.py generate_node_command: replica = tp*pp;
  when > 1, "--nnodes R --node-rank r --master-addr HEAD --master-port
  25000" and "--headless" on workers (init_port default 25000).
- runtimes/sglang.py generate_node_command: "--dist-init-addr HEAD:25000
  --nnodes N --node-rank r" appended on a multi-node launch.
- env = merge(common, cluster, recipe env, extra):
  runtimes/_util.py default_env_hf_offline (HF_HUB_OFFLINE=1,
  TRANSFORMERS_OFFLINE=1); vllm_distributed get_cluster_env
  (NCCL_CUMEM_ENABLE=0, OMP_NUM_THREADS=4); sglang get_cluster_env
  (NCCL_CUMEM_ENABLE=0, SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0);
  base get_extra_env HF_HOME=/cache/huggingface. The per-host comm env
  (orchestration/infiniband.py) comes from detection and is left out.
- docker: orchestration/executor.py EXECUTOR_DEFAULTS (gpus all, ipc host,
  network host, shm 32gb) with core/launcher.py's rootless adjustments
  (privileged off, no-new-privileges, memlock=-1:-1, stack=67108864,
  /dev/infiniband), executor_config.user; primitives.build_volumes binds
  the HF cache home at /cache/huggingface.

Run from internal/lane: python3 testdata/parity/derive.py (the recipes
are read from the registry clone in ../config/testdata/registry)
"""
import json
import re
import shlex

import yaml

SPARKRUN_COMMIT = "0041b8f8fc1320ffa2e85d2d0ac760ee6be19de7"
REGISTRY_COMMIT = "307578001460733fcb9335d0e84f8d3e38e40552"
INIT_PORT = 25000
HOSTS = ["192.168.100.11", "192.168.100.12", "192.168.100.13", "192.168.100.14"]

CASES = {
    "solo-vllm": "experimental-recipes/gemma4/gemma4-26b-a4b-bf16-vllm.yaml",
    "2node-vllm": "official-recipes/minimax-m2.7/minimax-m2.7-awq4-vllm.yaml",
    "4node-vllm": "experimental-recipes/eugr-vllm/minimax-m2.5-4x-vllm.yaml",
    "2node-sglang": "experimental-recipes/minimax-m3/minimax-m3-v0-nvfp4-2x-reap25.yaml",
    "pp3-vllm": "experimental-recipes/qwen3.5/vllm-mesh/qwen3.5-397b-a17b-int4-autoround-3x-vllm.yaml",
    "mods-vllm": "official-recipes/qwen3.6/vllm/qwen3.6-27b-fp8-vllm.yaml",
}


def pystr(v):
    return str(v)


def render(cmd, defaults, model):
    chain = {k: pystr(v) for k, v in defaults.items()}
    chain.setdefault("model", model)
    out = cmd.strip()
    last = None
    while last != out:
        last = out
        out = re.sub(r"\{(\w+)\}", lambda m: chain.get(m.group(1), m.group(0)), out)
    return out


def main():
    for name, rel in CASES.items():
        with open("../config/testdata/registry/" + rel) as f:
            r = yaml.safe_load(f)
        d = r.get("defaults") or {}
        tp = int(d.get("tensor_parallel", 1) or 1)
        pp = int(d.get("pipeline_parallel", 1) or 1)
        n = tp * pp
        base = render(r["command"], d, r["model"])
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if n > 1:
            if r["runtime"] == "sglang":
                env.update(NCCL_CUMEM_ENABLE="0", SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK="0")
            else:
                env.update(NCCL_CUMEM_ENABLE="0", OMP_NUM_THREADS="4")
        env.update({k: pystr(v) for k, v in (r.get("env") or {}).items()})
        env["HF_HOME"] = "/cache/huggingface"
        ranks = []
        for rank in range(n):
            cmd = base
            if n > 1 and r["runtime"] == "sglang":
                cmd += " --dist-init-addr %s:%d --nnodes %d --node-rank %d" % (HOSTS[0], INIT_PORT, n, rank)
            elif n > 1:
                cmd += " --nnodes %d --node-rank %d --master-addr %s --master-port %d" % (n, rank, HOSTS[0], INIT_PORT)
                if rank > 0:
                    cmd += " --headless"
            # bash drops a backslash-newline pair (line continuation) before splitting.
            ranks.append({"host": HOSTS[rank], "argv": shlex.split(cmd.replace("\\\n", "")), "env": env})
        ex = r.get("executor_config") or {}
        docker = {
            "gpus": "all", "ipc": "host", "network": "host", "shm_size": "32gb",
            "privileged": False, "security_opt": ["no-new-privileges"],
            "ulimit": ["memlock=-1:-1", "stack=67108864"], "devices": ["/dev/infiniband"],
            "user": ex.get("user", ""), "volume": "HF_CACHE_HOME:/cache/huggingface",
        }
        mods = [m.removeprefix("mods/") for m in (r.get("mods") or [])]
        pre_exec = []
        for m in mods:
            dest = "/workspace/mods/" + m
            pre_exec += [{"copy_mod": m, "dest": dest},
                         {"run": "export WORKSPACE_DIR=$PWD && cd %s && chmod +x run.sh && ./run.sh" % dest}]
        fx = {"sparkrun_commit": SPARKRUN_COMMIT, "registry_commit": REGISTRY_COMMIT,
              "recipe": rel, "nodes": n, "ranks": ranks, "docker": docker, "pre_exec": pre_exec}
        with open("testdata/parity/%s.json" % name, "w") as f:
            json.dump(fx, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
