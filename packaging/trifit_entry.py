"""Entry script of the frozen desktop app (PyInstaller): the ``trifit`` command line.

With no arguments it opens the window (``trifit gui``), as the installed ``trifit`` does.
"""

import sys

from trifit.cli import main

if __name__ == "__main__":
    sys.exit(main())
