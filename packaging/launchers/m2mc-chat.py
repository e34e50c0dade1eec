"""Bundle entry point for m2mc-chat: PyInstaller freezes this script, which runs ``app.chat.main``."""

import sys

from m2mc.app.chat import main

sys.exit(main())
