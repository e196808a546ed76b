"""Host time per call (launch cost, no synchronisation) of each FFT-convolution pass against
cuDNN on a small layer, where the host side dominates.  python3 benchmarks/host_overhead.py"""
import time

import torch
import torch.nn.functional as F


def per_call_us(fn, calls=500):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def main():
    import fastlayers  # noqa: F401
    dev = torch.device("cuda")
    x = torch.randn(1, 8, 16, 16, device=dev)
    w = torch.randn(8, 8, 3, 3, device=dev)
    gy = torch.randn(1, 8, 16, 16, device=dev)
    basis = [18, 18]
    cases = {
        "cudnn fprop": lambda: F.conv2d(x, w, None, 1, 1),
        "fft fprop": lambda: torch.ops.fastlayers.fft_conv2d(x, w, None, [1, 1], basis, False),
        "fft bprop": lambda: torch.ops.fastlayers.fft_conv2d_input_grad(gy, w, [1, 1], basis, False),
        "fft accGrad": lambda: torch.ops.fastlayers.fft_conv2d_weight_grad(gy, x, [1, 1], basis, False),
    }
    for name, fn in cases.items():
        host, total = per_call_us(fn)
        print("%-12s host %.1f us/call, with device %.1f us/call" % (name, host, total))


def print_runtime_calls(fn, reps, top, unit):
    """The CUDA runtime/driver API calls `fn` makes, host time per `unit`, longest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = [(e.cpu_time_total / reps, e.count / reps, e.key) for e in prof.key_averages()
            if e.key.startswith("cu")]
    for t, n, key in sorted(rows, reverse=True)[:top]:
        print("  %8.1f us/%s  x%.1f  %s" % (t, unit, n, key))


def runtime_calls():
    """CUDA runtime/driver API calls made by 20 forward calls (a synchronising one shows here)."""
    dev = torch.device("cuda")
    x = torch.randn(1, 8, 16, 16, device=dev)
    w = torch.randn(8, 8, 3, 3, device=dev)
    fn = lambda: torch.ops.fastlayers.fft_conv2d(x, w, None, [1, 1], [18, 18], False)  # noqa: E731
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    print_runtime_calls(fn, 20, 12, "call")


def module_step_calls():
    """Runtime API calls, allocator traffic and wall time of Conv2d forward+backward on the L4
    layer (TF32 allowed), back to back: nn.Conv2d, then fastlayers.Conv2d with the FFT input
    gradient only, then with fbfft on all three passes (the tuner's choice there)."""
    import fastlayers
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    n = torch.nn.Conv2d(128, 128, 7).to(dev)
    x = torch.randn(128, 128, 16, 16, device=dev, requires_grad=True)
    mods = [("nn", n)]
    for labels in (("native", "fft:16x16", "native"), ("fbfft:16x16",) * 3):
        m = fastlayers.Conv2d(128, 128, 7).to(dev).force_algorithms(*labels)
        mods.append(("fastlayers " + "/".join(labels), m))
    for name, mod in mods:
        step = lambda: mod(x).sum().backward()  # noqa: E731
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()
        t0 = time.perf_counter()
        for _ in range(50):
            step()
        torch.cuda.synchronize()
        t = (time.perf_counter() - t0) / 50 * 1e6
        after = torch.cuda.memory_stats()
        moved = {k: after.get(k, 0) - before.get(k, 0)
                 for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")}
        print("%-40s fwd+bwd back to back: %.1f us/step; allocator over 50 steps: %s"
              % (name, t, moved))
        print_runtime_calls(step, 5, 8, "step")


if __name__ == "__main__":
    main()
    runtime_calls()
    module_step_calls()
