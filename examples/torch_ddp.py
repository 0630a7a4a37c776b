"""A small model trained with DistributedDataParallel on gyre, checked against gloo.

Each rank trains the same MLP on its shard of a synthetic regression problem, once with the
gyre backend and once with gloo (the same seeds and data), then rank 0 compares the final
parameters with each other and with a single-process run over the whole batch, and prints
the median DDP step time of both backends.

    python3 examples/torch_ddp.py --spawn 4                # torch.multiprocessing.spawn
    build/bin/gyrerun -n 4 -- /usr/bin/python3 examples/torch_ddp.py   # under gyrerun

At 2 ranks gyre and gloo agree bit for bit (DDP divides each gradient by the world size
before the allreduce, and a two-term sum does not depend on order). At more ranks the
summation order differs between the two libraries, so they agree within --rtol; the
single-process reference (one big batch instead of averaged shards) within --ref-rtol.
The program exits non-zero when a comparison fails. Put the build's python/ folder on
PYTHONPATH (e.g. PYTHONPATH=build/python).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(args):
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(),
                         nn.Linear(args.hidden, args.hidden), nn.Tanh(),
                         nn.Linear(args.hidden, 1))


def batch(args, step, world_size):
    """The whole batch of one step (every rank's shard, in rank order)."""
    g = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(world_size * args.batch, args.features, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * x[:, :1]
    return x, y


def train_ddp(args, rank, world_size, backend, init_file):
    if backend == "gyre":
        import gyre.distributed
        gyre.distributed.configure(deterministic=args.deterministic)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank,
                            world_size=world_size)
    model = DDP(make_model(args))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    times = []
    for step in range(args.steps):
        x, y = batch(args, step, world_size)
        shard = slice(rank * args.batch, (rank + 1) * args.batch)
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[shard]), y[shard])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    params = [p.detach().clone() for p in model.module.parameters()]
    dist.barrier()
    dist.destroy_process_group()
    warm = times[min(10, len(times) - 1):]
    return params, statistics.median(warm), float(loss)


def train_single(args, world_size):
    model = make_model(args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        x, y = batch(args, step, world_size)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def max_rel_diff(a, b):
    """The largest difference in any parameter tensor, relative to that tensor's largest
    magnitude (elementwise ratios blow up on parameters that are near zero)."""
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-12)) for x, y in zip(a, b))


def run(rank, world_size, folder, args):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    results = {}
    for backend in args.backends.split(","):
        results[backend] = train_ddp(args, rank, world_size, backend,
                                     os.path.join(folder, "init-" + backend))
    if rank != 0:
        return
    ok = True
    for backend, (params, step_time, loss) in results.items():
        print("%-4s  %d ranks  %d steps  final loss %.6f  median step %.3f ms"
              % (backend, world_size, args.steps, loss, step_time * 1e3))
    if "gyre" in results and "gloo" in results:
        a, b = results["gyre"][0], results["gloo"][0]
        exact = all(torch.equal(x, y) for x, y in zip(a, b))
        diff = max_rel_diff(a, b)
        print("gyre vs gloo: %s (max relative difference %.3g)"
              % ("bit for bit equal" if exact else "differ", diff))
        ok &= exact if (world_size <= 2 and args.deterministic) else diff <= args.rtol
        print("step time gyre/gloo: %.2f" % (results["gyre"][1] / results["gloo"][1]))
    ref = train_single(args, world_size)
    for backend, (params, _, _) in results.items():
        diff = max_rel_diff(params, ref)
        print("%s vs single process: max relative difference %.3g (tolerance %g)"
              % (backend, diff, args.ref_rtol))
        ok &= diff <= args.ref_rtol
    print("MATCH" if ok else "MISMATCH", flush=True)
    if not ok:
        sys.exit(1)


def spawned(rank, world_size, folder, args):
    run(rank, world_size, folder, args)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spawn", type=int, default=0,
                   help="start this many ranks with torch.multiprocessing.spawn")
    p.add_argument("--backends", default="gyre,gloo")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--deterministic", type=int, default=1,
                   help="gyre's canonical reduction order (1) or its fastest (0)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="gyre vs gloo beyond 2 ranks, relative to each tensor's largest value")
    p.add_argument("--ref-rtol", type=float, default=1e-3,
                   help="DDP vs the single-process reference")
    args = p.parse_args()
    if args.spawn:
        folder = tempfile.mkdtemp(prefix="gyre-ddp-")
        try:
            mp.spawn(spawned, args=(args.spawn, folder, args), nprocs=args.spawn, join=True)
        except mp.ProcessExitedException as e:
            sys.exit("torch_ddp: %s" % e)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    # Under gyrerun: the rank and size come from gyre's environment; the job id names a
    # shared folder for torch's own rendezvous (gloo's, and gyre's when not under gyrerun).
    rank, world_size = int(os.environ["GYRE_RANK"]), int(os.environ["GYRE_WORLD_SIZE"])
    folder = os.path.join(tempfile.gettempdir(), "gyre-ddp-" + os.environ["GYRE_JOB_ID"])
    os.makedirs(folder, exist_ok=True)
    run(rank, world_size, folder, args)


if __name__ == "__main__":
    main()
