"""Bundled sample images and icons (data files)."""
from importlib.resources import files


def sample_path(name: str = "astronaut.png") -> str:
    return str(files(__name__).joinpath(name))
