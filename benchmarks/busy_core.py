"""Training beside other work: the threads the flow chooses for a stage started while another process holds a
core, against one thread and against every core (what the flow gave before it measured the other work).

    python benchmarks/busy_core.py                 # in a workspace with data/models/upstream/base
    python benchmarks/busy_core.py --updates 60 --busy 1

`--busy` processes spin a core each (plain Python loops, started outside this process tree as another user's job
would be); then, side by side with them, thread_layout.py's worker trains the pretrained model (the pretraining's
architecture and the fine-tune's batches, bf16 where the CPU is faster with it) for `--updates` updates with:
the threads the flow gives a lone all-core stage now (`flows.dag.busy_elsewhere` measured, `Dag.launch`), one
thread, and every core. Printed: target tokens/s of each, the CPU, and the ratios chosen / one thread (at least
about 1: the choice never loses to one thread) and every core / one thread (below 1: what taking every core cost).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPIN = "import time\nend = time.time() + float(__import__('sys').argv[1])\nwhile time.time() < end: pass\n"


def spin(seconds: float) -> int:
    """A busy loop outside this process tree for `seconds`; its pid."""
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "$0" {seconds} >/dev/null 2>&1 & echo $!', SPIN],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def main() -> None:
    from benchmarks.thread_layout import run_workers
    from flows.dag import Dag, Stage, busy_elsewhere, cores
    from vocabridge.nmt.precision import describe_cpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--busy", type=int, default=1, help="processes that each keep a core busy")
    args = parser.parse_args()
    n = cores()
    pids = [spin(3600) for _ in range(args.busy)]
    try:
        time.sleep(1.0)
        elsewhere = busy_elsewhere(1.0)
        dag = Dag({"pretrain": Stage("pretrain", all_cores=True)})
        chosen = dict(dag.launch(["pretrain"], set(), {}, n, 2, elsewhere))["pretrain"]
        speed = {threads: run_workers([threads], args.updates, args.warm)[0] for threads in sorted({1, chosen, n})}
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    print(f"CPU: {describe_cpu()}, {n} cores; {args.busy} busy process(es), measured as {elsewhere} core(s) busy "
          f"elsewhere; {args.updates} updates after {args.warm} warm-up")
    for threads, tokens in speed.items():
        label = " (the flow's choice)" if threads == chosen else ""
        print(f"  {threads} thread(s){label}: {tokens:8.0f} target tokens/s")
    print(f"ratio chosen ({chosen}) / 1 thread: {speed[chosen] / speed[1]:.2f}x")
    print(f"ratio every core ({n}) / 1 thread: {speed[n] / speed[1]:.2f}x")


if __name__ == "__main__":
    main()
