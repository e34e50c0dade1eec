"""Controllers of the main window: each holds one concern's logic over the shared Qt-free state (ui/model/)
and writes to the screen only through its own narrow view protocol (``ComposeView``, ``JoinsView``,
``SessionsView``, ``StatusView``), never through the window as a whole."""
