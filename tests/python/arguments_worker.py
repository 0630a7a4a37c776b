"""One rank of arguments_test.py: argv = rank size dir. Timeouts and op/dtype arguments,
each case on every rank in the same order, so that the calls that run still match."""
import math
import sys

import numpy as np

import gyre

rank, size, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
comm = gyre.Comm.embedded(rank, size, "file://" + folder + "/store", job_id="args",
                          timeout=20)


def raises(kind, fn, *texts):
    """fn() must raise exactly `kind` whose message holds every one of `texts`."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        if type(e) is not kind or not all(t in str(e) for t in texts):
            raise AssertionError("rank %d: want %s naming %r, got %s: %s"
                                 % (rank, kind.__name__, texts, type(e).__name__, e))
        return
    raise AssertionError("rank %d: want %s naming %r, nothing raised" % (rank, kind.__name__, texts))


def ones():
    return np.ones(4, np.float32)


# Huge and infinite timeouts mean no limit: the call runs and sums.
for t in (math.inf, 1e300, 1e12):
    assert comm.allreduce(ones(), timeout=t).tolist() == [size] * 4, t
    assert comm.allreduce(ones(), async_op=True).wait(timeout=t).tolist() == [size] * 4, t

# NaN and negative timeouts are refused by name, before anything is sent.
for t, text in ((math.nan, "nan"), (-1, "-1.0"), (-math.inf, "-inf")):
    raises(ValueError, lambda: comm.allreduce(ones(), timeout=t), "timeout", text)
    raises(ValueError, lambda: comm.barrier(timeout=t), "timeout", text)
    work = comm.allreduce(ones(), async_op=True)
    raises(ValueError, lambda: work.wait(timeout=t), "timeout", text)
    assert work.wait().tolist() == [size] * 4  # the call itself went on
# A call's timeout of 0 is no "fail at once" (a collective needs its peers) and no silent
# "the job's default" (that is None): it is refused, naming both. Work.wait(timeout=0) polls.
for call in (lambda: comm.allreduce(ones(), timeout=0), lambda: comm.barrier(timeout=0.0),
             lambda: comm.allreduce(ones(), async_op=True, timeout=0),
             lambda: comm.send(ones(), dst=0, timeout=0), lambda: comm.close(timeout=0)):
    raises(ValueError, call, "timeout must be > 0 seconds, not 0", "None: the job's",
           "wait(timeout=0)")
work = comm.barrier(async_op=True)
while True:
    try:
        work.wait(timeout=0)
        break
    except TimeoutError:
        pass
assert comm.allreduce(ones(), timeout=None).tolist() == [size] * 4
# algorithm=None is the automatic choice, as "" is (it raised TypeError).
assert comm.allreduce(ones(), algorithm=None).tolist() == [size] * 4
gathered = np.empty(4 * size, np.float32)
comm.allgather(ones(), gathered, algorithm=None)
assert gathered.tolist() == [1.0] * (4 * size)

# deterministic is None or -1 (the job's default), False or 0, True or 1; another value is
# refused by name rather than taken for its truth.
for d in (None, -1, 0, 1, False, True, np.int64(1)):
    assert comm.allreduce(ones(), deterministic=d).tolist() == [size] * 4, d
for d, kind in ((5, ValueError), (-2, ValueError), (2 ** 70, ValueError), (1.0, TypeError),
                ("yes", TypeError), (np.float32(1), TypeError)):
    raises(kind, lambda: comm.allreduce(ones(), deterministic=d), "deterministic is " + repr(d),
           "None or -1 (the job's default), False or 0 (off), True or 1 (canonical order)")
    raises(kind, lambda: comm.barrier(deterministic=d), "deterministic is " + repr(d))
raises(ValueError, lambda: gyre.Comm.embedded(rank, size, "file://" + folder + "/unused",
                                              deterministic=5), "deterministic is 5",
       "False or 0 (off), True or 1")
raises(TypeError, lambda: gyre.Comm.embedded(rank, size, "file://" + folder + "/unused",
                                             deterministic=None), "deterministic is None")
raises(ValueError, lambda: gyre.Comm.embedded(rank, size, "file://" + folder + "/unused",
                                              timeout=math.nan), "timeout", "nan")
raises(ValueError, lambda: gyre.Comm.embedded(rank, size, "file://" + folder + "/unused",
                                              rendezvous_timeout=-2), "rendezvous_timeout",
       "-2.0")
raises(ValueError, lambda: gyre.Comm.connect_daemon(folder + "/no.sock", timeout=math.nan),
       "timeout", "nan")

# An op that is neither a name nor a gyre.ReduceOp names itself and the names allowed.
raises(ValueError, lambda: comm.allreduce(ones(), op=99), "99", "sum, prod, min, max")
raises(ValueError, lambda: comm.reduce(ones(), op=-1), "-1", "bxor")
raises(TypeError, lambda: comm.allreduce(ones(), op=None), "None", "sum, prod")
raises(TypeError, lambda: comm.reduce_scatter(np.ones(2 * size, np.float32),
                                              out=np.ones(2, np.float32), op=1.5), "1.5")
raises(ValueError, lambda: comm.allreduce(ones(), op="mean"), "'mean'", "sum, prod")
assert comm.allreduce(np.full(4, rank, np.int32), op=gyre.ReduceOp.MAX).tolist() == [size - 1] * 4
assert comm.allreduce(np.full(4, rank, np.int32), op="min").tolist() == [0] * 4

# An element type gyre does not take names itself and the types it takes.
raises(ValueError, lambda: comm.allreduce(np.ones(4, np.int16)), "'h'", "float32", "uint64")
raises(ValueError, lambda: comm.allreduce(np.ones(4, ">f4")), "'>f'", "native byte order")
raises(ValueError, lambda: comm.allreduce(np.ones(4, np.complex64)), "'Zf'", "int32")
# bool and uint8 are one gyre type, but a sum of uint8 into a bool array would leave bytes
# that are no bool (2), and a bool input into uint8 would not be summed as numbers.
raises(ValueError, lambda: comm.allreduce(np.ones(4, np.uint8), out=np.zeros(4, bool)),
       "element types differ")
raises(ValueError, lambda: comm.allreduce(np.ones(4, bool), out=np.zeros(4, np.uint8)),
       "element types differ")
assert comm.allreduce(np.ones(4, bool), out=np.zeros(4, bool)).tolist() == [True] * 4

# The Comm still works.
assert comm.allreduce(ones()).tolist() == [size] * 4
print("arguments ok on rank %d" % rank, flush=True)
