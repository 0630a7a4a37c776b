#!/usr/bin/env python3
"""Before/after comparison of two gyre builds, interleaved, in BENCH.md's method.

Every (round, p, mode, build) is a fresh gyrerun job of gyre-bench; within a round the builds
alternate, and each round starts with the other build, so drift hits both alike. Prints, per
(mode, p, size), each build's median of the per-round medians and the median over rounds of
the per-round ratio B / A. With --mpi it runs Open MPI's allreduce (gyre-bench-mpi, forced
onto TCP as compare.sh does) in the same rotation and adds the ratio B / Open MPI.

  bench/ab_latency.py --a /tmp/base/bin --b build/bin --rounds 5 --ranks 2,4 \\
      --modes embedded,daemon --sizes 4,1K,64K,1M --jsonl out.jsonl

With --a and --b the same build, --a_algo and --b_algo compare two algorithms instead, and
--b_mode the two modes (the rows are named by the --a jobs' mode):

  bench/ab_latency.py --a build/bin --b build/bin --a_name chain --b_name binomial \\
      --a_algo chain --b_algo binomial --op broadcast --ranks 4 --modes embedded
  bench/ab_latency.py --a build/bin --b build/bin --a_name embedded --b_name daemon \\
      --modes embedded --b_mode daemon --sizes 16M,64M

--a_flags and --b_flags add gyrerun flags to one side's jobs: --b_flags=--tune measures online
tuning against the model's choice alone.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_table  # noqa: E402  (placement_cut, placement)
from compare import cpu_probe  # noqa: E402  (gyre-machine-limits --probe)


def run_job(cmd, timeout):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           text=True)
    except subprocess.TimeoutExpired:
        return False, "timed out after %ss" % timeout
    return r.returncode == 0, r.stdout


def read_jsonl(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="bin/ folder of the build before")
    ap.add_argument("--b", required=True, help="bin/ folder of the build after")
    ap.add_argument("--a_name", default="before")
    ap.add_argument("--b_name", default="after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--modes", default="embedded,daemon")
    ap.add_argument("--sizes", default="4,1K,64K,1M")
    ap.add_argument("--op", default="allreduce")
    ap.add_argument("--algo", default="auto")
    ap.add_argument("--a_algo", help="the algorithm the --a jobs force (default --algo)")
    ap.add_argument("--b_algo", help="the algorithm the --b jobs force (default --algo); "
                    "with --a and --b the same folder, this compares two algorithms")
    ap.add_argument("--b_mode", help="run the --b jobs in this mode whatever the row's (e.g. "
                    "--modes embedded --b_mode daemon: the daemon's cost over embedded)")
    ap.add_argument("--a_flags", default="", help="extra gyrerun flags of the --a jobs")
    ap.add_argument("--b_flags", default="", help="extra gyrerun flags of the --b jobs (e.g. "
                    "--tune)")
    ap.add_argument("--mpi", action="store_true", help="also run Open MPI (embedded rows only)")
    ap.add_argument("--no_pin", action="store_true")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--jsonl", help="append every measured row here")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="gyre-ab-")
    ranks = [int(x) for x in args.ranks.split(",")]
    modes = args.modes.split(",")
    builds = [(args.a_name, args.a), (args.b_name, args.b)]
    if args.a_name == args.b_name:
        ap.error("--a_name and --b_name must differ")
    algo_of = {args.a_name: args.a_algo or args.algo, args.b_name: args.b_algo or args.algo}
    flags_of = {args.a_name: shlex.split(args.a_flags), args.b_name: shlex.split(args.b_flags)}
    pin = [] if args.no_pin else ["--pin"]
    mpirun = shutil.which("mpirun")
    rows = []
    for rnd in range(args.rounds):
        for p in ranks:
            for mode in modes:
                order = builds if rnd % 2 == 0 else builds[::-1]
                jobs = [(name, bindir) for name, bindir in order]
                if args.mpi and mode == "embedded" and mpirun:
                    jobs.insert(1, ("openmpi", None))
                for name, bindir in jobs:
                    out = os.path.join(work, "r%d-p%d-%s-%s.jsonl" % (rnd, p, mode, name))
                    if bindir is None:
                        mpi_bench = os.path.join(args.b, "gyre-bench-mpi")
                        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to",
                               "none", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                               "--mca", "btl_tcp_if_include", "lo", "--mca",
                               "oob_tcp_if_include", "lo", "-np", str(p), mpi_bench,
                               "--algo_label", "default", "--op", args.op, "--sizes",
                               args.sizes, "--jsonl", out] + pin
                    else:
                        job_mode = args.b_mode if args.b_mode and name == args.b_name else mode
                        cmd = [os.path.join(bindir, "gyrerun"), "-n", str(p), "--mode", job_mode,
                               "--job_timeout", str(args.timeout - 5)] + flags_of[name] + [
                               "--",
                               os.path.join(bindir, "gyre-bench"), "--op", args.op, "--algo",
                               algo_of[name], "--sizes", args.sizes, "--jsonl", out] + pin
                    before = cpu_probe(args.b)
                    ok, text = run_job(cmd, args.timeout)
                    probes = [before, cpu_probe(args.b)]
                    if not ok:
                        print("job failed: %s\n%s" % (" ".join(cmd), text[-2000:]),
                              file=sys.stderr)
                        continue
                    for row in read_jsonl(out):
                        row["build"] = name
                        row["mode"] = mode  # the table's row; job_mode is how it ran
                        row["job_mode"] = mode if bindir is None else job_mode
                        row["round"] = rnd
                        row["cpu_rt_ns"] = probes
                        rows.append(row)
        print("round %d of %d done" % (rnd + 1, args.rounds), file=sys.stderr)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    shutil.rmtree(work, ignore_errors=True)

    def cell(build, mode, p, size):
        return {r["round"]: r for r in rows if r["build"] == build and r["mode"] == mode and
                r["ranks"] == p and r["bytes"] == size}

    cut = compare_table.placement_cut([x for r in rows for x in (r.get("cpu_rt_ns") or [])])

    def same_place(x, y, want):
        where = compare_table.placement(x.get("cpu_rt_ns"), cut)
        return where == want and where == compare_table.placement(y.get("cpu_rt_ns"), cut)

    sizes = sorted({r["bytes"] for r in rows})
    a, b = args.a_name, args.b_name
    # One placement all along reads as "near" (placement_cut needs a 2x spread): the probe's
    # median says which it was.
    if cut == float("inf"):
        print("- the probe never varied 2x, so every job counts as \"near\" below, whichever "
              "placement it was:")
    for where in ("near", "far", "changed"):
        probes = [x for r in rows for x in (r.get("cpu_rt_ns") or [])
                  if compare_table.placement(r.get("cpu_rt_ns"), cut) == where]
        if probes:
            print("- %s: %d jobs, CPU round trip median %d ns" %
                  (where, len({(r["round"], r["ranks"], r["mode"], r["build"]) for r in rows
                               if compare_table.placement(r.get("cpu_rt_ns"), cut) == where}),
                   statistics.median(probes)))
    print("| mode | p | size | %s median | %s median | %s / %s | the same, both near | "
          "the same, both far | %s algo | Open MPI | %s / Open MPI |" % (a, b, b, a, b, b))
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mode in modes:
        for p in ranks:
            for size in sizes:
                ca, cb = cell(a, mode, p, size), cell(b, mode, p, size)
                cm = cell("openmpi", "embedded", p, size) if mode == "embedded" else {}
                if not ca or not cb:
                    continue
                ma = statistics.median(r["median_us"] for r in ca.values())
                mb = statistics.median(r["median_us"] for r in cb.values())
                ratios = [cb[k]["median_us"] / ca[k]["median_us"] for k in ca if k in cb]
                # Only rounds where both jobs ran in one placement, the same (see
                # compare_table.placement): the host's moves cost up to 2x by themselves,
                # and can change which of two algorithms is faster.
                def matched(want):
                    m = [cb[k]["median_us"] / ca[k]["median_us"] for k in ca
                         if k in cb and same_place(ca[k], cb[k], want)]
                    return ("%.2f (%d of %d rounds)" % (statistics.median(m), len(m),
                                                        len(ratios))
                            if m else "- (0 of %d rounds)" % len(ratios))
                algo = ",".join(sorted({r["algo"] for r in cb.values()}))
                mpi, mpi_ratio = "", ""
                if cm:
                    mpi = "%.1f us" % statistics.median(r["median_us"] for r in cm.values())
                    mr = [cb[k]["median_us"] / cm[k]["median_us"] for k in cm if k in cb]
                    if mr:
                        mpi_ratio = "%.2f" % statistics.median(mr)
                label = "%d B" % size if size < 1024 else (
                    "%d KiB" % (size // 1024) if size < 1 << 20 else "%d MiB" % (size >> 20))
                print("| %s | %d | %s | %.1f us | %.1f us | %.2f [%.2f-%.2f] | %s | %s | %s | %s "
                      "| %s |" % (mode, p, label, ma, mb, statistics.median(ratios),
                                  min(ratios), max(ratios), matched("near"), matched("far"),
                                  algo, mpi, mpi_ratio))


if __name__ == "__main__":
    main()
