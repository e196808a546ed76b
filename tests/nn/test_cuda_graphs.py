"""A training step with fastlayers layers captured in a CUDA graph and replayed: the tuned choices
run inside the graph, and replays train exactly as eager steps do."""
import copy

import pytest
import torch
from torch import nn

import fastlayers
from fastlayers import tuner
from conv_samples import RecordOps


def cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 5, padding=2), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).cuda()


def trainer(m, loss_of):
    """A training step of `m` (SGD) on fixed-shape inputs: loss_of(m(xs), ys), backward, step."""
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def step(xs, ys):
        opt.zero_grad(set_to_none=False)
        loss = loss_of(m(xs), ys)
        loss.backward()
        opt.step()
        return loss
    return step


def warm_and_capture(step, eager_step, x, y):
    """Three warm-up steps of each on a side stream (tuning, plans, workspaces before capture),
    then `step` captured on static copies of x, y: (graph, static x, static y, static loss, the
    fastlayers ops captured)."""
    static_x, static_y = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(static_x, static_y)
            eager_step(x, y)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with RecordOps() as rec, torch.cuda.graph(g):
        static_loss = step(static_x, static_y)
    return g, static_x, static_y, static_loss, rec.calls


def replays_like_eager(captured, eager_step, batch, steps, model, eager):
    """Replays of the captured step on new batches give the eager steps' losses, and both models
    end with the same parameters."""
    g, static_x, static_y, static_loss, _ = captured
    for _ in range(steps):
        xi, yi = batch()
        static_x.copy_(xi)
        static_y.copy_(yi)
        g.replay()
        loss = eager_step(xi, yi)
        torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def labels(model):
    return [("fft:16x16", "fbfft:16x16", "fft:16x16,tile=10x10"),
            ("fbfft:16x16", "fft:16x16", "fbfft:8x8,tile=6x6")]


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["forced", "tuned"])
def test_captured_training_step_replays_like_eager(how, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # put back after the test
    torch.manual_seed(0)
    ref = cnn()
    model = fastlayers.convert(copy.deepcopy(ref))
    convs = [m for m in model.modules() if isinstance(m, fastlayers.Conv2d)]
    if how == "forced":
        for m, ls in zip(convs, labels(model)):
            m.force_algorithms(*ls)
    eager = copy.deepcopy(model)
    x = torch.randn(4, 3, 12, 12, device="cuda")
    y = torch.randint(0, 4, (4,), device="cuda")

    step, eager_step = (trainer(m, nn.functional.cross_entropy) for m in (model, eager))
    captured = warm_and_capture(step, eager_step, x, y)
    calls = captured[-1]
    if how == "tuned":
        assert {r["source"] for r in tuner.decisions()} >= {"tuned"}
    chosen = [c for m in convs for c in m._fl_forced or ()] if how == "forced" else None
    if how == "forced":
        assert {name for name, _ in calls} == {
            "fft_conv2d", "fft_conv2d_input_grad", "fft_conv2d_weight_grad"}, chosen
    replays_like_eager(captured, eager_step,
                       lambda: (torch.randn_like(x), torch.randint(0, 4, (4,), device="cuda")), 5,
                       model, eager)


class _Tagger(nn.Module):
    def __init__(self, bidirectional):
        super().__init__()
        self.lstm = nn.LSTM(6, 16, num_layers=2, bidirectional=bidirectional)
        self.head = nn.Linear(32 if bidirectional else 16, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("bidirectional", [False, True], ids=["stack", "bidirectional"])
def test_captured_lstm_training_step_replays_like_eager(bidirectional, monkeypatch):
    # The fused LSTM inside a user's graph: lstm_stack's wavefront (unidirectional), or the two
    # directions on two streams (bidirectional: a graph keeps only the order the streams state,
    # so a missing wait of the side stream for the layer below shows here every time); their
    # loops are recorded into the capture.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    model = fastlayers.convert(_Tagger(bidirectional).cuda())
    model.lstm.force_algorithm("fused")
    eager = copy.deepcopy(model)
    x = torch.randn(7, 4, 6, device="cuda")
    y = torch.randint(0, 3, (7 * 4,), device="cuda")

    loss_of = lambda out, ys: nn.functional.cross_entropy(out.flatten(0, 1), ys)  # noqa: E731
    step, eager_step = (trainer(m, loss_of) for m in (model, eager))
    captured = warm_and_capture(step, eager_step, x, y)
    assert ("lstm" if bidirectional else "lstm_stack") in {n for n, _ in captured[-1]}
    replays_like_eager(captured, eager_step,
                       lambda: (torch.randn_like(x), torch.randint(0, 3, (7 * 4,), device="cuda")),
                       4, model, eager)
