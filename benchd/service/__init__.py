"""The service installer behind `benchctl service` (launchd or systemd user unit); imports the floor only."""
