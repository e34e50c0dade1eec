"""``python -m app.ordering_study``: same as the ``m2mc-ordering-study`` command."""

import sys

from .cli import main

sys.exit(main())
