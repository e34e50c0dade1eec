"""Controllers of the main window: each holds one concern's state and logic; the window holds the views."""
