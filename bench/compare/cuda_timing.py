"""The GPU timing of the microbenchmarks beside it (grouped_gemm.py, fp8_gemms.py)."""
import torch


def timed(fn, iters: int) -> float:
    """Mean milliseconds of fn() over `iters` calls on the current stream, after 3 untimed ones."""
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters
