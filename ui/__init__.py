"""Qt user interface of M2MC: models, views, dialogs and the middleware signal bridge."""

from .refcount_guard import protect_singletons

protect_singletons()  # before any Qt call: see the module for the PySide6 6.12 / Python 3.11 bug
