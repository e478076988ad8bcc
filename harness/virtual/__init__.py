"""The virtual phone: a device-side ADB daemon over a sandbox (see docs/virtual-phone.md).

Kept import-free on purpose: the phone's own tools import submodules on every call.
"""
