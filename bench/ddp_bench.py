#!/usr/bin/python3
"""DDP step time on gyre and on gloo, side by side (issue: the torch.distributed backend).

Runs examples/torch_ddp.py --spawn N in fresh processes for each (round, N), alternating
which backend trains first, parses each backend's median step time, and prints per N the
medians and the median over rounds of the per-round ratio gyre / gloo, as a Markdown table.

  bench/ddp_bench.py --ranks 2,4 --rounds 3 --steps 200 [--out bench/results/DATE-ddp.md]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "examples", "torch_ddp.py"))
LINE = re.compile(r"^(gyre|gloo)\s+(\d+) ranks\s+(\d+) steps.*median step ([0-9.]+) ms", re.M)


def one_run(n, order, args, env):
    cmd = [sys.executable, EXAMPLE, "--spawn", str(n), "--steps", str(args.steps),
           "--hidden", str(args.hidden), "--backends", ",".join(order)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.job_timeout)
    times = {m.group(1): float(m.group(4)) for m in LINE.finditer(p.stdout)}
    if p.returncode != 0 or len(times) != 2 or "MISMATCH" in p.stdout:
        raise SystemExit("ddp_bench: %s failed (exit %d):\n%s\n%s"
                         % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return times, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--job_timeout", type=float, default=600)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    env = dict(os.environ)
    build_python = os.path.join(HERE, "..", "build", "python")
    env["PYTHONPATH"] = build_python + os.pathsep + env.get("PYTHONPATH", "")
    start = time.time()
    load0 = os.getloadavg()
    rows, commands = [], []
    for n in [int(x) for x in args.ranks.split(",")]:
        per = {"gyre": [], "gloo": []}
        ratios = []
        for r in range(args.rounds):
            order = ["gyre", "gloo"] if r % 2 == 0 else ["gloo", "gyre"]
            times, cmd = one_run(n, order, args, env)
            commands.append(cmd)
            for b in per:
                per[b].append(times[b])
            ratios.append(times["gyre"] / times["gloo"])
        rows.append((n, statistics.median(per["gyre"]), statistics.median(per["gloo"]),
                     statistics.median(ratios), min(ratios), max(ratios)))
    load1 = os.getloadavg()
    lines = [
        "# DDP step time, gyre vs gloo: %s" % time.strftime("%Y-%m-%dT%H:%M"),
        "",
        "Produced by `bench/ddp_bench.py --ranks %s --rounds %d --steps %d --hidden %d` in %.0f s."
        % (args.ranks, args.rounds, args.steps, args.hidden, time.time() - start),
        "Each (round, ranks) is one fresh `examples/torch_ddp.py --spawn N` job that trains the",
        "same model with both backends (the order alternates between rounds) and checks that",
        "their parameters agree. Ratio: per round, then the median over rounds [range].",
        "",
        "- Machine: %d CPUs; load average %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end."
        % ((os.cpu_count() or 0,) + tuple(load0) + tuple(load1)),
        "",
        "| ranks | gyre median step | gloo median step | gyre / gloo |",
        "|---|---|---|---|",
    ]
    for n, gy, gl, ratio, lo, hi in rows:
        lines.append("| %d | %.2f ms | %.2f ms | %.2f [%.2f-%.2f] |" % (n, gy, gl, ratio, lo, hi))
    unique = list(dict.fromkeys(commands))  # each (ranks, order) once
    lines += ["", "Command lines (one job each):", ""] + ["- `%s`" % c for c in unique]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
