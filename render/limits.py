"""The largest fit the engine accepts, in a module of its own: the command line checks its options
against these before it imports anything heavy (render/cli.py), the fitter and the image loader
when they run. And what the API takes as a whole number (counts, seeds, indices, sizes)."""

#: Triangles a fit may hold.
MAX_TRIANGLES_FIT = 20000
#: Replicas of one image a fit may run side by side (FitSettings.replicas).
MAX_REPLICAS = 8
#: Working sizes beyond this are refused (the fit and the GUI would be unusable anyway).
MAX_WORKING_SIZE = 4096
#: Iterations of a fit given no stop condition (`trifit fit`, `batch`): a count, not a time, so that
#: the same command writes the same scene on any machine.
DEFAULT_ITERATIONS = 600


def is_whole(value) -> bool:
    """Is ``value`` a whole number: Python's int or numpy's integer, not a bool (int() would take
    2.5, True or "3")?"""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    import numpy as np  # (not at import: the command line reads this module before anything heavy)

    return isinstance(value, np.integer)
