"""The tuner: per shape and per pass, the fastest candidate whose error is within tolerance.

Candidates are PyTorch's own implementation (``native``, always present) and every algorithm in
``fastlayers.algorithms`` that supports the case. Decisions live in memory and in a JSON file;
choosing a cached decision costs a dictionary look-up.

Parts: state.py (mode, budget, bounds), cache.py (the file), measure.py (accuracy guard, timers,
budget loop), decide.py (memory, file, measuring or the heuristic), records.py (forced choices,
fallbacks, decisions(), report()), and one module per layer kind (conv2d.py, lstm.py: its
problem, inputs, reference and candidates).

Environment:
  FASTLAYERS_TUNER_MODE       ``tune`` (measure on first sight; default), ``cache`` (use cached
                              decisions, otherwise the heuristic), ``off`` (heuristic only)
  FASTLAYERS_CACHE_DIR        folder of the decision file (default: $XDG_CACHE_HOME/fastlayers,
                              else ~/.cache/fastlayers)
  FASTLAYERS_TUNER_BUDGET     seconds of repeated rounds per pass and shape after every
                              candidate's first figure (default 2)
  FASTLAYERS_WORKSPACE_LIMIT  bytes a candidate's workspace may take (suffixes K, M, G allowed;
                              default: the smaller of 1 GiB and a quarter of free device memory)
  FASTLAYERS_TUNE_CPU         1 to measure on CPU tensors too (default: CPU uses the heuristic)
  FASTLAYERS_TRANSFORMS       0 to keep every layer off transform-based algorithms (FFT,
                              Winograd), where one NaN, inf or huge input value spoils more than
                              the outputs whose window holds it: under FFT, its whole sample
                              (default 1; also set_transforms(), transforms(), and a layer's own
                              setting; docs/tuner.md)
"""
from .cache import FORMAT, cache_file
from .conv2d import PASSES, ConvProblem, candidates_conv2d, choose_conv2d
from .decide import Decision, observing
from .lstm import LstmProblem, candidates_lstm, choose_lstm
from .measure import ERROR_FLOOR, WIN_MARGIN, error_floor
from .records import clear, decisions, note_fallback, record_forced, report
from .state import (MODES, _state, generation, get_mode, mode, new_generation, set_budget,
                    set_mode, set_transforms, set_workspace_limit, transforms, transforms_allowed,
                    workspace_limit)

__all__ = [
    "ConvProblem", "LstmProblem", "candidates_lstm", "choose_lstm", "Decision", "PASSES", "FORMAT", "MODES", "ERROR_FLOOR", "WIN_MARGIN",
    "choose_conv2d", "candidates_conv2d", "report", "decisions", "set_mode", "get_mode", "mode",
    "clear", "cache_file", "set_workspace_limit", "workspace_limit", "set_budget", "generation",
    "note_fallback", "record_forced", "error_floor", "observing", "set_transforms", "transforms",
    "transforms_allowed", "new_generation",
]
