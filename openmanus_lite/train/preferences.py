"""Moved to openmanus_lite.preference.pairs (this old path still imports it, with a DeprecationWarning)."""

from openmanus_lite._lazy import moved_module

moved_module(__name__, 'openmanus_lite.preference.pairs')
