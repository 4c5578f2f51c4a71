"""The service installer: renders and loads the launchd LaunchAgent (`launchd`) or the systemd user unit
(`manager`), used by `benchctl service`. Stands alone: imports the floor only, never the daemon.

Public names: `plan`, `install`, `uninstall`, `status`, `ServicePlan` (manager).
"""
