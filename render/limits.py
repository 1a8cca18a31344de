"""The largest fit the engine accepts, in a module of its own: the command line checks its options
against these before it imports anything heavy (render/cli.py), the fitter and the image loader
when they run."""

#: Triangles a fit may hold.
MAX_TRIANGLES_FIT = 20000
#: Working sizes beyond this are refused (the fit and the GUI would be unusable anyway).
MAX_WORKING_SIZE = 4096
