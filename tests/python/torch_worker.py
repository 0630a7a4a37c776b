"""One rank of torch_test.py: argv = rank size dir scenario. Every collective runs through
the gyre backend (the default group) and through gloo (a second group over the same ranks)
on the same inputs; integer results must be equal."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import gyre
import gyre.distributed

rank, size, folder, scenario = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
timeout = datetime.timedelta(seconds=float(os.environ.get("GYRE_TEST_TIMEOUT", "30")))
dist.init_process_group("gyre", init_method="file://" + folder + "/init", rank=rank,
                        world_size=size, timeout=timeout)
assert dist.get_backend() == "gyre"
gloo = dist.new_group(backend="gloo") if scenario == "collectives" else None
R = dist.ReduceOp


def data(n, dtype, seed=0):
    return ((torch.arange(n) * 7 + rank * 3 + seed) % 11 + 1).to(dtype)


def same(name, a, b):
    if not torch.equal(a, b):
        raise AssertionError("%s on rank %d: gyre %s, gloo %s" % (name, rank, a, b))


def both(name, fn):
    """Runs fn(group) for gyre (None: the default group) and gloo; compares the results."""
    got, want = fn(None), fn(gloo)
    if isinstance(got, (list, tuple)):
        for g, w in zip(got, want):
            same(name, g, w)
    else:
        same(name, got, want)


def unsupported(fn, text="gyre does not support"):
    try:
        fn()
    except RuntimeError as e:
        assert text in str(e), str(e)
        return
    raise AssertionError("accepted: expected %r" % text)


def collectives():
    n = 12
    for dtype in (torch.int64, torch.int32, torch.float32, torch.float64):
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if not dtype.is_floating_point:
            ops += [R.BAND, R.BOR, R.BXOR]
        for op in ops:
            def allreduce(g, op=op):
                t = data(n, dtype)
                dist.all_reduce(t, op=op, group=g)
                return t
            both("all_reduce %s %s" % (op, dtype), allreduce)

        # gloo reduces a strided view as if it were dense, so its reference is a dense copy.
        def strided(g):
            m = data(3 * n, dtype).view(n, 3)
            if g is None:
                dist.all_reduce(m[:, 1])  # not contiguous
            else:
                col = m[:, 1].contiguous()
                dist.all_reduce(col, group=g)
                m[:, 1] = col
            return m
        both("all_reduce non-contiguous", strided)

        def broadcast(g):
            t = data(n, dtype)
            dist.broadcast(t, src=size - 1, group=g)
            return t
        both("broadcast", broadcast)

        def reduce(g):
            t = data(n, dtype)
            dist.reduce(t, dst=0, op=R.MAX, group=g)
            return t if rank == 0 else torch.zeros(0)
        both("reduce", reduce)

        def all_gather(g):
            out = [torch.zeros(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(out, data(n, dtype), group=g)
            return out
        both("all_gather", all_gather)

        def all_gather_base(g):
            out = torch.zeros(n * size, dtype=dtype)
            if g is None:
                dist._all_gather_base(out, data(n, dtype))
            else:
                pieces = [torch.zeros(n, dtype=dtype) for _ in range(size)]
                dist.all_gather(pieces, data(n, dtype), group=g)
                out = torch.cat(pieces)
            return out
        both("_all_gather_base", all_gather_base)

        # gloo has no reduce_scatter: its reference is a gloo all_reduce, then this rank's part.
        def reduce_scatter(g):
            inputs = [data(n, dtype, seed=q) for q in range(size)]
            if g is None:
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, inputs)
                return out
            full = torch.cat(inputs)
            dist.all_reduce(full, group=g)
            return full[rank * n:(rank + 1) * n].clone()
        both("reduce_scatter", reduce_scatter)

        def reduce_scatter_base(g):
            full = torch.cat([data(n, dtype, seed=q) for q in range(size)])
            if g is None:
                out = torch.zeros(n, dtype=dtype)
                dist._reduce_scatter_base(out, full)
                return out
            dist.all_reduce(full, group=g)
            return full[rank * n:(rank + 1) * n].clone()
        both("_reduce_scatter_base", reduce_scatter_base)

        def all_to_all_single(g):
            inp = torch.cat([torch.full((2, 3), rank * 100 + q).to(dtype) for q in range(size)])
            out = torch.zeros_like(inp)
            dist.all_to_all_single(out, inp, group=g)
            return out
        both("all_to_all_single", all_to_all_single)

        def all_to_all(g):
            inp = [torch.full((n,), rank * 100 + q).to(dtype) for q in range(size)]
            out = [torch.zeros(n, dtype=dtype) for _ in range(size)]
            if g is None:
                dist.all_to_all(out, inp)
                return out
            flat_out = torch.zeros(n * size, dtype=dtype)
            dist.all_to_all_single(flat_out, torch.cat(inp), group=g)
            return list(flat_out.split(n))
        both("all_to_all", all_to_all)

        def gather(g):
            out = [torch.zeros(n, dtype=dtype) for _ in range(size)] if rank == 0 else None
            dist.gather(data(n, dtype), out, dst=0, group=g)
            return out if rank == 0 else [torch.zeros(0)]
        both("gather", gather)

        def scatter(g):
            src = [data(n, dtype, seed=q) for q in range(size)] if rank == 0 else None
            out = torch.zeros(n, dtype=dtype)
            dist.scatter(out, src, src=0, group=g)
            return out
        both("scatter", scatter)

    # AVG (gloo has none): the sum divided by the world size.
    t = data(n, torch.float64)
    dist.all_reduce(t, op=R.AVG)
    ref = data(n, torch.float64)
    dist.all_reduce(ref, group=gloo)
    assert torch.allclose(t, ref / size), (t, ref / size)
    # PREMUL_SUM: factor times the sum.
    if hasattr(dist, "_make_nccl_premul_sum"):
        t = data(n, torch.float64)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        assert torch.allclose(t, ref * 0.5), (t, ref * 0.5)
    # bool tensors reduce as logical or / and.
    flags = torch.tensor([rank == 0, True, False])
    dist.all_reduce(flags)
    assert flags.tolist() == [True, True, False], flags
    # ...but have no average, and the refusal names their own type.
    unsupported(lambda: dist.all_reduce(flags, op=R.AVG), "AVG is not defined on bool tensors")
    dist.barrier()

    # Asynchronous handles: Work.wait, is_completed, and the Future DDP uses.
    works, tensors = [], []
    for k in range(4):
        tensors.append(torch.full((1000,), k + rank, dtype=torch.int64))
        works.append(dist.all_reduce(tensors[-1], async_op=True))
    fut = works[3].get_future()
    for k in range(3):
        works[k].wait()
        same("async", tensors[k], torch.full((1000,), k * size + size * (size - 1) // 2))
    result = fut.wait()
    same("future", result[0], torch.full((1000,), 3 * size + size * (size - 1) // 2))
    assert all(w.is_completed() for w in works)
    dist.barrier(async_op=True).wait()

    # A tensor whose elements share memory (expand(): stride 0) cannot take a result. It is
    # refused at the call on every rank, as a plain RuntimeError naming the fix (not a
    # GyreError from the worker), and nothing is sent: the next call still matches.
    shared = [
        ("allreduce", lambda: dist.all_reduce(torch.ones(1).expand(4))),
        ("allreduce", lambda: dist.all_reduce(torch.ones(2, 1).expand(2, 3), async_op=True)),
        ("broadcast", lambda: dist.broadcast(torch.ones(1).expand(4), src=0)),
        ("allgather", lambda: dist.all_gather([torch.zeros(1).expand(3) for _ in range(size)],
                                              torch.ones(3))),
        ("reduce_scatter", lambda: dist.reduce_scatter(torch.zeros(1).expand(2),
                                                       [torch.ones(2) for _ in range(size)])),
    ]
    for what, call in shared:
        try:
            call()
        except gyre.GyreError as e:
            raise AssertionError("%s of an expanded tensor: a GyreError, %s" % (what, e))
        except RuntimeError as e:
            for text in ("gyre " + what, "overlapping memory", "stride of 0", ".contiguous()"):
                assert text in str(e), (text, str(e))
        else:
            raise AssertionError("%s of an expanded tensor was accepted" % what)
    t = torch.ones(4)
    dist.all_reduce(t)
    same("all_reduce after the refused calls", t, torch.full((4,), float(size)))

    # configure() takes deterministic as a switch, not any value with a truth.
    for d in (5, 1.0, "yes"):
        try:
            gyre.distributed.configure(deterministic=d)
        except ValueError as e:
            assert "deterministic is %r" % (d,) in str(e), str(e)
        else:
            raise AssertionError("configure(deterministic=%r) was accepted" % (d,))

    # What gyre cannot do says so.
    if size > 1:
        inp, out = torch.zeros(size + 1), torch.zeros(size + 1)
        splits = [2] + [1] * (size - 1)
        unsupported(lambda: dist.all_to_all_single(out, inp, splits, splits))
    if size > 1:
        point_to_point()
    dist.destroy_process_group(gloo)
    print("collectives ok", flush=True)


def point_to_point():
    """send/recv, isend/irecv and batch_isend_irecv through gyre and through gloo."""
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    for dtype in (torch.int64, torch.int32, torch.float64):
        def ring(g):
            got = torch.zeros(9, dtype=dtype)
            if rank % 2 == 0:
                dist.send(data(9, dtype, seed=5), nxt, group=g)
                dist.recv(got, prev, group=g)
            else:
                dist.recv(got, prev, group=g)
                dist.send(data(9, dtype, seed=5), nxt, group=g)
            return got
        both("send/recv %s" % dtype, ring)

    # Every rank posts its receive before its send (batch_isend_irecv), into a strided view,
    # and two tags are received in the other order than sent.
    def posted_first(g):
        m = torch.zeros(10, 3, dtype=torch.int64)
        late = torch.zeros(4, dtype=torch.int64)
        # gloo takes only dense tensors: its reference receives into a dense one.
        into = m[:, 1] if g is None else torch.zeros(10, dtype=torch.int64)
        ops = [dist.P2POp(dist.irecv, into, prev, group=g, tag=1),
               dist.P2POp(dist.isend, data(10, torch.int64, seed=9), nxt, group=g, tag=1)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        m[:, 1] = into
        a = dist.isend(data(4, torch.int64, seed=1), nxt, group=g, tag=2)
        b = dist.isend(data(4, torch.int64, seed=2), nxt, group=g, tag=3)
        first = torch.zeros(4, dtype=torch.int64)
        dist.recv(first, prev, group=g, tag=3)
        dist.recv(late, prev, group=g, tag=2)
        a.wait()
        b.wait()
        return [m, first, late]
    both("batch_isend_irecv", posted_first)
    unsupported(lambda: dist.recv(torch.zeros(1)), "recv from any source")


def mismatch():
    t = torch.ones(4 if rank == 0 else 5)
    try:
        dist.all_reduce(t)
    except gyre.GyreError as e:
        print("GyreError code=%s msg=%s" % (e.code, str(e).replace("\n", " ")), flush=True)
        return
    raise AssertionError("mismatched all_reduce succeeded")


def stall():
    dist.all_reduce(torch.ones(8))
    print("ready", flush=True)
    if rank == size - 1:
        time.sleep(120)  # the harness SIGSTOPs this rank here
    time.sleep(0.5)
    start = time.monotonic()
    work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    try:
        work.wait()
    except gyre.GyreError as e:
        # The Future carries the same verdict.
        try:
            work.get_future().wait()
            raise AssertionError("future completed without the error")
        except RuntimeError as f:
            assert "stalled" in str(f), str(f)
        print("GyreError after=%.1f code=%s msg=%s"
              % (time.monotonic() - start, e.code, str(e).replace("\n", " ")), flush=True)
        return
    raise AssertionError("all_reduce with a stalled rank succeeded")


def interrupt():
    if rank == 1:
        time.sleep(60)  # never joins the call; the harness kills this rank
        return
    print("waiting", flush=True)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(16))
    except KeyboardInterrupt:
        print("interrupted after=%.2f" % (time.monotonic() - start), flush=True)
        os._exit(0)
    raise AssertionError("all_reduce returned")


def group_algorithm():
    """Under GYRE_ALGORITHM=ring: DDP's first calls (a broadcast, a barrier) choose their own
    algorithm, and allreduce runs the ring."""
    t = torch.full((1000,), 5.0) if rank == 0 else torch.zeros(1000)
    dist.broadcast(t, src=0)
    same("broadcast", t, torch.full((1000,), 5.0))
    dist.barrier()
    x = torch.arange(1000, dtype=torch.int64) + rank
    dist.all_reduce(x)
    same("allreduce", x, torch.arange(1000, dtype=torch.int64) * size + size * (size - 1) // 2)
    print("group_algorithm ok", flush=True)


def refused():
    """Rank 0's all_reduce of an int16 tensor (a type gyre does not take) is refused by the
    backend before it is queued, while rank 1 makes the call: the refusal keeps its place in the
    sequence, so rank 1's call fails naming rank 0, and every later call of both ranks meets
    its partner and is exact (before, rank 1's call paired with rank 0's next one and returned
    its data)."""
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(8, dtype=torch.int16))
            raise AssertionError("an int16 all_reduce was accepted")
        dist.all_reduce(torch.ones(8, dtype=torch.int32))
        raise AssertionError("rank %d: the all_reduce rank 0 refused returned" % rank)
    except gyre.GyreError as e:
        assert rank != 0 and "rank 0" in str(e) and "refused" in str(e), str(e)
    except RuntimeError as e:
        assert rank == 0 and "gyre does not support" in str(e), str(e)
    for step in range(2, 5):
        x = torch.full((8,), 10 * step * (rank + 1), dtype=torch.int32)
        dist.all_reduce(x)
        same("all_reduce after the refusal", x,
             torch.full((8,), 10 * step * size * (size + 1) // 2, dtype=torch.int32))
    print("refused ok", flush=True)


def premul_inputs():
    """PREMUL_SUM scales each rank's contribution, never its tensor: reduce leaves every
    non-root input as it was (the root's holds the result) and reduce_scatter its input,
    whether contiguous or strided."""
    premul = dist._make_nccl_premul_sum
    total = float(size * (size + 1) // 2)
    for root in range(size):
        t = torch.full((6,), float(rank + 1))
        dist.reduce(t, dst=root, op=premul(0.5))
        want = torch.full((6,), 0.5 * total) if rank == root else torch.full((6,), float(rank + 1))
        same("reduce PREMUL_SUM to %d" % root, t, want)
        base = torch.full((6, 2), float(rank + 1))
        col = base[:, 0]  # strided
        dist.reduce(col, dst=root, op=premul(0.25))
        want = torch.full((6,), 0.25 * total) if rank == root else torch.full((6,), float(rank + 1))
        same("strided reduce PREMUL_SUM to %d" % root, col, want)
        same("the column beside it", base[:, 1], torch.full((6,), float(rank + 1)))
    inp = torch.full((4 * size,), float(rank + 1))
    out = torch.empty(4)
    dist.reduce_scatter_tensor(out, inp, op=premul(0.5))
    same("reduce_scatter_tensor PREMUL_SUM", out, torch.full((4,), 0.5 * total))
    same("its input", inp, torch.full((4 * size,), float(rank + 1)))
    print("premul_inputs ok", flush=True)


def future_callbacks():
    """A future's `then` callback may make collectives and wait for them (Work.wait, or the
    new call's future), or wait for a call made before it; callbacks run in the order the
    calls complete. Before, callbacks ran on the one thread that runs every call, and such a
    callback hung it for good (no call in progress, so no deadline either)."""
    total = size * (size + 1) // 2

    def blocking(fut):
        x = torch.full((2,), float(rank + 1))
        dist.all_reduce(x)  # Work.wait
        return x

    def by_future(fut):
        x = torch.full((2,), float(rank + 1))
        return dist.all_reduce(x, async_op=True).get_future().wait()[0] * 2

    for cb, want in ((blocking, total), (by_future, 2 * total)):
        t = torch.ones(4)
        got = dist.all_reduce(t, async_op=True).get_future().then(cb).wait()
        same(cb.__name__, got, torch.full((2,), float(want)))
        same(cb.__name__ + ": the first call", t, torch.full((4,), float(size)))

    # Nested: a callback's call has a callback of its own that makes a call.
    def outer(fut):
        y = torch.ones(3)
        inner = dist.all_reduce(y, async_op=True).get_future().then(blocking)
        return inner.wait()[0] + y

    got = dist.all_reduce(torch.ones(1), async_op=True).get_future().then(outer).wait()
    same("nested", got, torch.full((3,), float(total + size)))

    # A callback waiting for a call made after the one it follows.
    a, b = torch.ones(2), torch.full((2,), 3.0)
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, async_op=True)
    got = wa.get_future().then(lambda f: (wb.wait(), b + f.value()[0])[1]).wait()
    same("waits for the next call", got, torch.full((2,), 4.0 * size))

    # Order: callbacks of calls made in turn run in turn.
    seen, futs = [], []
    for k in range(20):
        f = dist.all_reduce(torch.full((8,), float(k)), async_op=True).get_future()
        futs.append(f.then(lambda f, k=k: seen.append(k)))
    torch.futures.wait_all(futs)
    assert seen == list(range(20)), seen

    # Still in step afterwards.
    x = torch.ones(3)
    dist.all_reduce(x)
    same("after", x, torch.full((3,), float(size)))
    print("future_callbacks ok", flush=True)


def powersgd():
    """DDP with torch's PowerSGD comm hook (whose callbacks make collectives and wait for
    them) trains a few steps on gyre exactly as on gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook as P

    gloo = dist.new_group(backend="gloo")
    models = []
    for group in (None, gloo):
        torch.manual_seed(0)
        m = DDP(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)), process_group=group)
        state = P.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        m.register_comm_hook(state, P.powerSGD_hook)
        models.append((m, torch.optim.SGD(m.parameters(), lr=0.05)))
    torch.manual_seed(1 + rank)
    for step in range(5):
        x, y = torch.randn(8, 32), torch.randn(8, 4)
        for m, opt in models:
            opt.zero_grad()
            ((m(x) - y) ** 2).mean().backward()
            opt.step()
    for (name, g), w in zip(models[0][0].named_parameters(), models[1][0].parameters()):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-6), (name, (g - w).abs().max())
    print("powersgd ok", flush=True)


{"collectives": collectives, "premul_inputs": premul_inputs,
 "future_callbacks": future_callbacks, "powersgd": powersgd, "mismatch": mismatch, "stall": stall,
 "interrupt": interrupt, "group_algorithm": group_algorithm, "refused": refused}[scenario]()
sys.stdout.flush()
os._exit(0)
