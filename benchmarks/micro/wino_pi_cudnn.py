# cuDNN's forward and input gradient on the layers of wino_pi.cu, timed the same way (10 calls
# captured in a CUDA graph, the median of 7 replays' event time a call): python3 wino_pi_cudnn.py
import torch, torch.nn.functional as F, statistics
torch.backends.cudnn.benchmark = True
layers = [("conv1_2", 64, 64, 224), ("conv2_1", 64, 128, 112), ("conv2_2", 128, 128, 112),
          ("conv3_1", 128, 256, 56), ("conv3_2", 256, 256, 56), ("conv4_1", 256, 512, 28),
          ("conv4_2", 512, 512, 28), ("conv5", 512, 512, 14)]
def graph_ms(fn):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(10): fn()
    g.replay(); torch.cuda.synchronize()
    v = []
    for _ in range(7):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize(); v.append(a.elapsed_time(b) / 10)
    return statistics.median(v)
for dt, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
    for N in (8, 64):
        for lname, C, K, H in layers:
            x = torch.randn(N, C, H, H, device="cuda", dtype=dt)
            w = torch.randn(K, C, 3, 3, device="cuda", dtype=dt)
            b = torch.randn(K, device="cuda", dtype=dt)
            gy = torch.randn(N, K, H, H, device="cuda", dtype=dt)
            f = graph_ms(lambda: F.conv2d(x, w, b, padding=1))
            ig = graph_ms(lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False]))
            print(f"{name} {lname:8s} N{N:<3d} cudnn fwd {f:.4f} ms igrad {ig:.4f} ms", flush=True)
