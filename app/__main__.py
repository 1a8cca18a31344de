"""``python -m trifit.app [IMAGE] [--start]``: the trifit window."""

import sys

from trifit.cli import one_blas_thread

one_blas_thread()  # before numpy loads, as the console script does

from .main import main  # noqa: E402

sys.exit(main())
