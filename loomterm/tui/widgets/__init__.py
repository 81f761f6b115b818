"""The editor's widgets and dialogs."""
