"""Where a build's Ray tasks run: a small CPU share each, spread over the nodes with CPUs in turn.

Kept apart from the stages (no import of them) so that a task's worker process imports little before it starts.
"""

from __future__ import annotations

from typing import Any

# A token CPU share, as the assembler's (indexing.assembler_num_cpus): it keeps a task off a head started with
# --num-cpus=0, and it never fills a node. On one node of 2 CPUs (tests, `make demo`) the assembler (0.05) and
# the embedding pool it drives (2 x 0.8) hold 1.65 CPUs while it waits on them; the two tasks beside it add 0.1
# (the knowledge merge's tasks end before the pool starts), so the pool's actors always fit beside them (Ray 2.60
# stalls for good when the CPUs that actors and tasks ask for fill a node while something waits on them).
# Hyperbolic training and postings are single-threaded Python and torch at one thread (Ray's OMP_NUM_THREADS for
# a fractional share), as they were in the assembler.
TASK_NUM_CPUS = 0.05


def placement(nth: int, pinned: bool, elsewhere: bool = True) -> dict[str, Any]:
    """The Ray options of the `nth` task a build sends out: a soft affinity to a node with CPUs, the nodes offering
    the most first, taken in turn, so that tasks spread over a cluster; with `elsewhere`, other than this process's
    node (the assembler's), so that a task's memory and CPU come from elsewhere where a cluster has it. `pinned`:
    the checkpoint is on this node's disk only (an index on object storage), so are the tasks."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    if pinned:
        # No CPU share: the node running the command may be a head that offers none (as its assembler).
        return {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(here, soft=False)}
    nodes = sorted((n for n in ray.nodes() if n["Alive"] and not (elsewhere and n["NodeID"] == here)
                    and n["Resources"].get("CPU", 0) >= TASK_NUM_CPUS),
                   key=lambda n: (-n["Resources"]["CPU"], n["NodeID"]))
    if not nodes:
        return {"num_cpus": TASK_NUM_CPUS}
    node = nodes[nth % len(nodes)]["NodeID"]
    return {"num_cpus": TASK_NUM_CPUS, "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)}
