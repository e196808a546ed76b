"""torch.library.opcheck of the three FFT-convolution ops (schema, fake kernels, autograd
registration, AOT dispatch) on every device: both backends, tiled and not, float32 and float16."""
import pytest
import torch

from conv_samples import Case, opcheck_args, opcheck_id, opcheck_specs

SPECS = list(opcheck_specs((torch.float32, torch.float16)))


@pytest.mark.parametrize("spec", SPECS, ids=opcheck_id)
def test_opcheck(device, spec):
    torch.library.opcheck(*opcheck_args(*spec, device=device))


OPCHECK_CASE = Case(2, 2, 3, 5, 4, 3, 2, 1, 1, (8, 8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("variant", ["forward", "input_grad", "weight_grad"])
def test_opcheck_fbfft(device, variant, dtype):
    torch.library.opcheck(*opcheck_args(variant, OPCHECK_CASE, dtype, "all", device, "fbfft"))


# Tiles 3x4 (forward), 4x3 (input grad) and 2x5 (weight grad) of a 7x6 problem: partial tiles.
TILED_CASE = Case(2, 2, 3, 7, 6, 3, 2, 1, 1, (8, 8))
TILES = {"forward": (3, 4), "input_grad": (4, 3), "weight_grad": (2, 5)}


@pytest.mark.parametrize("grads", ["none", "all"])
@pytest.mark.parametrize("backend", ["cufft", "fbfft"])
@pytest.mark.parametrize("variant", ["forward", "input_grad", "weight_grad"])
def test_opcheck_tiled(device, variant, backend, grads):
    torch.library.opcheck(*opcheck_args(variant, TILED_CASE, torch.float32, grads, device,
                                        backend, TILES[variant]))
