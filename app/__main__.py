"""``python -m trifit.app [IMAGE] [--start]``: the trifit window."""

import sys

from .main import main

sys.exit(main())
