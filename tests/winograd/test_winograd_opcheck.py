"""torch.library.opcheck of the three Winograd ops (schema, fake kernels, autograd registration,
AOT dispatch) on every device: every op, with and without bias and TF32, no input / the first /
every input needing a gradient, float32 and float16."""
import pytest
import torch

from winograd_samples import SMALL_SHAPES, shape_id, tensors

fl = torch.ops.fastlayers


def opcheck_args(variant, tile, shape, dtype, grads, device):
    """The op and its arguments; `first`: the op's first tensor needs a gradient, `all`: every
    tensor does."""
    x, w, b, gy = tensors(shape, dtype, device)
    if grads != "none":
        x.requires_grad_(), gy.requires_grad_()
    if grads == "all":
        w.requires_grad_(), b.requires_grad_()
    pad = list(shape[5:])
    if variant == "forward-transformed":
        return fl.winograd_conv2d.default, (x, w, b, pad, tile, False, False,
                                            fl.winograd_filter_transform(w.detach(), tile))
    return {
        "forward": (fl.winograd_conv2d.default, (x, w, b, pad, tile, False)),
        "forward-nobias-tf32": (fl.winograd_conv2d.default, (x, w, None, pad, tile, True)),
        "filter_transform": (fl.winograd_filter_transform.default, (w, tile)),
        "input_grad": (fl.winograd_conv2d_input_grad.default, (gy, w, pad, tile, False)),
        "weight_grad": (fl.winograd_conv2d_weight_grad.default, (gy, x, pad, tile, False)),
    }[variant]


VARIANT = ("forward", "input_grad", "weight_grad")
# Every op at every grads setting (each at a tile other than the default); without bias with
# TF32; the padding-3 shape (the input gradient's windows start inside grad_output); float16.
# The tile changes no schema, shape or formula: the value tests run every tile.
SPECS = ([(VARIANT[p], t, SMALL_SHAPES[0], torch.float32, g)
          for p, t in ((0, 4), (1, 6), (2, 4)) for g in ("none", "first", "all")]
         + [("forward-nobias-tf32", 6, SMALL_SHAPES[0], torch.float32, g) for g in ("none", "all")]
         + [(VARIANT[p], 2, SMALL_SHAPES[2], torch.float32, "all") for p in range(3)]
         + [(VARIANT[p], 4, SMALL_SHAPES[1], torch.float16, "all") for p in range(3)]
         + [(v, t, SMALL_SHAPES[0], torch.float32, g) for v in ("forward-transformed",
                                                              "filter_transform")
            for t, g in ((4, "none"), (6, "all"))])


def spec_id(spec):
    variant, tile, shape, dtype, grads = spec
    return "%s-t%d-%s-%s-grad=%s" % (variant, tile, shape_id(shape),
                                     str(dtype).replace("torch.", ""), grads)


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_opcheck(device, spec):
    variant, tile, shape, dtype, grads = spec
    torch.library.opcheck(*opcheck_args(variant, tile, shape, dtype, grads, device))
