"""The three FFT-convolution passes on the shape matrix, per device and precision, against
PyTorch in float64 within the tolerance rule of conv_samples; where the rule is meant to catch a
wrong kernel (CPU float32, CUDA float16 and bfloat16) each comparison also proves it does: the
output scaled by (1 + MUTATION[precision]) must fail."""
import pytest
import torch

from conv_samples import (DTYPES, Case, check_passes, fbfft_cases, fft_passes, make_tensors,
                          rel_err, sample_cases, skip_unless_supported)

CASES = list(sample_cases("full"))
FBFFT = list(fbfft_cases("full"))
PRECISIONS = ["float32", "tf32", "float16", "bfloat16", "float64"]
# (device, precision) whose every comparison also checks that the rule rejects a scaled output.
MUTATED = {("cpu", "float32"), ("cuda", "float16"), ("cuda", "bfloat16")}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_pytorch_within_its_error(device, precision, case):
    skip_unless_supported(device, precision)
    x, w, b, gy = make_tensors(case, DTYPES[precision], device)
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, tf32=precision == "tf32")
    check_passes(ours, x, w, b, gy, case.padding, precision, case.basis,
                 mutation=(device, precision) in MUTATED, what=str(case))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "tf32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", FBFFT, ids=str)
def test_fbfft_backend_matches_pytorch_within_its_error(precision, case):
    """The fbfft transforms in the same pipeline (power-of-two bases up to 128); on the CPU
    both backends are one pipeline (test_cpu_runs_one_pipeline)."""
    x, w, b, gy = make_tensors(case, DTYPES[precision], "cuda")
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, tf32=precision == "tf32",
                      backend="fbfft")
    for out in ours:
        assert out.dtype == x.dtype and out.device == x.device
    check_passes(ours, x, w, b, gy, case.padding, precision, case.basis,
                 mutation=("cuda", precision) in MUTATED, what="fbfft " + str(case))


# Bases 64 and 128 on fbfft: the frequency-major layout of the GEMMs, windows past the input,
# partial last tiles of the clipped inverse, bias in every storage type. At 128 (the lane
# kernels), C <= 4 takes the small-channel products on row-major spectra (batches and output
# channels that leave partial blocks of 4), C > 4 the staged transposes around the GEMMs.
LANE_CASES = [Case(2, 3, 4, 70, 61, 3, 5, 1, 2, (128, 128)),
              Case(3, 2, 5, 50, 64, 3, 3, 1, 0, (64, 64)),
              Case(1, 4, 3, 97, 100, 7, 5, 3, 2, (128, 128)),
              Case(5, 1, 6, 33, 40, 4, 3, 1, 0, (128, 128)),
              Case(6, 2, 9, 21, 30, 11, 11, 5, 5, (64, 128)),
              Case(2, 6, 5, 70, 61, 3, 5, 1, 2, (128, 128))]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", LANE_CASES, ids=str)
def test_fbfft_large_bases_within_pytorch_error(case, precision):
    x, w, b, gy = make_tensors(case, DTYPES[precision], "cuda")
    ours = fft_passes(x, w, b, gy, case.padding, case.basis, backend="fbfft")
    check_passes(ours, x, w, b, gy, case.padding, precision, case.basis, what="fbfft " + str(case))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=str)
def test_cpu_runs_one_pipeline(dtype):
    """A contract, not a correctness test: the CPU kernel ignores `backend` and `tf32` (no TF32
    on the CPU, one FFT library), tiled or not, so its results are identical for every choice;
    the values are checked once, by the tests above."""
    case = Case(3, 4, 5, 19, 14, 3, 4, 1, 2, (16, 16))
    x, w, b, gy = make_tensors(case, dtype)
    for tile in ((0, 0), (10, 9)):
        base = fft_passes(x, w, b, gy, case.padding, case.basis, tile=tile)
        for tf32, backend in ((False, "fbfft"), (True, "cufft"), (True, "fbfft")):
            other = fft_passes(x, w, b, gy, case.padding, case.basis, tf32, backend, tile)
            for name, o, e in zip(("forward", "input_grad", "weight_grad"), other, base):
                assert o.dtype == dtype, name
                torch.testing.assert_close(o, e, rtol=0, atol=0,
                                           msg="%s tile=%s tf32=%s %s" % (name, tile, tf32,
                                                                          backend))


@pytest.mark.gpu
def test_cuda_float64_equals_cpu():
    """An extra identity: the CUDA pipeline (cuFFT, float64) and the CPU one agree to rounding."""
    case = Case(3, 5, 6, 14, 11, 5, 3, 2, 1, (18, 16))
    tensors = make_tensors(case, torch.float64)
    cpu = fft_passes(*tensors, case.padding, case.basis)
    cuda = fft_passes(*(t.cuda() for t in tensors), case.padding, case.basis)
    for c, g in zip(cpu, cuda):
        assert g.device.type == "cuda" and rel_err(g.cpu(), c) <= 1e-12
    check_passes(cuda, *(t.cuda() for t in tensors), case.padding, "float64", what=str(case))
