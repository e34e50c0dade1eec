"""``python -m m2mc.app.ordering_study``: same as the ``m2mc-ordering-study`` command."""

import sys

from . import main

sys.exit(main())
