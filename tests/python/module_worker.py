"""One rank of module_test.py: argv = rank size dir scenario."""
import os
import sys
import time

import numpy as np

import gyre

rank, size, folder, scenario = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
timeout = float(os.environ.get("GYRE_TEST_TIMEOUT", "20"))
comm = gyre.Comm.embedded(rank, size, "file://" + folder + "/store", job_id="pytest",
                          timeout=timeout)
assert comm.rank == rank and comm.size == size and comm.mode == "embedded"


def contribution(r, n, dtype):
    # Small distinct integers per rank and element, exact in every dtype below.
    return ((np.arange(n) * 7 + r * 3 + 1) % 11 + 1).astype(dtype)


def expect(name, got, want):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        raise AssertionError("%s on rank %d: got %s, want %s" % (name, rank, got, want))


def collectives():
    n = 10
    for dtype in (np.int32, np.int64, np.uint8, np.float32, np.float64):
        every = [contribution(r, n, dtype) for r in range(size)]
        ops = {"sum": np.sum, "max": np.max, "min": np.min}
        if dtype != np.uint8:
            ops["prod"] = np.prod
        if np.issubdtype(dtype, np.integer):
            ops["band"] = np.bitwise_and.reduce
            ops["bor"] = np.bitwise_or.reduce
            ops["bxor"] = np.bitwise_xor.reduce
        for op, fn in ops.items():
            want = fn(np.stack(every), axis=0).astype(dtype)
            expect("allreduce " + op, comm.allreduce(contribution(rank, n, dtype), op=op), want)
        if np.issubdtype(dtype, np.floating):
            got = comm.allreduce(contribution(rank, n, dtype), op="avg")
            np.testing.assert_allclose(got, np.mean(np.stack(every), axis=0), rtol=1e-6)
        root = size - 1
        data = contribution(rank, n, dtype)
        expect("broadcast", comm.broadcast(data, root=root), every[root])
        out = np.zeros(n, dtype)
        comm.reduce(contribution(rank, n, dtype), root=0, out=out, op="max")
        if rank == 0:
            expect("reduce", out, np.max(np.stack(every), axis=0))
        gathered = np.zeros(n * size, dtype)
        expect("allgather", comm.allgather(every[rank], gathered), np.concatenate(every))
        big = [contribution(r, n * size, dtype) for r in range(size)]
        piece = np.zeros(n, dtype)
        want = np.sum(np.stack(big), axis=0).astype(dtype)[rank * n:(rank + 1) * n]
        expect("reduce_scatter", comm.reduce_scatter(big[rank], piece), want)
        sent = np.concatenate([np.full(n, rank * 100 + q, dtype) for q in range(size)])
        recv = np.zeros(n * size, dtype)
        want = np.concatenate([np.full(n, q * 100 + rank, dtype) for q in range(size)])
        expect("alltoall", comm.alltoall(sent, recv), want)
        out = np.zeros(n * size, dtype) if rank == 1 % size else None
        comm.gather(every[rank], out, root=1 % size)
        if out is not None:
            expect("gather", out, np.concatenate(every))
        src = np.concatenate(big) if rank == 0 else None
        part = np.zeros(n * size, dtype)
        expect("scatter", comm.scatter(src, part, root=0), big[rank])
    comm.barrier()
    # bytearray, in place, and a 2-D array with an explicit output.
    b = bytearray(b"gyre-%d" % rank)
    expect("bytearray", list(comm.broadcast(b, root=0)), list(b"gyre-0"))
    m = np.ones((3, 4), np.float64) * (rank + 1)
    out = np.empty_like(m)
    comm.allreduce(m, out=out)
    expect("2-D", out, np.full((3, 4), size * (size + 1) / 2))
    expect("input untouched", m, np.full((3, 4), rank + 1.0))
    # Asynchronous handles complete in call order; the outputs are handed back by wait().
    works = [comm.allreduce(np.full(1000, k + rank, np.int64), async_op=True) for k in range(3)]
    works.append(comm.barrier(async_op=True))
    works.append(comm.allgather(np.full(2, rank, np.int32), np.zeros(2 * size, np.int32),
                                async_op=True))
    for k in range(3):
        expect("async allreduce", works[k].wait(timeout=30),
               np.full(1000, k * size + size * (size - 1) // 2))
    works[3].wait()
    expect("async allgather", works[4].wait(), np.repeat(np.arange(size, dtype=np.int32), 2))
    assert all(w.done() for w in works)
    # Per-call options reach gyre.
    comm.allreduce(np.ones(64, np.float32), algorithm="ring")
    assert comm.last()["algorithm"] == "ring" or size == 1, comm.last()
    comm.allreduce(np.ones(64, np.float32), deterministic=True)
    assert comm.last()["algorithm"] == "canonical" or size == 1, comm.last()
    # Argument errors are Python errors before anything is sent.
    for bad in (lambda: comm.allreduce(np.ones((4, 4))[:, 1]),
                lambda: comm.allgather(np.ones(3), np.ones(3 * size + 1)),
                lambda: comm.allreduce(np.ones(3), op="median"),
                lambda: comm.allreduce([1, 2, 3])):
        try:
            bad()
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError("bad argument accepted")
    try:
        comm.allreduce(np.ones(3, np.int32), op="avg")
    except gyre.GyreError as e:
        assert e.code == "InvalidArgument" and "avg" in str(e), (e.code, str(e))
        assert isinstance(e, RuntimeError)
    else:
        raise AssertionError("avg on integers accepted")
    if size > 1:
        point_to_point()
    comm.barrier()
    print("collectives ok", flush=True)


def point_to_point():
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    # Receives posted first, sends after: neither blocks the other.
    got = np.zeros(1000, np.int64)
    r = comm.recv(got, prev, tag=3, async_op=True)
    s = comm.send(contribution(rank, 1000, np.int64), nxt, tag=3, async_op=True)
    expect("irecv", r.wait(timeout=30), contribution(prev, 1000, np.int64))
    s.wait()
    # Blocking, two tags taken in the other order than sent, bytearray payloads.
    w = [comm.send(bytearray(b"tag%d-from%d" % (t, rank)), nxt, tag=t, async_op=True)
         for t in (1, 2)]
    b2, b1 = bytearray(10), bytearray(10)
    comm.recv(b2, prev, tag=2)
    comm.recv(b1, prev, tag=1)
    for x in w:
        x.wait()
    expect("tag order", [bytes(b1), bytes(b2)],
           [b"tag1-from%d" % prev, b"tag2-from%d" % prev])
    assert comm.last()["bytes_recv"] == 10, comm.last()
    # A receive of another size names both sides; the message is consumed by it.
    if rank == 0:
        comm.send(np.ones(4, np.float32), 1)
    elif rank == 1:
        try:
            comm.recv(np.zeros(5, np.float32), 0)
        except gyre.GyreError as e:
            assert e.code == "InvalidArgument" and "count=4" in str(e) and "count=5" in str(e), \
                str(e)
        else:
            raise AssertionError("recv of another size accepted")
    for bad in (lambda: comm.send(np.ones(2), size), lambda: comm.send(np.ones(2), rank),
                lambda: comm.recv(np.ones(2), prev, tag=70000)):
        try:
            bad()
        except gyre.GyreError as e:
            assert e.code == "InvalidArgument", (e.code, str(e))
        else:
            raise AssertionError("bad send/recv accepted")


def mismatch():
    count = 4 if rank == 0 else 5
    try:
        comm.allreduce(np.ones(count, np.float32))
    except gyre.GyreError as e:
        print("GyreError code=%s msg=%s" % (e.code, str(e).replace("\n", " ")), flush=True)
        return
    raise AssertionError("mismatched allreduce succeeded")


def stall():
    comm.allreduce(np.ones(8))
    print("ready", flush=True)
    if rank == size - 1:
        time.sleep(120)  # the harness SIGSTOPs this rank here
    time.sleep(0.5)
    start = time.monotonic()
    try:
        comm.allreduce(np.ones(1 << 16))
    except gyre.GyreError as e:
        print("GyreError after=%.1f code=%s msg=%s"
              % (time.monotonic() - start, e.code, str(e).replace("\n", " ")), flush=True)
        return
    raise AssertionError("allreduce with a stalled rank succeeded")


def interrupt():
    if rank == 1:
        time.sleep(60)  # never joins the call; the harness kills this rank
        return
    print("waiting", flush=True)
    start = time.monotonic()
    try:
        comm.allreduce(np.ones(16), timeout=60)
    except KeyboardInterrupt:
        print("interrupted after=%.2f" % (time.monotonic() - start), flush=True)
        os._exit(0)
    raise AssertionError("allreduce returned")


def abandon():
    """Rank 0 drops a call's Work and buffer, then its Comm, while the call waits for rank 1;
    fresh arrays it then fills must stay as filled when the call completes."""
    global comm
    n = 256
    if rank == 0:
        x = np.ones(n, np.float32)
        w = comm.allreduce(x, async_op=True)
        del w, x
        time.sleep(0.2)
        comm = None
        fresh = [np.full(n, 7.0, np.float32) for _ in range(64)]
        time.sleep(2.5)
        changed = [i for i, y in enumerate(fresh) if not (y == 7.0).all()]
        print("abandon changed=%s" % changed, flush=True)
    else:
        time.sleep(1.0)
        x = np.full(n, 2.0, np.float32)
        comm.allreduce(x)
        print("abandon rank1 got=%s" % x[0], flush=True)


def fork():
    """A child forked from rank 0 is told at once that it cannot use the parent's Comm, and
    exits normally; the parent's Comm goes on working."""
    x = np.ones(4, np.float32)
    comm.allreduce(x)
    if rank == 0:
        pid = os.fork()
        if pid == 0:
            start = time.monotonic()
            try:
                comm.allreduce(np.ones(4, np.float32), timeout=60)
                print("fork child: allreduce returned", flush=True)
            except gyre.GyreError as e:
                print("fork child: after=%.2f msg=%s"
                      % (time.monotonic() - start, str(e).replace("\n", " ")), flush=True)
            sys.exit(0)  # the interpreter's exit destroys the child's copy of the Comm
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("fork child exited status=%d" % status, flush=True)
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("fork child hung", flush=True)
    y = np.full(4, float(rank + 1), np.float32)
    comm.allreduce(y)
    print("fork after=%s" % y[0], flush=True)


{"collectives": collectives, "mismatch": mismatch, "stall": stall,
 "interrupt": interrupt, "abandon": abandon, "fork": fork}[scenario]()
sys.stdout.flush()
os._exit(0)
