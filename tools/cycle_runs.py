"""What the pruning-cycle measuring tools (elitist_cycles.py, newcomer_pruning.py) share: their fit
options and the images they fit, each loaded at the working size after one fitter has built the
pipelines. Imported from the tools folder (a script's own folder is first on its path)."""

import argparse

from trifit import Fitter, load_image
from trifit.resources import sample_path


def add_fit_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=int, default=12000, help="iterations, planned as a time-limited fit would")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)


def seeds(a: argparse.Namespace) -> list[int]:
    return [int(s) for s in a.seeds.split(",")]


def targets(a: argparse.Namespace, eng):
    """(name as given, working-size target) for each of ``--images`` (a bundled sample's name or a path)."""
    for name in a.images.split(","):
        target = load_image(sample_path(name) if "/" not in name else name, a.size)
        Fitter(target, triangles=a.tris, size=a.size, engine=eng).close()  # (pipelines before any fit)
        yield name, target
