"""Test and demo support that ships with the package (private adb server, ports)."""
