"""WGSL compute shaders of the trifit engine (data files; loaded by render.gpu.shaders)."""
