"""Tuning sweep for the fit (issue #5): one change at a time against the defaults, on the bundled
samples at 176 px with 150 triangles, at fixed iteration budgets (or a time limit per fit).
Prints one line per run.

    python tools/sweep_quality.py [--iters 300,1000 | --time-limit 12 | --budgeted-plan 975 [--marks 0.3,0.85]]
                                  [--seeds 0] [--variants a,b] [--alternate]

--alternate (with --iters or --time-limit) runs each seed's fits of every variant in turn, their order
alternating by seed, after a fit that builds the pipelines: time-limited variants then share the
machine's state (a lent GPU's speed drifts within a call).

With --iters or --time-limit and more than one variant, a paired summary against the first variant
ends each budget's lines (tools/pair_summary.py's: medians, mean paired difference and its standard
error, iteration medians, per image; then over the images).

--budgeted-plan N runs N iterations planned as a time-limited fit would plan them (the coarse share
of a short time budget) but deterministically, so variants compare without the time limit's spread.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # pair_summary, also under `python -P`

from pair_summary import summarise  # noqa: E402  (tools/pair_summary.py, beside this file)

from trifit import Engine, StopConditions  # noqa: E402
from trifit.export import SHARP_SETTINGS  # noqa: E402
from trifit.quality import fit_and_score  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

VARIANTS = {
    "default": {},
    "device placement": {"placement": "device"},  # issue #19: growth and respawn placed on the device (the default)
    "host placement": {"placement": "host"},      # ... and the render read back, placed in numpy
    "no-coarse": {"coarse_fraction": 0.0},
    "no-respawn": {"respawn_every": 0},
    "respawn uncapped": {"respawn_checks": 0},  # a check every respawn_every iterations however long the plan
    "respawn checks 300": {"respawn_checks": 300},
    "lr_vertex x2": {"lr_vertex": 0.012},
    "lr_vertex /2": {"lr_vertex": 0.003},
    "lr_colour x2": {"lr_colour": 0.1, "lr_alpha": 0.1},
    "lr_alpha x2": {"lr_alpha": 0.1},     # the opacities' rate alone
    "lr_alpha /2": {"lr_alpha": 0.025},
    "sigma 4->0.5": {"sigma_start_px": 4.0},
    "sigma 2.5->0.3": {"sigma_end_px": 0.3},
    "sigma 2.5->1.0": {"sigma_end_px": 1.0},
    "lr_final 0.02": {"lr_final": 0.02},
    "respawn_alpha 0.05": {"respawn_alpha": 0.05},
    "respawn_alpha 0.1": {"respawn_alpha": 0.1},
    "respawn_alpha 0.15": {"respawn_alpha": 0.15},
    "respawn_alpha 0.2": {"respawn_alpha": 0.2},
    "adam_eps 1e-5": {"adam_eps": 1e-5},
    "adam_eps 1e-4": {"adam_eps": 1e-4},
    "lr_final 0.2": {"lr_final": 0.2},
    "lr_final 0.3": {"lr_final": 0.3},
    "coarse 0.5": {"coarse_fraction": 0.5},
    "respawn alpha 0.05": {"respawn_alpha": 0.05},
    "growth 3": {"growth_stages": 3},
    "growth 5": {"growth_stages": 5},
    "growth 10": {"growth_stages": 10},
    "growth 5 +colour": {"growth_stages": 5, "lr_colour": 0.1, "lr_alpha": 0.1},
    "growth 5 +sigma": {"growth_stages": 5, "sigma_start_px": 4.0, "sigma_end_px": 0.3},
    "growth 5 +both": {"growth_stages": 5, "lr_colour": 0.1, "lr_alpha": 0.1, "sigma_start_px": 4.0,
                       "sigma_end_px": 0.3},
    "growth 5 +both +alpha.8": {"growth_stages": 5, "lr_colour": 0.1, "lr_alpha": 0.1, "sigma_start_px": 4.0,
                                "sigma_end_px": 0.3, "init_alpha": 0.8},
    "growth 10 +both": {"growth_stages": 10, "lr_colour": 0.1, "lr_alpha": 0.1, "sigma_start_px": 4.0,
                        "sigma_end_px": 0.3},
    "coarse max 0.7": {"coarse_max_fraction": 0.7},
    "coarse max 0.6": {"coarse_max_fraction": 0.6},
    "coarse max 0.5": {"coarse_max_fraction": 0.5},
    "coarse max 0.85": {"coarse_max_fraction": 0.85},  # the default before short plans pruned in the stage
    "sigma end 0.4": {"sigma_end_px": 0.4},
    "sigma end 0.6": {"sigma_end_px": 0.6},
    "growth until 0.35": {"growth_until": 0.35},
    "sigma over 1.0": {"sigma_fraction": 1.0},
    "sigma over 1.0 end 0.6": {"sigma_fraction": 1.0, "sigma_end_px": 0.6},
    "coarse 0.85 fixed": {"coarse_fraction": 0.85},
    "coarse 0.65 fixed": {"coarse_fraction": 0.65, "coarse_max_fraction": 0.65},
    "coarse 0.5 fixed": {"coarse_fraction": 0.5, "coarse_max_fraction": 0.5},
    "coarse 0.92 fixed": {"coarse_fraction": 0.92, "coarse_max_fraction": 0.92},
    # since the defaults became insert_shape "residual" and beta2 0.99:
    "old defaults": {"insert_shape": "random", "beta2": 0.999, "overgrow": 1.0},
    "random shape": {"insert_shape": "random"},
    "beta2 0.999": {"beta2": 0.999},
    "beta2 0.995": {"beta2": 0.995},
    "insert alpha 0.3": {"insert_alpha": 0.3},
    "insert radius 0.8": {"insert_radius": 0.8},
    # since the default became overgrow 1.5:
    "no overgrow": {"overgrow": 1.0},
    "overgrow 2": {"overgrow": 2.0},
    "overgrow 1.25": {"overgrow": 1.25},
    "overgrow 1.5": {"overgrow": 1.5},
    "overgrow 3": {"overgrow": 3.0},
    "overgrow 2 prune 0.6": {"overgrow": 2.0, "prune_until": 0.6},
    # pruning cycles (overgrow_cycles is a maximum: cycles of at least prune_cycle_min iterations)
    "cycles 2": {"overgrow_cycles": 2},
    "cycles 3": {"overgrow_cycles": 3},
    "cycles 3 until 0.85": {"overgrow_cycles": 3, "prune_until": 0.85},
    "cycles 6 until 0.85": {"overgrow_cycles": 6, "prune_until": 0.85},
    "cycles 10 until 0.85": {"overgrow_cycles": 10, "prune_until": 0.85},
    "cycles 6 until 0.85 x2": {"overgrow_cycles": 6, "prune_until": 0.85, "overgrow": 2.0},
    "cycles 4 until 0.85": {"overgrow_cycles": 4, "prune_until": 0.85},
    "cycles 12 until 0.9": {"overgrow_cycles": 12, "prune_until": 0.9},
    "cycles 6 until 0.85 respawn 100": {"overgrow_cycles": 6, "prune_until": 0.85, "respawn_every": 100},
    "cycles 6 until 0.85 hold 0.5": {"overgrow_cycles": 6, "prune_until": 0.85, "prune_hold": 0.5},
    "cycles 6 until 0.85 hold 0.5 stages 8": {"overgrow_cycles": 6, "prune_until": 0.85, "prune_hold": 0.5, "prune_stages": 8},
    "cycles 4 until 0.85 hold 0.5": {"overgrow_cycles": 4, "prune_until": 0.85, "prune_hold": 0.5},
    "cycles 6 until 0.85 insert alpha 0.3": {"overgrow_cycles": 6, "prune_until": 0.85, "insert_alpha": 0.3},
    "cycles 6 until 0.9": {"overgrow_cycles": 6, "prune_until": 0.9},
    "cycles 6 until 0.85 sigma over 0.9": {"overgrow_cycles": 6, "prune_until": 0.85, "sigma_fraction": 0.9},
    "cycles 6 until 0.85 lr_final 0.3": {"overgrow_cycles": 6, "prune_until": 0.85, "lr_final": 0.3},
    # long plans (issue #19: 30,000 iterations ended below 15,000): the knobs counted in iterations
    "respawn 200": {"respawn_every": 200},
    "cycles 96": {"overgrow_cycles": 96},
    "cycles 48": {"overgrow_cycles": 48},
    "cycles 75": {"overgrow_cycles": 75},   # long plans: fewer, longer cycles (150 is the default since
    "cycles 150": {"overgrow_cycles": 150},  # QUALITY.md "At most 150 cycles")
    "cycles of 100": {"overgrow_cycles": 0},  # as many as fit, prune_cycle_min iterations each (no cap)
    # (sixth session) cycle length and shape at a 1 s fit's length
    "cycles of 50": {"prune_cycle_min": 50},
    "GPU cycles": {"prune_cycle_min": 100, "prune_cycles_floor": 0},  # cycles of 100 in every plan, as before cycles
    # of 50 (render/strategy.py timed_cycle_min: a GPU's time-limited plans keep cycles of 100)
    "no cycle floor": {"prune_cycles_floor": 0},  # a short plan's cycles as many as fit at prune_cycle_min
    "cycle floor 6": {"prune_cycles_floor": 6},
    "cycle floor 16": {"prune_cycles_floor": 16},
    "timed cycles of 50": {"timed_cycle_min": 50},  # a time limit's cycles on a GPU as its fixed plans'
    "timed cycles of 150": {"timed_cycle_min": 150},
    "timed cycles of 200": {"timed_cycle_min": 200},
    "newcomers x3": {"prune_newcomers": 3.0},
    "newcomers x1.5": {"prune_newcomers": 1.5},
    "cycles of 25": {"prune_cycle_min": 25},
    "cycles of 35": {"prune_cycle_min": 35},
    "cycles of 70": {"prune_cycle_min": 70},
    "cycles of 150": {"prune_cycle_min": 150},
    "cycles of 200": {"prune_cycle_min": 200},
    "growth until 0.35 cycles of 50": {"growth_until": 0.35, "prune_cycle_min": 50},
    "peak hold 0.5": {"prune_stages": 1, "prune_hold": 0.5},
    "prune stages 3": {"prune_stages": 3},
    "prune last 1": {"prune_last_steps": 1},  # the last cycle drops in one step, as the others (before 4)
    "cull 1e-5": {"cull_tolerance": 1e-5},  # the iterations culled at the renders' budget (the default before 1e-3)
    "cull 3e-3": {"cull_tolerance": 3e-3},
    "cull 1e-2": {"cull_tolerance": 1e-2},
    "cycles 6 until 0.85 x1.75": {"overgrow_cycles": 6, "prune_until": 0.85, "overgrow": 1.75},
    # Adam and new triangles (docs/bench/h200-adam-young-tried.txt; its other variants need its patch)
    "beta2 0.98": {"beta2": 0.98},
    "beta2 0.95": {"beta2": 0.95},
    "init alpha 0.4": {"init_alpha": 0.4},
    "init alpha 0.8": {"init_alpha": 0.8},
    "insert radius 0.4": {"insert_radius": 0.4},
    # the fit's walks stopping at a pixel's transmittance as renders do, not at 1e-30 (docs/bench/h200-fit-stop-transmittance.txt)
    "stop 1e-6": {"stop_transmittance": 1e-6},
    "stop 1e-4": {"stop_transmittance": 1e-4},
    "stop 1e-3": {"stop_transmittance": 1e-3},
    "overgrow any count": {"overgrow_max": 1 << 30},
    "cycles 9 growth 0.3 until 0.85": {"overgrow_cycles": 9, "prune_until": 0.85, "growth_until": 0.3},
    "cycles 6 until 0.85 x1.25": {"overgrow_cycles": 6, "prune_until": 0.85, "overgrow": 1.25},
    "cycles 6 until 0.85 stages 2": {"overgrow_cycles": 6, "prune_until": 0.85, "prune_stages": 2},
    "cycles 6 until 0.85 stages 8": {"overgrow_cycles": 6, "prune_until": 0.85, "prune_stages": 8},
    # learning-rate restarts in each pruning cycle after the first (fifth session). Measured on the
    # defaults of 5d9219a (4 pruning stages, respawns until 0.8 of the plan); since b0bd003 the
    # defaults are "R lr2.0 c16 respawn 0.5 stages 2" (respawns stop where pruning begins).
    # Restarts of sigma, and restarts decaying within their cycle, were measured with options
    # since removed (QUALITY.md).
    "5d9219a defaults": {"cycle_lr": 0.0, "overgrow_cycles": 6, "prune_cycle_min": 250, "prune_stages": 4},
    "restart lr 0.5": {"cycle_lr": 0.5},
    "restart lr 1.0": {"cycle_lr": 1.0},
    "restart lr 1.5": {"cycle_lr": 1.5},
    "restart lr 1.0 cycles 9": {"cycle_lr": 1.0, "overgrow_cycles": 9, "prune_cycle_min": 100},
    "restart lr 1.0 cycles 12": {"cycle_lr": 1.0, "overgrow_cycles": 12, "prune_cycle_min": 100},
    "restart lr 1.0 cycles 4": {"cycle_lr": 1.0, "overgrow_cycles": 4},
    "restart lr 1.0 hold 0.3": {"cycle_lr": 1.0, "prune_hold": 0.3},
    "restart lr 1.0 until 0.9": {"cycle_lr": 1.0, "prune_until": 0.9},
    "restart lr 1.0 x1.75": {"cycle_lr": 1.0, "overgrow": 1.75},
    "R lr1.5 c12": {"cycle_lr": 1.5, "overgrow_cycles": 12, "prune_cycle_min": 100},
    "R lr1.5 c12 x1.75": {"cycle_lr": 1.5, "overgrow_cycles": 12, "prune_cycle_min": 100, "overgrow": 1.75},
    "R lr1.0 c12 x1.75": {"cycle_lr": 1.0, "overgrow_cycles": 12, "prune_cycle_min": 100, "overgrow": 1.75},
    "R lr2.0 c12": {"cycle_lr": 2.0, "overgrow_cycles": 12, "prune_cycle_min": 100},
    "R lr1.0 c16": {"cycle_lr": 1.0, "overgrow_cycles": 16, "prune_cycle_min": 100},
    "R lr1.5 c9 x1.75": {"cycle_lr": 1.5, "overgrow_cycles": 9, "prune_cycle_min": 100, "overgrow": 1.75},
    "R lr3.0 c12": {"cycle_lr": 3.0, "overgrow_cycles": 12, "prune_cycle_min": 100},
    "R lr4.0 c12": {"cycle_lr": 4.0, "overgrow_cycles": 12, "prune_cycle_min": 100},
    "R lr3.0 c16": {"cycle_lr": 3.0, "overgrow_cycles": 16, "prune_cycle_min": 100},
    "R lr2.0 c16": {"cycle_lr": 2.0, "overgrow_cycles": 16, "prune_cycle_min": 100},
    "R lr3.0 c12 x1.75": {"cycle_lr": 3.0, "overgrow_cycles": 12, "prune_cycle_min": 100, "overgrow": 1.75},
    "R lr3.0 c9": {"cycle_lr": 3.0, "overgrow_cycles": 9, "prune_cycle_min": 100},
    "R lr2.0 c20": {"cycle_lr": 2.0, "overgrow_cycles": 20, "prune_cycle_min": 80},
    "R lr2.0 c16 respawn 0.5": {"cycle_lr": 2.0, "overgrow_cycles": 16, "prune_cycle_min": 100, "respawn_until": 0.5},
    "R lr2.0 c16 stages 2": {"cycle_lr": 2.0, "overgrow_cycles": 16, "prune_cycle_min": 100, "prune_stages": 2},
    "R lr2.0 c16 respawn 0.5 stages 2": {"cycle_lr": 2.0, "overgrow_cycles": 16, "prune_cycle_min": 100,
                                         "respawn_until": 0.5, "prune_stages": 2},
    "R lr2.5 c16": {"cycle_lr": 2.5, "overgrow_cycles": 16, "prune_cycle_min": 100},
    "R lr2.0 c24": {"cycle_lr": 2.0, "overgrow_cycles": 24, "prune_cycle_min": 60},
    "R lr2.0 c16 x1.75": {"cycle_lr": 2.0, "overgrow_cycles": 16, "prune_cycle_min": 100, "overgrow": 1.75},
    "cycles 24 until 0.9": {"overgrow_cycles": 24, "prune_until": 0.9},
    # sixth session: what new triangles in a pruning cycle look like (most of them are pruned again);
    # least-squares colour and opacity for new triangles ("fit", "fit cand4": best of 4 candidates) and
    # splitting the triangles with the largest vertex gradients ("split ...") were measured with
    # options since removed (QUALITY.md). Then the final sigma probes, measured on 1441908's defaults
    # (anneal over 0.75 of the plan, no probes); since the next commit the defaults are "probes 6
    # anneal 0.6", which "no probes anneal 0.75" undoes.
    "ia 0.3": {"insert_alpha": 0.3},
    "ia 0.5": {"insert_alpha": 0.5},
    "hold 0.3": {"prune_hold": 0.3},
    "sigma end 0.7": {"sigma_end_px": 0.7},
    "lrv x1.5": {"lr_vertex": 0.009},
    "beta1 0.8": {"beta1": 0.8},
    "beta1 0.95": {"beta1": 0.95},
    "sigma end 0.3": {"sigma_end_px": 0.3},
    "probes 6": {"sigma_probes": 6},
    "probes 12": {"sigma_probes": 12},
    "probes 6 eps 0.25": {"sigma_probes": 6, "sigma_probe_eps": 0.25},
    "probes 6 anneal 0.6": {"sigma_probes": 6, "sigma_fraction": 0.6},
    "probes 12 anneal 0.6": {"sigma_probes": 12, "sigma_fraction": 0.6},
    "hold 0.3 lrv x1.5": {"prune_hold": 0.3, "lr_vertex": 0.009},
    "anneal 0.6": {"sigma_fraction": 0.6},
    "respawn 100": {"respawn_every": 100},
    "one submission a chunk": {"first_submission": 0},
    "no probes anneal 0.75": {"sigma_probes": 0, "sigma_fraction": 0.75},
    "probes 6 anneal 0.6 gain 2": {"sigma_probes": 6, "sigma_fraction": 0.6, "sigma_probe_gain": 2.0},
    "probes 6 anneal 0.6 end 0.4": {"sigma_probes": 6, "sigma_fraction": 0.6, "sigma_end_px": 0.4},
    "probes 6 anneal 0.6 gain 2 end 0.4": {"sigma_probes": 6, "sigma_fraction": 0.6, "sigma_probe_gain": 2.0,
                                           "sigma_end_px": 0.4},
    "probes 8 anneal 0.5 gain 2": {"sigma_probes": 8, "sigma_fraction": 0.5, "sigma_probe_gain": 2.0},
    "probes 3 anneal 0.6 gain 2": {"sigma_probes": 3, "sigma_fraction": 0.6, "sigma_probe_gain": 2.0},
    "probes 4 anneal 0.6": {"sigma_probes": 4, "sigma_fraction": 0.6},
    "probes 6 anneal 0.5": {"sigma_probes": 6, "sigma_fraction": 0.5},
    "probes 6 anneal 0.6 eps 0.25": {"sigma_probes": 6, "sigma_fraction": 0.6, "sigma_probe_eps": 0.25},
    "probes 6 anneal 0.6 hold 0.3": {"sigma_probes": 6, "sigma_fraction": 0.6, "prune_hold": 0.3},
    "probes 6 anneal 0.6 lrv x1.5": {"sigma_probes": 6, "sigma_fraction": 0.6, "lr_vertex": 0.009},
    "probes 6 anneal 0.6 hold 0.3 lrv x1.5": {"sigma_probes": 6, "sigma_fraction": 0.6, "prune_hold": 0.3,
                                              "lr_vertex": 0.009},
    "probes 6 hold 0.3 lrv x1.5": {"sigma_probes": 6, "prune_hold": 0.3, "lr_vertex": 0.009},
    "cycles 60 until 0.9": {"overgrow_cycles": 60, "prune_until": 0.9},
    "cycles 24": {"overgrow_cycles": 24},
    "cycles 32": {"overgrow_cycles": 32},
    "cycles 24 overgrow 1.75": {"overgrow_cycles": 24, "overgrow": 1.75},
    "cycle lr 1.5": {"cycle_lr": 1.5},
    "cycle lr 2.5": {"cycle_lr": 2.5},
    "lr_final 0.05": {"lr_final": 0.05},
    "16 cycles overgrow 1.5": {"overgrow_cycles": 16, "overgrow": 1.5},  # the defaults until 7th session
    # the window of the pruning cycles (docs/bench/h200-window-knobs-8b1ed02.txt)
    "prune until 0.9": {"prune_until": 0.9},
    "growth until 0.35 prune until 0.9": {"growth_until": 0.35, "prune_until": 0.9},
    "growth until 0.4 prune until 0.9": {"growth_until": 0.4, "prune_until": 0.9},
    "sigma over 0.5": {"sigma_fraction": 0.5},
    "coarse 0.15": {"coarse_fraction": 0.15},  # a shorter half-size stage (h200-coarse-share-8b1ed02.txt)
    "coarse 0.4": {"coarse_fraction": 0.4},  # a longer one (h200-coarse-1s-replicas.txt: none and 0.15 lost astronaut)
    "hold 0.05": {"prune_hold": 0.05},  # later cycles regrow to the full peak (h200-regrow-peak-tried.txt)
    "hold 0.2": {"prune_hold": 0.2},
    # with the second set of photographs not tuned on (docs/bench/h200-photo-set-2.txt), against pruning until
    # 0.85, the default until these made it 0.9 ("prune until 0.9" above is the default since)
    "prune until 0.85": {"prune_until": 0.85},
    "lrv x0.75": {"lr_vertex": 0.0045},
    "lrv x1.25": {"lr_vertex": 0.0075},
    "prune until 0.95": {"prune_until": 0.95},
    "prune until 0.9 hold 0.05": {"prune_until": 0.9, "prune_hold": 0.05},
    "prune until 0.9 hold 0.1": {"prune_until": 0.9, "prune_hold": 0.1},
    "respawn checks 40": {"respawn_checks": 40},  # fewer chunk ends in the growth half (each check ends one)
    "hold 0.05 respawn checks 40": {"prune_hold": 0.05, "respawn_checks": 40},
    # every cycle at the full peak and pruned once, judged at 0.3 / 0.5 / 0.7 of it ("peak hold 0.5" above):
    # twice the newcomers for the same events (docs/bench/h200-cycle-regrowth-peak-tried.txt)
    "peak hold 0.3": {"prune_stages": 1, "prune_hold": 0.3},
    "peak hold 0.7": {"prune_stages": 1, "prune_hold": 0.7},
    # replicas at equal iterations (the default chooses 2 on a GPU at 176 px / 150: render/replicas.py)
    "replicas 1": {"replicas": 1},
    "replicas 3": {"replicas": 3},
    "replicas 4": {"replicas": 4},
    # new triangles' size (insert_radius 0.6): larger, after a second replica placing at 1.4x gained astronaut
    # (docs/bench/h200-replica-radius-tried.txt; its variants there ran with the patch inside)
    "insert radius 0.84": {"insert_radius": 0.84},
    "insert radius 1.0": {"insert_radius": 1.0},
    # a short time-limited plan's pruning waiting for the working size's measured speed, as before prune_in_coarse
    "prune waits": {"prune_in_coarse": False},
    # every triangle's vertices at one rate, as before small_triangle_px; and the rule at other sizes
    "small triangles off": {"small_triangle_px": 0.0},
    "small triangles 8": {"small_triangle_px": 8.0},
    "small triangles 11": {"small_triangle_px": 11.0},
    # the anneal's end and the first probe's floor and ceiling at other values; and --sharp's settings
    "no sigma floor": {"sigma_end_px": 0.5, "sigma_ceiling_px": 0.0, "sigma_floor_px": 0.0},  # the anneal to 0.5 px, probes
    # stepping from there; the first probe's floor at other values (the anneal to 0.5 px, as they were measured)
    "sigma floor 0.2": {"sigma_end_px": 0.5, "sigma_ceiling_px": 0.0, "sigma_floor_px": 0.2},
    "sigma floor 0.35": {"sigma_end_px": 0.5, "sigma_ceiling_px": 0.0, "sigma_floor_px": 0.35},
    "no sigma ceiling": {"sigma_ceiling_px": 0.0},  # the anneal to 0.25 px, probes stepping from there
    "sigma ceiling 0.35": {"sigma_ceiling_px": 0.35},  # the first probe's ceiling lower
    "sigma end 0.35": {"sigma_end_px": 0.35},
    "sigma end 0.2": {"sigma_end_px": 0.2},
    "sigma end 0.5": {"sigma_end_px": 0.5},  # the anneal to 0.5 px and the floor at 0.25 (the ceiling at 0.5 inert)
    "sigma end 0.15": {"sigma_end_px": 0.15},
    "sharp": dict(SHARP_SETTINGS),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", default="300,1000")
    p.add_argument("--seeds", default="0")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--time-limit", type=float, help="seconds per fit instead of --iters")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--size", type=int, default=176, help="working size (with --budgeted-plan)")
    p.add_argument("--budgeted-plan", type=int, help="N iterations planned like a time-limited fit")
    p.add_argument("--marks", help="with --budgeted-plan: fractions of the plan (e.g. 0.3,0.85) at which to print each "
                   "seed's working-size PSNR, and how its rank there predicts its final rank")
    p.add_argument("--alternate", action="store_true", help="seed by seed, the variants in turn (their order "
                   "alternating), after a fit that builds the pipelines")
    a = p.parse_args()
    if a.budgeted_plan:
        return budgeted(a)
    eng = Engine("gpu")
    print(f"# sweep on {eng.description}, {time.strftime('%Y-%m-%d')}", flush=True)
    budgets = [None] if a.time_limit else [int(v) for v in a.iters.split(",")]
    names, seeds = a.variants.split(","), [int(s) for s in a.seeds.split(",")]
    paths = [sample_path(image) if "/" not in image else image for image in a.images.split(",")]
    if a.alternate:
        fit_and_score(eng, paths[0], a.tris, 0, 176, StopConditions(iterations=50))  # (the pipelines)
    for iters in budgets:
        stop = StopConditions(time_limit=a.time_limit) if iters is None else StopConditions(iterations=iters)
        if a.alternate:
            runs = [(name, path, seed) for k, seed in enumerate(seeds) for path in paths
                    for name in (names if k % 2 == 0 else names[::-1])]
        else:
            runs = [(name, path, seed) for name in names for path in paths for seed in seeds]
        rows = {}
        for name, path, seed in runs:
            r = fit_and_score(eng, path, a.tris, seed, 176, stop, **VARIANTS[name])
            print(f"{r['iterations']:5d} {name:20s} {Path(path).name:14s} s{seed} PSNR {r['psnr']:.3f} "
                  f"{r['wall_s']:.2f}s respawned {r['respawned']}", flush=True)
            rows[("base" if name == names[0] else name, Path(path).name, seed)] = r
        if len(names) > 1:  # each variant paired with the first ("base") seed by seed
            print(f"# paired against {names[0]} (base):")
            for name in names[1:]:
                summarise(rows, sorted({img for _, img, _ in rows}), name)


def budgeted(a):
    import numpy as np

    from trifit import Fitter, load_image
    from trifit.quality import score_as_saved

    eng = Engine("gpu")
    marks = [float(m) for m in a.marks.split(",")] if a.marks else []
    print(f"# budgeted plan of {a.budgeted_plan} on {eng.description}, {time.strftime('%Y-%m-%d')}", flush=True)
    for name in a.variants.split(","):
        for image in a.images.split(","):
            path = sample_path(image) if "/" not in image else image
            target = load_image(path, a.size)
            psnrs, sigmas, on_way = [], [], []
            for seed in [int(s) for s in a.seeds.split(",")]:
                f = Fitter(target, triangles=a.tris, size=a.size, seed=seed, engine=eng, **VARIANTS[name])
                f.plan(a.budgeted_plan, time_budgeted=True)  # as a time limit plans it
                done, seen = 0, []
                for m in marks:  # the working-size PSNR on the way (the stage's size and count)
                    k = int(m * a.budgeted_plan) - done
                    seen.append(f.step(k).psnr)
                    done += k
                f.step(a.budgeted_plan - done)
                scene = f.scene
                psnrs.append(score_as_saved(scene, target)["psnr"])
                sigmas.append(scene.sigma * min(scene.width, scene.height))
                f.close()
                if marks:
                    on_way.append(seen)
                    print(f"  {Path(image).name} s{seed}: " + " ".join(f"{v:.2f}" for v in seen) +
                          f" -> {psnrs[-1]:.2f}", flush=True)
            print(f"{name:24s} {Path(image).name:14s} seeds {a.seeds}: PSNR mean {np.mean(psnrs):.2f} "
                  f"({min(psnrs):.2f}-{max(psnrs):.2f}) sigma {np.mean(sigmas):.2f} px "
                  f"[{' '.join(f'{p:.4f}' for p in psnrs)}]", flush=True)
            if marks:  # does a seed's rank on the way predict its rank at the end?
                ranks = np.argsort(np.argsort(np.array(on_way), axis=0), axis=0)
                final = np.argsort(np.argsort(psnrs))
                corr = [np.corrcoef(ranks[:, i], final)[0, 1] for i in range(len(marks))]
                print(f"  rank correlation with the final PSNR at {', '.join(f'{m:g}' for m in marks)} of the plan: "
                      + " / ".join(f"{c:.2f}" for c in corr), flush=True)


if __name__ == "__main__":
    main()
