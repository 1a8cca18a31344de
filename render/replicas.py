"""Replicas: one image fitted as R copies side by side, selected at each pruning cycle's start.

A fit's later pruning cycles each grow triangles back where the error is largest and prune
back; which of those newcomers survive depends on the random stream that placed them. R
replicas of an image run in one batch (one set of dispatches an iteration for all), each
replica with its own random stream; at the start of each later cycle (its regrowth event) every
replica takes the state of the replica with the lowest loss there -- parameters, Adam moments,
scene records, triangle ids, locks, loss history, final-sigma factor --, so the cycles revise
the best scene found so far R ways at once. The scene a fit reports is its lowest-loss
replica's (``Fitter.leaders``). Replica 0 draws from the image's own seed, so until the first
selection it is the fit a single replica makes.

Replicas cost GPU work per iteration; they pay where the GPU has room for them: a small image on
a GPU leaves most of its compute units idle. The number is chosen when the fit starts, from
inputs a scene may depend on (the adapter's type, the working size, the strategy), never from a
measured speed (:func:`auto_replicas`); a scene records the number chosen. docs/QUALITY.md
("Replicas, built in") has the measurements.
"""

from __future__ import annotations

import numpy as np

#: tiles (16 x 16 px) of a working image up to which a GPU adapter runs two replicas: a
#: batch of two such images is at most 512 tile workgroups, which a discrete GPU runs side by side
AUTO_MAX_TILES = 256
#: ... and tiles x triangles asked for up to this (a bound on the tile lists' entries, which the
#: backward's workgroups walk). At a 1 s fit at 176 px two replicas gained with 100 triangles
#: (chelsea's 88 tiles, astronaut's 121: 8,800 and 12,100) and on astronaut with 150 (18,150); they
#: gained nothing on astronaut with 200 (24,200) and lost with 500 (60,500): the second replica's
#: work then costs more iterations than its search finds (docs/QUALITY.md, "Replicas, built in")
AUTO_MAX_TILE_TRIANGLES = 20000


def auto_replicas(adapter_type: str, width: int, height: int, triangles: int, strategy: str) -> int:
    """The replicas ``FitSettings.replicas = 0`` means for a fit of this working size and count
    on an adapter of this type (render/gpu/device.py's ``type``; the reference backend's is
    "CPU"): two on a GPU for images of at most :data:`AUTO_MAX_TILES` tiles and
    :data:`AUTO_MAX_TILE_TRIANGLES` tiles x triangles under the default strategy (the only one
    with pruning cycles to select at), one otherwise -- a CPU adapter runs a batch of two at
    half the speed of one."""
    tiles = -(-width // 16) * -(-height // 16)
    gpu = adapter_type in ("DiscreteGPU", "IntegratedGPU")
    small = tiles <= AUTO_MAX_TILES and tiles * triangles <= AUTO_MAX_TILE_TRIANGLES
    return 2 if gpu and strategy == "default" and small else 1


def winners(losses: np.ndarray, replicas: int) -> np.ndarray:
    """For each slot of a fit's batch (image-major: slot ``b * replicas + r``), the slot of its
    image's replica with the lowest loss (``losses``: each slot's latest; NaN counts as worst,
    ties go to the lowest replica)."""
    losses = np.asarray(losses, dtype=np.float64).reshape(-1, replicas)
    ranked = np.where(np.isfinite(losses), losses, np.inf)
    best = np.argmin(ranked, axis=1)
    return np.repeat(np.arange(len(losses)) * replicas + best, replicas)
