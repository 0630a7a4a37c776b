"""gyre: collectives that never hang.

    import gyre
    comm = gyre.Comm.from_environment()          # under gyrerun
    comm.allreduce(numpy_array)                  # in place; raises gyre.GyreError on failure

The torch.distributed backend lives in gyre.distributed (import it, then
torch.distributed.init_process_group("gyre", ...)). See docs/python.md.
"""
from gyre._gyre import Comm, GyreError, ReduceOp, Work

__all__ = ["Comm", "GyreError", "ReduceOp", "Work"]
