"""Naga package."""
