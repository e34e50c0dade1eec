"""Bundle entry point for m2mc-peer: PyInstaller freezes this script, which runs ``app.peer.main``."""

import sys

from m2mc.app.peer import main

sys.exit(main())
