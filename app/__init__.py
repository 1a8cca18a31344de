"""The trifit desktop application (PySide6). GUI only: the engine lives in ``render``."""
