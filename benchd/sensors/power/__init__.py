"""Power source and sleep prevention (`status`), with macOS's pmset/caffeinate parsing in `darwin`."""
