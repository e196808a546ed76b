"""References and checks shared by the fbfft tests: fbfft's semantics written with torch.fft."""
import torch

from conv_samples import TRANSFORM_FACTOR, assert_float64_matches, assert_within_bound

SIZES_1D = [2, 4, 8, 16, 32, 64, 128, 256]
SIZES_2D = [(2, 2), (4, 8), (8, 8), (16, 16), (32, 16), (32, 32), (64, 64), (128, 128)]


def window_ref(x, offset, n):
    """x[..., i + offset] for i < n over the last len(n) dims, zeros outside."""
    out = torch.zeros(*x.shape[:-len(n)], *n, dtype=x.dtype, device=x.device)
    src = [slice(None)] * (x.dim() - len(n))
    dst = list(src)
    for o, m, length in zip(offset, n, x.shape[-len(n):]):
        lo, hi = max(0, o), min(length, o + m)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _norm(normalized):
    return "backward" if normalized else "forward"


def torch_rfft(x, n, offset=0):
    return torch.fft.rfft(window_ref(x, (offset,), (n,)), n)


def torch_irfft(X, n, out_size, offset=0, normalized=True):
    return window_ref(torch.fft.irfft(X, n, norm=_norm(normalized)), (offset,), (out_size,))


def torch_rfft2(x, size, offset=(0, 0), transposed=False):
    X = torch.fft.rfft2(window_ref(x, offset, size))
    return X.transpose(-1, -2).contiguous() if transposed else X


def torch_irfft2(X, size, out_size, offset=(0, 0), transposed=False, normalized=True):
    if transposed:
        X = X.transpose(-1, -2)
    return window_ref(torch.fft.irfft2(X, s=size, norm=_norm(normalized)), offset, out_size)


def _compute(t):
    """The precision fbfft computes `t` in: float32 for half storage, else t's own."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _wide(t):
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def check_transform(got, reference, *inputs, what=""):
    """`got` (fbfft on any device) against `reference(*inputs)` by torch.fft on the CPU: float64
    to FLOAT64_BOUND, else within TRANSFORM_FACTOR x torch.fft's own float32 error."""
    cpu = [t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in inputs]
    tensors = [t for t in cpu if isinstance(t, torch.Tensor)]
    ref = reference(*[_wide(t) if isinstance(t, torch.Tensor) else t for t in cpu])
    where = "%s on %s" % (what, got.device.type)
    if tensors[0].dtype in (torch.float64, torch.complex128):
        assert_float64_matches(_real_view(got.cpu()), _real_view(ref), where)
        return
    same = reference(*[_compute(t) if isinstance(t, torch.Tensor) else t for t in cpu])
    assert got.dtype == same.dtype, "%s: dtype %s, torch.fft's %s" % (where, got.dtype, same.dtype)
    assert_within_bound(_real_view(got.cpu()), _real_view(ref), _real_view(same),
                        precision="float32", factor=TRANSFORM_FACTOR, what=where)


def _real_view(t):
    return torch.view_as_real(t.contiguous()) if t.is_complex() else t
