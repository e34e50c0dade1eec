"""The main window's panes (groups, conversation, threads, members, status): each owns its widgets and
mirrors part of the app model (ui.model); the window lays them out and wires them to the controllers."""
