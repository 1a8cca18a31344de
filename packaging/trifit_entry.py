"""Entry script of the frozen desktop app (PyInstaller): the ``trifit`` command line.

With no arguments it opens the window (``trifit gui``), as the installed ``trifit`` does.
"""

from trifit.cli import entry

if __name__ == "__main__":
    entry()
